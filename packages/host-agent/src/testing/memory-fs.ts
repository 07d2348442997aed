/**
 * The file tree of an in-memory guest: its root filesystem and the volumes mounted in it,
 * with the guest agent's errors (its errno mapping: `file_not_found`, `not_a_directory`,
 * ...) and a filesystem's bounds (a disk or volume that fills is `disk_full`).
 */
import { DenError, type DirEntry, type ErrorCode, type FileStat } from "@den/protocol";

interface Meta {
  mode: number;
  uid: number;
  gid: number;
  mtimeMs: number;
  xattrs?: Record<string, string>;
}
export interface FileNode extends Meta {
  type: "file";
  data: Buffer;
}
export interface DirNode extends Meta {
  type: "dir";
  entries: Map<string, FsNode>;
}
export type FsNode = FileNode | DirNode;

/**
 * What a filesystem's owner is told of it (the in-memory host keeps its state on disk):
 * `room` before it takes `grow` more bytes (it may refuse, throwing), `changed` after
 * anything in it changed.
 */
export interface FsWatch {
  room(grow: number, path: string): void;
  changed(): void;
}

/** A filesystem: a tree and the bytes it may hold (a disk's or a volume's size). */
export interface Filesystem {
  root: DirNode;
  limitBytes: number;
  watch?: FsWatch;
}

export interface Owner {
  uid: number;
  gid: number;
}

/** What the guest's libc says for each code (the shell's messages use it too). */
export const STRERROR: Partial<Record<ErrorCode, string>> = {
  file_not_found: "No such file or directory", not_a_directory: "Not a directory", is_a_directory: "Is a directory",
  already_exists: "File exists", not_empty: "Directory not empty", permission_denied: "Read-only file system",
  invalid_argument: "Invalid argument", io_error: "Device or resource busy", disk_full: "No space left on device",
};

/** The guest agent's error for `path` (a full disk as the runtime words it). */
export function fsError(code: ErrorCode, path: string): DenError {
  if (code === "disk_full") return new DenError("disk_full", `the sandbox's disk is full: ${path}: ${STRERROR.disk_full}`);
  return new DenError(code, `${path}: ${STRERROR[code] ?? code}`);
}

/** The most entries a listing returns (the guest agent's LIST_MAX). */
const LIST_MAX = 10_000;
const XATTR_NAME = /^user\.[^\0]{1,250}$/;

export function dir(now: number, owner: Owner = { uid: 0, gid: 0 }, mode = 0o755): DirNode {
  return { type: "dir", entries: new Map(), mode, ...owner, mtimeMs: now };
}

/** An absolute guest path as its components (`.` and `..` resolved as written). */
export function components(path: string, what = "path"): string[] {
  if (typeof path !== "string" || !path.startsWith("/")) throw new DenError("invalid_argument", `${what} must be an absolute guest path, got ${JSON.stringify(path)}`);
  if (path.includes("\0")) throw new DenError("invalid_argument", `${what} contains a NUL byte`);
  if (Buffer.byteLength(path) > 4096) throw new DenError("invalid_argument", `${what} is longer than 4096 bytes`);
  const out: string[] = [];
  for (const c of path.split("/")) {
    if (c === "" || c === ".") continue;
    if (c === "..") out.pop();
    else out.push(c);
  }
  return out;
}

function usedBytes(node: FsNode): number {
  if (node.type === "file") return node.data.length;
  let n = 0;
  for (const c of node.entries.values()) n += usedBytes(c);
  return n;
}

export function cloneNode<N extends FsNode>(node: N): N {
  const xattrs = node.xattrs ? { xattrs: { ...node.xattrs } } : {};
  if (node.type === "file") return { ...node, ...xattrs, data: Buffer.from(node.data) };
  return { ...node, ...xattrs, entries: new Map([...node.entries].map(([k, v]) => [k, cloneNode(v)])) };
}

