/** EntryInfo as envd reports it, from the guest's stat and the file's `user.e2b.*` xattrs. */
import { posix } from "node:path";
import { DenError, type FileStat, type HostGuest, type e2b } from "@den/protocol";
import { withDeadline } from "./deadline.js";
import type { SandboxState } from "./state.js";

const XATTR_PREFIX = "user.e2b.";
const TYPES: Record<FileStat["type"], e2b.FileType> = { file: "FILE_TYPE_FILE", dir: "FILE_TYPE_DIRECTORY", symlink: "FILE_TYPE_SYMLINK", other: "FILE_TYPE_UNSPECIFIED" };
/** The names Den's templates give these ids; any other id is reported as its number. */
const NAMES: Record<number, string> = { 0: "root", 1000: "user" };

/** Go's `FileMode.String()` (what envd sends): type letters, then rwx for owner, group, other. */
export function permissions(type: FileStat["type"], mode: number): string {
  let head = type === "dir" ? "d" : type === "symlink" ? "L" : type === "other" ? "?" : "";
  if (mode & 0o4000) head += "u";
  if (mode & 0o2000) head += "g";
  if (mode & 0o1000) head += "t";
  let rwx = "";
  for (let i = 8; i >= 0; i--) rwx += mode & (1 << i) ? "rwx"[(8 - i) % 3] : "-";
  return (head || "-") + rwx;
}

export function idName(id: number): string {
  return NAMES[id] ?? String(id);
}

/** The guest has no xattr ops (an older agent, or the placeholder): metadata is simply absent. */
export function unsupported(e: unknown): boolean {
  return e instanceof DenError && (e.code === "unknown_op" || /not (yet )?implemented|unknown op/i.test(e.message));
}

/** A file's E2B metadata, or undefined when it has none or the guest cannot say. */
export async function metadataOf(guest: HostGuest, state: SandboxState, path: string): Promise<Record<string, string> | undefined> {
  if (state.noXattrs) return undefined;
  let attrs: Record<string, string>;
  try {
    attrs = await withDeadline(guest.files.getXattrs(path), `xattrs of ${path}`);
  } catch (e) {
    if (unsupported(e)) {
      state.noXattrs = true;
      return undefined;
    }
    // Gone since it was listed: no metadata to report.
    if (e instanceof DenError && e.code === "file_not_found") return undefined;
    throw e;
  }
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(attrs)) if (k.startsWith(XATTR_PREFIX)) out[k.slice(XATTR_PREFIX.length)] = v;
  return Object.keys(out).length ? out : undefined;
}

/** Where a symlink leads: the absolute path at the end of its chain and what is there (none: broken or a loop). */
export interface LinkEnd {
  path: string;
  stat?: FileStat;
}

/** Links one resolution follows before it calls the chain a loop (Go's EvalSymlinks: 255). */
const MAX_LINKS = 255;

/** A guest path as Go's `filepath.EvalSymlinks` gives it: every link on the way followed, relative targets against their link's directory. */
export type Resolved = { ok: true; path: string; stat: FileStat } | { ok: false; why: "missing" | "loop" };

/**
 * Resolves guest paths the way E2B's envd does (inside the VM, with EvalSymlinks), one
 * `lstat` per path component, each remembered for the resolver's life (one request), so a
 * listing's links share their parents' lookups.
 */
export class LinkResolver {
  private readonly seen = new Map<string, Promise<FileStat | undefined>>();

  constructor(private readonly guest: HostGuest) {}

  /** The guest's lstat of `p`; undefined when it is not there (or cannot be, like `file/x`). */
  lstat(p: string): Promise<FileStat | undefined> {
    let s = this.seen.get(p);
    if (!s) {
      s = withDeadline(this.guest.files.stat(p), `stat of ${p}`).catch((e: unknown) => {
        // Not there, not a directory on the way, no permission: nothing to resolve to.
        if (e instanceof DenError && e.status < 500 && e.status !== 408) return undefined;
        throw e;
      });
      this.seen.set(p, s);
    }
    return s;
  }

  async resolve(path: string): Promise<Resolved> {
    let todo = path.split("/").filter(Boolean);
    let done = "/";
    let stat: FileStat | undefined = await this.lstat("/");
    let links = 0;
    while (todo.length) {
      const name = todo.shift()!;
      if (name === ".") continue;
      if (name === "..") {
        done = posix.dirname(done);
        stat = await this.lstat(done);
        continue;
      }
      const next = posix.join(done, name);
      const s = await this.lstat(next);
      if (!s) return { ok: false, why: "missing" };
      if (s.type === "symlink") {
        if (++links > MAX_LINKS || s.target === undefined) return { ok: false, why: s.target === undefined ? "missing" : "loop" };
        todo = [...s.target.split("/").filter(Boolean), ...todo];
        if (s.target.startsWith("/")) done = "/";
        continue;
      }
      if (todo.length && s.type !== "dir") return { ok: false, why: "missing" };
      done = next;
      stat = s;
    }
    return stat ? { ok: true, path: done, stat } : { ok: false, why: "missing" };
  }

  /** A link's end as envd reports it: resolved, or (broken, a loop) the link's own path. */
  async linkEnd(path: string): Promise<LinkEnd> {
    const r = await this.resolve(path);
    return r.ok ? { path: r.path, stat: r.stat } : { path };
  }
}

/**
 * EntryInfo from an `lstat`. A symlink is reported as E2B's envd reports it: the type and
 * permission bits of what it leads to (FILE_TYPE_UNSPECIFIED and 0 when that is nothing),
 * its own `permissions` (`Lrwxrwxrwx`), size and times, and `symlinkTarget` the absolute
 * path at the end of its chain (a broken link: its own path).
 */
export function entryInfo(path: string, s: FileStat, metadata?: Record<string, string>, link?: LinkEnd): e2b.EntryInfo {
  const isLink = s.type === "symlink";
  const type: e2b.FileType = isLink ? (link?.stat ? TYPES[link.stat.type] : "FILE_TYPE_UNSPECIFIED") : TYPES[s.type];
  return {
    name: path === "/" ? "/" : posix.basename(path),
    type,
    path,
    size: String(s.size),
    mode: isLink ? (link?.stat ? link.stat.mode & 0o777 : 0) : s.mode & 0o777,
    permissions: permissions(s.type, s.mode),
    owner: idName(s.uid),
    group: idName(s.gid),
    modifiedTime: new Date(s.mtime_ms).toISOString(),
    ...(isLink ? { symlinkTarget: link?.path ?? path } : {}),
    ...(metadata ? { metadata } : {}),
  };
}

/** An entry from its `lstat`: metadata for files (that is where uploads put it), the end of a symlink's chain. */
export async function entryOf(guest: HostGuest, state: SandboxState, path: string, s: FileStat, links: LinkResolver): Promise<e2b.EntryInfo> {
  if (s.type === "symlink") return entryInfo(path, s, undefined, await links.linkEnd(path));
  return entryInfo(path, s, s.type === "file" ? await metadataOf(guest, state, path) : undefined);
}

/** Stat plus metadata (files only: that is where uploads put it); a symlink's info names where it leads. */
export async function statEntry(guest: HostGuest, state: SandboxState, path: string): Promise<e2b.EntryInfo> {
  const s = await withDeadline(guest.files.stat(path), `stat of ${path}`);
  return entryOf(guest, state, path, s, new LinkResolver(guest));
}
