import { spawn } from "node:child_process";
import { createReadStream, createWriteStream, existsSync, statSync } from "node:fs";
import { mkdir, rename } from "node:fs/promises";
import { basename, dirname, join, posix, resolve } from "node:path";
import { Readable, Transform, Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { randomBytes } from "node:crypto";
import type { Command } from "commander";
import { Sandbox } from "@den/sdk";
import { x as untar } from "tar";
import { Progress, UsageError } from "../output.js";

const REMOTE = /^(sbx_[a-z2-7]{16}):(\/.*)$/;

/** Counts bytes into a progress display as they pass. */
function counting(p: Progress): Transform {
  return new Transform({
    transform(chunk: Buffer, _enc, cb) {
      p.add(chunk.length);
      cb(null, chunk);
    },
  });
}

const shq = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/** Runs local tar; resolves when it exits 0. */
function tar(args: string[], stdio: { stdin?: "pipe"; stdout?: "pipe" }) {
  const child = spawn("tar", args, { stdio: [stdio.stdin ?? "ignore", stdio.stdout ?? "ignore", "pipe"] });
  let err = "";
  child.stderr!.on("data", (d: Buffer) => (err = (err + d.toString()).slice(-2000)));
  const done = new Promise<void>((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code) => (code === 0 ? resolve() : reject(new UsageError(`tar failed: ${err.trim() || `exit ${code}`}`))));
  });
  return { child, done };
}

/** What a sandbox's archive may put here: plain files, directories and symlinks (never followed on the way in). */
const SAFE_ENTRIES = new Set(["File", "OldFile", "ContiguousFile", "Directory", "SymbolicLink"]);

/**
 * Unpacks a tar the sandbox made (its guest is untrusted) into `target`: no owners, no
 * setuid, setgid or sticky bits, no device nodes, FIFOs or hard links, nothing outside
 * `target` (absolute and `..` paths are refused, and node-tar never writes through a
 * symlink). What is left out is named in `skipped`.
 */
function safeUntar(target: string, skipped: string[]): Writable {
  return untar({
    cwd: target, preserveOwner: false, preservePaths: false, strict: false,
    filter: (path, entry) => {
      const type = "type" in entry ? String(entry.type) : "File";
      if (!SAFE_ENTRIES.has(type)) {
        skipped.push(`${path} (${type})`);
        return false;
      }
      if ("mode" in entry && typeof entry.mode === "number") (entry as { mode: number }).mode = entry.mode & 0o777;
      return true;
    },
    onwarn: (_code, message) => skipped.push(message),
  }) as unknown as Writable;
}

async function remoteRun(sbx: Sandbox, cmd: string): Promise<void> {
  const r = await sbx.exec(cmd, { timeoutSeconds: 3600 });
  if (r.exitCode !== 0) throw new UsageError(`in the sandbox: ${(r.stderr || r.stdout).trim().slice(0, 500) || `exit ${r.exitCode}`}`);
}

/** A local file or directory into the sandbox (directories as a tar stream, unpacked there). */
async function upload(local: string, sbx: Sandbox, remote: string): Promise<void> {
  if (!existsSync(local)) throw new UsageError(`no such file or directory: ${local}`);
  // Like cp: into an existing directory, the source keeps its name.
  const into = await sbx.filesystem.stat(remote).then((s) => s.type === "dir", () => false);
  const target = into ? posix.join(remote, basename(resolve(local))) : remote;
  const st = statSync(local);
  if (!st.isDirectory()) {
    const p = new Progress(`${local} -> ${sbx.id}:${target}`, st.size);
    await sbx.filesystem.write(target, Readable.toWeb(createReadStream(local).pipe(counting(p))) as ReadableStream<Uint8Array>);
    p.finish();
    return;
  }
  const tmp = `/tmp/.den-cp-${randomBytes(6).toString("hex")}.tar`;
  const p = new Progress(`${local}/ -> ${sbx.id}:${target}/`, null);
  const t = tar(["-C", local, "-cf", "-", "."], { stdout: "pipe" });
  try {
    await Promise.all([sbx.filesystem.write(tmp, Readable.toWeb(t.child.stdout!.pipe(counting(p))) as ReadableStream<Uint8Array>), t.done]);
    await remoteRun(sbx, `mkdir -p ${shq(target)} && tar -xf ${tmp} -C ${shq(target)}; rc=$?; rm -f ${tmp}; exit $rc`);
  } finally {
    await sbx.filesystem.remove(tmp).catch(() => undefined);
  }
  p.finish();
}

/** A file or directory of the sandbox to this machine (a directory is packed there, unpacked here). */
async function download(sbx: Sandbox, remote: string, local: string): Promise<void> {
  const st = await sbx.filesystem.stat(remote);
  const into = existsSync(local) && statSync(local).isDirectory();
  const target = into ? join(local, posix.basename(remote)) : local;
  if (st.type !== "dir") {
    const p = new Progress(`${sbx.id}:${remote} -> ${target}`, st.size);
    // Written beside the target and renamed: an interrupted copy never leaves half a file.
    const part = `${target}.den-part-${randomBytes(4).toString("hex")}`;
    await pipeline(Readable.fromWeb((await sbx.filesystem.readStream(remote)) as import("node:stream/web").ReadableStream<Uint8Array>), counting(p), createWriteStream(part));
    await rename(part, target);
    p.finish();
    return;
  }
  const tmp = `/tmp/.den-cp-${randomBytes(6).toString("hex")}.tar`;
  try {
    await remoteRun(sbx, `tar -cf ${tmp} -C ${shq(remote)} .`);
    const size = (await sbx.filesystem.stat(tmp)).size;
    const p = new Progress(`${sbx.id}:${remote}/ -> ${target}/`, size);
    await mkdir(target, { recursive: true });
    const skipped: string[] = [];
    await pipeline(Readable.fromWeb((await sbx.filesystem.readStream(tmp)) as import("node:stream/web").ReadableStream<Uint8Array>), counting(p), safeUntar(target, skipped));
    p.finish();
    if (skipped.length) process.stderr.write(`den cp: left out ${skipped.length} entr${skipped.length === 1 ? "y" : "ies"} of the sandbox's archive:\n  ${skipped.slice(0, 20).join("\n  ")}\n`);
  } finally {
    await sbx.filesystem.remove(tmp).catch(() => undefined);
  }
}

/** `den cp SRC DST`: files and whole directories, either way; one side is `ID:/path`. */
export function registerCp(program: Command): void {
  program
    .command("cp")
    .description("copy files or directories between this machine and a sandbox (ID:/path on one side)")
    .argument("<src>", "a local path or ID:/absolute/path")
    .argument("<dst>", "a local path or ID:/absolute/path")
    .addHelpText("after", "\nExamples:\n  den cp ./src sbx_...:/work        # ./src into /work (as /work/src if /work exists)\n  den cp sbx_...:/work/out.txt .    # a file from the sandbox\n")
    .action(async (src: string, dst: string) => {
      const s = REMOTE.exec(src);
      const d = REMOTE.exec(dst);
      if (!!s === !!d) throw new UsageError("den cp wants exactly one side as ID:/absolute/path");
      if (s) {
        const sbx = await Sandbox.connect(s[1]!);
        await mkdir(dirname(resolve(dst)), { recursive: true });
        await download(sbx, s[2]!, dst);
      } else {
        const sbx = await Sandbox.connect(d![1]!);
        await upload(src, sbx, d![2]!);
      }
    });
}
