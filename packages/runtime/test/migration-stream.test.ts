// needs: one VM
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { keepChangedPages, PAGE_SIZE, type PageFilterStats } from "../src/migration-stream.js";
import { mulberry32 } from "../src/index.js";
import { sandboxFixture } from "./helpers.js";
import { changedPages } from "../src/pagemap.js";
import { hasNativePageFilter, nativeKeepChangedPages, nativePageFilterCompresses, prepareNativeTools, type Compressor } from "../src/native.js";
import net from "node:net";
import { spawnSync } from "node:child_process";

// ---- a small writer and loader of QEMU 10 migration streams (only what RAM needs) ----

const u8 = (n: number) => Buffer.from([n]);
const be32 = (n: number) => { const b = Buffer.alloc(4); b.writeUInt32BE(n); return b; };
const be64 = (n: bigint | number) => { const b = Buffer.alloc(8); b.writeBigUInt64BE(BigInt(n)); return b; };
const str = (s: string) => Buffer.concat([u8(s.length), Buffer.from(s, "latin1")]);
const ZERO = 0x02, MEM_SIZE = 0x04, PAGE = 0x08, EOS = 0x10, CONTINUE = 0x20;

type Rec = { block: string; offset: number; data: Buffer | "zero"; cont?: boolean };

/**
 * A stream: header, configuration, RAM setup, RAM parts (the last after the switchover-start
 * command, as QEMU 10 sends it), a device section, EOF.
 */
function stream(blocks: Array<[string, number]>, parts: Rec[][], caps = ["x-ignore-shared"], device = Buffer.from("device state \x00\x01\x7e\x02 bytes")): Buffer {
  const bufs: Buffer[] = [be32(0x5145564d), be32(3), u8(0x07), be32(7), Buffer.from("microvm")];
  bufs.push(u8(0x05), str("configuration/capabilities"), be32(1), be32(caps.length), ...caps.map(str));
  const total = blocks.reduce((n, [, len]) => n + len, 0);
  bufs.push(u8(0x01), be32(2), str("ram"), be32(0), be32(4), be64(BigInt(total) | BigInt(MEM_SIZE)));
  for (const [name, len] of blocks) bufs.push(str(name), be64(len), ...(caps.includes("x-ignore-shared") ? [be64(0)] : []));
  bufs.push(be64(EOS), u8(0x7e), be32(2));
  parts.forEach((recs, i) => {
    if (i === parts.length - 1) bufs.push(u8(0x08), be32(11 << 16));
    bufs.push(u8(i === parts.length - 1 ? 0x03 : 0x02), be32(2));
    for (const r of recs) {
      const flags = (r.data === "zero" ? ZERO : PAGE) | (r.cont ? CONTINUE : 0);
      bufs.push(be64(BigInt(r.offset) | BigInt(flags)), ...(r.cont ? [] : [str(r.block)]), r.data === "zero" ? u8(0) : r.data);
    }
    bufs.push(be64(EOS), u8(0x7e), be32(2));
  });
  bufs.push(u8(0x04), be32(3), str("cpu"), be32(0), be32(1), device, u8(0x7e), be32(3), u8(0x00));
  return Buffer.concat(bufs);
}

