/** A bounded walk of a guest directory tree (ListDir with depth, and the watchers' snapshots). */
import { posix } from "node:path";
import type { DirEntry, HostGuest } from "@den/protocol";
import { ConnectError } from "./connect.js";
import { withDeadline } from "./deadline.js";

/** Entries one walk may return; past it the call fails instead of returning a partial tree. */
export const MAX_WALK_ENTRIES = 10_000;
/** How deep a walk goes, whatever the caller asks. */
export const MAX_WALK_DEPTH = 32;

export interface Walked {
  /** Relative to the root, `/`-separated. */
  rel: string;
  path: string;
  entry: DirEntry;
}

/**
 * Symlinks not followed; `depth` 1 = the root's own entries. In the order E2B's envd (Go's
 * `filepath.WalkDir`) gives: depth first, each directory's entries by name (bytewise), a
 * directory before what is in it.
 */
export async function walk(guest: HostGuest, root: string, depth: number, max = MAX_WALK_ENTRIES): Promise<Walked[]> {
  const out = await walkLevels(guest, root, depth, max);
  const key = new Map(out.map((w) => [w, w.rel.split("/").map((c) => Buffer.from(c))]));
  return out.sort((a, b) => {
    const x = key.get(a)!;
    const y = key.get(b)!;
    for (let i = 0; i < Math.min(x.length, y.length); i++) {
      const c = Buffer.compare(x[i]!, y[i]!);
      if (c) return c;
    }
    return x.length - y.length;
  });
}

/** Level by level (one listing per directory, at most `max` entries). */
async function walkLevels(guest: HostGuest, root: string, depth: number, max = MAX_WALK_ENTRIES): Promise<Walked[]> {
  const out: Walked[] = [];
  let level: Array<{ rel: string; path: string }> = [{ rel: "", path: root }];
  for (let d = 1; d <= Math.min(depth, MAX_WALK_DEPTH) && level.length; d++) {
    const next: typeof level = [];
    for (const dir of level) {
      const listed = await withDeadline(guest.files.list(dir.path), `listing of ${dir.path}`).catch((e) => {
        // A subdirectory that vanished (or is unreadable) mid-walk is skipped; the root is not.
        if (dir.rel === "") throw e;
        return { entries: [] as DirEntry[], truncated: false };
      });
      if (listed.truncated) throw new ConnectError("resource_exhausted", `${dir.path} has more entries than Den lists`);
      for (const e of listed.entries) {
        const rel = dir.rel ? `${dir.rel}/${e.name}` : e.name;
        const path = posix.join(dir.path, e.name);
        out.push({ rel, path, entry: e });
        if (out.length > max) throw new ConnectError("resource_exhausted", `more than ${max} entries under ${root}; list a narrower path or a smaller depth`);
        if (e.type === "dir") next.push({ rel, path });
      }
    }
    level = next;
  }
  return out;
}
