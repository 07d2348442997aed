/**
 * Test images: small OCI image layouts made on this machine with umoci (and GNU tar, node fs),
 * their archives (OCI layout tars, docker-save tarballs), and hostile archives an importer
 * must refuse. Every maker is idempotent: a finished layout has a `<layout>.done` marker
 * beside it, and a half-made one (no marker) is made again from scratch.
 */
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { createReadStream, createWriteStream, existsSync, readdirSync, statSync } from "node:fs";
import { chmod, copyFile, mkdir, mkdtemp, readFile, rename, rm, symlink, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import { pipeline } from "node:stream/promises";
import { promisify } from "node:util";
import { createGunzip, createGzip } from "node:zlib";
import { pack as tarPack, type Headers, type Pack } from "tar-stream";

const execFileP = promisify(execFile);

export interface TestImage {
  /** The OCI image layout's directory (umoci's `--image <layout>:<tag>`). */
  layout: string;
  tag: string;
}

async function run(cmd: string, args: string[]): Promise<void> {
  try {
    await execFileP(cmd, args, { maxBuffer: 16 * 1024 * 1024 });
  } catch (e) {
    const err = e as { stderr?: string; message: string };
    throw new Error(`${cmd} ${args.join(" ")} failed: ${(err.stderr || err.message).trim().slice(-2000)}`);
  }
}

/** `umoci config` flags repeated per item: `--config.cmd=a --config.cmd=b`. */
function repeated(flag: string, values: string[]): string[] {
  return values.map((v) => `--config.${flag}=${v}`);
}

/**
 * Makes `layout` (tag `tag`) once: `build` fills a fresh layout beside it, which is then
 * garbage-collected, moved into place and marked done.
 */
async function makeOnce(layout: string, tag: string, build: (layout: string, work: string) => Promise<void>): Promise<TestImage> {
  const done = `${layout}.done`;
  if (existsSync(done) && existsSync(join(layout, "index.json"))) return { layout, tag };
  await mkdir(dirname(layout), { recursive: true });
  await rm(layout, { recursive: true, force: true });
  const work = await mkdtemp(`${layout}.work-`);
  try {
    const fresh = join(work, "layout");
    await run("umoci", ["init", "--layout", fresh]);
    await run("umoci", ["new", "--image", `${fresh}:${tag}`]);
    await build(fresh, work);
    await run("umoci", ["gc", "--layout", fresh]);
    await rename(fresh, layout);
    await writeFile(done, `${new Date().toISOString()}\n`);
  } finally {
    await rm(work, { recursive: true, force: true });
  }
  return { layout, tag };
}

/** Unpacks the image into `bundle`, lets `fill` change its rootfs, and repacks the change as a new layer. */
async function addLayerFromTree(layout: string, tag: string, bundle: string, fill: (rootfs: string) => Promise<void>): Promise<void> {
  await run("umoci", ["unpack", "--image", `${layout}:${tag}`, bundle]);
  await fill(join(bundle, "rootfs"));
  await run("umoci", ["repack", "--image", `${layout}:${tag}`, bundle]);
  await rm(bundle, { recursive: true, force: true });
}

/** One entry of a hand-written tar: a header (pax records allowed) and its content. */
interface TarEntry { header: Headers & { pax?: Record<string, string> }; body?: string | Buffer }

async function writeTar(out: string, entries: Iterable<TarEntry>, opts: { gzip?: boolean } = {}): Promise<void> {
  const tar: Pack = tarPack();
  const writing = opts.gzip ? pipeline(tar, createGzip(), createWriteStream(out)) : pipeline(tar, createWriteStream(out));
  for (const e of entries) {
    const body = typeof e.body === "string" ? Buffer.from(e.body) : e.body;
    await new Promise<void>((resolve, reject) => {
      tar.entry({ mtime: new Date(0), uid: 0, gid: 0, ...e.header, ...(body ? { size: body.length } : {}) } as Headers, body ?? Buffer.alloc(0), (err) => (err ? reject(err) : resolve()));
    });
  }
  tar.finalize();
  await writing;
}

/** Adds a hand-written tar as the image's next layer (umoci compresses and records it). */
async function addLayerFromTar(layout: string, tag: string, work: string, name: string, entries: TarEntry[]): Promise<void> {
  const file = join(work, `${name}.tar`);
  await writeTar(file, entries);
  await run("umoci", ["raw", "add-layer", "--image", `${layout}:${tag}`, file]);
}

// ---------------------------------------------------------------------------------------------
// Images

/** The newest debootstrapped tree of a base template build (`<cache>/images/rootfs-*\/root`), if this machine has one. */
export function findBaseRootfs(): string | undefined {
  const images = join(process.env.DEN_CACHE_DIR ?? join(homedir(), ".cache", "den"), "images");
  if (!existsSync(images)) return undefined;
  const trees = readdirSync(images)
    .filter((n) => n.startsWith("rootfs-"))
    .map((n) => join(images, n, "root"))
    .filter((p) => existsSync(join(p, "usr", "bin", "python3")))
    .map((p) => ({ p, mtime: statSync(p).mtimeMs }))
    .sort((a, b) => b.mtime - a.mtime);
  return trees[0]?.p;
}

/**
 * A Debian image with Python serving HTTP on 8080: layer 1 is the Debian tree `rootfs`
 * (copied with tar, owners kept: run as root; /dev left empty), layer 2 adds /srv/www/index.html
 * ("hello from the image\n"). Env APP_MODE=image and a PATH, WorkingDir /srv/www, no User.
 */
export async function makePythonHttpImage(dir: string, opts: { rootfs: string }): Promise<TestImage> {
  if (!existsSync(join(opts.rootfs, "usr", "bin", "python3"))) throw new Error(`${opts.rootfs} has no usr/bin/python3`);
  return makeOnce(join(dir, "python-http"), "python-http", async (layout, work) => {
    const tag = "python-http";
    await addLayerFromTree(layout, tag, join(work, "bundle"), (rootfs) =>
      // (Not /dev's device nodes: images carry none, and making them needs CAP_MKNOD.)
      run("bash", ["-c", 'set -o pipefail; tar -C "$1" --exclude="./dev/*" -cf - . | tar -C "$2" -xpf -', "copy-tree", opts.rootfs, rootfs]));
    await addLayerFromTar(layout, tag, work, "www", [
      { header: { name: "srv/", type: "directory", mode: 0o755 } },
      { header: { name: "srv/www/", type: "directory", mode: 0o755 } },
      { header: { name: "srv/www/index.html", mode: 0o644 }, body: "hello from the image\n" },
    ]);
    await run("umoci", ["config", "--image", `${layout}:${tag}`,
      "--config.env=APP_MODE=image", "--config.env=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      "--config.workingdir=/srv/www", ...repeated("cmd", ["python3", "-m", "http.server", "8080", "--bind", "0.0.0.0"])]);
  });
}

const BUSYBOX = "/bin/busybox";
const BUSYBOX_APPLETS = ["sh", "ls", "cat", "echo", "id", "wget", "httpd"];

/** The busybox image's one layer and config, into an existing layout. */
async function buildBusybox(layout: string, tag: string, work: string): Promise<void> {
  await addLayerFromTree(layout, tag, join(work, "bundle"), async (rootfs) => {
    await mkdir(join(rootfs, "bin"), { recursive: true });
    await copyFile(BUSYBOX, join(rootfs, "bin", "busybox"));
    await chmod(join(rootfs, "bin", "busybox"), 0o755);
    for (const applet of BUSYBOX_APPLETS) await symlink("busybox", join(rootfs, "bin", applet));
    await mkdir(join(rootfs, "etc"), { recursive: true });
    await writeFile(join(rootfs, "etc", "passwd"), "root:x:0:0:root:/root:/bin/sh\n", { mode: 0o644 });
    await writeFile(join(rootfs, "etc", "group"), "root:x:0:\n", { mode: 0o644 });
    await mkdir(join(rootfs, "www"), { recursive: true });
    await writeFile(join(rootfs, "www", "index.html"), "busybox here\n", { mode: 0o644 });
  });
  await run("umoci", ["config", "--image", `${layout}:${tag}`, ...repeated("cmd", ["/bin/httpd", "-f", "-p", "8080", "-h", "/www"])]);
}

function requireBusybox(): void {
  if (!existsSync(BUSYBOX)) throw new Error(`${BUSYBOX} is missing: install busybox-static`);
}

/**
 * Static busybox at /bin/busybox with links sh, ls, cat, echo, id, wget, httpd in /bin; an
 * /etc/passwd and /etc/group with root only; /www/index.html "busybox here\n". Cmd serves
 * /www on 8080 with busybox httpd; no User, no Env, no bash.
 */
export async function makeBusyboxImage(dir: string): Promise<TestImage> {
  requireBusybox();
  return makeOnce(join(dir, "busybox"), "busybox", (layout, work) => buildBusybox(layout, "busybox", work));
}

/**
 * No shell anywhere and no /etc/passwd: one static busybox at /bin/busybox with no applet
 * links, Entrypoint ["/bin/busybox"], Cmd ["sleep", "3600"]. (Busybox picks its applet from
 * the name it runs as, so a copy named anything not starting with "busybox" — /bin/tool —
 * answers "applet not found" to everything; the binary keeps its name for the image to run.)
 */
export async function makeNoShellImage(dir: string): Promise<TestImage> {
  requireBusybox();
  return makeOnce(join(dir, "noshell"), "noshell", async (layout, work) => {
    await addLayerFromTar(layout, "noshell", work, "tool", [
      { header: { name: "bin/", type: "directory", mode: 0o755 } },
      { header: { name: "bin/busybox", mode: 0o755 }, body: await readFile(BUSYBOX) },
    ]);
    await run("umoci", ["config", "--image", `${layout}:noshell`, "--config.entrypoint=/bin/busybox", ...repeated("cmd", ["sleep", "3600"])]);
  });
}

/**
 * The busybox image plus two hand-written layers, to test that an unpacker applies layers the
 * way OCI says. Unpacked, the tree must be:
 *   /data/keep.txt        "keep\n"                       (layer 2)
 *   /data/gone.txt        absent: layer 3 has /data/.wh.gone.txt (a whiteout)
 *   /opaque/              exactly one entry, `new` ("new\n"): layer 3 marks /opaque opaque
 *                         (/opaque/.wh..wh..opq), hiding layer 2's old1 and old2
 *   /data/owned           mode 0640, owner 1234:5678, "owned\n"
 *   /data/a, /data/b      one file, two names (a hard link; link count 2), "linked\n"
 *   /data/xattr.txt       xattr user.den = "yes" (a PAX SCHILY.xattr record), "xattr\n"
 *   no .wh.* file anywhere, and the busybox tree of makeBusyboxImage underneath.
 */
export async function makeLayeredImage(dir: string): Promise<TestImage> {
  requireBusybox();
  const tag = "layered";
  return makeOnce(join(dir, "layered"), tag, async (layout, work) => {
    await buildBusybox(layout, tag, work);
    await addLayerFromTar(layout, tag, work, "layer2", [
      { header: { name: "data/", type: "directory", mode: 0o755 } },
      { header: { name: "data/keep.txt", mode: 0o644 }, body: "keep\n" },
      { header: { name: "data/gone.txt", mode: 0o644 }, body: "gone\n" },
      { header: { name: "data/owned", mode: 0o640, uid: 1234, gid: 5678 }, body: "owned\n" },
      { header: { name: "data/a", mode: 0o644 }, body: "linked\n" },
      { header: { name: "data/b", type: "link", linkname: "data/a", mode: 0o644 } },
      { header: { name: "data/xattr.txt", mode: 0o644, pax: { "SCHILY.xattr.user.den": "yes" } }, body: "xattr\n" },
      { header: { name: "opaque/", type: "directory", mode: 0o755 } },
      { header: { name: "opaque/old1", mode: 0o644 }, body: "old1\n" },
      { header: { name: "opaque/old2", mode: 0o644 }, body: "old2\n" },
    ]);
    await addLayerFromTar(layout, tag, work, "layer3", [
      { header: { name: "data/.wh.gone.txt", mode: 0o644 } },
      { header: { name: "opaque/", type: "directory", mode: 0o755 } },
      { header: { name: "opaque/.wh..wh..opq", mode: 0o644 } },
      { header: { name: "opaque/new", mode: 0o644 }, body: "new\n" },
    ]);
  });
}

// ---------------------------------------------------------------------------------------------
// Archives

/** An OCI image layout as one tar (`oci-layout`, `index.json`, `blobs/`), gzip'd if asked. Returns `out`. */
export async function makeOciArchive(layoutDir: string, out: string, opts: { gzip?: boolean } = {}): Promise<string> {
  await run("tar", ["--create", "--numeric-owner", "--owner=0", "--group=0", ...(opts.gzip ? ["--gzip"] : []), "-f", out, "-C", layoutDir, "oci-layout", "index.json", "blobs"]);
  return out;
}

interface LayoutImage { manifestDigest: string; configDigest: string; layerDigests: string[]; diffIds: string[] }

function blobPath(layoutDir: string, digest: string): string {
  return join(layoutDir, "blobs", "sha256", digest.slice("sha256:".length));
}

/** The manifest, config and layers of the layout's image tagged `tag`. */
async function readLayoutImage(layoutDir: string, tag: string): Promise<LayoutImage> {
  const index = JSON.parse(await readFile(join(layoutDir, "index.json"), "utf8")) as { manifests: { digest: string; annotations?: Record<string, string> }[] };
  const entry = index.manifests.find((m) => m.annotations?.["org.opencontainers.image.ref.name"] === tag);
  if (!entry) throw new Error(`${layoutDir} has no image tagged ${tag}`);
  const manifest = JSON.parse(await readFile(blobPath(layoutDir, entry.digest), "utf8")) as { config: { digest: string }; layers: { digest: string }[] };
  const config = JSON.parse(await readFile(blobPath(layoutDir, manifest.config.digest), "utf8")) as { rootfs: { diff_ids: string[] } };
  return { manifestDigest: entry.digest, configDigest: manifest.config.digest, layerDigests: manifest.layers.map((l) => l.digest), diffIds: config.rootfs.diff_ids };
}

/**
 * A `docker save` tarball (docker before 25) of the layout's image `tag`: `manifest.json`
 * (RepoTags `den-test/<tag>:latest`), `<config hex>.json`, `<diff id hex>/layer.tar` (each
 * layer decompressed), `<diff id hex>/VERSION` and `/json`, and `repositories`. With
 * `ociLayoutToo`, the layout's own files are added too, as docker 25+ does (an importer
 * should then read the OCI layout; here manifest.json's layer paths point at the gzip'd blobs,
 * so reading it instead would fail the diff id check). Returns `out`.
 */
export async function makeDockerSaveArchive(layoutDir: string, tag: string, out: string, opts: { ociLayoutToo?: boolean } = {}): Promise<string> {
  const image = await readLayoutImage(layoutDir, tag);
  const stage = await mkdtemp(`${out}.stage-`);
  try {
    const configHex = image.configDigest.slice("sha256:".length);
    await copyFile(blobPath(layoutDir, image.configDigest), join(stage, `${configHex}.json`));
    const layerPaths: string[] = [];
    for (const [i, digest] of image.layerDigests.entries()) {
      const id = image.diffIds[i]!.slice("sha256:".length);
      await mkdir(join(stage, id));
      await pipeline(createReadStream(blobPath(layoutDir, digest)), createGunzip(), createWriteStream(join(stage, id, "layer.tar")));
      await writeFile(join(stage, id, "VERSION"), "1.0");
      await writeFile(join(stage, id, "json"), JSON.stringify({ id }));
      layerPaths.push(`${id}/layer.tar`);
    }
    const repoTag = `den-test/${tag}:latest`;
    const layers = opts.ociLayoutToo ? image.layerDigests.map((d) => `blobs/sha256/${d.slice("sha256:".length)}`) : layerPaths;
    await writeFile(join(stage, "manifest.json"), JSON.stringify([{ Config: `${configHex}.json`, RepoTags: [repoTag], Layers: layers }]));
    await writeFile(join(stage, "repositories"), JSON.stringify({ [`den-test/${tag}`]: { latest: image.diffIds.at(-1)!.slice("sha256:".length) } }));
    const names = readdirSync(stage);
    if (opts.ociLayoutToo) {
      for (const name of ["oci-layout", "index.json", "blobs"]) await run("cp", ["-a", join(layoutDir, name), join(stage, name)]);
      names.push("oci-layout", "index.json", "blobs");
    }
    await run("tar", ["--create", "--numeric-owner", "--owner=0", "--group=0", "-f", out, "-C", stage, ...names]);
  } finally {
    await rm(stage, { recursive: true, force: true });
  }
  return out;
}

export type HostileKind = "dotdot" | "symlink" | "hardlink" | "device" | "duplicate-name" | "lying-digest" | "bomb" | "huge-header" | "too-many-entries";

/** How far a "bomb" inflates: pass a smaller `maxArchiveBytes` (a few MiB) for it to trip. */
export const BOMB_INFLATED_BYTES = 64 * 1024 * 1024;

function sha256Hex(bytes: Buffer | string): string {
  return createHash("sha256").update(bytes).digest("hex");
}

const OCI_LAYOUT_FILE: TarEntry = { header: { name: "oci-layout", mode: 0o644 }, body: JSON.stringify({ imageLayoutVersion: "1.0.0" }) };

/**
 * An archive an importer must refuse (each otherwise looks like an OCI layout):
 * - `dotdot`: an entry `../evil`;
 * - `symlink`: `blobs/sha256/<hex>` a symlink to /etc/passwd;
 * - `hardlink`: `index.json` a hard link to /etc/passwd;
 * - `device`: a character device `dev-null` (1, 3);
 * - `duplicate-name`: `index.json` twice (the second as `./index.json`);
 * - `lying-digest`: a blob whose content does not hash to its name, named by index.json;
 * - `bomb`: gzip'd, ~70 KB, inflating to BOMB_INFLATED_BYTES (a blob of zeros);
 * - `huge-header`: gzip'd, a 16 MiB pax header (which a tar parser buffers whole);
 * - `too-many-entries`: 10001 empty files (the default limit is 10000).
 * Returns `out`.
 */
export async function makeHostileArchive(kind: HostileKind, out: string): Promise<string> {
  switch (kind) {
    case "dotdot":
      await writeTar(out, [OCI_LAYOUT_FILE, { header: { name: "../evil", mode: 0o644 }, body: "evil\n" }]);
      break;
    case "symlink":
      await writeTar(out, [OCI_LAYOUT_FILE, { header: { name: `blobs/sha256/${sha256Hex("x")}`, type: "symlink", linkname: "/etc/passwd" } }]);
      break;
    case "hardlink":
      await writeTar(out, [OCI_LAYOUT_FILE, { header: { name: "index.json", type: "link", linkname: "/etc/passwd" } }]);
      break;
    case "duplicate-name": {
      const index = JSON.stringify({ schemaVersion: 2, manifests: [] });
      await writeTar(out, [OCI_LAYOUT_FILE, { header: { name: "index.json", mode: 0o644 }, body: index }, { header: { name: "./index.json", mode: 0o644 }, body: index }]);
      break;
    }
    case "device":
      await writeTar(out, [OCI_LAYOUT_FILE, { header: { name: "dev-null", type: "character-device", devmajor: 1, devminor: 3, mode: 0o666 } }]);
      break;
    case "lying-digest": {
      const claimed = sha256Hex("the real manifest\n");
      const index = { schemaVersion: 2, manifests: [{ mediaType: "application/vnd.oci.image.manifest.v1+json", digest: `sha256:${claimed}`, size: 18, annotations: { "org.opencontainers.image.ref.name": "liar" } }] };
      await writeTar(out, [
        OCI_LAYOUT_FILE,
        { header: { name: "index.json", mode: 0o644 }, body: JSON.stringify(index) },
        { header: { name: `blobs/sha256/${claimed}`, mode: 0o644 }, body: "a different body!\n" },
      ]);
      break;
    }
    case "bomb": {
      const zeros = Buffer.alloc(BOMB_INFLATED_BYTES);
      await writeTar(out, [OCI_LAYOUT_FILE, { header: { name: `blobs/sha256/${sha256Hex(zeros)}`, mode: 0o644 }, body: zeros }], { gzip: true });
      break;
    }
    case "huge-header":
      await writeTar(out, [OCI_LAYOUT_FILE, { header: { name: "index.json", mode: 0o644, pax: { comment: "x".repeat(16 * 1024 * 1024) } }, body: "{}" }], { gzip: true });
      break;
    case "too-many-entries":
      await writeTar(out, (function* () {
        yield OCI_LAYOUT_FILE;
        for (let i = 0; i < 10_001; i++) yield { header: { name: `junk/${i}`, mode: 0o644 } };
      })());
      break;
  }
  return out;
}
