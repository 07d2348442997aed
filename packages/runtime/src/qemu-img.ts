import { spawn } from "node:child_process";
import { closeSync, fchmodSync, fchownSync, fstatSync, openSync, rmSync, unlinkSync, type Stats } from "node:fs";
import { DenError } from "@den/protocol";
import { TOOL_GID, toolIdentity } from "./jail/identity.js";

/**
 * qemu-img run unprivileged on images Den opened: a uid of its own for each run (no
 * capabilities, no groups but TOOL_GID), every image handed in as an inherited descriptor
 * and named `/proc/self/fd/N` (callers state whole graphs in `json:` names, so it opens no
 * path a header holds; image-tools.ts). A file it writes is its uid's for the run only; one
 * it reads and others may not is made readable by TOOL_GID for the run (counted: runs that
 * share an input undo it once the last is done). Den as another user than root runs it as is.
 */

/** How a run uses a file: reads it, writes it (an image that exists), or creates it (a new file at that path). */
export type ImageAccess = "read" | "write" | "create";

/** What is kept of its output (the errors quoted are short). */
const MAX_OUTPUT = 64 * 1024;

/** Read grants to TOOL_GID in force, by inode: what to put back once no run needs it. */
const grants = new Map<string, { users: number; gid: number; mode: number }>();

interface Opened {
  path: string;
  fd: number;
  access: ImageAccess;
  st: Stats;
}

/**
 * Runs `qemu-img` with `args(name)`, where `name(path)` is a file's name inside the run (one
 * of `files`). Throws `qemu_error` with what it said on failure (and removes the files it was to create).
 */
export async function runQemuImg(files: ReadonlyArray<readonly [string, ImageAccess]>, args: (name: (path: string) => string) => string[]): Promise<string> {
  const opened: Opened[] = [];
  const privileged = process.getuid?.() === 0;
  const id = toolIdentity();
  let ok = false;
  try {
    for (const [path, access] of files) {
      if (opened.some((o) => o.path === path)) continue;
      // (A file to create replaces what a killed run left there; `wx` follows no link planted in its place.)
      if (access === "create") rmSync(path, { force: true });
      const fd = openSync(path, access === "read" ? "r" : access === "write" ? "r+" : "wx", 0o644);
      opened.push({ path, fd, access, st: fstatSync(fd) });
    }
    if (privileged) for (const o of opened) grant(o, id);
    const name = (path: string) => {
      const i = opened.findIndex((o) => o.path === path);
      if (i < 0) throw new Error(`qemu-img: ${path} was not handed in`);
      return `/proc/self/fd/${3 + i}`;
    };
    const argv = ["qemu-img", ...args(name)];
    const cmd = privileged ? ["setpriv", `--reuid=${id.uid}`, `--regid=${id.gid}`, "--clear-groups", "--inh-caps=-all", "--no-new-privs", "--", ...argv] : argv;
    const out = await run(cmd, opened.map((o) => o.fd));
    ok = true;
    return out;
  } finally {
    for (const o of opened) {
      if (privileged) revoke(o);
      closeSync(o.fd);
      if (!ok && o.access === "create") unlinkSync(o.path);
    }
  }
}

/** Gives the run's uid what it needs of a file: a file it writes, for itself; one it reads, readable. */
function grant(o: Opened, id: { uid: number; gid: number }): void {
  if (o.access !== "read") return fchownSync(o.fd, id.uid, id.gid);
  if (o.st.mode & 0o004) return;
  const key = `${o.st.dev}:${o.st.ino}`;
  const g = grants.get(key);
  if (g) return void g.users++;
  grants.set(key, { users: 1, gid: o.st.gid, mode: o.st.mode & 0o7777 });
  fchownSync(o.fd, o.st.uid, TOOL_GID);
  fchmodSync(o.fd, (o.st.mode & 0o7777) | 0o040);
}

/** Puts a file's owner, group and mode back as they were before the run (a read grant once its last run is done). */
function revoke(o: Opened): void {
  if (o.access !== "read") {
    fchownSync(o.fd, o.st.uid, o.st.gid);
    fchmodSync(o.fd, o.st.mode & 0o7777);
    return;
  }
  if (o.st.mode & 0o004) return;
  const key = `${o.st.dev}:${o.st.ino}`;
  const g = grants.get(key);
  if (!g || --g.users > 0) return;
  grants.delete(key);
  fchownSync(o.fd, o.st.uid, g.gid);
  fchmodSync(o.fd, g.mode);
}

/** Runs `cmd` with `fds` from fd 3 on; its stdout, or a qemu_error with its stderr. */
function run(cmd: string[], fds: number[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd[0]!, cmd.slice(1), { stdio: ["ignore", "pipe", "pipe", ...fds], env: { PATH: process.env.PATH ?? "/usr/bin:/bin" } });
    let out = "";
    let err = "";
    child.stdout!.on("data", (d: Buffer) => { if (out.length < MAX_OUTPUT) out += d.toString(); });
    child.stderr!.on("data", (d: Buffer) => { if (err.length < MAX_OUTPUT) err += d.toString(); });
    child.on("error", (e) => reject(new DenError("qemu_error", `cannot run ${cmd[0]}: ${e.message}`)));
    child.on("close", (code, signal) => {
      if (code === 0) return resolve(out);
      const sub = cmd[cmd.indexOf("qemu-img") + 1] ?? "";
      reject(new DenError("qemu_error", `qemu-img ${sub} failed (${signal ?? `exit ${code}`}): ${err.trim().slice(0, 2000)}`));
    });
  });
}
