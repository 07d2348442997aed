import { constants } from "node:fs";
import { chmod, chown, lstat, mkdir, open, readFile, readlink, unlink } from "node:fs/promises";
import { join, posix } from "node:path";
import { DenError } from "@den/protocol";

/**
 * Den's changes to an image's unpacked root, made on the host before it becomes a disk.
 * The tree is the image's (untrusted): every path is resolved as the guest would see it,
 * symlinks included, but never outside the root (resolveIn), and files are opened with
 * O_NOFOLLOW, so a hostile `/etc -> /host/etc` link cannot make Den write a host file.
 */

const MAX_LINK_HOPS = 40;
/** Account files are read whole: a hostile one is refused above this. */
const MAX_ACCOUNT_FILE_BYTES = 4 * 1024 * 1024;

/** The host path of `path` inside `root`, symlinks followed within the root (the last one only if `followLast`). */
export async function resolveIn(root: string, path: string, followLast = true, hops = { n: 0 }): Promise<string> {
  const parts = path.split("/").filter((p) => p && p !== ".");
  let cur = "";
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i]!;
    if (part === "..") {
      cur = cur.includes("/") ? cur.slice(0, cur.lastIndexOf("/")) : "";
      continue;
    }
    const next = cur ? `${cur}/${part}` : part;
    const st = await lstat(join(root, next)).catch(() => undefined);
    if (st?.isSymbolicLink() && (i < parts.length - 1 || followLast)) {
      if (++hops.n > MAX_LINK_HOPS) throw new DenError("image_invalid", `too many symlinks resolving ${path} in the image`);
      const target = await readlink(join(root, next));
      // posix.join from "/" clamps any ".." at the root: the guest's view, never above it.
      const rest = parts.slice(i + 1).join("/");
      return resolveIn(root, posix.join("/", target.startsWith("/") ? "" : cur, target, rest), followLast, hops);
    }
    cur = next;
  }
  return join(root, cur);
}

/** mkdir -p inside the root; an existing non-directory on the way is refused. */
export async function mkdirIn(root: string, path: string, mode = 0o755): Promise<string> {
  let at = "";
  for (const part of path.split("/").filter(Boolean)) {
    at = `${at}/${part}`;
    const host = await resolveIn(root, at);
    const st = await lstat(host).catch(() => undefined);
    if (!st) {
      // A link on the way may point where nothing is yet: make that path (inside the root) instead.
      const resolved = host.slice(root.length) || "/";
      if (resolved !== at) await mkdirIn(root, resolved, mode);
      else {
        await mkdir(host, { mode });
        await chmod(host, mode);
      }
    } else if (!st.isDirectory()) throw new DenError("image_invalid", `${at} in the image is not a directory, and Den needs one there`);
  }
  return resolveIn(root, path);
}

/** Writes a file inside the root (replacing a file or symlink there), owned by root unless given. */
export async function writeIn(root: string, path: string, data: string | Buffer, mode: number, owner?: { uid: number; gid: number }): Promise<void> {
  await mkdirIn(root, posix.dirname(path));
  const host = await resolveIn(root, path, false);
  const st = await lstat(host).catch(() => undefined);
  if (st?.isDirectory()) throw new DenError("image_invalid", `${path} in the image is a directory, and Den needs a file there`);
  if (st && !st.isFile()) await unlink(host);
  const fh = await open(host, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW, mode);
  try {
    await fh.writeFile(data);
    await fh.chmod(mode);
    await fh.chown(owner?.uid ?? 0, owner?.gid ?? 0);
  } finally {
    await fh.close();
  }
}

/** A file of the image, or undefined if it has none (bounded; symlinks followed inside the root). */
export async function readIn(root: string, path: string): Promise<string | undefined> {
  const host = await resolveIn(root, path);
  const st = await lstat(host).catch(() => undefined);
  if (!st?.isFile()) return undefined;
  if (st.size > MAX_ACCOUNT_FILE_BYTES) throw new DenError("image_invalid", `${path} in the image is larger than ${MAX_ACCOUNT_FILE_BYTES} bytes`);
  const fh = await open(host, constants.O_RDONLY | constants.O_NOFOLLOW);
  try {
    return (await fh.readFile()).toString("utf8");
  } finally {
    await fh.close();
  }
}

