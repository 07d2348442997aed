import { posix } from "node:path";
import { DenError, api, type FileStat, type HostGuest } from "@den/protocol";
import type { Principal } from "./db/store.js";
import type { VolumeRow } from "./db/volume-store.js";
import type { Volumes } from "./volumes.js";
import { mapLimit } from "@den/protocol";

/** Entries one listing may return; past it the call fails rather than answer part of a tree. */
export const MAX_LIST_ENTRIES = 10_000;
/** How deep a listing goes, whatever is asked. */
export const MAX_LIST_DEPTH = 32;
/** Guest stats in flight at once for one listing. */
const STAT_CONCURRENCY = 8;
/** A chown or chmod in the helper gets this long. */
const EXEC_MS = 30_000;

/** An entry of a volume: its path from the volume's root, and the guest's stat of it. */
export interface VolumeEntry {
  path: string;
  stat: FileStat;
}

/** Ownership and permission bits to give what a call creates or changes (numeric ids: a volume outlives any guest's /etc/passwd). */
export interface EntryMeta {
  uid?: number | undefined;
  gid?: number | undefined;
  mode?: number | undefined;
}

/** The longest volume path: the helper's mount point goes before it, within the guest's 4096. */
export const MAX_VOLUME_PATH = 4000;

/** A path of a volume as given (relative ones from its root): absolute, no `..`, no `.`, no trailing `/`. */
export function volumePath(raw: string): string {
  const abs = raw.startsWith("/") ? raw : `/${raw}`;
  if (abs.length > MAX_VOLUME_PATH) throw new DenError("invalid_argument", `path: at most ${MAX_VOLUME_PATH} characters`);
  const ok = api.VolumeFilePath.safeParse(abs);
  if (!ok.success) throw new DenError("invalid_argument", `path: ${ok.error.issues[0]?.message ?? "not a path"}`);
  const n = posix.normalize(abs);
  return n.length > 1 && n.endsWith("/") ? n.slice(0, -1) : n;
}

const inGuest = (root: string, path: string) => (path === "/" ? root : root + path);

const missing = (e: unknown) => e instanceof DenError && e.code === "file_not_found";

/** chown/chmod in the helper (the guest's file ops set a mode and a user by name, not numeric ids on an existing path). */
async function applyMeta(guest: HostGuest, at: string, m: EntryMeta): Promise<void> {
  const run = async (argv: string[]) => {
    const r = await guest.exec(argv, { timeoutMs: EXEC_MS, maxOutputBytes: 64 * 1024 });
    if (r.exitCode !== 0) throw new DenError("invalid_argument", `${argv[0]}: ${r.stderr.toString("utf8").trim().slice(0, 500) || `exit ${r.exitCode ?? "by signal"}`}`);
  };
  if (m.uid !== undefined || m.gid !== undefined) await run(["chown", "-h", `${m.uid ?? ""}:${m.gid ?? ""}`.replace(/:$/, ""), "--", at]);
  if (m.mode !== undefined) await run(["chmod", m.mode.toString(8), "--", at]);
}

/**
 * A volume's files without a sandbox, beyond reading and writing whole files: stat, list,
 * make directories, remove, change owner and mode. Each call runs in a helper VM that
 * mounts the volume (Volumes.withHelper: read-only for stat and list), so nothing a guest
 * wrote is ever parsed on the host; while a sandbox holds the volume read-write (or, for
 * a change, at all) the call is a 409 `volume_in_use`.
 */
export class VolumeFiles {
  constructor(private readonly volumes: Volumes) {}

  async stat(p: Principal, v: VolumeRow, path: string): Promise<VolumeEntry> {
    return this.volumes.withHelper(p, v, true, async (guest, root) => ({ path, stat: await guest.files.stat(inGuest(root, path)) }));
  }