/** What QEMU's loader does with a stream: each block's memory after loading over `initial`, and the bytes after the RAM. */
function load(s: Buffer, initial: Record<string, Buffer>): { ram: Record<string, Buffer>; tail: Buffer } {
  const ram = Object.fromEntries(Object.entries(initial).map(([k, v]) => [k, Buffer.from(v)]));
  let i = 8;
  const rd = (n: number) => { const b = s.subarray(i, i + n); i += n; return b; };
  const rstr = () => rd(rd(1)[0]!).toString("latin1");
  assert.equal(rd(1)[0], 0x07);
  rd(rd(4).readUInt32BE(0));
  let ignoreShared = false;
  while (s[i] === 0x05) {
    rd(1); const name = rstr(); rd(4);
    assert.equal(name, "configuration/capabilities");
    for (let n = rd(4).readUInt32BE(0); n > 0; n--) if (rstr() === "x-ignore-shared") ignoreShared = true;
  }
  let last: string | undefined;
  const records = () => {
    for (;;) {
      const h = rd(8).readBigUInt64BE(0);
      const flags = Number(h & 0xfffn), offset = Number(h & ~0xfffn);
      if (flags & EOS) return;
      const block = flags & CONTINUE ? last! : (last = rstr());
      assert.ok(block, "a CONTINUE page names the block of the page before it");
      if (flags & PAGE) rd(PAGE_SIZE).copy(ram[block]!, offset);
      else ram[block]!.fill(rd(1)[0]!, offset, offset + PAGE_SIZE);
    }
  };
  for (;;) {
    const type = s[i];
    if (type === 0x01) {
      rd(1); rd(4); rstr(); rd(8);
      let left = rd(8).readBigUInt64BE(0) & ~0xfffn;
      while (left > 0n) { rstr(); left -= rd(8).readBigUInt64BE(0); if (ignoreShared) rd(8); }
      records();
    } else if (type === 0x02 || type === 0x03) {
      rd(5);
      records();
    } else if (type === 0x08) {
      assert.equal(rd(5).readUInt32BE(1), 11 << 16, "MIG_CMD_SWITCHOVER_START, no payload");
      continue;
    } else break;
    if (s[i] === 0x7e) rd(5);
  }
  return { ram, tail: s.subarray(i) };
}

async function filtered(input: Buffer, baseRam: string, chunking: (n: number) => number): Promise<{ out: Buffer; stats: PageFilterStats }> {
  const stats: PageFilterStats = { pages: 0, kept: 0, passedThrough: false, bytesIn: 0, bytesOut: 0 };
  async function* chunks() {
    for (let at = 0; at < input.length;) {
      const n = Math.max(1, chunking(input.length - at));
      yield input.subarray(at, at + n);
      at += n;
    }
  }
  const parts: Buffer[] = [];
  for await (const b of keepChangedPages(chunks(), baseRam, stats)) parts.push(b);
  return { out: Buffer.concat(parts), stats };
}

/** The filtered stream `out` loads into the same memory as `input` (the vectors' 4 of 8 pages kept), its tail unchanged. */
function loadsLikeInput(input: Buffer, out: Buffer, stats: PageFilterStats, initial: Record<string, Buffer>): void {
    const want = load(input, initial);
    const got = load(out, initial);
    assert.deepEqual(got.ram.ram, want.ram.ram);
    assert.deepEqual(got.ram["pc.bios"], want.ram["pc.bios"]);
    assert.deepEqual(got.tail, want.tail, "everything after the RAM passes unchanged");
    assert.deepEqual({ pages: stats.pages, kept: stats.kept, passedThrough: stats.passedThrough }, { pages: 8, kept: 4, passedThrough: false });
    assert.equal(stats.bytesIn, input.length);
    assert.equal(stats.bytesOut, out.length);
    assert.ok(out.length <= input.length - 2 * PAGE_SIZE, `${out.length} of ${input.length} bytes`);
}

