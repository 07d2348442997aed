// needs: umoci, skopeo
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DenError, type ErrorCode } from "@den/protocol";
import { importArchive, type ImportArchiveOptions } from "../src/oci/archive.js";
import { BlobCache } from "../src/oci/blob-cache.js";
import type { ResolvedImage } from "../src/oci/types.js";
import {
  makeBusyboxImage,
  makeDockerSaveArchive,
  makeHostileArchive,
  makeLayeredImage,
  makeNoShellImage,
  makeOciArchive,
  type HostileKind,
  type TestImage,
} from "../src/testing/images.js";

const ARCH = process.arch === "arm64" ? "arm64" : "amd64";
const PLATFORM = { os: "linux", architecture: ARCH } as const;
const work = mkdtempSync(join(tmpdir(), "den-archive-test-"));
const archives = join(work, "archives");
mkdirSync(archives);
let caches = 0;
let busybox: TestImage;
let layered: TestImage;
let noShell: TestImage;

before(async () => {
  const images = join(work, "images");
  [busybox, layered, noShell] = [await makeBusyboxImage(images), await makeLayeredImage(images), await makeNoShellImage(images)];
});
after(() => rmSync(work, { recursive: true, force: true }));

function newCache(): BlobCache {
  return new BlobCache(join(work, `cache-${++caches}`), { maxBytes: 1024 ** 3 });
}

function sha256(bytes: Buffer): string {
  return createHash("sha256").update(bytes).digest("hex");
}

/** The cache holds whole, verified blobs and nothing else (no temp files); the archives' directory no scratch. */
function assertClean(cache: BlobCache): void {
  if (existsSync(cache.dir)) {
    for (const name of readdirSync(cache.dir)) assert.equal(name, "sha256", `unexpected ${name} in the cache dir`);
    const blobs = join(cache.dir, "sha256");
    for (const name of existsSync(blobs) ? readdirSync(blobs) : []) {
      assert.match(name, /^[0-9a-f]{64}$/, `stray file ${name} in the cache`);
      assert.equal(sha256(readFileSync(join(blobs, name))), name, `blob ${name} does not hash to its name`);
    }
  }
  assert.deepEqual(readdirSync(archives).filter((n) => n.startsWith(".den-archive-")), [], "scratch left beside the archives");
}

async function refused(p: Promise<unknown>, code: ErrorCode, message?: RegExp): Promise<DenError> {
  const err = await p.then(
    () => assert.fail(`expected ${code}, but it was accepted`),
    (e: unknown) => e,
  );
  assert.ok(err instanceof DenError, `expected a DenError, got ${String(err)}`);
  assert.equal(err.code, code, err.message);
  if (message) assert.match(err.message, message);
  return err;
}

interface LayoutFacts { manifestDigest: string; config: string; layers: { mediaType: string; digest: string; size: number }[]; diffIds: string[] }

function readLayout(image: TestImage): LayoutFacts {
  const blob = (d: string) => JSON.parse(readFileSync(join(image.layout, "blobs", "sha256", d.slice(7)), "utf8"));
  const index = JSON.parse(readFileSync(join(image.layout, "index.json"), "utf8"));
  const entry = index.manifests.find((m: { annotations?: Record<string, string> }) => m.annotations?.["org.opencontainers.image.ref.name"] === image.tag);
  const manifest = blob(entry.digest);
  return { manifestDigest: entry.digest, config: manifest.config.digest, layers: manifest.layers, diffIds: blob(manifest.config.digest).rootfs.diff_ids };
}

async function imported(file: string, cache: BlobCache, opts: Partial<ImportArchiveOptions> = {}): Promise<ResolvedImage> {
  const image = await importArchive(file, cache, { platform: PLATFORM, ...opts });
  for (const d of [image.config, ...image.layers]) {
    assert.ok(cache.has(d.digest), `${d.digest} is not in the cache`);
    assert.equal(statSync(cache.path(d.digest)).size, d.size);
  }
  assert.ok(cache.has(image.manifestDigest), "the manifest is not in the cache");
  assertClean(cache);
  return image;
}

const BUSYBOX_RUN = { env: [], entrypoint: null, cmd: ["/bin/httpd", "-f", "-p", "8080", "-h", "/www"], workingDir: "", user: "" };

