/**
 * The host contract (@den/protocol `HostAgent`, `HostGuest`) as the control plane relies on
 * it, one suite for every implementation: the in-memory host, the local one (QEMU) and the
 * HTTP one over loopback. Where the memory host and a real one answer differently, one of
 * the runs fails: the memory host is only worth its speed while it behaves as a host does.
 *
 * The tests of a describe block run in order on one sandbox (and what it becomes), so a
 * real host pays for few VMs: each step is what the control plane does next to a sandbox.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Server } from "node:https";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { gunzipSync, gzipSync } from "node:zlib";
import { DenError, inventoryCpuSeconds, type HostAgent, type HostGuest, type StoredDigests, type StoredRef } from "@den/protocol";
import { issueMachine, newCa, serverTlsOptions } from "@den/pki";
import { newId } from "@den/runtime";
import { STORE_MANIFEST, snapshotKey, storedSnapshotComplete, templateKey, type ObjectStore } from "@den/store";
import { Registrar, type RegisteredHost } from "../../src/index.js";

/** One implementation under test, with what only its own side can do. */
export interface ContractHost {
  /** What the control plane calls. */
  host: HostAgent;
  /** The objects its stored snapshots go to. */
  store: ObjectStore;
  /** The host side, as its registration sees it (the registrar runs beside the host agent, never across the hop). */
  registered(): RegisteredHost;
  /** The host agent process restarts (its VMs and data dir stay): the control plane's new handle on it. */
  restart(): Promise<HostAgent>;
  close(): Promise<void>;
}

