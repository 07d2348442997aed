// needs: qemu-img
import { test } from "node:test";
import assert from "node:assert/strict";
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync, statSync, writeFileSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DenError } from "@den/protocol";
import { checkChain, checkImage } from "../src/image-check.js";
import { createOverlay, flattenImage, rebaseImage, renameBacking } from "../src/image-tools.js";

import { qcow2Chain, qemuImg } from "./qcow2-chain.js";

/** A refusal: disk_corrupt (a 4xx), its message matching `why`. */
const refused = (why: RegExp) => (e: unknown) => e instanceof DenError && e.code === "disk_corrupt" && e.status === 422 && why.test(e.message);

/** Writes bytes into an image's header, as an escaped QEMU holding it read-write could. */
function poke(path: string, offset: number, bytes: Buffer): void {
  const fd = openSync(path, "r+");
  try {
    writeSync(fd, bytes, 0, bytes.length, offset);
  } finally {
    closeSync(fd);
  }
}
const u32 = (n: number) => { const b = Buffer.alloc(4); b.writeUInt32BE(n); return b; };
const u64 = (n: bigint) => { const b = Buffer.alloc(8); b.writeBigUInt64BE(n); return b; };

/**
 * Makes an image's first header extension name an external data file (and sets its
 * incompatible bit): what an escaped QEMU would write to reach `name` through the next opener.
 */
function plantDataFile(path: string, name: string): void {
  const head = readFileSync(path).subarray(0, 4096);
  const at = head.readUInt32BE(100);
  const ext = Buffer.alloc(8 + Math.ceil(name.length / 8) * 8 + 8);
  ext.writeUInt32BE(0x44415441, 0);
  ext.writeUInt32BE(name.length, 4);
  ext.write(name, 8, "latin1");
  poke(path, at, ext);
  poke(path, 72, u64(head.readBigUInt64BE(72) | 4n));
}

function setup() {
  const dir = mkdtempSync(join(tmpdir(), "den-imgcheck-"));
  const { base, mid, top } = qcow2Chain(dir);
  return { dir, base, mid, top, done: () => rmSync(dir, { recursive: true, force: true }) };
}

test("images as qemu-img makes them pass, each with exactly the backing Den expects", () => {
  const s = setup();
  try {
    checkChain([s.top, s.mid, s.base]);
    assert.deepEqual(checkImage(s.base, {}), { size: 64 * 1024 * 1024, backing: undefined });
    assert.throws(() => checkImage(s.top, { backing: s.base }), refused(/names backing file ".*mid\.qcow2", expected .*base\.qcow2/));
    assert.throws(() => checkImage(s.top, {}), refused(/expected none/));
    assert.throws(() => checkImage(s.base, { backing: s.mid }), refused(/names no backing file/));
    // (The chain's bottom must name none.)
    assert.throws(() => checkChain([s.top, s.mid]), refused(/mid\.qcow2.*expected none/));
  } finally {
    s.done();
  }
});

test("a header rewritten to name /etc/shadow as backing or data file is refused, and nothing opens /etc/shadow", async () => {
  const s = setup();
  const shadow = statSync("/etc/shadow");
  try {
    // The backing name, as `rebase -u` (which opens no backing) writes it.
    qemuImg("rebase", "-q", "-u", "-f", "qcow2", "-F", "qcow2", "-b", "/etc/shadow", s.top);
    assert.throws(() => checkChain([s.top, s.mid, s.base]), refused(/top\.qcow2: it names backing file "\/etc\/shadow", expected .*mid\.qcow2/));
    qemuImg("rebase", "-q", "-u", "-f", "qcow2", "-F", "raw", "-b", "/etc/shadow", s.mid);
    assert.throws(() => checkImage(s.mid, { backing: "/etc/shadow" }), refused(/backing format "raw"/));
    // An overlay made over it, or a rebase, refuse before qemu-img runs.
    await assert.rejects(createOverlay([s.top, s.mid, s.base], join(s.dir, "new.qcow2")), refused(/\/etc\/shadow/));
    assert.equal(existsSync(join(s.dir, "new.qcow2")), false);
    await assert.rejects(rebaseImage(s.top, [s.mid, s.base], [s.base]), refused(/\/etc\/shadow/));
    // A volume (no backing) made to name a data file.
    const vol = join(s.dir, "vol.qcow2");
    qemuImg("create", "-q", "-f", "qcow2", vol, "16M");
    plantDataFile(vol, "/etc/shadow");
    assert.throws(() => checkImage(vol, {}), refused(/vol\.qcow2: it names external data file "\/etc\/shadow"/));
    // Its extension alone (the bit cleared) is refused too.
    poke(vol, 72, u64(0n));
    assert.throws(() => checkImage(vol, {}), refused(/names external data file "\/etc\/shadow"/));
    await assert.rejects(renameBacking(vol, s.base), refused(/data file "\/etc\/shadow"/));
    await assert.rejects(flattenImage([vol], join(s.dir, "flat.qcow2")), refused(/data file "\/etc\/shadow"/));
    const after = statSync("/etc/shadow");
    assert.equal(after.atimeMs, shadow.atimeMs);
    assert.equal(after.mtimeMs, shadow.mtimeMs);
  } finally {
    s.done();
  }
});

