// needs: one VM, network namespace
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { once } from "node:events";
import { readFileSync, readlinkSync } from "node:fs";
import net_ from "node:net";
import { join } from "node:path";
import { DenError } from "@den/protocol";
import { GUEST_NET, SandboxNetwork, type NetworkEnv } from "../../src/network/sandbox-network.js";
import type { Runtime, Sandbox } from "../../src/index.js";
import { QEMU_PIDS_MAX, memoryLimitMb } from "../../src/jail/cgroups.js";
import { hostCgroups } from "../../src/jail/host.js";
import { vmIdentity } from "../../src/jail/identity.js";
import { testRuntime } from "../helpers.js";

/**
 * Egress through passt in a per-sandbox namespace, against real microVMs. Runs only
 * inside scripts/netns-test.sh: a namespace with no default route, so nothing here can
 * leave the machine; "the internet" is 198.51.100.10 and 203.0.113.10, and 10.99.0.10 is
 * a private-range server no sandbox may reach.
 */
const insideTestNetns = (() => {
  try {
    return !execFileSync("ip", ["route", "show", "default"], { encoding: "utf8" }).trim() && process.env.DEN_NETNS_TEST === "1";
  } catch {
    return false;
  }
})();

const env: NetworkEnv = { pool: "100.96.0.0/16", hostAddresses: [], hosts: { "allowed.test": "198.51.100.10", "other.test": "203.0.113.10" } };