/** A template's RAM (pages 0-3 hold data, 4-7 are zero) and a stream's RAM records over it: pages 1, 2, 5 and 6 differ. */
function vectors(seed: number) {
  const rand = mulberry32(seed);
  const page = (fill?: number) => (fill === undefined ? Buffer.from(Array.from({ length: PAGE_SIZE }, () => Math.floor(rand() * 256))) : Buffer.alloc(PAGE_SIZE, fill));
  const template = Buffer.concat([page(), page(), page(), page(), page(0), page(0), page(0), page(0)]);
  const tpl = (n: number) => template.subarray(n * PAGE_SIZE, (n + 1) * PAGE_SIZE);
  const recs: Rec[][] = [
    [
      { block: "ram", offset: 0, data: Buffer.from(tpl(0)) }, // same as the template: dropped (it named the block)
      { block: "ram", offset: PAGE_SIZE, data: page(), cont: true }, // changed: kept, must now name its block
      { block: "ram", offset: 4 * PAGE_SIZE, data: "zero", cont: true }, // zero over zero: dropped
      { block: "ram", offset: 2 * PAGE_SIZE, data: "zero", cont: true }, // zero over data: kept
      { block: "pc.bios", offset: 0, data: page(0x55) }, // another block: kept as it is
      { block: "ram", offset: 3 * PAGE_SIZE, data: Buffer.from(tpl(3)) }, // dropped
      { block: "ram", offset: 5 * PAGE_SIZE, data: page(), cont: true }, // kept: must name "ram" again (pc.bios came last)
    ],
    [
      { block: "ram", offset: 6 * PAGE_SIZE, data: page(), cont: true }, // kept, CONTINUE still right
      { block: "ram", offset: 7 * PAGE_SIZE, data: "zero", cont: true }, // dropped
    ],
  ];
  return { rand, template, recs };
}

describe("a saved state keeps only the pages that differ from the template's RAM", () => {
  const tmp = mkdtempSync(join(tmpdir(), "den-stream-"));
  after(() => rmSync(tmp, { recursive: true, force: true }));
  const { rand, template, recs } = vectors(7);
  const baseRam = join(tmp, "memory.bin");
  writeFileSync(baseRam, template);
  const input = stream([["ram", template.length], ["pc.bios", PAGE_SIZE]], recs);
  const initial = { ram: template, "pc.bios": Buffer.alloc(PAGE_SIZE) };

  for (const [name, chunking] of [["one chunk", (n: number) => n], ["1-byte chunks", () => 1], ["random chunks", () => 1 + Math.floor(rand() * 700)]] as const) {
    test(`loads into the same memory as the whole stream, with the same device state (${name})`, async () => {
      const { out, stats } = await filtered(input, baseRam, chunking);
      loadsLikeInput(input, out, stats, initial);
    });
  }

  test("a stream it does not fully understand passes unchanged", async () => {
    for (const s of [
      stream([["ram", template.length]], recs.slice(0, 1), ["x-ignore-shared", "postcopy-ram"]), // a capability it does not read
      stream([["ram", 2 * template.length]], recs.slice(1)), // a RAM block unlike the template's
      Buffer.from("not a migration stream at all"),
      Buffer.alloc(0),
    ]) {
      const { out, stats } = await filtered(s, baseRam, () => 13);
      assert.deepEqual(out, s);
      assert.equal(stats.pages - stats.kept, 0, "nothing dropped");
    }
  });

  test("a surprise after pages were dropped fails the save instead of passing on a stream that would load wrong", async () => {
    const s = stream([["ram", template.length], ["pc.bios", PAGE_SIZE]], recs);
    // Corrupt the last RAM record's flags into an encoding the filter never expects (XBZRLE).
    const bad = Buffer.from(s);
    const at = bad.lastIndexOf(be64(BigInt(7 * PAGE_SIZE) | BigInt(ZERO | CONTINUE)));
    bad.writeBigUInt64BE(BigInt(7 * PAGE_SIZE) | 0x40n | BigInt(CONTINUE), at);
    await assert.rejects(filtered(bad, baseRam, (n) => n), /cannot be filtered/);
  });
});

/** `input` through the native filter as QEMU would send it: over a unix socket the helper reads itself. */
async function nativeFiltered(input: Buffer, changed: Uint8Array, ramBytes: number, dir: string, compressor?: Compressor): Promise<{ out: Buffer; stats: PageFilterStats }> {
  const stats: PageFilterStats = { pages: 0, kept: 0, passedThrough: false, bytesIn: 0, bytesOut: 0 };
  const path = join(dir, `in-${Math.random().toString(36).slice(2)}.sock`);
  const server = net.createServer({ pauseOnConnect: true });
  await new Promise<void>((r) => server.listen(path, r));
  try {
    const accepted = new Promise<net.Socket>((r) => server.once("connection", r));
    const client = net.connect(path);
    client.end(input);
    const parts: Buffer[] = [];
    for await (const b of nativeKeepChangedPages(await accepted, changed, ramBytes, stats, compressor)) parts.push(b);
    return { out: Buffer.concat(parts), stats };
  } finally {
    server.close();
  }
}

