// needs: umoci
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { lstat, mkdtemp, readFile, readdir, readlink, rm, stat, symlink, mkdir, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { pack, type Headers } from "tar-stream";
import { DenError } from "@den/protocol";
import { BlobCache, prepareRootfs, resolveIn, unpackImage, type Descriptor, type ResolvedImage } from "../src/index.js";

type Entry = Partial<Headers> & { name: string; body?: string };

/** A layer tar of these entries, gzipped, with its diff id. */
async function layer(entries: Entry[]): Promise<{ gz: Buffer; diffId: string }> {
  const p = pack();
  const chunks: Buffer[] = [];
  p.on("data", (c: Buffer) => chunks.push(c));
  const done = new Promise((r) => p.on("end", r));
  for (const e of entries) {
    const { body, ...h } = e;
    await new Promise<void>((res, rej) => p.entry({ mode: h.type === "directory" ? 0o755 : 0o644, uid: 0, gid: 0, ...h }, body ?? "", (err) => (err ? rej(err) : res())));
  }
  p.finalize();
  await done;
  const tar = Buffer.concat(chunks);
  return { gz: gzipSync(tar), diffId: `sha256:${createHash("sha256").update(tar).digest("hex")}` };
}

async function* once(b: Buffer): AsyncIterable<Buffer> {
  yield b;
}

const sha = (b: Buffer) => `sha256:${createHash("sha256").update(b).digest("hex")}`;

/** An image of these layers, its blobs in `cache`. */
async function image(cache: BlobCache, layers: Entry[][], opts: { lieDiffId?: boolean } = {}): Promise<ResolvedImage> {
  const made = await Promise.all(layers.map(layer));
  const descs: Descriptor[] = [];
  for (const l of made) {
    const d = { mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", digest: sha(l.gz), size: l.gz.length };
    await cache.put(d, once(l.gz));
    descs.push(d);
  }
  const diffIds = made.map((l) => l.diffId);
  if (opts.lieDiffId) diffIds[0] = sha(Buffer.from("something else"));
  const config = Buffer.from(JSON.stringify({ architecture: "amd64", os: "linux", config: {}, rootfs: { type: "layers", diff_ids: diffIds } }));
  const cd = { mediaType: "application/vnd.oci.image.config.v1+json", digest: sha(config), size: config.length };
  await cache.put(cd, once(config));
  return { source: "test", manifestDigest: sha(Buffer.from("m")), config: cd, layers: descs, diffIds, run: { env: [], entrypoint: null, cmd: null, workingDir: "", user: "" }, platform: "linux/amd64" };
}

describe("unpacking an image into a root", () => {
  let dir: string;
  let cache: BlobCache;
  let n = 0;
  const work = async () => {
    const w = join(dir, `work-${n++}`);
    await mkdir(w);
    return w;
  };
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "den-unpack-"));
    cache = new BlobCache(join(dir, "cache"), { maxBytes: 1 << 30 });
  });
  after(() => rm(dir, { recursive: true, force: true }));

  test("layers in order: a whiteout deletes, an opaque dir hides the lower layer, owners, modes and hard links kept", async () => {
    const img = await image(cache, [
      [
        { name: "data", type: "directory" }, { name: "data/keep.txt", body: "keep\n" }, { name: "data/gone.txt", body: "gone\n" },
        { name: "data/owned", body: "x", mode: 0o640, uid: 1234, gid: 5678 }, { name: "data/a", body: "same\n" }, { name: "data/b", type: "link", linkname: "data/a" },
        { name: "opaque", type: "directory" }, { name: "opaque/old1", body: "1" }, { name: "opaque/old2", body: "2" },
      ],
      [{ name: "data/.wh.gone.txt" }, { name: "opaque/.wh..wh..opq" }, { name: "opaque/new", body: "new\n" }],
    ]);
    const { rootfs, unpackedBytes } = await unpackImage(img, cache, await work());
    assert.ok(unpackedBytes > 0);
    assert.deepEqual((await readdir(join(rootfs, "data"))).sort(), ["a", "b", "keep.txt", "owned"]);
    assert.deepEqual(await readdir(join(rootfs, "opaque")), ["new"]);
    const owned = await stat(join(rootfs, "data/owned"));
    assert.equal(owned.mode & 0o7777, 0o640);
    assert.deepEqual([owned.uid, owned.gid], [1234, 5678]);
    assert.equal((await stat(join(rootfs, "data/a"))).ino, (await stat(join(rootfs, "data/b"))).ino);
  });

  const refused: Array<[string, Entry[][], RegExp]> = [
    ["an entry that climbs out of the root", [[{ name: "../evil", body: "x" }]], /climbs out of the root/],
    ["a hard link out of the root", [[{ name: "x", type: "link", linkname: "../../etc/passwd" }]], /points out of the root/],
    ["a device node", [[{ name: "dev/sda", type: "block-device", devmajor: 8, devminor: 0 }]], /device node/],
  ];
  for (const [what, layers, why] of refused) {
    test(`${what} is refused before anything is extracted`, async () => {
      const w = await work();
      await assert.rejects(unpackImage(await image(cache, layers), cache, w), (e: DenError) => e.code === "image_invalid" && why.test(e.message));
      assert.deepEqual(await readdir(w), [], "nothing was written");
    });
  }

  test("a config whose diff ids do not match the layers is refused", async () => {
    const img = await image(cache, [[{ name: "f", body: "x" }]], { lieDiffId: true });
    await assert.rejects(unpackImage(img, cache, await work()), (e: DenError) => e.code === "image_invalid" && /unpacks to/.test(e.message));
  });

  test("a decompression bomb stops at the size limit", async () => {
    const img = await image(cache, [[{ name: "zeros", body: "\0".repeat(8 * 1024 * 1024) }]]);
    assert.ok(img.layers[0]!.size < 100_000, "it is small compressed");
    await assert.rejects(unpackImage(img, cache, await work(), { limits: { maxUnpackedBytes: 1024 * 1024 } }), (e: DenError) => e.code === "image_invalid" && /larger than 1 MiB/.test(e.message));
  });

  test("a symlink in a layer cannot make a later entry land outside the root", async () => {
    const outside = join(dir, "outside");
    await mkdir(outside);
    const img = await image(cache, [[{ name: "escape", type: "symlink", linkname: outside }], [{ name: "escape/planted", body: "x" }]]);
    await unpackImage(img, cache, await work());
    assert.deepEqual(await readdir(outside), [], "nothing was written through the link");
  });

  test("Den's changes stay inside the root, whatever its links say; the `user` account is added", async () => {
    const w = await work();
    const root = join(w, "rootfs");
    const host = join(dir, "host-etc");
    await mkdir(host);
    await writeFile(join(host, "passwd"), "host:x:0:0::/:/bin/sh\n");
    await mkdir(join(root, "bin"), { recursive: true });
    await writeFile(join(root, "bin", "sh"), "");
    // A hostile image: /etc is a link to an absolute path (the host's, if followed naively).
    await symlink(host, join(root, "etc"));
    const agent = join(dir, "agent");
    await writeFile(agent, "#!agent\n");
    const { user, hasShell } = await prepareRootfs(root, agent);
    assert.equal(await readFile(join(host, "passwd"), "utf8"), "host:x:0:0::/:/bin/sh\n", "the host's file is untouched");
    assert.equal(hasShell, true);
    assert.deepEqual([user.name, user.uid, user.home], ["user", 1000, "/home/user"]);
    // The link resolved inside the root: /etc is <root><host path>.
    const etc = await resolveIn(root, "/etc");
    assert.ok(etc.startsWith(root + "/"), etc);
    assert.match(await readFile(join(etc, "passwd"), "utf8"), /^user:x:1000:1000::\/home\/user:\/bin\/sh$/m);
    assert.equal(await readlink(join(root, "etc")), host, "the image's own link is left as it was");
    assert.equal((await lstat(join(root, "usr/local/sbin/den-agent"))).mode & 0o777, 0o755);
    assert.equal((await stat(join(root, "home/user"))).uid, 1000);
  });
});