describe("sandbox egress", { skip: !insideTestNetns && "run through scripts/netns-test.sh" }, () => {
  let rt: Runtime;
  let sbx: Sandbox;
  let net: SandboxNetwork;
  before(async () => {
    rt = await testRuntime();
    sbx = await rt.create({ template: "base" });
  });
  after(async () => {
    await net?.down();
    await sbx?.destroy();
    rt?.close();
  });

  /** `ok <body>` or `fail <curl exit code>`, from inside the guest. */
  const get = async (url: string) => {
    const r = await sbx.exec(`curl -sS -m 3 ${url} && exit 0 || exit $?`, { timeoutMs: 20_000 });
    return r.exitCode === 0 ? `ok ${r.stdout.toString().trim()}` : `fail ${r.exitCode}`;
  };

  test("none: the NIC leads nowhere", async () => {
    assert.match(await get("http://198.51.100.10/"), /^fail/);
  });

  test("open: the internet answers; private ranges and this machine do not; refusals are counted", async () => {
    // Under the umask `den serve` runs with: the router's uid must still read its resolv.conf.
    const umask = process.umask(0o077);
    try {
      net = await SandboxNetwork.up(rt.instance, sbx.id, 7, { egress: "open" }, env, sbx.dir);
    } finally {
      process.umask(umask);
    }
    assert.equal((await sbx.exec(net.guestSetup())).exitCode, 0);
    assert.equal(await get("http://198.51.100.10/"), "ok net1");
    assert.equal(await get("http://allowed.test/"), "ok net1", "names resolve through Den's DNS");
    assert.match(await get("http://10.99.0.10/"), /^fail/, "a private-range server");
    assert.match(await get(`http://${net.link.host}:80/`), /^fail/, "the host end of its own link");
    assert.match(await get("http://10.0.2.2:53/"), /^fail/, "the router's alias for the host");
    const refused = await net.refused();
    assert.ok(refused.private >= 2, JSON.stringify(refused));
  });

  test("the router runs as a uid of its own, chrooted to router-jail/, in its cgroup (and names still resolve)", () => {
    const pid = Number(readFileSync(join(sbx.dir, "router.pid"), "utf8").trim());
    const id = vmIdentity(rt.instance, `net-${sbx.id}`);
    assert.ok(id.uid > 0 && id.uid !== vmIdentity(rt.instance, sbx.id).uid, "not root, and not its VM's uid");
    assert.match(readFileSync(`/proc/${pid}/status`, "utf8"), new RegExp(`^Uid:\\s+${id.uid}\\s+${id.uid}\\s+${id.uid}\\s+${id.uid}$`, "m"));
    assert.equal(readlinkSync(`/proc/${pid}/root`), join(sbx.dir, "router-jail"));
    // (scripts/netns-test.sh mounts the host's cgroups again inside the test namespace)
    const cg = hostCgroups();
    assert.ok(cg, "this host's cgroups are writable here too");
    const cgroup = readFileSync(`/proc/${pid}/cgroup`, "utf8");
    for (const c of ["cpu", "memory", "pids"]) assert.match(cgroup, new RegExp(`:${c}:/den/${rt.instance}/net-${sbx.id}$`, "m"));
    const d = cg!.dirs(rt.instance, `net-${sbx.id}`);
    assert.equal(readFileSync(join(d.memory!, "memory.limit_in_bytes"), "utf8").trim(), String(memoryLimitMb(128) * 1024 * 1024));
    assert.equal(readFileSync(join(d.pids!, "pids.max"), "utf8").trim(), String(QEMU_PIDS_MAX));
    assert.match(readFileSync(`/proc/${pid}/status`, "utf8"), /^Seccomp:\s+2$/m, "under its seccomp filter");
  });

  test("allowlist: one address and one name pass, others are refused; back to none at once", async () => {
    await net.setPolicy({ egress: "allowlist", allow: ["198.51.100.10", "other.test"] });
    assert.equal(await get("http://198.51.100.10/"), "ok net1");
    assert.equal(await get("http://other.test/"), "ok net2", "an allowed name, and the address it resolved to");
    assert.match(await get("http://allowed.test/"), /^fail/, "a name not on the list does not resolve");
    await net.setPolicy({ egress: "allowlist", allow: ["198.51.100.10"] });
    assert.match(await get("http://203.0.113.10/"), /^fail/, "an address not on the list");
    await net.setPolicy({ egress: "none" });
    assert.match(await get("http://198.51.100.10/"), /^fail/);
    await net.setPolicy({ egress: "open" });
    assert.equal(await get("http://198.51.100.10/"), "ok net1");
    assert.ok((await net.refused()).dns >= 1);
  });

  test("DNS: learned addresses go to a bounded set of their own; TCP to the resolver is refused; a query flood is rate-limited", async () => {
    await net.setPolicy({ egress: "allowlist", allow: ["other.test"] });
    assert.equal(await get("http://other.test/"), "ok net2");
    const set = execFileSync("ip", ["netns", "exec", net.netns, "nft", "list", "set", "inet", "den", "dns4"], { encoding: "utf8" });
    assert.match(set, /size 4096/);
    assert.match(set, /203\.0\.113\.10/);
    // A TCP resolver on the host (any port 53 listener) is not the sandbox's to reach.
    const tcp53 = net_.createServer((c) => c.end("tcp-dns\n")).listen(53, "0.0.0.0");
    await once(tcp53, "listening");
    try {
      await net.setPolicy({ egress: "open" });
      for (const to of [GUEST_NET.dns, net.link.host]) {
        const r = await sbx.exec(`python3 -c "import socket; s = socket.create_connection(('${to}', 53), timeout=3); print(s.recv(16))" 2>&1; echo rc=$?`, { timeoutMs: 20_000 });
        assert.match(r.stdout.toString(), /rc=1/, `TCP to ${to}:53: ${r.stdout}`);
      }
    } finally {
      tcp53.close();
    }
    // 600 queries at once: the resolver answers about its burst, drops the rest, and counts them.
    const before = (await net.refused()).dns;
    const flood = await sbx.exec(`python3 -c "
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(0.5)
q = lambda i: i.to_bytes(2, 'big') + bytes.fromhex('01000001000000000000') + b'\\x07allowed\\x04test\\x00\\x00\\x01\\x00\\x01'
for i in range(600): s.sendto(q(i), ('${GUEST_NET.dns}', 53))
n = 0
try:
    while True: s.recv(512); n += 1
except socket.timeout: pass
print(n)"`, { timeoutMs: 60_000 });
    const answered = Number(flood.stdout.toString().trim());
    assert.ok(answered >= 50 && answered < 300, `answered ${answered} of 600 (${flood.stderr})`);
    // (the router may lose a few of the 600 on the way, so not every unanswered one reaches Den to be counted)
    const dropped = (await net.refused()).dns - before;
    assert.ok(dropped >= 200 && dropped + answered <= 600, `the dropped ones are counted (${dropped})`);
  });

  test("a port scan of this machine's addresses reaches none of its services, and a neighbour's execs go on meanwhile", async () => {
    // Services of "this machine" (the test namespace), on every address: none may answer the guest.
    const services = [1022, 2222, 8080].map((port) => net_.createServer((c) => c.end("den-host-secret\n")).listen(port, "0.0.0.0"));
    await Promise.all(services.map((srv) => once(srv, "listening")));
    // The scanner's network as the runtime builds it, knowing this machine's addresses; the neighbour is the suite's sandbox.
    const scanner = await rt.create({ template: "base" });
    await rt.setNetwork(scanner.id, { egress: "open" });
    const neighbour = sbx;
    try {
      let done = false;
      const rtts: number[] = [];
      const probe = (async () => {
        while (!done) {
          const t0 = performance.now();
          assert.equal((await neighbour.exec("echo ok")).stdout.toString(), "ok\n");
          rtts.push(performance.now() - t0);
        }
      })();
      // Every address of this machine the guest might know of: its link's host end, the router's alias, the test namespace's own.
      const link = rt.networks.get(scanner.id)!.link;
      const targets = [link.host, GUEST_NET.gateway, "198.51.100.1", "203.0.113.1"];
      // (a refused connection is accepted by Den's refuser and reset at once: "connected" proves nothing, an answer would)
      const scan = await scanner.exec(`python3 -c "
import socket
leaks, tried = [], 0
for host in ${JSON.stringify(targets).replace(/"/g, "'")}:
    for port in list(range(1, 65)) + [1022, 2222, 8080]:
        tried += 1
        s = socket.socket(); s.settimeout(0.5)
        try:
            if s.connect_ex((host, port)) == 0 and b'den-host-secret' in s.recv(64): leaks.append(f'{host}:{port}')
        except OSError: pass
        s.close()
print(tried, ' '.join(leaks) or 'none')"`, { timeoutMs: 600_000 });
      done = true;
      await probe;
      assert.equal(scan.stdout.toString().trim(), `${targets.length * 67} none`, `services that answered: ${scan.stdout} ${scan.stderr}`);
      assert.ok(rtts.length >= 3, `the neighbour ran execs throughout (${rtts.length})`);
      assert.ok((await rt.networks.get(scanner.id)!.refused()).private > 0, "the scan's connections were refused and counted");
    } finally {
      for (const srv of services) srv.close();
      await scanner.destroy();
    }
  });

  test("a policy that names neither a CIDR nor a domain is refused", () => {
    assert.throws(() => SandboxNetwork.validate({ egress: "allowlist", allow: ["not a host!"] }), (e: unknown) => e instanceof DenError && e.code === "invalid_argument");
  });
});