async function exists(root: string, path: string): Promise<boolean> {
  return (await lstat(await resolveIn(root, path)).catch(() => undefined)) !== undefined;
}

interface Account {
  name: string;
  uid: number;
  gid: number;
  home: string;
}

function parsePasswd(text: string): Account[] {
  return text.split("\n").flatMap((l) => {
    const f = l.split(":");
    return f.length >= 7 ? [{ name: f[0]!, uid: Number(f[2]), gid: Number(f[3]), home: f[5]! }] : [];
  });
}

function idsIn(text: string, field: number): Set<number> {
  return new Set(text.split("\n").map((l) => Number(l.split(":")[field])).filter((n) => Number.isInteger(n)));
}

/** The first free id at or above `from`. */
function freeId(used: Set<number>, from: number): number {
  let id = from;
  while (used.has(id)) id++;
  return id;
}

/**
 * The account E2B-style agents expect, as E2B's builds add it: `user` (uid 1000 where free),
 * home /home/user, its own group, passwordless sudo where sudo exists. An image that has a
 * `user` keeps its own. Returns the account.
 */
export async function ensureUserAccount(root: string): Promise<Account> {
  const passwd = (await readIn(root, "/etc/passwd")) ?? "root:x:0:0:root:/root:/bin/sh\n";
  const group = (await readIn(root, "/etc/group")) ?? "root:x:0:\n";
  const had = parsePasswd(passwd).find((a) => a.name === "user");
  if (had) return had;
  const uid = freeId(idsIn(passwd, 2), 1000);
  const groups = group.split("\n").map((l) => l.split(":"));
  const own = groups.find((g) => g[0] === "user");
  const gid = own ? Number(own[2]) : freeId(idsIn(group, 2), uid);
  const shell = (await exists(root, "/bin/bash")) ? "/bin/bash" : (await exists(root, "/bin/sh")) ? "/bin/sh" : "/sbin/nologin";
  const nl = (s: string) => (s === "" || s.endsWith("\n") ? s : `${s}\n`);
  await writeIn(root, "/etc/passwd", `${nl(passwd)}user:x:${uid}:${gid}::/home/user:${shell}\n`, 0o644);
  if (!own) await writeIn(root, "/etc/group", `${nl(group)}user:x:${gid}:\n`, 0o644);
  const shadow = await readIn(root, "/etc/shadow");
  if (shadow !== undefined) await writeIn(root, "/etc/shadow", `${nl(shadow)}user:!:${Math.floor(Date.now() / 86_400_000)}:0:99999:7:::\n`, 0o640);
  const home = await mkdirIn(root, "/home/user");
  await chown(home, uid, gid);
  if ((await exists(root, "/usr/bin/sudo")) && (await exists(root, "/etc/sudoers.d"))) {
    await writeIn(root, "/etc/sudoers.d/user", "user ALL=(ALL:ALL) NOPASSWD: ALL\n", 0o440);
  }
  return { name: "user", uid, gid, home: "/home/user" };
}

/**
 * Makes an unpacked image bootable by Den: Den's guest agent as init (the image's own init,
 * kernel and entrypoint are not used to boot), the directories it mounts on, a hostname,
 * and the `user` account.
 */
export async function prepareRootfs(root: string, agentBinary: string): Promise<{ user: Account; hasShell: boolean }> {
  for (const d of ["/proc", "/sys", "/dev", "/run", "/etc", "/root"]) await mkdirIn(root, d, d === "/root" ? 0o700 : 0o755);
  const tmp = await mkdirIn(root, "/tmp");
  await chmod(tmp, 0o1777);
  await writeIn(root, "/usr/local/sbin/den-agent", await readFile(agentBinary), 0o755);
  await writeIn(root, "/etc/hostname", "den\n", 0o644);
  if (!(await exists(root, "/etc/hosts"))) await writeIn(root, "/etc/hosts", "127.0.0.1 localhost\n127.0.1.1 den\n::1 localhost\n", 0o644);
  const user = await ensureUserAccount(root);
  return { user, hasShell: (await exists(root, "/bin/sh")) || (await exists(root, "/bin/bash")) };
}
