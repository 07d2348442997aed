// needs: one VM
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, readSync, rmSync, statSync, writeSync } from "node:fs";
import { join } from "node:path";
import { Runtime, createVolumeImage, type Sandbox } from "../src/index.js";
import { isCode, qemuProcesses, testRuntime } from "./helpers.js";

const out = async (s: Sandbox, cmd: string) => (await s.exec(cmd)).stdout.toString().trim();
const bootId = (s: Sandbox) => out(s, "cat /proc/sys/kernel/random/boot_id");

/** An image's first 4 KiB: its header, extensions and backing name (what an escaped QEMU rewrites). */
function readHead(path: string): Buffer {
  const fd = openSync(path, "r");
  try {
    const b = Buffer.alloc(4096);
    readSync(fd, b, 0, b.length, 0);
    return b;
  } finally {
    closeSync(fd);
  }
}
function writeHead(path: string, head: Buffer): void {
  const fd = openSync(path, "r+");
  try {
    writeSync(fd, head, 0, head.length, 0);
  } finally {
    closeSync(fd);
  }
}
/** As an escaped QEMU holding the image read-write: its backing file becomes `name`. */
const plantBacking = (path: string, name: string) => execFileSync("qemu-img", ["rebase", "-q", "-u", "-f", "qcow2", "-F", "qcow2", "-b", name, path]);
/** As an escaped QEMU: the first header extension becomes an external data file named `name`, its incompatible bit set. */
function plantDataFile(path: string, name: string): void {
  const head = readHead(path);
  const at = head.readUInt32BE(100);
  head.writeUInt32BE(0x44415441, at);
  head.writeUInt32BE(name.length, at + 4);
  head.write(name, at + 8, "latin1");
  head.fill(0, at + 8 + Math.ceil(name.length / 8) * 8, at + 16 + Math.ceil(name.length / 8) * 8);
  head.writeBigUInt64BE(head.readBigUInt64BE(72) | 4n, 72);
  writeHead(path, head);
}
const shadowState = () => {
  const st = statSync("/etc/shadow");
  return `${createHash("sha256").update(readFileSync("/etc/shadow")).digest("hex")} ${st.mtimeMs} ${st.ctimeMs}`;
};
const refused = (what: RegExp) => (e: unknown) => isCode("disk_corrupt")(e) && (e as Error).message.includes("/etc/shadow") && what.test((e as Error).message);

describe("a disk hibernation: shut down keeping the disk, boot again from it", () => {
  let rt: Runtime;
  let id = "";
  let tampered = "";
  let volDir = "";
  before(async () => {
    rt = await testRuntime();
  });
  after(async () => {
    for (const x of [id, tampered]) if (x && rt.has(x)) await rt.get(x).destroy();
    rt?.close();
    if (volDir) rmSync(volDir, { recursive: true, force: true });
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

  test("headers an escaped QEMU rewrote to name /etc/shadow (overlay's backing, volume's data file) are refused at the fork, the wake and the mount; /etc/shadow untouched, the sandbox intact", async () => {
    const shadow = shadowState();
    volDir = mkdtempSync(join(rt.dataDir, "tamper-"));
    const image = join(volDir, "volume.qcow2");
    await createVolumeImage(image, 16);
    const volume = { volume: "vol_tampered", image, path: "/data", readOnly: false };
    const sbx = await rt.create({ volumes: [volume] });
    tampered = sbx.id;
    const sandboxes = rt.list().length;
    await sbx.files.write("/root/keep.txt", "on the root disk");
    await sbx.files.write("/data/keep.txt", "on the volume");
    const disk = join(sbx.dir, "disk.qcow2");
    const diskHead = readHead(disk);
    const volHead = readHead(image);

    // Fork: the running VM's overlay names /etc/shadow; the parent's snapshot carries it, its child's disk is refused.
    plantBacking(disk, "/etc/shadow");
    await assert.rejects(rt.fork(sbx.id, 1), refused(/disk\.qcow2: it names backing file "\/etc\/shadow", expected .*templates\/base\//));
    assert.equal(await out(sbx, "cat /root/keep.txt"), "on the root disk", "the parent runs on");
    assert.equal(rt.list().length, sandboxes, "no child left");

    // Wake after a disk hibernation: the overlay refused, then the volume; the sandbox stays stopped.
    await rt.stopKeepingDisk(sbx.id);
    plantDataFile(image, "/etc/shadow");
    await assert.rejects(rt.bootFromDisk(sbx.id), refused(/disk\.qcow2/));
    writeHead(disk, diskHead);
    await assert.rejects(rt.bootFromDisk(sbx.id), refused(/volume\.qcow2: it names external data file "\/etc\/shadow"/));
    assert.equal(rt.get(sbx.id).state, "stopped");
    assert.equal(qemuProcesses(rt).has(sbx.id), false, "no QEMU started");
    // A mount of the same volume in a new sandbox.
    await assert.rejects(rt.create({ volumes: [volume] }), refused(/volume\.qcow2/));
    assert.equal(rt.list().length, sandboxes, "the refused create left nothing");
    assert.equal(shadowState(), shadow, "/etc/shadow untouched");

    // Headers put back, everything is where it was.
    writeHead(image, volHead);
    const again = await rt.bootFromDisk(sbx.id);
    assert.equal(await out(again, "cat /root/keep.txt /data/keep.txt"), "on the root diskon the volume");
  });
});
