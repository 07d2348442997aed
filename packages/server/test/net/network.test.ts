// needs: one VM, network namespace
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { Sandbox } from "@den/sdk";
import { ADMIN_KEY, client, testServer, waitFor } from "../helpers.js";
import type { RunningServer } from "../../src/index.js";

/**
 * Sandbox networking through the API, against real microVMs. Runs only inside
 * scripts/netns-test.sh (no default route: nothing can leave this machine). "The
 * internet" is 198.51.100.10 and 203.0.113.10; 10.99.0.10 is a private-range server.
 */
const insideTestNetns = (() => {
  try {
    return !execFileSync("ip", ["route", "show", "default"], { encoding: "utf8" }).trim() && process.env.DEN_NETNS_TEST === "1";
  } catch {
    return false;
  }
})();

describe("sandbox networks through the API", { skip: !insideTestNetns && "run through scripts/netns-test.sh" }, () => {
  let server: RunningServer;
  let api: ReturnType<typeof client>;
  let port: number;
  before(async () => {
    process.env.DEN_NET_HOSTS = "allowed.test=198.51.100.10,other.test=203.0.113.10";
    server = await testServer({ DEN_NET_EVENTS_INTERVAL_SECONDS: "1" });
    api = client(server.url);
    port = Number(new URL(server.url).port);
  });
  after(async () => {
    for (const s of (await api("GET", "/v1/sandboxes?limit=200")).body?.sandboxes ?? []) await api("DELETE", `/v1/sandboxes/${s.id}`);
    for (const c of (await api("GET", "/v1/checkpoints")).body?.checkpoints ?? []) await api("DELETE", `/v1/checkpoints/${c.id}`);
    await server?.close();
  });

  const create = async (body: Record<string, unknown> = {}) => {
    const r = await api("POST", "/v1/sandboxes", { template: "base", ...body });
    assert.equal(r.status, 201, r.text);
    return r.body as { id: string; network: Record<string, unknown> };
  };
  const sh = async (id: string, cmd: string) => {
    const r = await api("POST", `/v1/sandboxes/${id}/exec`, { cmd, timeout_seconds: 60 });
    assert.equal(r.status, 200, r.text);
    return r.body as { stdout: string; stderr: string; exit_code: number };
  };
  /** `ok <body>` or `fail <curl's exit code>`. */
  const get = async (id: string, url: string) => {
    const r = await sh(id, `curl -sS -m 3 ${url}`);
    return r.exit_code === 0 ? `ok ${r.stdout.trim()}` : `fail ${r.exit_code}`;
  };
  const netnsOf = (id: string) => execFileSync("ip", ["netns", "list"], { encoding: "utf8" }).includes(`den-${id}`);

  test("egress none by default: nothing leaves; a policy with a bad entry is a 400 and changes nothing", async () => {
    const s = await create();
    assert.deepEqual(s.network, { egress: "none" });
    assert.match(await get(s.id, "http://198.51.100.10/"), /^fail/);
    assert.match(await get(s.id, "http://allowed.test/"), /^fail/);
    const udp = await sh(s.id, "python3 -c \"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'x', ('198.51.100.10', 53))\" 2>&1; echo rc=$?");
    assert.match(udp.stdout, /unreachable|rc=1/i, "no route for UDP either");
    const bad = await api("PUT", `/v1/sandboxes/${s.id}/network`, { egress: "open", deny: ["example.com"] });
    assert.equal(bad.status, 400, bad.text);
    const bad2 = await api("PUT", `/v1/sandboxes/${s.id}/network`, { egress: "allowlist", allow: ["300.1.1.1"] });
    assert.equal(bad2.status, 400, bad2.text);
    const status = await api("GET", `/v1/sandboxes/${s.id}/network`);
    assert.deepEqual(status.body.policy, { egress: "none" });
    assert.equal(status.body.active, false);
    await api("DELETE", `/v1/sandboxes/${s.id}`);
  });

  test("none -> allowlist -> none on a running sandbox, each at once; names resolve only when allowed", async () => {
    const s = await create();
    const r = await api("PUT", `/v1/sandboxes/${s.id}/network`, { egress: "allowlist", allow: ["198.51.100.10", "other.test"] });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.network.egress, "allowlist");
    assert.equal(await get(s.id, "http://198.51.100.10/"), "ok net1");
    assert.equal(await get(s.id, "http://other.test/"), "ok net2", "an allowed name");
    assert.match(await get(s.id, "http://allowed.test/"), /^fail/, "a name not on the list");
    assert.equal((await api("PUT", `/v1/sandboxes/${s.id}/network`, { egress: "allowlist", allow: ["198.51.100.10"] })).status, 200);
    assert.match(await get(s.id, "http://203.0.113.10/"), /^fail/, "an address not on the list");
    // The same through the SDK.
    const sbx = await Sandbox.connect(s.id, { apiUrl: server.url, apiKey: ADMIN_KEY });
    const st = await sbx.networkStatus();
    assert.equal(st.active, true);
    assert.deepEqual(st.policy.allow, ["198.51.100.10"]);
    assert.equal((await sbx.setNetwork({ egress: "none" })).network.egress, "none");
    assert.match(await get(s.id, "http://198.51.100.10/"), /^fail/);
    assert.equal(netnsOf(s.id), false, "none leaves no namespace behind");
    await api("DELETE", `/v1/sandboxes/${s.id}`);
  });

  test("open: the internet answers; the API, the host, other sandboxes and private ranges do not; refusals are events, aggregated", async () => {
    const other = await create({ network: { egress: "open" } });
    const s = await create({ network: { egress: "open" } });
    assert.equal(s.network.egress, "open");
    assert.equal(typeof s.network.max_connections, "number", "the server's connection limit applies");
    assert.equal(await get(s.id, "http://198.51.100.10/"), "ok net1");
    // Every address this machine has, on the API's port; the router's host alias; the other sandbox's link.
    const own = JSON.parse(execFileSync("ip", ["-j", "-4", "addr", "show"], { encoding: "utf8" })) as Array<{ addr_info: Array<{ local: string }> }>;
    const targets = [`10.0.2.2:${port}`, `127.0.0.1:${port}`, "10.99.0.10", ...own.flatMap((l) => l.addr_info.map((a) => `${a.local}:${port}`))];
    const otherLink = execFileSync("ip", ["-n", `den-${other.id}`, "-j", "-4", "addr", "show", "dev", "eth0"], { encoding: "utf8" });
    targets.push((JSON.parse(otherLink) as Array<{ addr_info: Array<{ local: string }> }>)[0]!.addr_info[0]!.local);
    for (const t of targets) assert.match(await get(s.id, `http://${t}/`), /^fail/, `${t} must be refused`);
    const v6 = await sh(s.id, "curl -sS -m 3 'http://[::1]:" + port + "/' ; curl -sS -m 3 http://[fec0::2]/; echo done");
    assert.doesNotMatch(v6.stdout, /den|healthz|"code"/, "no IPv6 way to the host");
    // A port scan of the private server: one aggregated event per interval, not one per probe.
    const before = (await api("GET", `/v1/sandboxes/${s.id}/events`)).body.events.length;
    await sh(s.id, "for p in $(seq 1 300); do (echo > /dev/tcp/10.99.0.10/$p) 2>/dev/null; done; true");
    const refused = await waitFor("refusal events", async () => {
      const ev = (await api("GET", `/v1/sandboxes/${s.id}/events`)).body.events.filter((e: { type: string }) => e.type === "network.refused");
      const total = ev.reduce((n: number, e: { data: { private: number } }) => n + e.data.private, 0);
      return total >= 300 ? ev : undefined;
    }, 20_000);
    const after = (await api("GET", `/v1/sandboxes/${s.id}/events`)).body.events.length;
    assert.ok(after - before <= 15, `a 300-port scan added ${after - before} events`);
    assert.ok(refused.length >= 1);
    const status = (await api("GET", `/v1/sandboxes/${s.id}/network`)).body;
    assert.equal(status.active, true);
    assert.ok(status.refused.private >= 300, JSON.stringify(status));
    await api("DELETE", `/v1/sandboxes/${s.id}`);
    await api("DELETE", `/v1/sandboxes/${other.id}`);
    assert.equal(netnsOf(s.id) || netnsOf(other.id), false, "destroy removes the namespaces");
  });

  test("limits: connection N+1 is refused while the first N work; bandwidth is held to its rate", async () => {
    const s = await create({ network: { egress: "open", max_connections: 2, bandwidth_mbps: 2 } });
    // Three connections held open at once, then each used: a refused one may look connected
    // for a moment (it is reset at once), so it is judged by whether it answers.
    const r = await sh(s.id, `python3 - <<'EOF'
import socket, time
socks = []
for i in range(3):
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect(('198.51.100.10', 80)); socks.append(s)
    except OSError:
        socks.append(None)
    time.sleep(0.3)
for s in socks:
    try:
        s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n'); print(s.recv(12) or 'refused')
    except Exception:
        print('refused')
EOF`);
    assert.equal(r.stdout, "b'HTTP/1.0 200'\nb'HTTP/1.0 200'\nrefused\n", r.stderr);
    // 1 MiB at 2 Mbit/s takes about 4 s; unshaped it takes well under one.
    const t = await sh(s.id, "curl -sS -m 60 -o /dev/null -w '%{size_download} %{time_total}' http://198.51.100.10/big.bin");
    const [bytes, secs] = t.stdout.split(" ").map(Number);
    assert.equal(bytes, 1048576, t.stderr);
    const mbps = (bytes! * 8) / secs! / 1e6;
    assert.ok(mbps < 2 * 1.3, `downloaded at ${mbps.toFixed(2)} Mbit/s with a 2 Mbit/s limit`);
    await api("DELETE", `/v1/sandboxes/${s.id}`);
  });

  test("the policy survives warm and cold hibernate, checkpoint/restore and fork; each fork child has its own network", async () => {
    const s = await create({ network: { egress: "allowlist", allow: ["allowed.test"] } });
    assert.equal(await get(s.id, "http://allowed.test/"), "ok net1");
    for (const mode of ["warm", "cold"]) {
      assert.equal((await api("POST", `/v1/sandboxes/${s.id}/hibernate`, { mode })).status, 200);
      if (mode === "cold") assert.equal(netnsOf(s.id), false, "a cold sandbox has no network on the host");
      assert.equal((await api("POST", `/v1/sandboxes/${s.id}/wake`)).status, 200);
      assert.equal(await get(s.id, "http://allowed.test/"), "ok net1", `after ${mode} hibernate`);
      assert.match(await get(s.id, "http://203.0.113.10/"), /^fail/, `still an allowlist after ${mode} hibernate`);
    }
    // A change while hibernated applies at the wake.
    await api("POST", `/v1/sandboxes/${s.id}/hibernate`, { mode: "cold" });
    assert.equal((await api("PUT", `/v1/sandboxes/${s.id}/network`, { egress: "open" })).status, 200);
    await api("POST", `/v1/sandboxes/${s.id}/wake`);
    assert.equal(await get(s.id, "http://203.0.113.10/"), "ok net2", "the policy set while cold");
    const cp = await api("POST", `/v1/sandboxes/${s.id}/checkpoints`, {});
    assert.equal(cp.status, 201, cp.text);
    const restored = await api("POST", `/v1/checkpoints/${cp.body.id}/restore`, {});
    assert.equal(restored.status, 201, restored.text);
    assert.equal(restored.body.network.egress, "open");
    assert.equal(await get(restored.body.id, "http://203.0.113.10/"), "ok net2", "a restore keeps the policy");
    const forked = await api("POST", `/v1/sandboxes/${s.id}/fork`, { count: 2 });
    assert.equal(forked.status, 201, forked.text);
    const kids = forked.body.sandboxes as Array<{ id: string; network: { egress: string } }>;
    for (const k of kids) {
      assert.equal(k.network.egress, "open");
      assert.equal(netnsOf(k.id), true, "each child has a namespace of its own");
      assert.equal(await get(k.id, "http://198.51.100.10/"), "ok net1");
    }
    assert.equal(await get(s.id, "http://198.51.100.10/"), "ok net1", "the parent keeps its network");
    const macs = await Promise.all([s.id, ...kids.map((k) => k.id)].map(async (id) => (await sh(id, "cat /sys/class/net/eth0/address")).stdout.trim()));
    assert.equal(new Set(macs).size, 3, `each has a MAC of its own: ${macs.join(" ")}`);
    for (const id of [s.id, restored.body.id, ...kids.map((k) => k.id)]) await api("DELETE", `/v1/sandboxes/${id}`);
    await api("DELETE", `/v1/checkpoints/${cp.body.id}`);
  });
});