test("an OCI layout tar imports as the layout says, with or without its tag", async () => {
  const file = await makeOciArchive(busybox.layout, join(archives, "busybox-oci.tar"));
  const facts = readLayout(busybox);
  const cache = newCache();
  const image = await imported(file, cache, { tag: "busybox" });
  assert.equal(image.source, "archive");
  assert.equal(image.manifestDigest, facts.manifestDigest);
  assert.equal(image.config.digest, facts.config);
  assert.deepEqual(image.layers, facts.layers.map(({ mediaType, digest, size }) => ({ mediaType, digest, size })));
  assert.deepEqual(image.diffIds, facts.diffIds);
  assert.deepEqual(image.run, BUSYBOX_RUN);
  assert.equal(image.platform, `linux/${ARCH}`);
  // The only image: no tag needed. Imported again into the same cache: blobs already there.
  assert.deepEqual(await imported(file, cache), image);
});

test("a gzip'd OCI layout tar of a three-layer image imports the same", async () => {
  const file = await makeOciArchive(layered.layout, join(archives, "layered-oci.tar.gz"), { gzip: true });
  assert.deepEqual([...readFileSync(file).subarray(0, 2)], [0x1f, 0x8b]);
  const facts = readLayout(layered);
  const image = await imported(file, newCache(), { tag: "layered" });
  assert.equal(image.manifestDigest, facts.manifestDigest);
  assert.equal(image.layers.length, 3);
  assert.deepEqual(image.diffIds, facts.diffIds);
  assert.deepEqual(image.run, BUSYBOX_RUN);
});

test("a docker-save tarball imports with the layout's run config and diff ids; its layers are the plain tars", async () => {
  const facts = readLayout(layered);
  const file = await makeDockerSaveArchive(layered.layout, layered.tag, join(archives, "layered-docker.tar"));
  for (const tag of ["den-test/layered:latest", "den-test/layered", "docker.io/den-test/layered:latest", undefined]) {
    const cache = newCache();
    const image = await imported(file, cache, tag === undefined ? {} : { tag });
    assert.deepEqual(image.diffIds, facts.diffIds);
    assert.deepEqual(image.run, BUSYBOX_RUN);
    assert.equal(image.config.digest, facts.config, "the config's bytes are the layout's");
    assert.deepEqual(image.layers.map((l) => [l.mediaType, l.digest]), facts.diffIds.map((d) => ["application/vnd.oci.image.layer.v1.tar", d]));
    // Den wrote the OCI manifest a docker-save tarball stands for.
    const manifest = JSON.parse(readFileSync(cache.path(image.manifestDigest), "utf8"));
    assert.deepEqual(manifest.layers, image.layers);
  }
});

test("skopeo's docker-archive (layers as <hex>.tar, <id>/layer.tar symlinks to them) imports", async () => {
  const facts = readLayout(busybox);
  const file = join(archives, "busybox-skopeo.tar");
  execFileSync("skopeo", ["copy", "--quiet", `oci:${busybox.layout}:${busybox.tag}`, `docker-archive:${file}:den-test/busybox:v1`]);
  const listing = execFileSync("tar", ["tvf", file], { encoding: "utf8" });
  assert.match(listing, /^l.*\/layer\.tar -> \.\.\/[0-9a-f]{64}\.tar$/m, "skopeo writes the legacy symlinks this test is about");
  const image = await imported(file, newCache(), { tag: "den-test/busybox:v1" });
  assert.deepEqual(image.diffIds, facts.diffIds);
  assert.deepEqual(image.run, BUSYBOX_RUN);
});

test("an archive that is both (docker 25+) is read as its OCI layout", async () => {
  const facts = readLayout(busybox);
  const file = await makeDockerSaveArchive(busybox.layout, busybox.tag, join(archives, "busybox-docker25.tar"), { ociLayoutToo: true });
  const image = await imported(file, newCache(), { tag: "busybox" });
  assert.equal(image.manifestDigest, facts.manifestDigest);
  assert.deepEqual(image.layers.map((l) => l.digest), facts.layers.map((l) => l.digest));
});