test("an image qemu-img made with a data file, bitmaps, snapshots, encryption or v2 is refused", () => {
  const s = setup();
  try {
    const img = (name: string, ...args: string[]) => {
      const p = join(s.dir, name);
      qemuImg("create", "-q", "-f", "qcow2", ...args, p, "16M");
      return p;
    };
    assert.throws(() => checkImage(img("df.qcow2", "-o", `data_file=${join(s.dir, "df.raw")}`), {}), refused(/external data file/));
    assert.throws(() => checkImage(img("v2.qcow2", "-o", "compat=0.10"), {}), refused(/version 2/));
    assert.throws(() => checkImage(img("enc.qcow2", "--object", "secret,id=k,data=x", "-o", "encrypt.format=luks,encrypt.key-secret=k,encrypt.iter-time=10"), {}), refused(/encrypted/));
    const bm = img("bm.qcow2");
    qemuImg("bitmap", "--add", bm, "b0");
    assert.throws(() => checkImage(bm, {}), refused(/autoclear|0x23852875/));
    const sn = img("sn.qcow2");
    qemuImg("snapshot", "-c", "s0", sn);
    assert.throws(() => checkImage(sn, {}), refused(/internal snapshots/));
  } finally {
    s.done();
  }
});

test("corrupt and unknown feature bits, unknown extensions, names out of bounds and short files are refused", () => {
  const s = setup();
  try {
    const fresh = () => {
      const p = join(s.dir, `x${Math.random().toString(36).slice(2)}.qcow2`);
      qemuImg("create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", s.base, p);
      checkImage(p, { backing: s.base });
      return p;
    };
    let p = fresh();
    poke(p, 72, u64(2n));
    assert.throws(() => checkImage(p, { backing: s.base }), refused(/corrupt bit/));
    p = fresh();
    poke(p, 72, u64(4n));
    assert.throws(() => checkImage(p, { backing: s.base }), refused(/external data file bit/));
    p = fresh();
    poke(p, 72, u64(1n << 5n));
    assert.throws(() => checkImage(p, { backing: s.base }), refused(/unknown incompatible features 0x20/));
    p = fresh();
    // The backing format extension comes first (at 112); the feature name table after it (8 + 8 bytes on).
    poke(p, 112 + 16, u32(0x12345678));
    assert.throws(() => checkImage(p, { backing: s.base }), refused(/header extension 0x12345678/));
    p = fresh();
    poke(p, 8, u64(70_000n));
    assert.throws(() => checkImage(p, { backing: s.base }), refused(/outside the first cluster/));
    p = fresh();
    poke(p, 16, u32(5000));
    assert.throws(() => checkImage(p, { backing: s.base }), refused(/backing file name of 5000 bytes/));
    p = fresh();
    poke(p, 116, u32(0xffff_fff0));
    assert.throws(() => checkImage(p, { backing: s.base }), refused(/extension runs past/));
    const short = join(s.dir, "short.qcow2");
    writeFileSync(short, readFileSync(s.base).subarray(0, 100));
    assert.throws(() => checkImage(short, {}), refused(/shorter than/));
    assert.throws(() => checkImage("/etc/hostname", {}), refused(/not a qcow2 image|shorter than/));
  } finally {
    s.done();
  }
});

test("Den's qemu-img steps keep the chain as stated: overlay, rebase onto a shorter chain, renamed backing, flatten", async () => {
  const s = setup();
  try {
    const ov = join(s.dir, "ov.qcow2");
    await createOverlay([s.top, s.mid, s.base], ov);
    checkChain([ov, s.top, s.mid, s.base]);
    await rebaseImage(ov, [s.top, s.mid, s.base], [s.base]);
    checkChain([ov, s.base]);
    assert.equal(await renameBacking(ov, s.base), false);
    assert.equal(await renameBacking(ov, s.mid), true);
    checkChain([ov, s.mid, s.base]);
    const flat = join(s.dir, "flat.qcow2");
    await flattenImage([ov, s.mid, s.base], flat);
    checkImage(flat, {});
  } finally {
    s.done();
  }
});