  /** The entries under a directory, `depth` levels down (1: its own), breadth first, symlinks not followed. */
  async list(p: Principal, v: VolumeRow, path: string, depth = 1): Promise<VolumeEntry[]> {
    return this.volumes.withHelper(p, v, true, async (guest, root) => {
      const top = await guest.files.stat(inGuest(root, path));
      if (top.type !== "dir") throw new DenError("not_a_directory", `${path} is not a directory`);
      const found: string[] = [];
      let level = [path];
      for (let d = 1; d <= Math.min(depth, MAX_LIST_DEPTH) && level.length; d++) {
        const next: string[] = [];
        for (const dir of level) {
          const listed = await guest.files.list(inGuest(root, dir));
          if (listed.truncated) throw new DenError("invalid_argument", `${dir} has more entries than Den lists; list a narrower path`);
          for (const e of listed.entries) {
            const child = posix.join(dir, e.name);
            found.push(child);
            if (found.length > MAX_LIST_ENTRIES) throw new DenError("invalid_argument", `more than ${MAX_LIST_ENTRIES} entries under ${path}; list a narrower path or a smaller depth`);
            if (e.type === "dir") next.push(child);
          }
        }
        level = next;
      }
      // The listing's entries carry no owner: a stat each (there is no writer meanwhile: the helper holds the volume).
      return mapLimit(found, STAT_CONCURRENCY, async (child) => ({ path: child, stat: await guest.files.stat(inGuest(root, child)) }));
    });
  }

  /** A directory; `parents` makes the missing ones above it (and an existing directory is then no error, as `mkdir -p`). */
  async mkdir(p: Principal, v: VolumeRow, path: string, opts: EntryMeta & { parents?: boolean | undefined }): Promise<VolumeEntry> {
    return this.volumes.withHelper(p, v, false, async (guest, root) => {
      const at = inGuest(root, path);
      const there = await guest.files.stat(at).catch((e: unknown) => (missing(e) ? undefined : Promise.reject(e)));
      if (there && !(opts.parents && there.type === "dir")) throw new DenError("already_exists", `${path} already exists`);
      if (!there) {
        if (!opts.parents) await guest.files.stat(inGuest(root, posix.dirname(path))).catch((e: unknown) => Promise.reject(missing(e) ? new DenError("file_not_found", `${posix.dirname(path)} does not exist (force makes it)`) : e));
        await guest.files.mkdir(at, { parents: !!opts.parents });
      }
      await applyMeta(guest, at, opts);
      return { path, stat: await guest.files.stat(at) };
    });
  }

  /** Writes a whole file (atomically, parents made), then its owner and mode if given. */
  async write(p: Principal, v: VolumeRow, path: string, source: AsyncIterable<Buffer>, meta: EntryMeta = {}): Promise<VolumeEntry> {
    if (path === "/") throw new DenError("invalid_argument", "path: the volume's root is a directory");
    return this.volumes.withHelper(p, v, false, async (guest, root) => {
      const at = inGuest(root, path);
      await guest.files.write(at, source, { parents: true });
      await applyMeta(guest, at, meta);
      return { path, stat: await guest.files.stat(at) };
    });
  }

  /** Removes a file, or a directory and all under it. */
  async remove(p: Principal, v: VolumeRow, path: string): Promise<void> {
    if (path === "/") throw new DenError("invalid_argument", "path: the volume's root cannot be removed (delete the volume)");
    await this.volumes.withHelper(p, v, false, async (guest, root) => {
      const at = inGuest(root, path);
      await guest.files.stat(at);
      await guest.files.remove(at, { recursive: true });
    });
  }

  async setMeta(p: Principal, v: VolumeRow, path: string, meta: EntryMeta): Promise<VolumeEntry> {
    return this.volumes.withHelper(p, v, false, async (guest, root) => {
      const at = inGuest(root, path);
      await guest.files.stat(at);
      await applyMeta(guest, at, meta);
      return { path, stat: await guest.files.stat(at) };
    });
  }
}