describe("the native page filter does what keepChangedPages does with the kernel's bitmap", () => {
  const tmp = mkdtempSync(join(tmpdir(), "den-native-"));
  after(() => rmSync(tmp, { recursive: true, force: true }));
  prepareNativeTools(tmp);
  const { template, recs } = vectors(11);
  // The pages the guest wrote (the kernel's bitmap): 1, 2, 5 and 6, the ones that differ from the template.
  const changed = Uint8Array.from([0b01100110]);
  const initial = { ram: template, "pc.bios": Buffer.alloc(PAGE_SIZE) };

  test("it is built on this host (cc is one of Den's packages), with libzstd (libzstd-dev is one too)", () => {
    assert.equal(hasNativePageFilter(), true);
    assert.equal(nativePageFilterCompresses(), true);
  });

  test("its stream loads into the same memory as the whole stream, with the same device state", async () => {
    const input = stream([["ram", template.length], ["pc.bios", PAGE_SIZE]], recs);
    const { out, stats } = await nativeFiltered(input, changed, template.length, tmp);
    loadsLikeInput(input, out, stats, initial);
  });

  test("with a compressor, what comes out is the same stream compressed; a compressor that fails fails it", async () => {
    const input = stream([["ram", template.length], ["pc.bios", PAGE_SIZE]], recs);
    const plain = await nativeFiltered(input, changed, template.length, tmp);
    const command = ["zstd", "-1", "-q", "-c"];
    // The command, and (where the filter was built with libzstd, as on these hosts) its own zstd.
    for (const compressor of [{ command }, { command: ["false"], zstdLevel: 1 }]) {
      const packed = await nativeFiltered(input, changed, template.length, tmp, compressor);
      const unpacked = spawnSync("zstd", ["-d", "-q", "-c"], { input: packed.out });
      assert.equal(unpacked.status, 0, `${JSON.stringify(compressor)}: ${unpacked.stderr}`);
      assert.deepEqual(unpacked.stdout, plain.out);
      assert.equal(packed.stats.bytesOut, plain.out.length, "bytesOut counts the filtered bytes");
      // Its frame carries a content checksum (a wake relies on zstd checking it): one flipped byte inside fails.
      const flipped = Buffer.from(packed.out);
      flipped[flipped.length - 6] = flipped[flipped.length - 6]! ^ 0x01;
      assert.notEqual(spawnSync("zstd", ["-d", "-q", "-c"], { input: flipped }).status, 0, "a damaged frame is refused");
    }
    await assert.rejects(nativeFiltered(input, changed, template.length, tmp, { command: ["sh", "-c", "cat >/dev/null; exit 3"] }), /compressor failed/);
  });

  test("a stream it does not fully understand passes unchanged", async () => {
    for (const s of [
      stream([["ram", template.length]], recs.slice(0, 1), ["x-ignore-shared", "postcopy-ram"]),
      stream([["ram", 2 * template.length]], recs.slice(1)),
      Buffer.from("not a migration stream at all"),
      Buffer.alloc(0),
    ]) {
      const { out, stats } = await nativeFiltered(s, changed, template.length, tmp);
      assert.deepEqual(out, s);
      assert.equal(stats.pages - stats.kept, 0, "nothing dropped");
    }
  });

  test("a surprise after pages were dropped fails instead of passing on a stream that would load wrong", async () => {
    const bad = stream([["ram", template.length], ["pc.bios", PAGE_SIZE]], recs);
    const at = bad.lastIndexOf(be64(BigInt(7 * PAGE_SIZE) | BigInt(ZERO | CONTINUE)));
    bad.writeBigUInt64BE(BigInt(7 * PAGE_SIZE) | 0x40n | BigInt(CONTINUE), at);
    await assert.rejects(nativeFiltered(bad, changed, template.length, tmp), /cannot be filtered/);
  });
});

