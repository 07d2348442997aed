// needs: nothing
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { open as openFh } from "node:fs/promises";
import { createReadStream, createWriteStream, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import S3rver from "s3rver";
import { DenError } from "@den/protocol";
import {
  LocalDirStore, MAX_MANIFEST_BYTES, S3Store, STORE_MANIFEST, canStreamStoredFile, deleteStoredSnapshot, putSnapshotFileFromFd, readStoredManifest, streamStoredFile, listStoredSnapshots, snapshotKey, downloadSnapshot,
  storedBytes, storedDigests, uploadSnapshot, type ObjectStore,
} from "../src/index.js";

const isCode = (code: string) => (e: unknown) => e instanceof DenError && e.code === code;

/** One contract, two implementations: a local directory and a real S3-compatible server. */
function contract(name: string, open: () => Promise<{ store: ObjectStore; corrupt(key: string): Promise<void>; close(): Promise<void> }>) {
  describe(`object store contract: ${name}`, () => {
    let h: Awaited<ReturnType<typeof open>>;
    let work: string;
    before(async () => {
      h = await open();
      work = mkdtempSync(join(tmpdir(), "den-store-test-"));
    });
    after(async () => {
      await h?.close();
      rmSync(work, { recursive: true, force: true });
    });

    test("objects round-trip; list, head and delete", async () => {
      const data = randomBytes(3 * 1024 * 1024 + 17);
      writeFileSync(join(work, "in.bin"), data);
      const progress: number[] = [];
      await h.store.putStream("a/b/in.bin", createReadStream(join(work, "in.bin")), (p) => progress.push(p.bytes));
      await h.store.putBytes("a/c.json", Buffer.from("{}"));
      const head = await h.store.head("a/b/in.bin");
      assert.deepEqual({ key: head?.key, size: head?.size }, { key: "a/b/in.bin", size: data.length });
      assert.ok(head!.modifiedAt > Date.now() - 600_000 && head!.modifiedAt <= Date.now() + 5_000, "it says when it was written");
      assert.equal(await h.store.head("a/missing"), undefined);
      assert.deepEqual((await h.store.list("a/")).map((o) => o.key), ["a/b/in.bin", "a/c.json"]);
      await pipeline(await h.store.getStream("a/b/in.bin"), createWriteStream(join(work, "out.bin")));
      assert.ok(readFileSync(join(work, "out.bin")).equals(data));
      assert.ok(progress.length > 0 && progress.at(-1)! >= data.length - 1);
      await h.store.delete("a/b/in.bin");
      await h.store.delete("a/c.json");
      assert.deepEqual(await h.store.list("a/"), []);
      await assert.rejects(h.store.getBytes("a/c.json"), isCode("snapshot_not_found"));
    });

    test("a stream uploads as an object, and its last progress report says it is done", async () => {
      const data = randomBytes(2 * 1024 * 1024 + 5);
      const seen: Array<{ bytes: number; total?: number }> = [];
      await h.store.putStream("s/streamed.bin", Readable.from([data.subarray(0, 1 << 20), data.subarray(1 << 20)]), (p) => seen.push(p));
      assert.ok((await h.store.getBytes("s/streamed.bin")).equals(data));
      assert.deepEqual(seen.at(-1), { key: "s/streamed.bin", bytes: seen.at(-1)!.bytes, total: seen.at(-1)!.bytes });
      assert.ok(seen.at(-1)!.bytes > 0);
      const body: Buffer[] = [];
      for await (const c of await h.store.getStream("s/streamed.bin")) body.push(c as Buffer);
      assert.ok(Buffer.concat(body).equals(data));
      await h.store.delete("s/streamed.bin");
      await assert.rejects(h.store.getStream("s/streamed.bin"), isCode("snapshot_not_found"));
    });

    test("keys cannot escape the store", async () => {
      for (const bad of ["../etc/passwd", "/etc/passwd", "a/../../b", "a\u0000b", "", "a//b"]) {
        await assert.rejects(h.store.putBytes(bad, Buffer.from("x")), isCode("invalid_argument"), bad);
      }
    });

    test("a snapshot uploads compressed with its manifest last, downloads verified, and deletes to zero", async () => {
      const src = join(work, "snap");
      const dst = join(work, "restored");
      rmSync(src, { recursive: true, force: true });
      const { mkdirSync } = await import("node:fs");
      mkdirSync(src);
      const state = Buffer.concat([randomBytes(256 * 1024), Buffer.alloc(4 * 1024 * 1024)]);
      writeFileSync(join(src, "state.bin"), state);
      writeFileSync(join(src, "disk.qcow2"), randomBytes(100_000));
      const before = (await h.store.list("snapshots/")).length;
      const m = await uploadSnapshot(h.store, snapshotKey("snap_aaaaaaaaaaaaaaaa"), src, ["state.bin", "disk.qcow2"], { kind: "sandbox" });
      assert.ok(m.files["state.bin"]!.size < state.length / 2, "zero pages compress away");
      const bytes = await storedBytes(h.store, snapshotKey("snap_aaaaaaaaaaaaaaaa"));
      assert.ok(bytes > 0 && bytes < state.length);
      await downloadSnapshot(h.store, snapshotKey("snap_aaaaaaaaaaaaaaaa"), dst);
      assert.ok(readFileSync(join(dst, "state.bin")).equals(state));
      assert.deepEqual(JSON.parse(readFileSync(join(dst, "manifest.json"), "utf8")), { kind: "sandbox" });

      await h.corrupt(m.files["state.bin"]!.key);
      const dst2 = join(work, "restored2");
      await assert.rejects(downloadSnapshot(h.store, snapshotKey("snap_aaaaaaaaaaaaaaaa"), dst2), isCode("snapshot_corrupt"));
      assert.equal(existsSync(dst2), false, "nothing left behind");

      await deleteStoredSnapshot(h.store, snapshotKey("snap_aaaaaaaaaaaaaaaa"));
      assert.equal((await h.store.list("snapshots/")).length, before);
      await assert.rejects(downloadSnapshot(h.store, snapshotKey("snap_aaaaaaaaaaaaaaaa"), dst2), isCode("snapshot_not_found"));

      // Sums the caller already has are used as they are: right ones restore, a wrong one is caught on download.
      const sum = (b: Buffer) => createHash("sha256").update(b).digest("hex");
      const disk = readFileSync(join(src, "disk.qcow2"));
      const known = { "state.bin": { size: state.length, sha256: sum(state) }, "disk.qcow2": { size: disk.length, sha256: sum(disk) } };
      const m2 = await uploadSnapshot(h.store, snapshotKey("snap_bbbbbbbbbbbbbbbb"), src, ["state.bin", "disk.qcow2"], {}, undefined, known);
      assert.equal(m2.files["state.bin"]!.rawSha256, sum(state));
      await downloadSnapshot(h.store, snapshotKey("snap_bbbbbbbbbbbbbbbb"), join(work, "restored3"));
      assert.ok(readFileSync(join(work, "restored3", "disk.qcow2")).equals(disk));
      // The restored bytes are checked by the codec's own checksum: an object altered with its
      // stored sum altered to match (so only the decompressed content is wrong) is still refused.
      const m3 = await uploadSnapshot(h.store, snapshotKey("snap_cccccccccccccccc"), src, ["state.bin"], {}, undefined, known);
      const obj = m3.files["state.bin"]!;
      const altered = await h.store.getBytes(obj.key);
      const at = Math.floor(altered.length / 2);
      altered[at] = altered[at]! ^ 0xff;
      await h.store.putBytes(obj.key, altered);
      const m3json = JSON.parse((await h.store.getBytes(`${snapshotKey("snap_cccccccccccccccc")}/${STORE_MANIFEST}`)).toString());
      m3json.files["state.bin"].sha256 = sum(altered);
      await h.store.putBytes(`${snapshotKey("snap_cccccccccccccccc")}/${STORE_MANIFEST}`, Buffer.from(JSON.stringify(m3json)));
      await assert.rejects(downloadSnapshot(h.store, snapshotKey("snap_cccccccccccccccc"), join(work, "restored4")), isCode("snapshot_corrupt"));
      assert.equal(existsSync(join(work, "restored4")), false, "nothing left behind");
      await deleteStoredSnapshot(h.store, snapshotKey("snap_bbbbbbbbbbbbbbbb"));
      await deleteStoredSnapshot(h.store, snapshotKey("snap_cccccccccccccccc"));
    });

    test("a state streams into a descriptor verified (a local store's zstd reads the file itself), and a descriptor's writer makes an object", async () => {
      const src = join(work, "snap-streamed");
      rmSync(src, { recursive: true, force: true });
      mkdirSync(src);
      const state = Buffer.concat([randomBytes(3 << 20), Buffer.alloc(2 << 20)]);
      writeFileSync(join(src, "state.bin"), state);
      const key = snapshotKey("snap_ssssssssssssssss");
      const sum = (b: Buffer) => createHash("sha256").update(b).digest("hex");
      const m = await uploadSnapshot(h.store, key, src, ["state.bin"], {}, undefined, { "state.bin": { size: state.length, sha256: sum(state) } });
      assert.ok(canStreamStoredFile(m, "state.bin"), "stored as zstd");
      const into = async (name: string, stored = m) => {
        const fh = await openFh(join(work, name), "w");
        try {
          await streamStoredFile(h.store, stored, "state.bin", fh.fd);
        } finally {
          await fh.close();
        }
        return readFileSync(join(work, name));
      };
      assert.ok((await into("streamed.bin")).equals(state));
      // Another object of the same size in its place: its sum is wrong, so it is refused.
      const obj = m.files["state.bin"]!;
      const good = await h.store.getBytes(obj.key);
      const other = Buffer.from(good);
      other[other.length >> 1] = other[other.length >> 1]! ^ 0xff;
      await h.store.putBytes(obj.key, other);
      await assert.rejects(into("streamed2.bin"), isCode("snapshot_corrupt"));
      // The same altered bytes with a manifest that vouches for them: zstd's own checksum refuses them.
      await assert.rejects(into("streamed3.bin", { ...m, files: { "state.bin": { ...obj, sha256: sum(other) } } }), isCode("snapshot_corrupt"));
      // Longer than the manifest says.
      await h.store.putBytes(obj.key, Buffer.concat([good, Buffer.alloc(10)]));
      await assert.rejects(into("streamed4.bin"), isCode("snapshot_corrupt"));
      await deleteStoredSnapshot(h.store, key);

      // A writer into a descriptor: local stores take it (the object hashed as it lands), S3 does not.
      const body = randomBytes(1 << 20);
      const made = putSnapshotFileFromFd(h.store, key, "state.bin", "zstd", async (fd) => {
        const child = spawn("zstd", ["-1", "-q", "-c"], { stdio: ["pipe", fd, "inherit"] });
        child.stdin!.end(body);
        assert.equal((await once(child, "close"))[0], 0);
      });
      if (h.store.kind === "s3") assert.equal(made, undefined);
      else {
        const put = await made!;
        const stored = await h.store.getBytes(put.key);
        assert.deepEqual({ key: put.key, size: put.size, sha256: put.sha256 }, { key: `${key}/state.bin.zst`, size: stored.length, sha256: sum(stored) });
        await deleteStoredSnapshot(h.store, key);
      }
    });

    test("a manifest is checked against its upload's digests before it is parsed, and field by field before it is used", async () => {
      const src = join(work, "snap-digests");
      rmSync(src, { recursive: true, force: true });
      mkdirSync(src);
      writeFileSync(join(src, "state.bin"), Buffer.concat([randomBytes(64 * 1024), Buffer.alloc(1 << 20)]));
      writeFileSync(join(src, "disk.qcow2"), randomBytes(10_000));
      const key = snapshotKey("snap_gggggggggggggggg", "dep_digests");
      const manifestKey = `${key}/${STORE_MANIFEST}`;
      const runtimeManifest = { kind: "sandbox", template: { name: "base", version: "0123456789ab" } };
      const m = await uploadSnapshot(h.store, key, src, ["state.bin", "disk.qcow2"], runtimeManifest);
      const digests = storedDigests(m);
      // What the upload says it wrote is what the store holds.
      const wrote = await h.store.getBytes(manifestKey);
      assert.deepEqual(digests.manifest, { size: wrote.length, sha256: createHash("sha256").update(wrote).digest("hex") });
      for (const [n, o] of Object.entries(m.files)) {
        const b = await h.store.getBytes(o.key);
        assert.deepEqual(digests.files[n], { size: b.length, sha256: createHash("sha256").update(b).digest("hex") });
      }
      assert.deepEqual(await readStoredManifest(h.store, key, digests), m);
      await downloadSnapshot(h.store, key, join(work, "dl-ok"), undefined, undefined, { digests });
      assert.deepEqual(JSON.parse(readFileSync(join(work, "dl-ok", "manifest.json"), "utf8")), runtimeManifest);

      const put = (v: unknown) => h.store.putBytes(manifestKey, Buffer.from(typeof v === "string" ? v : JSON.stringify(v, null, 2)));
      const refused = async (why: string, opts: { digests?: boolean } = {}) => {
        await assert.rejects(readStoredManifest(h.store, key, opts.digests ? digests : undefined), isCode("snapshot_corrupt"), why);
        const dst = join(work, "dl-refused");
        await assert.rejects(downloadSnapshot(h.store, key, dst, undefined, undefined, opts.digests ? { digests } : {}), isCode("snapshot_corrupt"), why);
        assert.equal(existsSync(dst), false, `nothing downloaded: ${why}`);
      };
      // Valid in itself (its fields all pass), but not the manifest the upload recorded: refused with the digests.
      await put({ ...m, snapshot: { ...runtimeManifest, template: { name: "../snapshots", version: "0123456789ab" } } });
      await refused("another template named", { digests: true });
      assert.equal((await readStoredManifest(h.store, key)).snapshot && true, true, "without digests only the store's fields are checked here (the runtime checks its own manifest)");
      // A whole snapshot put in its place, every object consistent with its manifest: only the record tells.
      writeFileSync(join(src, "disk.qcow2"), randomBytes(10_000));
      const forged = await uploadSnapshot(h.store, key, src, ["state.bin", "disk.qcow2"], runtimeManifest);
      await downloadSnapshot(h.store, key, join(work, "dl-forged"), undefined, forged);
      await refused("a forged snapshot", { digests: true });
      // Each object checked against the record too (a manifest's bytes that match, objects that do not: a record of another upload).
      await assert.rejects(readStoredManifest(h.store, key, { ...storedDigests(forged), files: digests.files }), isCode("snapshot_corrupt"));
      await assert.rejects(readStoredManifest(h.store, key, { ...storedDigests(forged), files: { "state.bin": digests.files["state.bin"]! } }), isCode("snapshot_corrupt"));

      // Without digests (a copy recorded before them), every field is still checked before use.
      const other = snapshotKey("snap_hhhhhhhhhhhhhhhh", "dep_digests");
      const file = (over: Record<string, unknown>) => ({ ...forged, files: { ...forged.files, "state.bin": { ...forged.files["state.bin"]!, ...over } } });
      const cases: Array<[string, unknown]> = [
        ["not JSON", "{ not json"],
        ["another format", { ...forged, format: 2 }],
        ["another snapshot's id", { ...forged, id: "snap_hhhhhhhhhhhhhhhh" }],
        ["an object of another snapshot", file({ key: `${other}/state.bin.zst` })],
        ["an object outside its key", file({ key: `${key}/../../x/state.bin.zst` })],
        ["a negative size", file({ size: -1 })],
        ["a fractional size", file({ rawSize: 1.5 })],
        ["a size past any disk", file({ rawSize: 2 ** 60 })],
        ["a size as a string", file({ size: "10" })],
        ["an unknown compression", file({ compression: "brotli" })],
        ["a sha256 that is not one", file({ sha256: "../x" })],
        ["a file name with a slash", { ...forged, files: { "../state.bin": forged.files["state.bin"] } }],
        ["a hidden file name", { ...forged, files: { ".state.bin": forged.files["state.bin"] } }],
        ["the download's own manifest name", { ...forged, files: { "manifest.json": forged.files["state.bin"] } }],
        ["no files", { ...forged, files: {} }],
        ["no runtime manifest", { ...forged, snapshot: null }],
        ["a manifest too big to be one", JSON.stringify({ ...forged, pad: "x".repeat(MAX_MANIFEST_BYTES) })],
      ];
      for (const [why, v] of cases) {
        await put(v);
        await refused(why);
      }
      await put(forged);
      assert.deepEqual(await readStoredManifest(h.store, key), forged, "the forged one, put back, reads (only the record could tell)");
      await deleteStoredSnapshot(h.store, key);
    });

    test("an upload that never wrote its manifest is not a snapshot", async () => {
      await h.store.putBytes("snapshots/snap_bbbbbbbbbbbbbbbb/state.bin.gz", Buffer.from("partial"));
      await assert.rejects(downloadSnapshot(h.store, snapshotKey("snap_bbbbbbbbbbbbbbbb"), join(work, "x")), isCode("snapshot_not_found"));
      await deleteStoredSnapshot(h.store, snapshotKey("snap_bbbbbbbbbbbbbbbb"));
    });

    test("a deployment's snapshots are listed under its own prefix only", async () => {
      const src = mkdtempSync(join(tmpdir(), "den-dep-"));
      writeFileSync(join(src, "state.bin"), "x");
      await uploadSnapshot(h.store, snapshotKey("snap_dddddddddddddddd", "dep_aaaaaaaaaaaaaaaa"), src, ["state.bin"], {});
      await uploadSnapshot(h.store, snapshotKey("snap_eeeeeeeeeeeeeeee", "dep_bbbbbbbbbbbbbbbb"), src, ["state.bin"], {});
      const mine = await listStoredSnapshots(h.store, "dep_aaaaaaaaaaaaaaaa");
      assert.deepEqual(mine.map((s) => s.id), ["snap_dddddddddddddddd"]);
      assert.equal(mine[0]!.key, "dep_aaaaaaaaaaaaaaaa/snapshots/snap_dddddddddddddddd");
      assert.ok(mine[0]!.modifiedAt > Date.now() - 600_000, "objects say when they were written");
      await deleteStoredSnapshot(h.store, mine[0]!.key);
      await deleteStoredSnapshot(h.store, snapshotKey("snap_eeeeeeeeeeeeeeee", "dep_bbbbbbbbbbbbbbbb"));
      assert.deepEqual(await listStoredSnapshots(h.store, "dep_aaaaaaaaaaaaaaaa"), []);
      rmSync(src, { recursive: true, force: true });
    });
  });
}

/** Flips one byte in the middle of an object, the way a bad disk or a bad copy would. */
async function flipByte(store: ObjectStore, key: string): Promise<void> {
  const b = await store.getBytes(key);
  const at = Math.floor(b.length / 2);
  b.writeUInt8(b.readUInt8(at) ^ 0x01, at);
  await store.putBytes(key, b);
}

contract("local directory", async () => {
  const root = mkdtempSync(join(tmpdir(), "den-store-local-"));
  const store = new LocalDirStore(root);
  return { store, corrupt: (k) => flipByte(store, k), close: async () => rmSync(root, { recursive: true, force: true }) };
});

describe("local directory: writes that never finish", () => {
  test("a writer killed mid-upload leaves a temp file no listing shows, and the sweep removes it but never a live write's", async () => {
    const root = mkdtempSync(join(tmpdir(), "den-store-sweep-"));
    const store = new LocalDirStore(root);
    try {
      // A real writer process, killed -9 while its upload streams (as a cold hibernate's is).
      const lib = new URL("../src/index.js", import.meta.url).href;
      const child = spawn(process.execPath, ["--input-type=module", "-e", `
        import { Readable } from "node:stream";
        const { LocalDirStore } = await import(${JSON.stringify(lib)});
        const s = new LocalDirStore(${JSON.stringify(root)});
        const endless = new Readable({ read() { this.push(Buffer.alloc(65536)); } });
        s.putStream("dep/snapshots/snap_a/state.zst", endless);
        setTimeout(() => console.log("writing"), 200);`], { stdio: ["ignore", "pipe", "inherit"] });
      await once(child.stdout!, "data");
      child.kill("SIGKILL");
      await once(child, "exit");
      const left = readdirSync(join(root, "dep/snapshots/snap_a"));
      assert.equal(left.length, 1);
      assert.match(left[0]!, new RegExp(`^state\\.zst\\.tmp-${child.pid}-[0-9a-f]{12}$`));
      assert.deepEqual(await store.list("dep/"), [], "a temp file is not an object");

      // A write of this process still in flight when the sweep runs: it is kept and lands.
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      const slow = Readable.from((async function* () { yield Buffer.from("a"); await gate; yield Buffer.from("b"); })());
      const live = store.putStream("dep/snapshots/snap_b/state.zst", slow);
      while (!existsSync(join(root, "dep/snapshots/snap_b"))) await new Promise((r) => setTimeout(r, 10));
      assert.equal(await store.sweepAbandoned!("dep/"), 1, "the dead writer's temp file, and only it");
      assert.ok(!existsSync(join(root, "dep/snapshots/snap_a")), "and the folder it emptied");
      release();
      await live;
      assert.equal((await store.getBytes("dep/snapshots/snap_b/state.zst")).toString(), "ab");
      assert.equal(await store.sweepAbandoned!("dep/"), 0);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});

describe("local directory: folders", () => {
  test("a delete leaves no emptied folder behind, and writes racing deletes in the same folder all land", async () => {
    const root = mkdtempSync(join(tmpdir(), "den-store-dirs-"));
    const store = new LocalDirStore(root);
    try {
      await store.putBytes("dep/snapshots/snap_a/state.zst", Buffer.from("s"));
      await store.putBytes("dep/snapshots/snap_a/store-manifest.json", Buffer.from("{}"));
      await store.putBytes("dep/snapshots/snap_b/state.zst", Buffer.from("b"));
      await store.delete("dep/snapshots/snap_a/state.zst");
      assert.ok(existsSync(join(root, "dep/snapshots/snap_a")), "a folder with an object left stays");
      await store.delete("dep/snapshots/snap_a/store-manifest.json");
      assert.ok(!existsSync(join(root, "dep/snapshots/snap_a")), "the emptied folder goes");
      assert.deepEqual(readdirSync(join(root, "dep/snapshots")), ["snap_b"], "its parent, not empty, stays");
      await store.delete("dep/snapshots/snap_b/state.zst");
      assert.deepEqual(readdirSync(root), [], "emptied up to the root, which stays");

      // Puts and deletes of one folder interleaved: a delete that empties it while a put
      // has made it but not yet its file must not fail the put.
      for (let round = 0; round < 50; round++) {
        const key = (i: number) => `dep/snapshots/snap_c/f${round}-${i}`;
        await Promise.all([
          ...Array.from({ length: 4 }, (_, i) => store.putBytes(key(i), Buffer.from(String(i)))),
          ...Array.from({ length: 4 }, (_, i) => store.delete(key(i + 4))),
          store.putBytes(key(8), Buffer.from("x")).then(() => store.delete(key(8))),
        ]);
        for (let i = 0; i < 4; i++) assert.equal((await store.getBytes(key(i))).toString(), String(i));
        for (let i = 0; i < 4; i++) await store.delete(key(i));
      }
      assert.deepEqual(readdirSync(root), []);

      // Folders an older Den (or a delete killed before its prune) left empty: the sweep removes them.
      mkdirSync(join(root, "dep/snapshots/snap_old"), { recursive: true });
      await store.putBytes("dep/snapshots/snap_live/state.zst", Buffer.from("l"));
      assert.equal(await store.sweepAbandoned!("dep/"), 0, "no temp file");
      assert.deepEqual(readdirSync(join(root, "dep/snapshots")), ["snap_live"]);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});

contract("S3 (s3rver)", async () => {
  const dir = mkdtempSync(join(tmpdir(), "den-s3rver-"));
  const server = new S3rver({ port: 0, address: "127.0.0.1", silent: true, directory: dir, configureBuckets: [{ name: "den" }] });
  const { port } = await server.run();
  const store = new S3Store({ bucket: "den", prefix: "test/", endpoint: `http://127.0.0.1:${port}`, accessKeyId: "S3RVER", secretAccessKey: "S3RVER" });
  return {
    store,
    corrupt: (k) => flipByte(store, k),
    close: async () => {
      store.close();
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
});