const isCode = (code: string) => (e: unknown) => {
  assert.ok(e instanceof DenError, `a DenError, not ${String(e)}`);
  assert.equal(e.code, code, e.message);
  return true;
};
const op = () => newId("op");
const text = async (g: HostGuest, path: string, opts?: { offset?: number; length?: number }) => {
  const parts: Buffer[] = [];
  for await (const c of g.files.readStream(path, opts)) parts.push(c);
  return Buffer.concat(parts).toString();
};
const sh = async (g: HostGuest, cmd: string) => {
  const r = await g.exec(cmd, { timeoutMs: 30_000 });
  assert.equal(r.exitCode, 0, `${cmd}: ${r.stderr.toString()}`);
  return r.stdout.toString();
};
const vmState = async (h: HostAgent, id: string) => (await h.inventory()).vms.find((v) => v.id === id)?.state;
async function until<T>(what: string, fn: () => Promise<T | undefined>, ms = 60_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
/** Whether a background process whose argv includes `word` runs in the guest. */
const runs = async (g: HostGuest, word: string) => (await g.processes.list()).some((p) => p.running && (p.argv ?? [p.cmd ?? ""]).join(" ").includes(word));

/**
 * What a host uploaded and answered digests for, tampered with in the store, is refused
 * (`snapshot_corrupt`) by `use` before it reads it, and nothing of the stored copy is lost
 * (it is put back as it was after each try): one byte of its state object, its manifest
 * naming `../snapshots` as its template (refused by its digests, and without them, as a copy
 * recorded before digests were, by the manifest's fields), and a copy whole in itself that is
 * not the one put (only the digests tell). `after`: what must hold after each refusal.
 */
async function refusesTampered(store: ObjectStore, ref: StoredRef & { digests: StoredDigests }, use: (r: StoredRef) => Promise<unknown>, after: () => Promise<void>): Promise<void> {
  assert.ok(ref.digests, "the upload's answer has its digests");
  const manifestKey = `${ref.key}/${STORE_MANIFEST}`;
  // Every object's sum, to see that nothing was lost; the two tampered with, to put back.
  const objects = async () => Promise.all((await store.list(`${ref.key}/`)).map(async (o) => [o.key, createHash("sha256").update(await store.getBytes(o.key)).digest("hex")]));
  const before = await objects();
  const manifestBytes = await store.getBytes(manifestKey);
  const manifest = JSON.parse(manifestBytes.toString()) as { files: Record<string, { key: string }>; snapshot: { template: { name: string } } };
  const stateKey = Object.entries(manifest.files).find(([n]) => n.includes("state"))![1].key;
  const stateBytes = await store.getBytes(stateKey);
  const refused = async (why: string, r: StoredRef) => {
    await assert.rejects(use(r), (e: unknown) => e instanceof DenError && e.code === "snapshot_corrupt" && e.status === 422, why);
    await after();
  };
  const putBack = async () => {
    await store.putBytes(stateKey, stateBytes);
    await store.putBytes(manifestKey, manifestBytes);
  };
  // One byte of its state.
  const state = Buffer.from(stateBytes);
  state[state.length >> 1] = state[state.length >> 1]! ^ 0x01;
  await store.putBytes(stateKey, state);
  await refused("one byte of its state", ref);
  await refused("one byte of its state, with no digests recorded", { id: ref.id, key: ref.key });
  await putBack();
  // Its manifest naming another template, one that is a path out of the template store.
  const named = { ...manifest, snapshot: { ...manifest.snapshot, template: { ...manifest.snapshot.template, name: "../snapshots" } } };
  await store.putBytes(manifestKey, Buffer.from(JSON.stringify(named, null, 2)));
  await refused("a manifest naming ../snapshots", ref);
  await refused("a manifest naming ../snapshots, with no digests recorded", { id: ref.id, key: ref.key });
  await putBack();
  // A copy whole in itself: its state compressed again (the same content, other bytes), the
  // manifest's sum and size of it made to match. Only the record of what was put tells.
  const again = recompressed(stateKey, stateBytes);
  await store.putBytes(stateKey, again);
  const m = JSON.parse((await store.getBytes(manifestKey)).toString()) as { files: Record<string, { key: string; sha256: string; size: number }> };
  for (const f of Object.values(m.files)) if (f.key === stateKey) Object.assign(f, { sha256: createHash("sha256").update(again).digest("hex"), size: again.length });
  await store.putBytes(manifestKey, Buffer.from(JSON.stringify(m, null, 2)));
  await refused("a copy whole in itself but not the one put", ref);
  await putBack();
  assert.deepEqual(await objects(), before, "nothing of the stored copy lost");
}

/** An object's content compressed again at another level: valid, the same when decompressed, other bytes. */
function recompressed(key: string, b: Buffer): Buffer {
  if (key.endsWith(".gz")) return gzipSync(gunzipSync(b), { level: 9 });
  const raw = spawnSync("zstd", ["-d", "-q", "-c"], { input: b, maxBuffer: 1 << 30 });
  const out = spawnSync("zstd", ["-3", "-q", "-c"], { input: raw.stdout, maxBuffer: 1 << 30 });
  assert.equal(out.status, 0);
  assert.ok(!out.stdout.equals(b), "other bytes");
  return out.stdout;
}

export function hostContract(name: string, open: () => Promise<ContractHost>): void {
  describe(`the host contract: ${name}`, () => {
    let c: ContractHost;
    let h: HostAgent;
    const A = newId("sbx");
    const B = newId("sbx");
    const ref = (): StoredRef => {
      const id = newId("snap");
      return { id, key: snapshotKey(id, "contract") };
    };
    before(async () => {
      c = await open();
      h = c.host;
    });
    after(async () => {
      for (const id of [A, B]) await h?.vms.destroy(id).catch(() => undefined);
      await c?.close();
    });

    test("who it is; unknown templates, sandboxes and volumes are errors with their codes", async () => {
      assert.ok(h.instance.length > 0);
      const base = (await h.templates.list()).find((t) => t.name === "base" && t.current);
      assert.ok(base, "a current base template");
      assert.ok(base.vcpus >= 1 && base.memory_mb >= 64 && base.disk_mb >= 64);
      await assert.rejects(h.vms.checkCreate({ template: "no-such-template" }), isCode("template_not_found"));
      await assert.rejects(h.vms.create(op(), { id: newId("sbx"), template: "no-such-template" }), isCode("template_not_found"));
      await assert.rejects(h.vms.checkShape({ vcpus: 1_000_000, memoryMb: 64 }), isCode("capacity_exhausted"));
      // (A host may refuse the handle itself or its first call.)
      await assert.rejects(async () => h.guest(newId("sbx")).exec("true"), isCode("sandbox_not_found"));
      await assert.rejects(h.vms.wakeWarm(op(), newId("sbx"), null), isCode("sandbox_not_running"));
      await assert.rejects(h.vms.wakeDisk(op(), newId("sbx")), isCode("sandbox_not_running"));
      await assert.rejects(h.volumes.create(op(), "not-a-volume-id", 64), isCode("invalid_argument"));
      // Nothing to remove and nothing that ran: both are fine, as the control plane retries them.
      await h.vms.destroy(newId("sbx"));
      await h.settled(op());
      assert.equal(inventoryCpuSeconds(await h.inventory(), newId("sbx")), undefined);
    });

    test("create is idempotent by operation id; the same id under another operation is refused", async () => {
      const o = op();
      const [a1, a2] = await Promise.all([h.vms.create(o, { id: A, template: "base" }), h.vms.create(o, { id: A, template: "base" })]);
      assert.deepEqual(a1, a2);
      assert.deepEqual(await h.vms.create(o, { id: A, template: "base" }), a1, "asked again: the first answer");
      assert.equal(a1.template, "base");
      assert.ok(a1.templateVersion.length > 0 && a1.vcpus >= 1 && a1.memoryMb >= 64 && a1.diskMb >= 64);
      const inv = await h.inventory();
      assert.equal(inv.vms.filter((v) => v.id === A).length, 1, "one VM");
      assert.equal(await vmState(h, A), "running");
      assert.equal(inv.instance, h.instance);
      assert.ok(inv.capacity.used.sandboxes >= 1);
      await assert.rejects(h.vms.create(op(), { id: A, template: "base" }), isCode("already_exists"));
      await h.settled(o);
    });

    test("exec: output, exit codes, env, stdin, a deadline; streamed, with stdin kept open", async () => {
      const g = h.guest(A);
      assert.equal(await sh(g, "echo hi"), "hi\n");
      const r = await g.exec("exit 3");
      assert.deepEqual([r.exitCode, r.timedOut], [3, false]);
      const nf = await g.exec("no-such-command-here");
      assert.equal(nf.exitCode, 127);
      assert.match(nf.stderr.toString(), /no-such-command-here.*not found/);
      assert.equal((await g.exec("echo $GREETING", { env: { GREETING: "hello there" } })).stdout.toString(), "hello there\n");
      assert.equal((await g.exec("cat", { stdin: "from stdin" })).stdout.toString(), "from stdin");
      assert.equal((await g.exec(["echo", "a b", "c"])).stdout.toString(), "a b c\n", "an argv is not split again");
      const slow = await g.exec("sleep 30", { timeoutMs: 300 });
      assert.equal(slow.timedOut, true);

      const p = await g.execStream("echo a; echo b");
      let out = "";
      for await (const chunk of p) if (chunk.stream === "stdout") out += chunk.data.toString();
      assert.equal(out, "a\nb\n");
      assert.equal((await p.wait()).exitCode, 0);
      const cat = await g.execStream("cat", { interactive: true });
      await cat.write("typed\n");
      cat.closeStdin();
      let echoed = "";
      for await (const chunk of cat) echoed += chunk.data.toString();
      assert.equal(echoed, "typed\n");
      assert.equal((await cat.wait()).exitCode, 0);
    });

    test("files: write, read, stat, list, mkdir, rename, remove, xattrs; exec sees the same tree; errors have codes", async () => {
      const g = h.guest(A);
      assert.equal(await g.files.write("/root/c/f.txt", "hello", { parents: true }), 5);
      assert.equal(await text(g, "/root/c/f.txt"), "hello");
      assert.equal(await text(g, "/root/c/f.txt", { offset: 1, length: 3 }), "ell");
      assert.equal(await sh(g, "cat /root/c/f.txt"), "hello");
      await sh(g, "echo from-exec > /root/c/e.txt");
      assert.equal(await text(g, "/root/c/e.txt"), "from-exec\n");
      const st = await g.files.stat("/root/c/f.txt");
      assert.deepEqual([st.type, st.size], ["file", 5]);
      assert.equal((await g.files.stat("/root/c")).type, "dir");
      await g.files.mkdir("/root/c/d");
      const names = (await g.files.list("/root/c")).entries.map((e) => `${e.name}:${e.type}`).sort();
      assert.deepEqual(names, ["d:dir", "e.txt:file", "f.txt:file"]);
      await g.files.rename("/root/c/f.txt", "/root/c/g.txt");
      await assert.rejects(g.files.stat("/root/c/f.txt"), isCode("file_not_found"));
      await assert.rejects(text(g, "/root/none.txt"), isCode("file_not_found"));
      await assert.rejects(g.files.write("/root/no/such/dir/x", "x", { parents: false }), isCode("file_not_found"));
      assert.equal(await g.files.write("/root/made/on/the/way/x", "x"), 1, "parents are made by default");
      await g.files.setXattrs("/root/c/g.txt", { "user.k": "v ✓" });
      assert.deepEqual(await g.files.getXattrs("/root/c/g.txt"), { "user.k": "v ✓" });
      await g.files.remove("/root/made", { recursive: true });
      await g.files.remove("/root/c/d");
      await g.files.remove("/root/c/e.txt");
      assert.deepEqual((await g.files.list("/root/c")).entries.map((e) => e.name), ["g.txt"]);
    });

    test("background processes: spawn, list, read, write, wait, kill", async () => {
      const g = h.guest(A);
      const cat = await g.spawn(["cat"], { interactive: true });
      await g.processes.write(cat.proc, "piped\n", true);
      const done = await g.processes.wait(cat.proc, 10_000);
      assert.equal(done.running, false);
      const out = await g.processes.read(cat.proc, "stdout");
      assert.equal(Buffer.from(out.data, "base64").toString(), "piped\n");
      const sleeper = await g.spawn("sleep 1000");
      assert.ok(await runs(g, "sleep"), "listed while it runs");
      assert.equal((await g.processes.wait(sleeper.proc, 100)).running, true);
      await g.processes.kill(sleeper.proc);
      assert.equal((await g.processes.wait(sleeper.proc, 10_000)).running, false);
      // One that lives on through what follows.
      await g.spawn("sleep 100000");
    });

    test("warm hibernate: paused in place, its snapshot listed once written, idempotent; wake keeps files and processes", async () => {
      const snap = newId("snap");
      const o = op();
      await h.vms.hibernateWarm(o, A, snap);
      await h.vms.hibernateWarm(o, A, snap);
      assert.equal(await vmState(h, A), "paused");
      await until("the warm snapshot", async () => ((await h.inventory()).snapshots.includes(snap) ? true : undefined));
      const w = op();
      await h.vms.wakeWarm(w, A, snap);
      await h.vms.wakeWarm(w, A, snap);
      assert.equal(await vmState(h, A), "running");
      const g = h.guest(A);
      assert.equal(await text(g, "/root/c/g.txt"), "hello");
      assert.ok(await runs(g, "sleep 100000"));
      await h.snapshots.dropLocal(snap);
      assert.ok(!(await h.inventory()).snapshots.includes(snap));
    });

    test("cold: the upload leaves the VM paused and the store complete; destroy, then a restore brings everything back", async () => {
      const to = ref();
      const o = op();
      const up = await h.vms.upload(o, A, to);
      assert.ok(up.storedBytes > 0);
      assert.deepEqual(await h.vms.upload(o, A, to), up, "asked again: the first answer");
      assert.equal(await vmState(h, A), "paused", "kept until the control plane has committed");
      assert.ok(await storedSnapshotComplete(c.store, to.key));
      await h.vms.destroy(A);
      assert.equal(await vmState(h, A), undefined);
      await h.vms.destroy(A);
      await refusesTampered(c.store, { ...to, digests: up.digests! }, (r) => h.vms.restore(op(), A, r), async () => assert.equal(await vmState(h, A), undefined, "no VM of the try"));
      const info = await h.vms.restore(op(), A, { ...to, digests: up.digests! });
      assert.equal(info.template, "base");
      assert.equal(await vmState(h, A), "running");
      const g = h.guest(A);
      assert.equal(await text(g, "/root/c/g.txt"), "hello");
      assert.ok(await runs(g, "sleep 100000"), "its processes too");
      await h.snapshots.unpin(to.id);
      await assert.rejects(h.vms.restore(op(), newId("sbx"), ref()), (e: unknown) => e instanceof DenError && e.status >= 400 && e.status < 500);
    });

    test("a checkpoint keeps it running; a fork's child is a copy that then goes its own way", async () => {
      const to = ref();
      const cp = await h.vms.checkpoint(op(), A, to);
      assert.ok(cp.pauseMs >= 0 && cp.storedBytes > 0);
      assert.equal(await vmState(h, A), "running");
      assert.ok(await storedSnapshotComplete(c.store, to.key));
      const o = op();
      const kids = await h.vms.fork(o, A, [B]);
      assert.equal(kids.length, 1);
      assert.equal(kids[0]!.template, "base");
      assert.deepEqual(await h.vms.fork(o, A, [B]), kids, "asked again: the first answer");
      const [ga, gb] = [h.guest(A), h.guest(B)];
      assert.equal(await text(gb, "/root/c/g.txt"), "hello");
      await gb.files.write("/root/c/g.txt", "child");
      assert.equal(await text(ga, "/root/c/g.txt"), "hello", "the parent's file is its own");
      assert.equal(await vmState(h, A), "running");
      assert.equal(await vmState(h, B), "running");
      await h.snapshots.unpin(to.id);
    });

    test("disk hibernate: off with its disk; its wake boots it with the files and without the processes", async () => {
      const o = op();
      await h.vms.hibernateDisk(o, B);
      await h.vms.hibernateDisk(o, B);
      assert.equal(await vmState(h, B), "off");
      const w = op();
      await h.vms.wakeDisk(w, B);
      await h.vms.wakeDisk(w, B);
      assert.equal(await vmState(h, B), "running");
      const g = h.guest(B);
      assert.equal(await text(g, "/root/c/g.txt"), "child");
      assert.equal(await runs(g, "sleep 100000"), false, "a fresh boot");
    });

    test("a restarted host agent still has its VMs, as they were", async () => {
      const before = (await h.inventory()).vms.filter((v) => v.id === A || v.id === B).map((v) => `${v.id}:${v.state}`).sort();
      h = await c.restart();
      const after = (await h.inventory()).vms.filter((v) => v.id === A || v.id === B).map((v) => `${v.id}:${v.state}`).sort();
      assert.deepEqual(after, before);
      assert.equal(await sh(h.guest(A), "cat /root/c/g.txt"), "hello");
    });

    test("a host whose lease cannot be renewed pauses its running VMs; resume runs each again", async () => {
      // A control plane (its hosts' listener, mutual TLS) that grants 400 ms leases, then stops answering.
      const ca = await newCa();
      const hostTls = await issueMachine(ca, { kind: "host", id: c.registered().instance }, { ttlHours: 1 });
      const cpTls = await issueMachine(ca, { kind: "control-plane", id: "rep_contract" }, { ttlHours: 1 });
      let beats = 0;
      const cp: Server = createServer(serverTlsOptions(cpTls), (req, res) => {
        req.resume();
        beats++;
        res.setHeader("content-type", "application/json");
        res.end(JSON.stringify({ leaseMs: 400, state: "up" }));
      });
      await new Promise<void>((r) => cp.listen(0, "127.0.0.1", r));
      const url = `https://127.0.0.1:${(cp.address() as { port: number }).port}`;
      const registrar = new Registrar(c.registered(), { controlPlanes: [url], link: { tls: hostTls, peer: { kind: "control-plane" } }, address: "https://127.0.0.1:9", intervalMs: 100 });
      try {
        await registrar.start();
        await until("a few renewals", async () => (beats >= 3 ? true : undefined), 10_000);
        assert.equal(await vmState(h, A), "running", "running while its lease is renewed");
        await new Promise<void>((r) => {
          cp.close(() => r());
          cp.closeAllConnections();
        });
        await until("its VMs paused once its lease ran out", async () => ((await vmState(h, A)) === "paused" && (await vmState(h, B)) === "paused" ? true : undefined), 20_000);
      } finally {
        registrar.stop();
        cp.close();
      }
      await h.vms.resume(A);
      await h.vms.resume(B);
      assert.equal(await vmState(h, A), "running");
      assert.equal(await sh(h.guest(B), "echo back"), "back\n");
      assert.ok(((inventoryCpuSeconds(await h.inventory(), A)) ?? -1) >= 0);
    });

    test("a template build: its log kept after it ends, idempotent by id; nothing of its VM left; an unknown build's log is empty and ended", async () => {
      const name = `contract-${newId("t").slice(2, 10)}`;
      const o = op();
      const spec = { name, setup: ["echo built-in-the-build > /root/built"], setupTimeoutSeconds: 60 };
      const [t, again] = await Promise.all([h.templates.build(o, spec), h.templates.build(o, spec)]);
      assert.deepEqual(again, t, "asked again with the same id: the same build");
      assert.equal(t.name, name);
      const page = await h.templates.buildLog(o, 0);
      assert.ok(page.done, "the log of an ended build is done");
      assert.ok(page.lines.some((l) => l.message.includes("setup: echo built-in-the-build")), JSON.stringify(page.lines));
      assert.equal(page.next, page.lines.length);
      assert.deepEqual((await h.templates.buildLog(o, page.next)).lines, [], "read from its end: nothing more");
      assert.ok((await h.templates.list()).some((x) => x.name === name && x.version === t.version && x.current));
      assert.deepEqual((await h.inventory()).vms.filter((v) => v.id !== A && v.id !== B), [], "the build's VM is gone");
      assert.deepEqual(await h.templates.buildLog(op(), 0), { lines: [], next: 0, done: true });
      await h.templates.cancelBuild(op());

      // Published to the store with the digests of what was put; gone from here, it comes back
      // only as they say: a tampered copy is refused before anything of it is installed.
      const key = templateKey(name, t.version, "contract");
      const pub = await h.templates.publish(op(), name, t.version, key);
      assert.ok(pub.storedBytes > 0 && pub.digests, "published, with its digests");
      await h.templates.delete(name);
      const listed = async () => (await h.templates.list()).some((x) => x.name === name);
      assert.equal(await listed(), false);
      await refusesTampered(c.store, { id: t.version, key, digests: pub.digests! }, (r) => h.templates.fetch(op(), name, t.version, key, true, r.digests), async () => assert.equal(await listed(), false, "nothing installed"));
      await h.templates.fetch(op(), name, t.version, key, true, pub.digests);
      assert.ok((await h.templates.list()).some((x) => x.name === name && x.version === t.version && x.current), "installed as its digests say");
      await h.templates.delete(name);
    });

    test("destroy removes the VMs; the inventory then lists none of them", async () => {
      await h.vms.destroy(A);
      await h.vms.destroy(B);
      const left = (await h.inventory()).vms.filter((v) => v.id === A || v.id === B);
      assert.deepEqual(left, []);
      await assert.rejects(async () => h.guest(A).exec("true"), isCode("sandbox_not_found"));
    });
  });
}