/** Where a path leads: its filesystem, its parent directory and name, and the node if there is one. */
interface Located {
  fs: Filesystem & { readOnly: boolean };
  parent: DirNode | undefined;
  name: string;
  node: FsNode | undefined;
  /** It is a mount point (the root of a mounted volume). */
  mountPoint: boolean;
}

/** A guest's files: its root filesystem, and volumes mounted at paths in it. */
export class MemoryFs {
  private readonly mounts = new Map<string, Filesystem & { readOnly: boolean }>();

  constructor(readonly rootFs: Filesystem, private readonly now: () => number) {}

  /** Puts `fs` at `path` (made if missing), as the guest mounts a volume. */
  mount(path: string, fs: Filesystem, readOnly: boolean): void {
    this.mkdir(path, { parents: true, owner: { uid: 0, gid: 0 }, mode: 0o755 });
    this.mounts.set("/" + components(path).join("/"), { ...fs, readOnly });
  }

  unmountAll(): void {
    this.mounts.clear();
  }

  private locate(path: string): Located {
    const parts = components(path);
    let fs = { ...this.rootFs, readOnly: false };
    let cur: DirNode = fs.root;
    let at = "";
    if (!parts.length) return { fs, parent: undefined, name: "", node: cur, mountPoint: false };
    for (const [i, name] of parts.entries()) {
      at += "/" + name;
      const mounted = this.mounts.get(at);
      const next: FsNode | undefined = mounted ? mounted.root : cur.entries.get(name);
      if (i === parts.length - 1) return { fs, parent: cur, name, node: next, mountPoint: !!mounted };
      if (!next) throw fsError("file_not_found", path);
      if (next.type !== "dir") throw fsError("not_a_directory", path);
      if (mounted) fs = mounted;
      cur = next;
    }
    throw new Error("unreachable");
  }

  private existing(path: string): FsNode {
    const l = this.locate(path);
    if (!l.node) throw fsError("file_not_found", path);
    return l.node;
  }

  private writable(l: Located, path: string): DirNode {
    if (!l.parent || !l.name) throw new DenError("invalid_argument", `bad file name: ${path}`);
    if (l.fs.readOnly) throw fsError("permission_denied", path);
    if (l.mountPoint) throw fsError("io_error", path);
    return l.parent;
  }

  /** Throws `disk_full` unless `fs` can hold `grow` more bytes. */
  private room(fs: Filesystem, grow: number, path: string): void {
    if (grow > 0 && usedBytes(fs.root) + grow > fs.limitBytes) throw fsError("disk_full", path);
    if (grow > 0) fs.watch?.room(grow, path);
  }

  stat(path: string): FileStat {
    const n = this.existing(path);
    return { type: n.type, size: n.type === "file" ? n.data.length : 4096, mode: n.mode, mtime_ms: n.mtimeMs, uid: n.uid, gid: n.gid };
  }

  /** The node at `path`, or undefined (the shell's `test`). */
  find(path: string): FsNode | undefined {
    try {
      return this.locate(path).node;
    } catch {
      return undefined;
    }
  }

  list(path: string): { entries: DirEntry[]; truncated: boolean } {
    const n = this.existing(path);
    if (n.type !== "dir") throw fsError("not_a_directory", path);
    const at = "/" + components(path).join("/");
    const entries: DirEntry[] = [];
    for (const [name, child] of n.entries) {
      if (entries.length >= LIST_MAX) return { entries, truncated: true };
      const shown = this.mounts.get(`${at === "/" ? "" : at}/${name}`)?.root ?? child;
      entries.push({ name, type: shown.type, size: shown.type === "file" ? shown.data.length : 4096, mode: shown.mode, mtime_ms: shown.mtimeMs });
    }
    return { entries, truncated: false };
  }

  read(path: string, offset = 0, length = -1): Buffer {
    const n = this.existing(path);
    if (n.type !== "file") throw fsError("is_a_directory", path);
    if (offset < 0) throw new DenError("invalid_argument", "bad offset or window");
    return n.data.subarray(offset, length < 0 ? undefined : offset + length);
  }

