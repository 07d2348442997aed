// needs: nothing
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DenError } from "@den/protocol";
import { LocalDirStore, codecCpuSeconds, downloadSnapshot, preferredCompression, snapshotKey, uploadSnapshot, STORE_MANIFEST } from "../src/index.js";
import { childTimes } from "../src/codec.js";

const isCode = (code: string) => (e: unknown) => e instanceof DenError && e.code === code;
const work = mkdtempSync(join(tmpdir(), "den-codec-"));
after(() => rmSync(work, { recursive: true, force: true }));
const store = new LocalDirStore(join(work, "store"));
const src = join(work, "src");
mkdirSync(src);
// A memory image's mix: random pages (incompressible) and zero pages.
const state = Buffer.concat([randomBytes(8 << 20), Buffer.alloc(8 << 20), randomBytes(4 << 20)]);
writeFileSync(join(src, "state.bin"), state);

test("zstd is the default where the tool is; its CPU (in a process of its own) is counted", async () => {
  assert.equal(preferredCompression(), "zstd");
  const cpu0 = codecCpuSeconds();
  const m = await uploadSnapshot(store, snapshotKey("snap_zzzzzzzzzzzzzzzz"), src, ["state.bin"], {});
  assert.equal(m.files["state.bin"]!.compression, "zstd");
  assert.match(m.files["state.bin"]!.key, /state\.bin\.zst$/);
  assert.ok(m.files["state.bin"]!.size < state.length * 0.7, "zero pages compress away");
  // (`times` counts whole clock ticks per process: 20 MiB can take less than one. 64 MiB of
  // random bytes cannot, on any machine this runs on.)
  writeFileSync(join(work, "big.bin"), randomBytes(64 << 20));
  await uploadSnapshot(store, snapshotKey("snap_bbbbbbbbbbbbbbbb"), work, ["big.bin"], {});
  assert.ok(codecCpuSeconds() > cpu0, "the codec's CPU is Den's");
  await downloadSnapshot(store, snapshotKey("snap_zzzzzzzzzzzzzzzz"), join(work, "out-zstd"));
  assert.ok(readFileSync(join(work, "out-zstd", "state.bin")).equals(state));
  // A small file (a disk overlay) is gzipped in process: a codec process would cost more than it saves.
  const small = randomBytes(100_000);
  writeFileSync(join(src, "disk.qcow2"), small);
  const m2 = await uploadSnapshot(store, snapshotKey("snap_ssssssssssssssss"), src, ["state.bin", "disk.qcow2"], {});
  assert.equal(m2.files["state.bin"]!.compression, "zstd");
  assert.equal(m2.files["disk.qcow2"]!.compression, "gzip");
  await downloadSnapshot(store, snapshotKey("snap_ssssssssssssssss"), join(work, "out-mixed"));
  assert.ok(readFileSync(join(work, "out-mixed", "disk.qcow2")).equals(small));
  assert.ok(readFileSync(join(work, "out-mixed", "state.bin")).equals(state));
});

test("objects stored as gzip (older snapshots, or DEN_STORE_COMPRESSION=gzip) still download", async () => {
  process.env.DEN_STORE_COMPRESSION = "gzip";
  try {
    const m = await uploadSnapshot(store, snapshotKey("snap_gggggggggggggggg"), src, ["state.bin"], {});
    assert.equal(m.files["state.bin"]!.compression, "gzip");
    assert.match(m.files["state.bin"]!.key, /state\.bin\.gz$/);
  } finally {
    delete process.env.DEN_STORE_COMPRESSION;
  }
  await downloadSnapshot(store, snapshotKey("snap_gggggggggggggggg"), join(work, "out-gzip"));
  assert.ok(readFileSync(join(work, "out-gzip", "state.bin")).equals(state));
});

test("an object that decompresses to more than its manifest says is refused (no decompression bombs), as is an unknown codec", async () => {
  const key = snapshotKey("snap_zzzzzzzzzzzzzzzz");
  const m = JSON.parse((await store.getBytes(`${key}/${STORE_MANIFEST}`)).toString());
  m.files["state.bin"].rawSize = 1 << 20;
  await store.putBytes(`${key}/${STORE_MANIFEST}`, Buffer.from(JSON.stringify(m)));
  await assert.rejects(downloadSnapshot(store, key, join(work, "bomb")), isCode("snapshot_corrupt"));
  m.files["state.bin"].compression = "brotli";
  await store.putBytes(`${key}/${STORE_MANIFEST}`, Buffer.from(JSON.stringify(m)));
  await assert.rejects(downloadSnapshot(store, key, join(work, "unknown")), isCode("snapshot_corrupt"));
});

test("a shell's `times` report reads as its children's CPU seconds", () => {
  assert.equal(childTimes("0m0.010000s 0m0.000000s\n0m1.250000s 0m0.500000s\n"), 1.75);
  assert.equal(childTimes("1m2.5s 0m0s\n2m0.25s 0m1.00s"), 121.25);
  assert.equal(childTimes("garbage"), 0);
});