describe("a real VM's saved state carries what the guest changed (a real VM)", () => {
  const f = sandboxFixture();

  test("a fresh sandbox's state is small; 24 MiB written in tmpfs add about 24 MiB; a restore brings it back byte for byte", async () => {
    const { rt, sbx } = f;
    const fresh = await rt.snapshot(sbx.id);
    const freshBytes = statSync(join(fresh.dir, "state.bin")).size;
    assert.equal(fresh.manifest.changedPagesOnly, true);
    const r = await sbx.exec(["sh", "-c", "head -c 25165824 /dev/urandom > /dev/shm/blob && sha256sum /dev/shm/blob"]);
    assert.equal(r.exitCode, 0);
    const dirty = await rt.snapshot(sbx.id);
    const dirtyBytes = statSync(join(dirty.dir, "state.bin")).size;
    assert.ok(freshBytes < 16 * 2 ** 20, `a fresh sandbox's state is ${(freshBytes / 2 ** 20).toFixed(1)} MiB`);
    assert.ok(dirtyBytes - freshBytes > 24 * 2 ** 20 && dirtyBytes - freshBytes < 40 * 2 ** 20, `24 MiB dirtied added ${((dirtyBytes - freshBytes) / 2 ** 20).toFixed(1)} MiB`);
    const child = await rt.restore(dirty.id);
    try {
      const c = await child.exec(["sha256sum", "/dev/shm/blob"]);
      assert.equal(c.stdout.toString(), r.stdout.toString());
      const back = await child.exec(["sh", "-c", "echo alive; cat /proc/meminfo | head -2"]);
      assert.match(back.stdout.toString(), /^alive/);
    } finally {
      await child.destroy();
      await rt.deleteSnapshot(fresh.id);
      await rt.deleteSnapshot(dirty.id);
    }
  });

  test("the kernel's page tables name the pages a guest wrote: 16 MiB more after it writes 16 MiB; another file or size is not its mapping", async () => {
    const { rt, sbx } = f;
    const tpl = await rt.templates.resolve("base");
    const ram = join(tpl.dir, "memory.bin");
    const bytes = sbx.info.memoryMb * 1024 * 1024;
    const count = (m: Uint8Array) => m.reduce((n, b) => n + popcount(b), 0);
    await sbx.pause();
    const before = await changedPages(sbx.pid!, ram, bytes);
    await sbx.resume();
    assert.ok(before, "a sandbox created from its template maps the template's RAM file");
    await sbx.exec(["sh", "-c", "head -c 16777216 /dev/urandom > /dev/shm/more"]);
    await sbx.pause();
    const after = (await changedPages(sbx.pid!, ram, bytes))!;
    await sbx.resume();
    const added = count(after) - count(before);
    assert.ok(added >= 4096 && added < 4096 * 2, `16 MiB written: ${added} pages more`);
    // Every page changed before is still changed (none reverts to the file's without a discard).
    for (let i = 0; i < before.length; i++) assert.equal(before[i]! & ~after[i]!, 0, `page byte ${i}`);
    // Another file, or the wrong size: not this mapping, so the caller compares instead.
    assert.equal(await changedPages(sbx.pid!, ram, bytes * 2), undefined);
    assert.equal(await changedPages(sbx.pid!, join(tpl.dir, "disk.qcow2"), bytes), undefined);
    await sbx.exec(["rm", "/dev/shm/more"]);
  });
});

function popcount(b: number): number {
  let n = 0;
  for (; b; b &= b - 1) n++;
  return n;
}