  /** Writes a whole file (a new file in place of any old one, as the agent's rename of a temp file). */
  write(path: string, data: Buffer, opts: { mode?: number; parents?: boolean; owner: Owner; append?: boolean }): number {
    components(path);
    const name = path.slice(path.lastIndexOf("/") + 1);
    if (!name || name === "." || name === "..") throw new DenError("invalid_argument", `bad file name: ${path}`);
    if (opts.parents) {
      try {
        this.mkdir(path.slice(0, path.lastIndexOf("/")) || "/", { parents: true, owner: opts.owner, mode: 0o755 });
      } catch {
        // the lookup below says why
      }
    }
    const l = this.locate(path);
    if (l.node?.type === "dir") throw fsError("is_a_directory", path);
    const parent = this.writable(l, path);
    const old = l.node;
    const content = opts.append && old ? Buffer.concat([old.data, data]) : data;
    this.room(l.fs, content.length - (old?.data.length ?? 0), path);
    const meta = opts.append && old ? { mode: old.mode, uid: old.uid, gid: old.gid, ...(old.xattrs ? { xattrs: old.xattrs } : {}) } : { mode: (opts.mode ?? 0o644) & 0o7777, ...opts.owner };
    parent.entries.set(l.name, { type: "file", data: content, ...meta, mtimeMs: this.now() });
    parent.mtimeMs = this.now();
    l.fs.watch?.changed();
    return data.length;
  }

  /** `touch`: an empty file if there is none, else a new mtime. */
  touch(path: string, owner: Owner): void {
    const n = this.find(path);
    if (!n) {
      this.write(path, Buffer.alloc(0), { owner });
      return;
    }
    n.mtimeMs = this.now();
    this.locate(path).fs.watch?.changed();
  }

  mkdir(path: string, opts: { parents?: boolean; mode?: number; owner: Owner }): void {
    const mode = (opts.mode ?? 0o755) & 0o7777;
    if (opts.parents) {
      const parts = components(path);
      for (let i = 1; i <= parts.length; i++) {
        const p = "/" + parts.slice(0, i).join("/");
        const n = this.locate(p).node;
        if (!n) this.mkdir(p, { mode, owner: opts.owner });
        else if (n.type !== "dir") throw fsError("already_exists", path);
      }
      return;
    }
    const l = this.locate(path);
    if (l.node) throw fsError("already_exists", path);
    const parent = this.writable(l, path);
    parent.entries.set(l.name, dir(this.now(), opts.owner, mode));
    parent.mtimeMs = this.now();
    l.fs.watch?.changed();
  }

  remove(path: string, opts: { recursive?: boolean } = {}): void {
    if (!components(path).length) throw new DenError("invalid_argument", "refusing to remove /");
    const l = this.locate(path);
    if (!l.node) throw fsError("file_not_found", path);
    const parent = this.writable(l, path);
    if (l.node.type === "dir" && l.node.entries.size && !opts.recursive) throw fsError("not_empty", path);
    parent.entries.delete(l.name);
    parent.mtimeMs = this.now();
    l.fs.watch?.changed();
  }

  rename(from: string, to: string): void {
    const src = this.locate(from);
    if (!src.node) throw fsError("file_not_found", from);
    const a = "/" + components(from).join("/");
    const b = "/" + components(to, "to").join("/");
    if (a === b) return;
    if (b.startsWith(a + "/")) throw fsError("invalid_argument", from);
    const dst = this.locate(to);
    const srcParent = this.writable(src, from);
    const dstParent = this.writable(dst, from);
    const node = src.node;
    if (dst.node?.type === "dir" && node.type !== "dir") throw fsError("is_a_directory", from);
    if (dst.node && dst.node.type !== "dir" && node.type === "dir") throw fsError("not_a_directory", from);
    if (dst.node?.type === "dir" && dst.node.entries.size) throw fsError("not_empty", from);
    // Across filesystems the agent copies, then removes the source.
    if (src.fs.root !== dst.fs.root) this.room(dst.fs, usedBytes(node) - (dst.node ? usedBytes(dst.node) : 0), from);
    srcParent.entries.delete(src.name);
    dstParent.entries.set(dst.name, src.fs.root === dst.fs.root ? node : cloneNode(node));
    srcParent.mtimeMs = dstParent.mtimeMs = this.now();
    src.fs.watch?.changed();
    if (dst.fs.root !== src.fs.root) dst.fs.watch?.changed();
  }