const HOSTILE: [HostileKind, RegExp, Partial<ImportArchiveOptions>?][] = [
  ["dotdot", /"\.\.\/evil" has a "\.\." in its name/],
  ["symlink", /symbolic link/],
  ["hardlink", /hard link/],
  ["device", /device node/],
  ["duplicate-name", /two entries named "index\.json"/],
  ["lying-digest", /is not the blob its name says/],
  ["bomb", /over 4194304 bytes once inflated/, { limits: { maxArchiveBytes: 4 * 1024 ** 2 } }],
  ["huge-header", /tar header over 4194304 bytes/],
  ["too-many-entries", /more than 10000 entries/],
];

for (const [kind, message, opts] of HOSTILE) {
  test(`a hostile archive is refused: ${kind}`, async () => {
    const file = await makeHostileArchive(kind, join(archives, `hostile-${kind}.tar`));
    const cache = newCache();
    await refused(importArchive(file, cache, { platform: PLATFORM, ...opts }), "image_invalid", message);
    assertClean(cache);
  });
}

test("not a tar, a truncated tar, an empty tar, an archive or image over a limit: refused", async () => {
  const cache = newCache();
  const junk = join(archives, "junk.tar");
  writeFileSync(junk, Buffer.alloc(4096, "not a tar at all "));
  await refused(importArchive(junk, cache, { platform: PLATFORM }), "image_invalid", /not a valid tar/);
  const whole = readFileSync(await makeOciArchive(busybox.layout, join(archives, "whole.tar")));
  const cut = join(archives, "cut.tar");
  writeFileSync(cut, whole.subarray(0, Math.floor(whole.length / 2)));
  await refused(importArchive(cut, cache, { platform: PLATFORM }), "image_invalid");
  const empty = join(archives, "empty.tar");
  writeFileSync(empty, Buffer.alloc(10240));
  await refused(importArchive(empty, cache, { platform: PLATFORM }), "image_not_found");
  await refused(importArchive(join(archives, "whole.tar"), cache, { platform: PLATFORM, limits: { maxArchiveBytes: 1024 } }), "image_invalid", /over the 1024-byte limit/);
  await refused(importArchive(join(archives, "whole.tar"), cache, { platform: PLATFORM, limits: { maxLayers: 0 } }), "image_invalid", /over the limit of 0/);
  assertClean(cache);
});

/** A copy of `image`'s layout whose manifest says layer 1 is one byte longer than it is. */
function layoutWithLyingLayerSize(image: TestImage): TestImage {
  const layout = join(work, "liar");
  execFileSync("cp", ["-a", image.layout, layout]);
  const blobs = join(layout, "blobs", "sha256");
  const index = JSON.parse(readFileSync(join(layout, "index.json"), "utf8"));
  const manifest = JSON.parse(readFileSync(join(blobs, index.manifests[0].digest.slice(7)), "utf8"));
  manifest.layers[0].size += 1;
  const bytes = Buffer.from(JSON.stringify(manifest));
  writeFileSync(join(blobs, sha256(bytes)), bytes);
  index.manifests[0] = { ...index.manifests[0], digest: `sha256:${sha256(bytes)}`, size: bytes.length };
  writeFileSync(join(layout, "index.json"), JSON.stringify(index));
  return { layout, tag: image.tag };
}

test("a manifest that lies about a layer's size is refused", async () => {
  const file = await makeOciArchive(layoutWithLyingLayerSize(busybox).layout, join(archives, "liar.tar"));
  const cache = newCache();
  await refused(importArchive(file, cache, { platform: PLATFORM }), "image_invalid", /layer 1 .* is \d+ bytes, but it is described as \d+/);
  assertClean(cache);
});

test("a tag the archive does not have is image_not_found, naming the tags it has", async () => {
  const oci = await makeOciArchive(busybox.layout, join(archives, "busybox-oci-2.tar"));
  await refused(importArchive(oci, newCache(), { platform: PLATFORM, tag: "nope" }), "image_not_found", /"busybox"/);
  const docker = await makeDockerSaveArchive(busybox.layout, busybox.tag, join(archives, "busybox-docker.tar"));
  await refused(importArchive(docker, newCache(), { platform: PLATFORM, tag: "den-test/busybox:v2" }), "image_not_found", /"den-test\/busybox:latest"/);
});