describe("a sandbox's network through the runtime", { skip: !insideTestNetns && "run through scripts/netns-test.sh" }, () => {
  test("set on a running sandbox, switched off and on, rebuilt after a restart, and gone without a trace on destroy", async () => {
    process.env.DEN_NET_HOSTS = "allowed.test=198.51.100.10";
    let rt = await testRuntime();
    const sbx = await rt.create({ template: "base" });
    const get = async (s: Sandbox, url: string) => (await s.exec(`curl -sS -m 3 ${url}`, { timeoutMs: 20_000 })).exitCode === 0;
    const traces = (id: string) => ({
      netns: execFileSync("ip", ["netns", "list"], { encoding: "utf8" }).includes(`den-${id}`),
      // The router is the QEMU with no machine whose stream leads to this sandbox's NIC socket.
      router: execFileSync("ps", ["-eo", "args"], { encoding: "utf8" }).split("\n").some((l) => l.includes("-M none") && l.includes(`${id}/router-jail/net.sock`)),
    });
    try {
      assert.equal(await get(sbx, "http://198.51.100.10/"), false);
      await rt.setNetwork(sbx.id, { egress: "allowlist", allow: ["allowed.test"] });
      assert.equal(await get(sbx, "http://allowed.test/"), true);
      assert.equal(await get(sbx, "http://203.0.113.10/"), false);
      await rt.setNetwork(sbx.id, { egress: "none" });
      assert.equal(await get(sbx, "http://198.51.100.10/"), false);
      assert.deepEqual(traces(sbx.id), { netns: false, router: false }, "none tears the network down");
      await rt.setNetwork(sbx.id, { egress: "open" });
      assert.equal(await get(sbx, "http://203.0.113.10/"), true);
      // A restarted runtime adopts the VM and builds its network again.
      rt.close();
      rt = await testRuntime();
      const again = rt.get(sbx.id);
      assert.equal(await get(again, "http://203.0.113.10/"), true, "the network works after a restart");
      await again.destroy();
      assert.deepEqual(traces(sbx.id), { netns: false, router: false });
    } finally {
      await rt.destroyAll();
      rt.close();
    }
  });
});
