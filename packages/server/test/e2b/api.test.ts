// needs: one VM, network namespace (open egress), the e2b client
/**
 * The E2B control-plane API, driven by the real `e2b` npm client (pinned) against a real
 * server and real microVMs, configured the way a user would: E2B_API_URL and E2B_API_KEY.
 * Covers what needs a guest: fork, snapshots, network, metrics, a public port, and a pause
 * that keeps only the disk. The mapping itself (create, info, paging, timeouts, pause and
 * connect, kill, older clients' paths, errors) runs on the memory host: e2b-rest.test.ts.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { Sandbox } from "e2b";
import type { RunningServer } from "../../src/index.js";
import { ADMIN_KEY, client, testServer, waitFor } from "../helpers.js";

describe("the E2B control-plane API through the e2b client", () => {
  let server: RunningServer;
  let api: ReturnType<typeof client>;
  const made: string[] = [];

  before(async () => {
    server = await testServer();
    api = client(server.url);
    process.env.E2B_API_URL = server.url;
    process.env.E2B_API_KEY = ADMIN_KEY;
  });

  after(async () => {
    for (const id of made) await Sandbox.kill(id).catch(() => undefined);
    await server?.close();
  });

  const create = async (opts: Parameters<typeof Sandbox.create>[1] = {}) => {
    const sbx = await Sandbox.create("base", opts);
    made.push(sbx.sandboxId);
    return sbx;
  };

  test("fork, snapshots (create, list, a sandbox from one, delete), network, metrics, and a public port on its E2B host", async () => {
    const sbx = await create({ timeoutMs: 600_000 });
    // Through /v1 (same owner, same sandbox): a file and a web server on 8080.
    const run = async (id: string, cmd: string) => {
      const r = await api("POST", `/v1/sandboxes/${id}/exec`, { cmd });
      assert.equal(r.status, 200, r.text);
      return r.body.stdout as string;
    };
    await run(sbx.sandboxId, "echo forked > /workspace/f; cd /workspace && nohup python3 -m http.server 8080 >/dev/null 2>&1 &");
    await waitFor("the web server", async () => ((await run(sbx.sandboxId, "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8080/f || true")) === "200" ? true : undefined), 20_000, 300);

    // getHost(8080) is a host Den's port proxy serves, without a key (E2B's ports are public by default).
    const host = sbx.getHost(8080);
    const [name, port] = host.split(":");
    const body = await new Promise<string>((resolve, reject) => {
      const req = http.request({ host: "127.0.0.1", port: Number(port), path: "/f", headers: { host: `${name}:${port}` } }, (res) => {
        let b = "";
        res.on("data", (c: Buffer) => (b += c.toString()));
        res.on("end", () => (res.statusCode === 200 ? resolve(b) : reject(new Error(`${res.statusCode}: ${b}`))));
      });
      req.on("error", reject);
      req.end();
    });
    assert.equal(body, "forked\n", "the guest's web server, at getHost(8080)");

    const [child] = await (Sandbox as unknown as { fork(id: string, opts: { count: number; timeoutMs: number }): Promise<Sandbox[]> }).fork(sbx.sandboxId, { count: 1, timeoutMs: 600_000 });
    assert.ok(child, "one child");
    made.push(child.sandboxId);
    assert.notEqual(child.sandboxId, sbx.sandboxId);
    assert.equal(await run(child.sandboxId, "cat /workspace/f"), "forked\n");
    assert.equal((await Sandbox.getInfo(child.sandboxId)).state, "running");

    const snap = await Sandbox.createSnapshot(sbx.sandboxId, { name: "e2b-snap" });
    assert.match(snap.snapshotId, /^snap_/);
    assert.deepEqual(snap.names, ["e2b-snap"]);
    const listed = await Sandbox.listSnapshots({ sandboxId: sbx.sandboxId }).nextItems();
    assert.deepEqual(listed.map((x: { snapshotId: string }) => x.snapshotId), [snap.snapshotId]);
    for (const ref of [snap.snapshotId, "e2b-snap"]) {
      const from = await create({ timeoutMs: 600_000 });
      await Sandbox.kill(from.sandboxId);
      const restored = await Sandbox.create(ref, { timeoutMs: 600_000 });
      made.push(restored.sandboxId);
      assert.equal(await run(restored.sandboxId, "cat /workspace/f"), "forked\n", `a sandbox from snapshot ${ref}`);
    }
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true);
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false, "gone");

    // Network: no internet access is egress none; an allowOut list behind a deny-all is an allowlist.
    await Sandbox.updateNetwork(sbx.sandboxId, { allowInternetAccess: false } as never);
    assert.equal((await api("GET", `/v1/sandboxes/${sbx.sandboxId}`)).body.network.egress, "none");
    await Sandbox.updateNetwork(sbx.sandboxId, { allowOut: ["example.com"], denyOut: ["0.0.0.0/0"] } as never);
    assert.deepEqual((await api("GET", `/v1/sandboxes/${sbx.sandboxId}`)).body.network.allow, ["example.com"]);
    const info = await Sandbox.getInfo(sbx.sandboxId);
    assert.deepEqual(info.network?.allowOut, ["example.com"]);

    // Metrics come from inside the guest.
    const metrics = await Sandbox.getMetrics(sbx.sandboxId);
    assert.ok(metrics.length >= 1, "at least one sample");
    const m = metrics.at(-1)!;
    assert.ok(m.cpuCount >= 1 && m.memTotal > 100 * 1024 * 1024 && m.memUsed > 0 && m.memUsed < m.memTotal, JSON.stringify(m));
    assert.ok(m.diskTotal > 1024 * 1024 * 1024 && m.diskUsed > 0 && m.diskUsed < m.diskTotal, JSON.stringify(m));
    assert.ok(m.cpuUsedPct >= 0 && m.cpuUsedPct <= 100);
  });

  test("a pause that keeps the disk only: connect boots it (files kept, a new boot_id, processes gone); so does onResume reboot, and onTimeout pause with keepMemory false", async () => {
    const run = async (id: string, cmd: string) => {
      const r = await api("POST", `/v1/sandboxes/${id}/exec`, { cmd });
      assert.equal(r.status, 200, r.text);
      return r.body.stdout as string;
    };
    const PROBE = "cat /root/keep.txt; echo; cat /proc/sys/kernel/random/boot_id; pgrep -c -x sleep || true";
    const probe = async (id: string) => {
      const [file, boot, sleeps] = (await run(id, PROBE)).trim().split("\n");
      return { file, boot, sleeps: Number(sleeps) };
    };
    const mode = async (id: string) => (await api("GET", `/v1/sandboxes/${id}`)).body.hibernate_mode as string | null;

    const id = (await create({ timeoutMs: 600_000 })).sandboxId;
    await run(id, "printf kept > /root/keep.txt; nohup sleep 100000 >/dev/null 2>&1 &");
    const first = await probe(id);
    assert.deepEqual([first.file, first.sleeps], ["kept", 1]);
    assert.equal(await Sandbox.pause(id, { keepMemory: false }), true);
    assert.equal((await Sandbox.getInfo(id)).state, "paused");
    assert.equal(await mode(id), "disk");
    await Sandbox.connect(id, { timeoutMs: 60_000 });
    assert.equal((await Sandbox.getInfo(id)).state, "running");
    const second = await probe(id);
    assert.deepEqual([second.file, second.sleeps], ["kept", 0], "files kept, processes gone");
    assert.notEqual(second.boot, first.boot, "it booted");

    // A warm pause resumed with onResume "reboot": its memory is given up, it boots.
    assert.equal(await Sandbox.pause(id), true);
    assert.equal(await mode(id), "warm");
    await Sandbox.connect(id, { onResume: "reboot", timeoutMs: 60_000 });
    const third = await probe(id);
    assert.equal(third.file, "kept");
    assert.notEqual(third.boot, second.boot);
    const modes = ((await api("GET", `/v1/sandboxes/${id}/events`)).body.events as Array<{ type: string; data: Record<string, unknown> }>)
      .filter((e) => e.type === "hibernated" || e.type === "running").map((e) => `${e.type}/${String(e.data.mode ?? "")}`);
    assert.deepEqual(modes.slice(1), ["hibernated/disk", "running/disk", "hibernated/warm", "hibernated/disk", "running/disk"]);

    // At its timeout, onTimeout {pause, keepMemory: false} hibernates it to its disk; connect boots it.
    const auto = (await create({ timeoutMs: 3_000, lifecycle: { onTimeout: { action: "pause", keepMemory: false } } })).sandboxId;
    // One exec, well inside its 3 s (and were it asleep already, the exec would wake it and the timeout start again).
    const madeBoot = (await run(auto, "printf kept > /root/keep.txt; cat /proc/sys/kernel/random/boot_id")).trim();
    await waitFor("the timeout's pause", async () => ((await Sandbox.getInfo(auto)).state === "paused" ? true : undefined), 20_000, 200);
    assert.equal(await mode(auto), "disk");
    assert.deepEqual((await Sandbox.getInfo(auto)).lifecycle, { onTimeout: "pause", autoResume: false });
    await Sandbox.connect(auto, { timeoutMs: 60_000 });
    const woke = await probe(auto);
    assert.equal(woke.file, "kept");
    assert.notEqual(woke.boot, madeBoot, "it booted");
    const hib = ((await api("GET", `/v1/sandboxes/${auto}/events`)).body.events as Array<{ type: string; reason: string; data: Record<string, unknown> }>).find((e) => e.type === "hibernated");
    assert.deepEqual([hib?.reason, hib?.data.mode], ["ttl", "disk"]);
  });

});
