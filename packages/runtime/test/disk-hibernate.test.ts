// needs: one VM
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { Runtime, type Sandbox } from "../src/index.js";
import { isCode, qemuProcesses, testRuntime } from "./helpers.js";

const out = async (s: Sandbox, cmd: string) => (await s.exec(cmd)).stdout.toString().trim();
const bootId = (s: Sandbox) => out(s, "cat /proc/sys/kernel/random/boot_id");

describe("a disk hibernation: shut down keeping the disk, boot again from it", () => {
  let rt: Runtime;
  let id = "";
  before(async () => {
    rt = await testRuntime();
  });
  after(async () => {
    if (id && rt.has(id)) await rt.get(id).destroy();
    rt?.close();
  });

  test("files survive, the boot is a new one, processes are gone; a restarted runtime keeps the stopped sandbox", async () => {
    const sbx = await rt.create();
    id = sbx.id;
    await sbx.files.write("/root/keep.txt", "written before the stop");
    // Written and not synced by anyone but the stop itself: the page cache must reach the disk.
    await sbx.exec("echo from-the-shell > /root/unsynced.txt");
    await sbx.exec("nohup sleep 100000 >/dev/null 2>&1 &");
    assert.equal(await out(sbx, "pgrep -c -x sleep"), "1");
    const boot1 = await bootId(sbx);
    const dir = sbx.dir;

    await rt.stopKeepingDisk(id);
    assert.equal(sbx.state, "stopped");
    assert.equal(sbx.vmAlive(), false);
    assert.equal(qemuProcesses(rt).has(id), false, "no QEMU while it is off");
    assert.ok(existsSync(join(dir, "disk.qcow2")), "the disk overlay stays");
    await assert.rejects(sbx.exec("true"), isCode("sandbox_not_running"));
    await rt.stopKeepingDisk(id); // idempotent

    // A new runtime on the same data dir finds it stopped (not a dead VM to clean up).
    rt.close();
    rt = await Runtime.open({ dataDir: rt.dataDir });
    assert.equal(rt.get(id).state, "stopped");

    const t0 = Date.now();
    const again = await rt.bootFromDisk(id);
    const bootMs = Date.now() - t0;
    assert.equal(again.state, "running");
    assert.equal(again.info.ramFile, true);
    assert.equal((await again.files.read("/root/keep.txt")).toString(), "written before the stop");
    assert.equal(await out(again, "cat /root/unsynced.txt"), "from-the-shell");
    const boot2 = await bootId(again);
    assert.notEqual(boot2, boot1, "a fresh boot");
    assert.equal(await out(again, "pgrep -c -x sleep || true"), "0", "the background process is gone");
    assert.equal(qemuProcesses(rt).has(id), true);
    await rt.bootFromDisk(id); // idempotent
    assert.equal(await bootId(again), boot2);
    console.log(`boot from disk: ${bootMs} ms`);

    // From paused (a warm hibernation's VM), and a second round of a booted one (RAM in a file).
    await again.files.write("/root/second.txt", "round two");
    await again.pause();
    await rt.stopKeepingDisk(id);
    assert.equal(existsSync(join(dir, "memory.bin")), false, "the RAM file goes with the VM");
    const third = await rt.bootFromDisk(id);
    assert.equal(await out(third, "cat /root/second.txt /root/keep.txt"), "round twowritten before the stop");
    assert.notEqual(await bootId(third), boot2);
    // A booted sandbox snapshots as any cold-booted one (RAM as a file).
    const snap = await rt.snapshot(id);
    assert.equal(snap.manifest.memory, "file");
    await rt.deleteSnapshot(snap.id);
  });
});