  /** chown and chmod: a new owner or mode on what is there. */
  setMeta(path: string, meta: { uid?: number; gid?: number; mode?: number }): void {
    const l = this.locate(path);
    if (!l.node) throw fsError("file_not_found", path);
    if (l.fs.readOnly) throw fsError("permission_denied", path);
    if (meta.uid !== undefined) l.node.uid = meta.uid;
    if (meta.gid !== undefined) l.node.gid = meta.gid;
    if (meta.mode !== undefined) l.node.mode = meta.mode & 0o7777;
    l.fs.watch?.changed();
  }

  setXattrs(path: string, attrs: Record<string, string>): void {
    if (!attrs || typeof attrs !== "object" || Array.isArray(attrs) || Object.values(attrs).some((v) => typeof v !== "string")) throw new DenError("invalid_argument", "attrs must be an object of strings");
    if (Object.keys(attrs).length > 128) throw new DenError("invalid_argument", "at most 128 attributes per call");
    for (const [k, v] of Object.entries(attrs)) {
      if (!XATTR_NAME.test(k) || Buffer.byteLength(k) > 255) throw new DenError("invalid_argument", `attribute names are user.<name> (at most 255 bytes): "${k.slice(0, 64)}"`);
      if (Buffer.byteLength(v) > 65536) throw new DenError("invalid_argument", `attribute ${k.slice(0, 64)}: the value must be a string of at most 65536 bytes`);
    }
    const l = this.locate(path);
    if (!l.node) throw fsError("file_not_found", path);
    if (l.fs.readOnly) throw fsError("permission_denied", path);
    l.node.xattrs = { ...l.node.xattrs, ...attrs };
    l.fs.watch?.changed();
  }

  getXattrs(path: string): Record<string, string> {
    return { ...this.existing(path).xattrs };
  }

  /** Bytes the root filesystem holds (volumes not counted: they are disks of their own). */
  usedBytes(): number {
    return usedBytes(this.rootFs.root);
  }
}

// ---- serialized trees: how a guest's files are kept in snapshots and templates ----

export type SerialNode =
  | { t: "f"; d: string; m: number; u: number; g: number; mt: number; x?: Record<string, string> }
  | { t: "d"; e: Record<string, SerialNode>; m: number; u: number; g: number; mt: number; x?: Record<string, string> };

export function serializeTree(n: FsNode): SerialNode {
  const meta = { m: n.mode, u: n.uid, g: n.gid, mt: n.mtimeMs, ...(n.xattrs ? { x: n.xattrs } : {}) };
  if (n.type === "file") return { t: "f", d: n.data.toString("base64"), ...meta };
  return { t: "d", e: Object.fromEntries([...n.entries].map(([k, v]) => [k, serializeTree(v)])), ...meta };
}

export function deserializeTree(s: SerialNode): FsNode {
  const meta = { mode: s.m, uid: s.u, gid: s.g, mtimeMs: s.mt, ...(s.x ? { xattrs: { ...s.x } } : {}) };
  if (s.t === "f") return { type: "file", data: Buffer.from(s.d, "base64"), ...meta };
  return { type: "dir", entries: new Map(Object.entries(s.e).map(([k, v]) => [k, deserializeTree(v)])), ...meta };
}

export function deserializeDir(s: SerialNode): DirNode {
  const n = deserializeTree(s);
  if (n.type !== "dir") throw new DenError("snapshot_corrupt", "a serialized file tree whose root is not a directory");
  return n;
}
