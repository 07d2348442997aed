// needs: one VM
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import S3rver from "s3rver";
import { inventoryCpuSeconds } from "@den/protocol";
import { findInstanceProcesses } from "@den/runtime";
import type { RunningServer } from "../src/index.js";
import { client, dataDir, testServer, untilWarmSnapshot } from "./helpers.js";

/** Deletes every path under the data dir (outside the store and templates) whose name holds one of `needles`. */
function removeHostFiles(root: string, needles: string[]): string[] {
  const removed: string[] = [];
  const walk = (dir: string) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, e.name);
      if (needles.some((n) => e.name.includes(n))) {
        rmSync(path, { recursive: true, force: true });
        removed.push(path);
      } else if (e.isDirectory() && path !== join(root, "store") && path !== join(root, "templates")) {
        walk(path);
      }
    }
  };
  walk(root);
  return removed;
}

/** Cold hibernate against both snapshot stores: the VM is gone, the sandbox wakes from the store. */
for (const kind of ["local", "s3"] as const) {
  describe(`cold hibernate (${kind} store)`, () => {
    let server: RunningServer;
    let s3: S3rver | undefined;
    let s3dir = "";
    let api: ReturnType<typeof client>;
    before(async () => {
      let env: Record<string, string> = {};
      if (kind === "s3") {
        s3dir = mkdtempSync(join(tmpdir(), "den-s3-"));
        s3 = new S3rver({ port: 0, address: "127.0.0.1", silent: true, directory: s3dir, configureBuckets: [{ name: "den" }] });
        const { port } = await s3.run();
        env = { DEN_STORE: "s3", DEN_S3_BUCKET: "den", DEN_S3_ENDPOINT: `http://127.0.0.1:${port}`, AWS_ACCESS_KEY_ID: "S3RVER", AWS_SECRET_ACCESS_KEY: "S3RVER" };
      }
      server = await testServer(env);
      api = client(server.url);
    });
    after(async () => {
      // (a before hook that failed leaves no server; the S3 server must close all the same, or the file never exits)
      try {
        if (api) for (const s of (await api("GET", "/v1/sandboxes?limit=200")).body?.sandboxes ?? []) await api("DELETE", `/v1/sandboxes/${s.id}`);
        await server?.close();
      } finally {
        await s3?.close();
        if (s3dir) rmSync(s3dir, { recursive: true, force: true });
      }
    });

    // Five rounds against the local store; the S3 store runs the same path, so two rounds there.
    const rounds = kind === "local" ? 5 : 2;
    test(`a 100 MB process and its HTTP server survive ${rounds} cold rounds, with every host file but the store deleted before each wake`, async () => {
      const c = await api("POST", "/v1/sandboxes", { persistent: true });
      const id = c.body.id;
      const start = await api("POST", `/v1/sandboxes/${id}/exec`, {
        cmd: "mkdir -p /work && cd /work && echo tree > f.txt && nohup python3 -c \"import http.server, os, zlib; data = bytearray(100 << 20); [data.__setitem__(slice(i, i + (1 << 20)), os.urandom(1 << 20)) for i in range(0, len(data), 1 << 20)]; h = type('H', (http.server.BaseHTTPRequestHandler,), {'do_GET': lambda s: (s.send_response(200), s.end_headers(), s.wfile.write(b'%08x' % zlib.crc32(data)))}); http.server.HTTPServer(('127.0.0.1', 8000), h).serve_forever()\" >/dev/null 2>&1 & echo $!",
      });
      const pid = start.body.stdout.trim();
      // Wait until the server holds its data and listens.
      const ready = await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "for i in $(seq 300); do curl -sf http://127.0.0.1:8000/ && exit 0; sleep 0.2; done; exit 1", timeout_seconds: 120 });
      assert.equal(ready.body.exit_code, 0, ready.text);
      const sum = ready.body.stdout;
      const tree = (await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "find /work -exec stat -c '%n %s %Y' {} + | sort" })).body.stdout;
      const instance = server.cp.hosts.first!.instance;
      for (let round = 1; round <= rounds; round++) {
        const diskDelta = statSync(join(dataDir(), "sandboxes", id, "disk.qcow2")).size;
        const h = await api("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "cold" });
        assert.equal(h.status, 200, h.text);
        assert.equal(h.body.state, "hibernated");
        assert.equal(h.body.hibernate_mode, "cold");
        assert.equal(findInstanceProcesses(instance).has(id), false, "no QEMU while cold");
        assert.equal(existsSync(join(dataDir(), "sandboxes", id)), false, "no sandbox dir while cold");
        assert.ok(h.body.stored_bytes > 0 && h.body.stored_bytes <= h.body.memory_mb * 1024 * 1024 + diskDelta,
          `stored ${h.body.stored_bytes} bytes; RAM ${h.body.memory_mb} MiB + disk delta ${diskDelta} bytes`);
        // Whatever else of it is on this host (a template pin, stray files) goes too: the store alone must do.
        const snapshot = (await server.cp.store.sandboxes.get(id))!.hibernate_snapshot!;
        const removed = removeHostFiles(dataDir(), [id, snapshot]);
        assert.ok(removed.some((f) => f.includes(join("pins", snapshot))), `the template pin was among the files removed: ${removed.join(", ")}`);
        // The next exec wakes it transparently.
        const r = await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: `kill -0 ${pid} && curl -sf http://127.0.0.1:8000/ && cat /work/f.txt` });
        assert.equal(r.body.stdout, `${sum}tree\n`, `round ${round}: ${r.text}`);
        assert.equal((await api("GET", `/v1/sandboxes/${id}`)).body.state, "running");
      }
      assert.equal((await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "find /work -exec stat -c '%n %s %Y' {} + | sort" })).body.stdout, tree, "the file tree is unchanged");
      const events = (await api("GET", `/v1/sandboxes/${id}/events`)).body.events as Array<{ type: string; data: Record<string, unknown> }>;
      assert.equal(events.filter((e) => e.type === "hibernated").length, rounds);
      for (const direction of ["upload", "download"]) {
        assert.ok(events.some((e) => e.type === "transfer.progress" && e.data.direction === direction && e.data.done === true), `a finished ${direction} is reported`);
      }
      await api("DELETE", `/v1/sandboxes/${id}`);
    });

    if (kind === "local") {
      test("template pins are the database's: a host that lost one gets it back at its reconcile, and lets go once the checkpoint is deleted", async () => {
        const id = (await api("POST", "/v1/sandboxes", { persistent: true })).body.id as string;
        const cp = await api("POST", `/v1/sandboxes/${id}/checkpoints`, {});
        assert.equal(cp.status, 201, cp.text);
        const sandbox = (await api("GET", `/v1/sandboxes/${id}`)).body;
        const pin = join(dataDir(), "pins", cp.body.id);
        assert.ok(existsSync(pin), "the checkpoint pins its template version on its host");
        rmSync(join(dataDir(), "pins"), { recursive: true, force: true });
        await server.cp.recovery.reconcileHost(server.cp.hosts.first!);
        assert.equal(readFileSync(pin, "utf8").trim(), `${sandbox.template}@${sandbox.template_version}`, "the pin is written again from the database");
        assert.equal((await api("DELETE", `/v1/checkpoints/${cp.body.id}`)).status, 204);
        await server.cp.recovery.reconcileHost(server.cp.hosts.first!);
        assert.equal(existsSync(pin), false, "a deleted checkpoint's pin goes at the next reconcile");
        await api("DELETE", `/v1/sandboxes/${id}`);
      });
    }

    test("destroying a sandbox and deleting its checkpoints gives the store back its bytes; over the stored-bytes quota is a 429", async () => {
      const storeBytes = async () => (await host().store.list("")).reduce((n, o) => n + o.size, 0);
      const key = (await api("POST", "/v1/keys", { owner: `quota-${kind}` })).body.key;
      const user = client(server.url, key);
      // What earlier tests released is collected first, so only this test's bytes are counted.
      await server.cp.gc.collect();
      const before = await storeBytes();
      const id = (await user("POST", "/v1/sandboxes", {})).body.id;
      await user("POST", `/v1/sandboxes/${id}/exec`, { cmd: "head -c 5000000 /dev/urandom > /tmp/blob" });
      const cp1 = await user("POST", `/v1/sandboxes/${id}/checkpoints`, { name: "one" });
      assert.equal(cp1.status, 201, cp1.text);
      const limits = server.cp.config.limits;
      const quota = limits.storedBytesPerOwner;
      limits.storedBytesPerOwner = cp1.body.stored_bytes;
      try {
        const refused = await user("POST", `/v1/sandboxes/${id}/checkpoints`, { name: "two" });
        assert.equal(refused.status, 429, refused.text);
        assert.equal(refused.body.error.code, "quota_exceeded");
        const cold = await user("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "cold" });
        assert.equal(cold.status, 429, cold.text);
        // A template build, and the upload of a build context, would add to what is stored: refused too.
        const build = await user("POST", "/v1/templates", { name: `quota-${kind}`, setup: ["true"] });
        assert.equal(build.status, 429, build.text);
        assert.equal(build.body.error.code, "quota_exceeded");
        const upload = await user("PUT", `/v1/templates/contexts/sha256:${"0".repeat(64)}`, Buffer.from("x"), { "content-type": "application/octet-stream" });
        assert.equal(upload.status, 429, upload.text);
        // Refused, and nothing lost: it still runs with its data.
        assert.equal((await user("POST", `/v1/sandboxes/${id}/exec`, { cmd: "stat -c %s /tmp/blob" })).body.stdout, "5000000\n");
        // Under the quota before, past it with what the upload wrote: refused at the commit, its copy released.
        limits.storedBytesPerOwner = cp1.body.stored_bytes + 1000;
        const late = await user("POST", `/v1/sandboxes/${id}/checkpoints`, { name: "three" });
        assert.equal(late.status, 429, late.text);
        assert.match(late.body.error.message, /more would pass the quota/);
        assert.deepEqual((await user("GET", "/v1/checkpoints")).body.checkpoints.map((c: { id: string }) => c.id), [cp1.body.id]);
        // So is a cold hibernation: refused at its commit, it keeps running with its data.
        const lateCold = await user("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "cold" });
        assert.equal(lateCold.status, 429, lateCold.text);
        assert.match(lateCold.body.error.message, /more would pass the quota/);
        assert.equal((await user("GET", `/v1/sandboxes/${id}`)).body.state, "running");
        assert.equal((await user("POST", `/v1/sandboxes/${id}/exec`, { cmd: "stat -c %s /tmp/blob" })).body.stdout, "5000000\n", "resumed, with its data");
      } finally {
        limits.storedBytesPerOwner = quota;
      }
      assert.equal((await user("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "cold" })).status, 200);
      assert.ok(await storeBytes() > before);
      assert.equal((await user("DELETE", `/v1/sandboxes/${id}`)).status, 200);
      assert.equal((await user("DELETE", `/v1/checkpoints/${cp1.body.id}`)).status, 204);
      // Released at once, deleted by the garbage collector (the suite's grace period is 0).
      await server.cp.gc.collect();
      assert.equal(await storeBytes(), before, "the store is back to its size before the sandbox existed");
    });

    const host = () => server.cp.hosts.first as unknown as { store: { list(p: string): Promise<Array<{ key: string; size: number }>>; getBytes(k: string): Promise<Buffer>; putBytes(k: string, b: Buffer): Promise<void> } };

    test("a stored snapshot with one flipped byte is refused; the sandbox stays hibernated", async () => {
      const id = (await api("POST", "/v1/sandboxes", {})).body.id;
      await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "echo v > /tmp/v" });
      const h = await api("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "cold" });
      assert.equal(h.body.hibernate_mode, "cold");
      const store = host().store;
      const key = (await store.list(`${server.cp.deployment}/snapshots/`)).find((o) => /\/state\.bin\.(gz|zst)$/.test(o.key))!.key;
      const good = await store.getBytes(key);
      const bad = Buffer.from(good);
      bad.writeUInt8(bad.readUInt8(bad.length >> 1) ^ 1, bad.length >> 1);
      await store.putBytes(key, bad);
      const r = await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "cat /tmp/v" });
      assert.equal(r.status, 422, r.text);
      assert.equal(r.body.error.code, "snapshot_corrupt");
      assert.equal((await api("GET", `/v1/sandboxes/${id}`)).body.state, "hibernated");
      // Put the good bytes back: the same sandbox wakes with its state.
      await store.putBytes(key, good);
      assert.equal((await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "cat /tmp/v" })).body.stdout, "v\n");
      await api("DELETE", `/v1/sandboxes/${id}`);
    });

    test("another sandbox's state in place of its own (valid, but not what its manifest hashed) never runs: refused, still hibernated", async () => {
      // The state streams into the VM as it downloads: the VM must not resume until the sums hold.
      const a = (await api("POST", "/v1/sandboxes", {})).body.id;
      const b = (await api("POST", "/v1/sandboxes", {})).body.id;
      await api("POST", `/v1/sandboxes/${a}/exec`, { cmd: "echo a > /tmp/who" });
      await api("POST", `/v1/sandboxes/${b}/exec`, { cmd: "echo b > /tmp/who" });
      for (const id of [a, b]) assert.equal((await api("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "cold" })).body.hibernate_mode, "cold");
      const store = host().store;
      const stateOf = async (id: string) => {
        const snap = (await server.cp.store.sandboxes.get(id))!.hibernate_snapshot!;
        return (await store.list(`${server.cp.deployment}/snapshots/${snap}/`)).find((o) => /\/state\.bin\.(gz|zst)$/.test(o.key))!.key;
      };
      const [keyA, keyB] = [await stateOf(a), await stateOf(b)];
      const good = await store.getBytes(keyA);
      await store.putBytes(keyA, await store.getBytes(keyB));
      const r = await api("POST", `/v1/sandboxes/${a}/exec`, { cmd: "cat /tmp/who" });
      assert.equal(r.status, 422, r.text);
      assert.equal(r.body.error.code, "snapshot_corrupt");
      assert.equal((await api("GET", `/v1/sandboxes/${a}`)).body.state, "hibernated");
      await store.putBytes(keyA, good);
      assert.equal((await api("POST", `/v1/sandboxes/${a}/exec`, { cmd: "cat /tmp/who" })).body.stdout, "a\n");
      assert.equal((await api("POST", `/v1/sandboxes/${b}/exec`, { cmd: "cat /tmp/who" })).body.stdout, "b\n");
      for (const id of [a, b]) await api("DELETE", `/v1/sandboxes/${id}`);
    });

    test("concurrent execs on a cold sandbox trigger one wake; destroy leaves nothing in the store", async () => {
      const c = await api("POST", "/v1/sandboxes", {});
      const id = c.body.id;
      await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "echo 1 > /tmp/x" });
      await api("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "cold" });
      const rs = await Promise.all(Array.from({ length: 5 }, () => api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "cat /tmp/x" })));
      for (const r of rs) assert.equal(r.body.stdout, "1\n", r.text);
      const wakes = (await api("GET", `/v1/sandboxes/${id}/events`)).body.events.filter((e: { type: string; data: { mode?: string } }) => e.type === "running" && e.data.mode === "cold");
      assert.equal(wakes.length, 1, "exactly one wake");
      await api("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "cold" });
      await api("DELETE", `/v1/sandboxes/${id}`);
      const store = (server.cp.hosts.first as unknown as { store: { list(p: string): Promise<unknown[]> } }).store;
      await server.cp.gc.collect();
      assert.deepEqual(await store.list(`${server.cp.deployment}/snapshots/`), [], "the store is empty again");
    });
  });
}

describe("warm hibernate", () => {
  test("a guest busy-looping a CPU, once warm-hibernated, costs its host under 1% CPU", async () => {
    const server = await testServer();
    const api = client(server.url);
    try {
      const id = (await api("POST", "/v1/sandboxes", {})).body.id;
      await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "nohup sh -c 'while true; do :; done' >/dev/null 2>&1 &" });
      const cpu = async () => inventoryCpuSeconds(await server.cp.hosts.first!.inventory(), id)!;
      const b0 = await cpu();
      await new Promise((r) => setTimeout(r, 1000));
      assert.ok((await cpu()) - b0 > 0.5, "the loop burns CPU while running");
      await api("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "warm" });
      // (Once its local snapshot is written: QEMU writes it after the hibernate's answer.)
      await untilWarmSnapshot(server, id);
      const h0 = await cpu();
      await new Promise((r) => setTimeout(r, 5000));
      const used = (await cpu()) - h0;
      assert.ok(used < 0.05, `hibernated QEMU used ${used.toFixed(3)} CPU-seconds in 5 s`);
      await api("DELETE", `/v1/sandboxes/${id}`);
    } finally {
      await server.close();
    }
  });
});
