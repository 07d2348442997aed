// needs: one VM
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { createVolumeImage, type Runtime, type Sandbox, type VolumeRequest } from "../src/index.js";
import { isCode, testRuntime } from "./helpers.js";

const sh = async (s: Sandbox, cmd: string) => {
  const r = await s.exec(["/bin/sh", "-c", cmd]);
  return { code: r.exitCode, out: r.stdout.toString().trim(), err: r.stderr.toString().trim() };
};
const ok = async (s: Sandbox, cmd: string) => {
  const r = await sh(s, cmd);
  assert.equal(r.code, 0, `${cmd}: ${r.err}`);
  return r.out;
};
const mounted = async (s: Sandbox, path: string) => (await sh(s, `grep -c ' ${path} ' /proc/mounts`)).out !== "0";

describe("volumes in a VM's disk slots", () => {
  let rt: Runtime;
  let dir = "";
  let image = "";
  const live: Sandbox[] = [];
  const start = async (make: () => Promise<Sandbox>) => {
    const s = await make();
    live.push(s);
    return s;
  };
  const vol = (path: string, readOnly = false): VolumeRequest => ({ volume: "vol_test", image, path, readOnly });
  before(async () => {
    rt = await testRuntime();
    dir = mkdtempSync(join(rt.dataDir, "volume-test-"));
    image = join(dir, "volume.qcow2");
    await createVolumeImage(image, 256);
  });
  after(async () => {
    for (const s of live) await s.destroy().catch(() => undefined);
    rt?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test("an empty volume is small on the host, and a bad size is refused", async () => {
    assert.ok(statSync(image).size < 8 * 1024 * 1024, `a new 256 MiB volume takes ${statSync(image).size} bytes`);
    await assert.rejects(createVolumeImage(join(dir, "bad.qcow2"), 1), isCode("invalid_argument"));
  });

  test("written by one sandbox, destroyed; read by the next, the same bytes and database; read-only holds against root", async () => {
    const a = await start(() => rt.create({ volumes: [vol("/data")] }));
    await ok(a, "head -c 50000000 /dev/urandom > /data/blob && sha256sum /data/blob | cut -d' ' -f1 > /root/sum");
    const sum = await ok(a, "cat /root/sum");
    await ok(a, `python3 -c "import sqlite3; c=sqlite3.connect('/data/db.sqlite'); c.execute('create table t(v)'); c.executemany('insert into t values(?)', [(i,) for i in range(1000)]); c.commit()"`);
    assert.equal(await ok(a, "df -m /data | tail -1 | awk '{print $2}'").then(Number) > 200, true, "the filesystem is the volume's size");
    await a.destroy();

    const b = await start(() => rt.create({ volumes: [vol("/mnt/in", true)] }));
    assert.equal(await ok(b, "sha256sum /mnt/in/blob | cut -d' ' -f1"), sum);
    assert.equal(await ok(b, `python3 -c "import sqlite3; print(sqlite3.connect('file:/mnt/in/db.sqlite?mode=ro', uri=True).execute('select count(*), sum(v) from t').fetchone())"`), "(1000, 499500)");
    assert.notEqual((await sh(b, "touch /mnt/in/x")).code, 0, "a read-only mount takes no writes");
    // Root in the guest may remount: the host's read-only disk still takes nothing.
    await sh(b, "mount -o remount,rw /mnt/in; echo nope > /mnt/in/x; sync");
    await b.destroy();
    const c = await start(() => rt.create({ volumes: [vol("/data")] }));
    assert.notEqual((await sh(c, "test -e /data/x")).code, 0, "the reader's write never reached the volume");
    assert.equal(await ok(c, "sha256sum /data/blob | cut -d' ' -f1"), sum);
    await c.destroy();
  });

  test("a hibernation releases the volume; changes made meanwhile are seen after the wake, with the guest's own state", async () => {
    const s = await start(() => rt.create({ volumes: [vol("/work")] }));
    await ok(s, "echo before > /work/mark; echo in-memory > /root/state; nohup sleep 100000 >/dev/null 2>&1 &");
    const snap = await rt.snapshot(s.id, { keepRunning: false, releaseVolumes: true });
    assert.equal(snap.manifest.volumes, undefined, "released: the snapshot holds no mount");
    await s.destroy();
    // Someone else uses the volume while the sandbox is hibernated.
    const other = await start(() => rt.create({ volumes: [vol("/v")] }));
    await ok(other, "echo meanwhile > /v/added; echo changed > /v/mark");
    await other.destroy();
    const woken = await start(() => rt.restore(snap.id, { id: s.id, volumes: [vol("/work")] }));
    assert.equal(await ok(woken, "cat /work/added /work/mark /root/state; pgrep -c -x sleep"), "meanwhile\nchanged\nin-memory\n1");
    await rt.deleteSnapshot(snap.id);
  });

  test("a volume a process holds stays mounted through a hibernation, in its slot at the wake", async () => {
    const s = await start(() => rt.create({ volumes: [vol("/held")] }));
    await ok(s, "echo held > /held/f; nohup sh -c 'exec 3</held/f; sleep 100000' >/dev/null 2>&1 &");
    await ok(s, "sleep 0.3");
    const snap = await rt.snapshot(s.id, { keepRunning: false, releaseVolumes: true });
    assert.deepEqual(snap.manifest.volumes?.map((v) => v.path), ["/held"]);
    await s.destroy();
    const woken = await start(() => rt.restore(snap.id, { id: s.id, volumes: [vol("/held")] }));
    assert.equal(await ok(woken, "cat /held/f; echo more >> /held/f; sync; cat /held/f"), "held\nheld\nmore");
    await rt.deleteSnapshot(snap.id);
    await woken.destroy();
  });

  test("a checkpoint does not carry its volume: restored elsewhere, the old mount is gone and another volume mounts", async () => {
    const s = await start(() => rt.create({ volumes: [vol("/data")] }));
    await ok(s, "echo at-checkpoint > /data/cp; echo disk > /root/cp");
    const cp = await rt.snapshot(s.id, { keepRunning: true });
    assert.deepEqual(cp.manifest.volumes?.map((v) => [v.path, v.stale ?? false]), [["/data", false]]);
    await s.destroy();
    const bare = await start(() => rt.restore(cp.id));
    assert.equal(await mounted(bare, "/data"), false, "the checkpoint's mount is let go of");
    assert.equal(bare.info.staleVolumes, undefined, "and its slot is free again");
    assert.equal(await ok(bare, "cat /root/cp"), "disk");
    await bare.destroy();
    const withVol = await start(() => rt.restore(cp.id, { volumes: [vol("/elsewhere")] }));
    assert.equal(await mounted(withVol, "/data"), false);
    assert.equal(await ok(withVol, "cat /elsewhere/cp"), "at-checkpoint");
    await withVol.destroy();
    await rt.deleteSnapshot(cp.id);
  });

  test("a disk hibernation unmounts the volume cleanly, and the boot from disk mounts it again", async () => {
    const s = await start(() => rt.create({ volumes: [vol("/keep")] }));
    await ok(s, "echo unsynced > /keep/disk-hib");
    await rt.stopKeepingDisk(s.id);
    const booted = await rt.bootFromDisk(s.id);
    assert.equal(await ok(booted, "cat /keep/disk-hib"), "unsynced");
    await booted.destroy();
  });

  test("mount points the system needs are refused", async () => {
    await assert.rejects(rt.create({ volumes: [vol("/etc")] }), isCode("invalid_argument"));
  });
});
