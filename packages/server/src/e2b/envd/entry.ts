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

export function entryInfo(path: string, s: FileStat, metadata?: Record<string, string>): e2b.EntryInfo {
  return {
    name: path === "/" ? "/" : posix.basename(path),
    type: TYPES[s.type],
    path,
    size: String(s.size),
    mode: s.mode & 0o777,
    permissions: permissions(s.type, s.mode),
    owner: idName(s.uid),
    group: idName(s.gid),
    modifiedTime: new Date(s.mtime_ms).toISOString(),
    ...(s.target !== undefined ? { symlinkTarget: s.target } : {}),
    ...(metadata ? { metadata } : {}),
  };
}

/** Stat plus metadata (files only: that is where uploads put it). */
export async function statEntry(guest: HostGuest, state: SandboxState, path: string): Promise<e2b.EntryInfo> {
  const s = await withDeadline(guest.files.stat(path), `stat of ${path}`);
  return entryInfo(path, s, s.type === "file" ? await metadataOf(guest, state, path) : undefined);
}
