import { execFile, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { copyFile, mkdir, readFile, rename, rm, stat, utimes, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { DenError } from "@den/protocol";
import { AGENT_DIR, IMAGES_DIR, loadRecipe, type Recipe } from "./recipe.js";

const execFileP = promisify(execFile);

export interface ImageArtifacts {
  /** Content key of the whole image (kernel, initrd, disk). */
  key: string;
  kernel: string;
  initrd: string;
  disk: string;
  kernelVersion: string;
}

export interface BuildOptions {
  cacheDir: string;
  log?: (line: string) => void;
}

function hash(...parts: (string | Buffer)[]): string {
  const h = createHash("sha256");
  for (const p of parts) h.update(p).update("\0");
  return h.digest("hex").slice(0, 16);
}

function script(name: string): string {
  return join(IMAGES_DIR, "scripts", name);
}

function fileHash(path: string): string {
  return hash(readFileSync(path));
}

/** Hash of the guest agent's sources: a change to the agent rebuilds the disk only. */
export function agentSourceKey(): string {
  const files = ["build.sh", ...readdirSync(join(AGENT_DIR, "src")).sort().map((f) => join("src", f))];
  return hash(...files.flatMap((f) => [f, readFileSync(join(AGENT_DIR, f))]));
}

/** The Debian mirror this machine's apt uses (debootstrap must use the same one). */
export function aptMirror(): string {
  if (process.env.DEN_DEBIAN_MIRROR) return process.env.DEN_DEBIAN_MIRROR;
  const sources = ["/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"];
  for (const f of sources) {
    if (!existsSync(f)) continue;
    const text = readFileSync(f, "utf8");
    const deb822 = /^URIs:\s*(\S+)/m.exec(text);
    if (deb822 && !deb822[1]!.includes("security")) return deb822[1]!;
    const line = /^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+\S+/m.exec(text);
    if (line) return line[1]!;
  }
  throw new DenError("build_failed", "cannot find a Debian mirror in /etc/apt sources; set DEN_DEBIAN_MIRROR");
}

/**
 * Runs one cached build step: if `dir` already holds a finished result (a `.done`
 * marker) it is reused; otherwise the step runs into a temp dir that is renamed into place.
 */
async function cachedStep(dir: string, what: string, opts: BuildOptions, run: (out: string) => Promise<void>): Promise<string> {
  if (existsSync(join(dir, ".done"))) {
    opts.log?.(`${what}: cached (${dir})`);
    return dir;
  }
  const tmp = `${dir}.tmp-${process.pid}`;
  await rm(tmp, { recursive: true, force: true });
  await mkdir(tmp, { recursive: true });
  const t0 = Date.now();
  opts.log?.(`${what}: building...`);
  try {
    await run(tmp);
    await writeFile(join(tmp, ".done"), new Date().toISOString() + "\n");
    await rm(dir, { recursive: true, force: true });
    await rename(tmp, dir);
  } catch (e) {
    await rm(tmp, { recursive: true, force: true });
    throw e;
  }
  opts.log?.(`${what}: built in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  return dir;
}

function runScript(path: string, env: Record<string, string>): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn("bash", [path], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let tail = "";
    const onOut = (d: Buffer) => {
      tail = (tail + d.toString()).slice(-4000);
    };
    child.stdout.on("data", onOut);
    child.stderr.on("data", onOut);
    child.on("error", (e) => reject(new DenError("build_failed", `${path}: ${e.message}`)));
    child.on("exit", (code) => {
      if (code === 0) resolve();
      else reject(new DenError("build_failed", `${path.split("/").pop()} failed (exit ${code}):\n${tail.trim()}`));
    });
  });
}

/**
 * Builds (or finds in the cache) the kernel, initramfs and root disk of a recipe.
 * Each layer is cached under `cacheDir` by the hash of its inputs, so changing the
 * agent rebuilds only the disk and a warm rebuild takes a moment.
 */
export async function buildImage(recipe: Recipe, opts: BuildOptions): Promise<ImageArtifacts> {
  const root = join(opts.cacheDir, "images");
  await mkdir(root, { recursive: true });

  const kernelKey = hash("kernel", recipe.kernelPackage, fileHash(script("build-kernel.sh")));
  const kernelDir = await cachedStep(join(root, `kernel-${kernelKey}`), "guest kernel", opts, (out) =>
    runScript(script("build-kernel.sh"), { KERNEL_PACKAGE: recipe.kernelPackage, OUT: out }));

  const initrdKey = hash("initrd", kernelKey, fileHash(script("build-initrd.sh")), fileHash("/bin/busybox"));
  const initrdDir = await cachedStep(join(root, `initrd-${initrdKey}`), "initramfs", opts, (out) =>
    runScript(script("build-initrd.sh"), { KERNEL_DIR: kernelDir, OUT: out }));

  const { rootfsKey, rootfsDir, baseDir } = await buildRootfs(root, recipe, opts);

  const agentKey = agentSourceKey();
  const agentDir = dirname(await buildAgent(opts));

  const files = Object.entries(recipe.files ?? {}).sort(([a], [b]) => a.localeCompare(b));
  const filesKey = hash("files", ...files.flatMap(([to, from]) => [to, fileHash(join(IMAGES_DIR, from))]));
  const diskKey = hash("disk", rootfsKey, agentKey, String(recipe.diskMb), fileHash(script("build-disk.sh")), ...(files.length ? [filesKey] : []));
  const diskDir = await cachedStep(join(root, `disk-${diskKey}`), "root disk", opts, async (out) => {
    // Den's own files for the template (a service it runs), staged as a tree the script copies over the root.
    const extra = join(out, "extra");
    for (const [to, from] of files) {
      await mkdir(dirname(join(extra, to)), { recursive: true });
      await copyFile(join(IMAGES_DIR, from), join(extra, to));
    }
    await runScript(script("build-disk.sh"), { ROOTFS_DIR: rootfsDir, AGENT: join(agentDir, "den-agent"), DISK_MB: String(recipe.diskMb), OUT: out, ...(files.length ? { EXTRA_DIR: extra } : {}) });
    await rm(extra, { recursive: true, force: true });
  });

  await pruneCache(root, new Set([kernelDir, initrdDir, rootfsDir, agentDir, diskDir, ...(baseDir ? [baseDir] : [])]));
  const kernelVersion = (await readFile(join(kernelDir, "kernel-version"), "utf8")).trim();
  return {
    key: hash("image", kernelKey, initrdKey, diskKey),
    kernel: join(kernelDir, "vmlinux"),
    initrd: join(initrdDir, "initrd.cpio"),
    disk: join(diskDir, "rootfs.qcow2"),
    kernelVersion,
  };
}

/**
 * The recipe's root filesystem: debootstrapped, or (a recipe `from` another) that recipe's
 * tree plus the recipe's packages installed by apt in a chroot. Cached by the hash of its inputs.
 */
async function buildRootfs(root: string, recipe: Recipe, opts: BuildOptions): Promise<{ rootfsKey: string; rootfsDir: string; baseDir?: string }> {
  const debootstrap = async (r: Recipe, what: string) => {
    const key = hash("rootfs", r.suite, r.packages.join(","), fileHash(script("build-rootfs.sh")));
    const dir = await cachedStep(join(root, `rootfs-${key}`), what, opts, (out) =>
      runScript(script("build-rootfs.sh"), { SUITE: r.suite, MIRROR: aptMirror(), PACKAGES: r.packages.join(","), OUT: out }));
    return { key, dir };
  };
  if (!recipe.from) {
    const { key, dir } = await debootstrap(recipe, "root filesystem (debootstrap)");
    return { rootfsKey: key, rootfsDir: dir };
  }
  const base = loadRecipe(recipe.from);
  if (base.from) throw new DenError("invalid_argument", `recipe ${recipe.name}: its base ${base.name} has a base of its own (one level only)`);
  if (base.suite !== recipe.suite) throw new DenError("invalid_argument", `recipe ${recipe.name}: suite ${recipe.suite} differs from its base's (${base.suite})`);
  const b = await debootstrap(base, `root filesystem of ${base.name} (debootstrap)`);
  const key = hash("rootfs-extend", b.key, recipe.packages.join(","), fileHash(script("build-rootfs-extend.sh")));
  const dir = await cachedStep(join(root, `rootfs-${key}`), `root filesystem (${base.name} + apt install)`, opts, (out) =>
    runScript(script("build-rootfs-extend.sh"), { BASE_DIR: b.dir, SUITE: recipe.suite, MIRROR: aptMirror(), PACKAGES: recipe.packages.join(","), OUT: out }));
  return { rootfsKey: key, rootfsDir: dir, baseDir: b.dir };
}

/** The guest agent's static binary (built once per source change, cached): every template's init. */
export async function buildAgent(opts: BuildOptions): Promise<string> {
  const root = join(opts.cacheDir, "images");
  await mkdir(root, { recursive: true });
  const dir = await cachedStep(join(root, `agent-${agentSourceKey()}`), "guest agent", opts, (out) =>
    runScript(join(AGENT_DIR, "build.sh"), { OUT: join(out, "den-agent") }));
  return join(dir, "den-agent");
}

/** Layers unused for this long are removed from the cache (other recipes keep theirs fresh by using them). */
const CACHE_MAX_AGE_MS = 7 * 24 * 3600 * 1000;

/** Drops stale layers and abandoned temp dirs, so rebuilding after each change doesn't fill the disk. */
async function pruneCache(root: string, inUse: Set<string>): Promise<void> {
  const now = Date.now();
  for (const name of readdirSync(root)) {
    const path = join(root, name);
    if (inUse.has(path)) {
      await utimes(path, new Date(), new Date());
      continue;
    }
    const tmpPid = /\.tmp-(\d+)$/.exec(name)?.[1];
    if (tmpPid) {
      if (!pidAlive(Number(tmpPid))) await rm(path, { recursive: true, force: true });
      continue;
    }
    const st = await stat(path).catch(() => undefined);
    if (st && now - st.mtimeMs > CACHE_MAX_AGE_MS) await rm(path, { recursive: true, force: true });
  }
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Debian packages the build needs on the host. */
export const HOST_PACKAGES = ["qemu-system-x86", "qemu-utils", "debootstrap", "busybox-static", "e2fsprogs", "lz4", "cpio", "gcc", "libc6-dev"];

export async function missingHostTools(): Promise<string[]> {
  const tools: Record<string, string> = {
    "qemu-system-x86_64": "qemu-system-x86", "qemu-img": "qemu-utils", debootstrap: "debootstrap",
    "mkfs.ext4": "e2fsprogs", lz4: "lz4", cpio: "cpio", gcc: "gcc",
  };
  const missing: string[] = [];
  for (const [tool, pkg] of Object.entries(tools)) {
    try {
      await execFileP("sh", ["-c", `command -v ${tool}`]);
    } catch {
      missing.push(pkg);
    }
  }
  if (!existsSync("/bin/busybox")) missing.push("busybox-static");
  return missing;
}