test("an image for another architecture is refused, naming the one it is for", async () => {
  const other = ARCH === "amd64" ? "arm64" : "amd64";
  const oci = await makeOciArchive(busybox.layout, join(archives, "busybox-oci-3.tar"));
  const cache = newCache();
  await refused(importArchive(oci, cache, { platform: { os: "linux", architecture: other } }), "image_invalid", new RegExp(`for linux/${ARCH}, not linux/${other}`));
  const docker = await makeDockerSaveArchive(busybox.layout, busybox.tag, join(archives, "busybox-docker-2.tar"));
  await refused(importArchive(docker, cache, { platform: { os: "linux", architecture: other } }), "image_invalid", new RegExp(`for linux/${ARCH}`));
  assertClean(cache);
});

test("an aborted import stops with `aborted`", async () => {
  const oci = await makeOciArchive(layered.layout, join(archives, "layered-oci-2.tar"));
  const cache = newCache();
  await refused(importArchive(oci, cache, { platform: PLATFORM, signal: AbortSignal.abort() }), "aborted");
  assertClean(cache);
});

// ---------------------------------------------------------------------------------------------
// The test images themselves

function unpack(image: TestImage, name: string): string {
  const bundle = join(work, `bundle-${name}`);
  execFileSync("umoci", ["unpack", "--image", `${image.layout}:${image.tag}`, bundle]);
  return join(bundle, "rootfs");
}

function xattr(path: string, name: string): string | undefined {
  try {
    return execFileSync("python3", ["-c", "import os,sys; print(os.getxattr(sys.argv[1], sys.argv[2]).decode(), end='')", path, name], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
  } catch {
    return undefined;
  }
}

test("makeLayeredImage unpacks to the tree its comment describes", () => {
  const root = unpack(layered, "layered");
  const data = join(root, "data");
  assert.equal(readFileSync(join(data, "keep.txt"), "utf8"), "keep\n");
  assert.ok(!existsSync(join(data, "gone.txt")), "the whiteout removed gone.txt");
  assert.deepEqual(readdirSync(join(root, "opaque")), ["new"], "the opaque directory hides old1 and old2");
  assert.equal(readFileSync(join(root, "opaque", "new"), "utf8"), "new\n");
  const owned = statSync(join(data, "owned"));
  assert.equal(owned.mode & 0o7777, 0o640);
  assert.deepEqual([owned.uid, owned.gid], [1234, 5678]);
  const [a, b] = [statSync(join(data, "a")), statSync(join(data, "b"))];
  assert.equal(a.ino, b.ino, "a and b are one file");
  assert.equal(a.nlink, 2);
  assert.equal(readFileSync(join(data, "b"), "utf8"), "linked\n");
  assert.equal(xattr(join(data, "xattr.txt"), "user.den"), "yes");
  assert.ok(existsSync(join(root, "bin", "busybox")), "the busybox layer is underneath");
  assert.deepEqual(readdirSync(data).filter((n) => n.startsWith(".wh.")), []);
});

test("makeBusyboxImage and makeNoShellImage unpack to what they say; makers are idempotent", async () => {
  const root = unpack(busybox, "busybox");
  assert.ok(statSync(join(root, "bin", "busybox")).mode & 0o111);
  for (const applet of ["sh", "ls", "cat", "echo", "id", "wget", "httpd"]) assert.ok(lstatSync(join(root, "bin", applet)).isSymbolicLink(), applet);
  assert.ok(!existsSync(join(root, "bin", "bash")));
  assert.equal(readFileSync(join(root, "etc", "passwd"), "utf8"), "root:x:0:0:root:/root:/bin/sh\n");
  assert.equal(readFileSync(join(root, "etc", "group"), "utf8"), "root:x:0:\n");
  assert.equal(readFileSync(join(root, "www", "index.html"), "utf8"), "busybox here\n");

  const bare = unpack(noShell, "noshell");
  assert.deepEqual(readdirSync(join(bare, "bin")), ["busybox"]);
  assert.ok(!existsSync(join(bare, "etc", "passwd")));
  const config = JSON.parse(readFileSync(join(work, "bundle-noshell", "config.json"), "utf8"));
  assert.deepEqual(config.process.args, ["/bin/busybox", "sleep", "3600"]);

  const marker = `${busybox.layout}.done`;
  const before = statSync(marker).mtimeMs;
  assert.deepEqual(await makeBusyboxImage(join(work, "images")), busybox);
  assert.equal(statSync(marker).mtimeMs, before, "made once");
});
