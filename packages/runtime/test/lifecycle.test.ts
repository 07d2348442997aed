// needs: one VM
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { cp, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { existsSync } from "node:fs";
import { spawn } from "node:child_process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findInstanceProcesses, type Runtime, type Sandbox } from "../src/index.js";
import { qemuProcesses, sandboxDirs, testRuntime, isCode } from "./helpers.js";
import { hasExited } from "../src/qemu.js";

const COUNTER = "nohup sh -c 'i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 0.2; done' >/dev/null 2>&1 & echo $!";

async function counter(s: Sandbox): Promise<number> {
  return Number((await s.exec("cat /tmp/count")).stdout.toString().trim());
}

describe("lifecycle", () => {
  let rt: Runtime;
  const owned: Sandbox[] = [];
  const track = <T extends Sandbox | Sandbox[]>(s: T): T => {
    owned.push(...(Array.isArray(s) ? s : [s]));
    return s;
  };
  before(async () => {
    rt = await testRuntime();
  });
  after(async () => {
    await Promise.all(owned.map((s) => s.destroy()));
    // The suite's data dir is its own: leave no snapshot behind to pin old template versions.
    for (const s of await rt.listSnapshots()) await rt.deleteSnapshot(s.id);
    rt?.close();
  });

  test("a background counter keeps its value across pause and resume", async () => {
    const sbx = track(await rt.create());
    const pid = (await sbx.exec(COUNTER)).stdout.toString().trim();
    await new Promise((r) => setTimeout(r, 1500));
    const before = await counter(sbx);
    assert.ok(before > 0);
    await sbx.pause();
    assert.equal(sbx.state, "paused");
    await assert.rejects(sbx.exec("true"), isCode("sandbox_not_running"));
    await new Promise((r) => setTimeout(r, 1000));
    await sbx.resume();
    const after = await counter(sbx);
    assert.ok(after >= before && after < before + 4, `counter ${before} -> ${after}: no ticks while paused`);
    assert.equal((await sbx.exec(`kill -0 ${pid} && echo alive`)).stdout.toString(), "alive\n");
  });

  test("snapshot -> destroy -> restore: same PID, counter continues, files kept, clock set", async () => {
    const sbx = track(await rt.create());
    const pid = (await sbx.exec(COUNTER)).stdout.toString().trim();
    await sbx.files.write("/workspace/note.txt", "written before the snapshot");
    await new Promise((r) => setTimeout(r, 1000));
    const snap = await rt.snapshot(sbx.id);
    assert.ok(snap.manifest.pauseMs > 0);
    const atSnapshot = await counter(sbx);
    await sbx.destroy();
    await new Promise((r) => setTimeout(r, 10_000));
    const restored = track(await rt.restore(snap.id));
    assert.equal((await restored.exec(`kill -0 ${pid} && echo alive`)).stdout.toString(), "alive\n");
    const guestMs = Number((await restored.exec("date +%s%3N")).stdout.toString().trim());
    assert.ok(Math.abs(guestMs - Date.now()) < 1000, `guest clock off by ${guestMs - Date.now()} ms`);
    await new Promise((r) => setTimeout(r, 1000));
    const c = await counter(restored);
    assert.ok(c > 0 && c <= atSnapshot + 10, `counter continues from the snapshot (${atSnapshot} -> ${c})`);
    assert.ok(c >= atSnapshot - 1);
    assert.equal((await restored.files.read("/workspace/note.txt")).toString(), "written before the snapshot");
  });

  test("fork: children diverge, the parent is unaffected, random state differs", async () => {
    const parent = track(await rt.create());
    await parent.exec(COUNTER);
    await parent.files.write("/workspace/shared.txt", "from parent");
    const kids = track(await rt.fork(parent.id, 2));
    assert.equal(kids.length, 2);
    const [a, b] = kids as [Sandbox, Sandbox];
    await a.files.write("/workspace/a.txt", "a");
    await b.files.write("/workspace/b.txt", "b");
    await a.exec("echo 1000 > /tmp/own");
    await b.exec("echo 2000 > /tmp/own");
    await a.exec("echo $(( $(cat /tmp/own) + 1 )) > /tmp/own");
    assert.equal((await a.exec("cat /tmp/own")).stdout.toString(), "1001\n");
    assert.equal((await b.exec("cat /tmp/own")).stdout.toString(), "2000\n");
    assert.equal((await a.exec("ls /workspace/b.txt 2>&1; true")).stdout.toString().includes("No such file"), true);
    assert.equal((await b.exec("ls /workspace/a.txt 2>&1; true")).stdout.toString().includes("No such file"), true);
    assert.equal((await a.files.read("/workspace/shared.txt")).toString(), "from parent");
    await assert.rejects(parent.files.stat("/workspace/a.txt"), isCode("file_not_found"));
    await assert.rejects(parent.files.stat("/tmp/own"), isCode("file_not_found"));
    const rand = async (s: Sandbox) => (await s.exec("head -c 16 /dev/urandom | od -An -tx1; python3 -c 'import random; print(random.random())'")).stdout.toString();
    assert.notEqual(await rand(a), await rand(b));
    // The parent's counter still runs.
    const c1 = await counter(parent);
    await new Promise((r) => setTimeout(r, 600));
    assert.ok((await counter(parent)) > c1);
  });

  test("fork x1: the child's QEMU starts while the parent's state is saved; so does a child's own; a failed fork leaves no QEMU", async () => {
    const parent = track(await rt.create());
    await parent.exec(COUNTER);
    await parent.files.write("/workspace/kept.txt", "from parent");
    // Held in the guest's memory only: the child has it only if it loaded the parent's state.
    await parent.exec("echo in-memory > /dev/shm/held");
    const [child] = track(await rt.fork(parent.id, 1));
    assert.equal((await child!.files.read("/workspace/kept.txt")).toString(), "from parent");
    assert.equal((await child!.exec("cat /dev/shm/held")).stdout.toString(), "in-memory\n");
    const c1 = await counter(child!);
    await new Promise((r) => setTimeout(r, 600));
    assert.ok((await counter(child!)) > c1, "the parent's counter runs on in the child");
    // The child's disk is a copy: its writes are not the parent's.
    await child!.files.write("/workspace/kept.txt", "from child");
    assert.equal((await parent.files.read("/workspace/kept.txt")).toString(), "from parent");
    // A child restored from a snapshot forks too (its snapshot's disk is rebased as its child starts).
    const [grandchild] = track(await rt.fork(child!.id, 1));
    assert.equal((await grandchild!.files.read("/workspace/kept.txt")).toString(), "from child");
    assert.equal((await grandchild!.exec("cat /dev/shm/held")).stdout.toString(), "in-memory\n");
    // A child that cannot be made (a bad id) fails the fork after its QEMU was started: that QEMU goes.
    await assert.rejects(rt.fork(parent.id, 1, { ids: ["not-an-id"] }), isCode("invalid_argument"));
    const settled = () => findInstanceProcesses(rt.instance, { pooled: true }).size === rt.list().length + rt.pooledVms;
    for (const deadline = Date.now() + 20_000; !settled() && Date.now() < deadline;) await new Promise((r) => setTimeout(r, 100));
    assert.ok(settled(), `QEMUs: ${findInstanceProcesses(rt.instance, { pooled: true }).size}, sandboxes ${rt.list().length}, pooled ${rt.pooledVms}`);
  });

  test("fork x3: each child holds the parent's memory byte for byte, mapping one shared RAM file; so do a child's own children", async () => {
    const parent = track(await rt.create());
    // A process holding 24 MiB of random bytes; on SIGUSR1 it writes their hash to /tmp/sum.
    const holder = [
      "import hashlib, os, signal, time",
      "b = bytearray(24 << 20)",
      "for i in range(0, len(b), 1 << 20): b[i:i + (1 << 20)] = os.urandom(1 << 20)",
      "def dump(*_):",
      "    open('/tmp/sum.part', 'w').write(hashlib.sha256(b).hexdigest()); os.rename('/tmp/sum.part', '/tmp/sum')",
      "signal.signal(signal.SIGUSR1, dump)",
      "dump()",
      "while True: time.sleep(1)",
    ].join("\n");
    await parent.files.write("/tmp/holder.py", holder);
    const pid = (await parent.exec("nohup python3 /tmp/holder.py >/dev/null 2>&1 & echo $!; while [ ! -e /tmp/sum ]; do sleep 0.1; done")).stdout.toString().trim();
    const want = (await parent.files.read("/tmp/sum")).toString();
    assert.match(want, /^[0-9a-f]{64}$/);
    const sumOf = async (s: Sandbox) => {
      await s.exec(`rm -f /tmp/sum; kill -USR1 ${pid}; while [ ! -e /tmp/sum ]; do sleep 0.1; done`);
      return (await s.files.read("/tmp/sum")).toString();
    };
    const kids = track(await rt.fork(parent.id, 3));
    for (const k of kids) {
      assert.equal(await sumOf(k), want, `${k.id} holds the parent's bytes`);
      // Its RAM is a private mapping of the fork's file (in the runtime's RAM directory), not of the template's.
      const maps = await readFile(`/proc/${k.pid}/maps`, "utf8");
      assert.ok(maps.includes(`${rt.ramDir}/`), `${k.id} maps the fork's RAM file`);
    }
    // Children write their own copies: one's change is not another's.
    await kids[0]!.exec(`python3 -c "open('/tmp/x','w').write('a')"; kill -9 ${pid}`);
    assert.equal(await sumOf(kids[1]!), want);
    assert.equal(await sumOf(parent), want);
    // A child's RAM is not its template's: its fork is a stream each grandchild loads.
    const grand = track(await rt.fork(kids[2]!.id, 2));
    for (const g of grand) assert.equal(await sumOf(g), want, `${g.id} holds its grandparent's bytes`);
  });

  test("three sandboxes at once; destroying each leaves no process, socket, overlay or memory file", async () => {
    const boxes = await Promise.all([rt.create(), rt.create(), rt.create()]);
    const pids = boxes.map((b) => b.pid!);
    for (const b of boxes) assert.equal((await b.exec("echo up")).stdout.toString(), "up\n");
    const live = qemuProcesses(rt);
    for (const b of boxes) assert.ok(live.has(b.id));
    for (const b of boxes) {
      const dir = b.dir;
      assert.ok(existsSync(join(dir, "qmp.sock")) && existsSync(join(dir, "disk.qcow2")));
      await b.destroy();
      assert.equal(existsSync(dir), false, "sandbox directory removed");
    }
    const after = qemuProcesses(rt);
    for (const [i, b] of boxes.entries()) {
      assert.equal(after.has(b.id), false);
      assert.equal(hasExited(pids[i]!), true, "QEMU process gone (a zombie at most, not yet reaped)");
      assert.equal(sandboxDirs(rt).includes(b.id), false);
    }
  });

  test("an imported snapshot with one byte flipped is refused; the original imports fine", async () => {
    const sbx = track(await rt.create());
    await sbx.files.write("/workspace/x", "x");
    const snap = await rt.snapshot(sbx.id);
    const tmp = await mkdtemp(join(tmpdir(), "den-import-"));
    try {
      await cp(snap.dir, tmp, { recursive: true });
      const good = await rt.importSnapshot(tmp);
      const state = join(tmp, "state.bin");
      const bytes = await readFile(state);
      const at = Math.floor(bytes.length / 2);
      bytes.writeUInt8(bytes.readUInt8(at) ^ 0x01, at);
      await writeFile(state, bytes);
      await assert.rejects(rt.importSnapshot(tmp), (e: unknown) => isCode("snapshot_corrupt")(e) && /sha256/.test((e as Error).message));
      const restored = track(await rt.restore(good.id));
      assert.equal((await restored.files.read("/workspace/x")).toString(), "x");
    } finally {
      await rm(tmp, { recursive: true, force: true });
    }
  });

  test("a snapshot made for another host is refused as incompatible and kept intact", async () => {
    const sbx = track(await rt.create());
    const snap = await rt.snapshot(sbx.id);
    const tmp = await mkdtemp(join(tmpdir(), "den-compat-"));
    try {
      await cp(snap.dir, tmp, { recursive: true });
      const m = JSON.parse(await readFile(join(tmp, "manifest.json"), "utf8"));
      m.host.qemuVersion = "1.0.0";
      m.host.accelerator = "kvm";
      await writeFile(join(tmp, "manifest.json"), JSON.stringify(m));
      await assert.rejects(rt.importSnapshot(tmp), isCode("snapshot_incompatible"));
      assert.ok(existsSync(join(tmp, "state.bin")) && existsSync(join(tmp, "disk.qcow2")));
    } finally {
      await rm(tmp, { recursive: true, force: true });
    }
    await assert.rejects(rt.restore("snap_doesnotexist000"), isCode("snapshot_not_found"));
  });

  test("a cold-booted sandbox of another size snapshots and restores with its RAM file", async () => {
    const sbx = track(await rt.boot({ vcpus: 2, memoryMb: 384 }));
    assert.equal((await sbx.exec("nproc")).stdout.toString(), "2\n");
    const memKb = Number((await sbx.exec("awk '/MemTotal/ {print $2}' /proc/meminfo")).stdout.toString());
    assert.ok(memKb > 300 * 1024 && memKb <= 384 * 1024, `MemTotal ${memKb} kB`);
    const pid = (await sbx.exec(COUNTER)).stdout.toString().trim();
    const snap = await rt.snapshot(sbx.id);
    assert.equal(snap.manifest.memory, "file");
    assert.deepEqual(snap.manifest.vm, { vcpus: 2, memoryMb: 384, diskMb: sbx.info.diskMb });
    await sbx.destroy();
    const back = track(await rt.restore(snap.id));
    assert.equal((await back.exec(`kill -0 ${pid} && nproc`)).stdout.toString(), "2\n");
    await assert.rejects(rt.boot({ memoryMb: 1 << 20 }), isCode("invalid_argument"));
  });

  test("a sandbox asks for a bigger disk; its root filesystem grows to fill it", async () => {
    const tplDisk = (await rt.templates.resolve("base")).manifest.vm.diskMb;
    const sbx = track(await rt.create({ diskMb: tplDisk + 2048 }));
    const sizeMb = Number((await sbx.exec("df -BM --output=size / | tail -1 | tr -dc 0-9")).stdout.toString());
    assert.ok(sizeMb > tplDisk + 1500, `root filesystem is ${sizeMb} MiB`);
    await assert.rejects(rt.create({ diskMb: tplDisk - 1 }), isCode("invalid_argument"));
    await assert.rejects(rt.create({ diskMb: 10 * 1024 * 1024 }), isCode("invalid_argument"));
  });

  test("a restarted runtime adopts running sandboxes and kills its strays", async () => {
    const sbx = await rt.create();
    await sbx.exec("echo kept > /tmp/kept");
    const id = sbx.id;
    // A QEMU of this instance that no sandbox owns (as if Den died between spawn and record).
    const stray = spawn("qemu-system-x86_64", ["-M", "none", "-display", "none", "-nodefaults"], {
      env: { ...process.env, DEN_INSTANCE: rt.instance, DEN_SANDBOX: "sbx_straystraystray" }, stdio: "ignore",
    });
    // Someone else's QEMU: never touched.
    const foreign = spawn("qemu-system-x86_64", ["-M", "none", "-display", "none", "-nodefaults"], { stdio: "ignore" });
    const foreignExit = new Promise((r) => foreign.once("exit", r));
    const strayExit = new Promise((r) => stray.once("exit", r));
    await new Promise((r) => setTimeout(r, 500));
    rt.close();
    rt = await testRuntime();
    const again = track(rt.get(id));
    assert.equal((await again.exec("cat /tmp/kept")).stdout.toString(), "kept\n");
    await strayExit;
    assert.equal(stray.signalCode, "SIGKILL", "the stray QEMU was killed");
    assert.equal(foreign.exitCode, null);
    assert.equal(foreign.signalCode, null, "a QEMU without this instance's tag is left alone");
    foreign.kill("SIGKILL");
    await foreignExit;
  });
});
