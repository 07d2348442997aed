import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, open, readdir, readFile, rename, rm, rmdir, stat, writeFile, type FileHandle } from "node:fs/promises";
import { dirname, join, relative } from "node:path";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { randomBytes } from "node:crypto";
import { DenError } from "@den/protocol";
import { hashOpenFile } from "./file-hash.js";
import { withProgress } from "./progress.js";
import { checkKey, checkPrefix, type ObjectInfo, type ObjectStore, type TransferProgress } from "./object-store.js";

/** A write's temp file: `<key>.tmp-<writer pid>-<random>` (the pid tells a dead writer's leftover from a live write). */
const TEMP = /\.tmp-(?:(\d+)-)?[0-9a-f]{12}$/;
/** A temp file of unknown or reused writer this old is abandoned: no one write takes this long. */
const TEMP_ABANDONED_MS = 6 * 3_600_000;
/** Temp files this process is writing now, through any instance (never swept). */
const writing = new Set<string>();

/** Objects as files under a root directory; every write is a temp file renamed into place. */
export class LocalDirStore implements ObjectStore {
  readonly kind = "local" as const;

  constructor(readonly root: string) {}

  private path(key: string): string {
    checkKey(key);
    return join(this.root, key);
  }

  private async atomicWrite(key: string, write: (tmp: string) => Promise<void>): Promise<void> {
    const final = this.path(key);
    const tmp = `${final}.tmp-${process.pid}-${randomBytes(6).toString("hex")}`;
    writing.add(tmp);
    try {
      await this.createIn(tmp);
      await write(tmp);
      await rename(tmp, final);
    } catch (e) {
      await rm(tmp, { force: true });
      throw e;
    } finally {
      writing.delete(tmp);
    }
  }

  /**
   * Creates the (empty) file `path` and its folders. A delete removes the folders it empties
   * (see delete), so one may go between this mkdir and the file's creation, or even inside a
   * recursive mkdir (Node's reports ENOTDIR when a folder it found existing is gone when it
   * checks it): then again. Once the file is there, its folder is not empty, and no delete
   * removes it.
   */
  private async createIn(path: string): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        await mkdir(dirname(path), { recursive: true });
        await writeFile(path, "", { flag: "wx", mode: 0o600 });
        return;
      } catch (e) {
        const code = (e as NodeJS.ErrnoException).code;
        if ((code !== "ENOENT" && code !== "ENOTDIR") || attempt >= 20) throw e;
      }
    }
  }

  /** Removes `dir` and its parents while they are empty, up to (not including) the root. */
  private async pruneEmpty(dir: string): Promise<void> {
    for (let rel = relative(this.root, dir); rel && !rel.startsWith(".."); rel = relative(this.root, dir)) {
      try {
        await rmdir(dir);
      } catch {
        return; // not empty (or gone): its parents are not empty either
      }
      dir = dirname(dir);
    }
  }

  /**
   * Deletes the temp files of writes that will never finish: a writer killed mid-upload
   * (kill -9 during a cold hibernate's stream) leaves one that no listing shows. A temp
   * file is abandoned when its writer process is gone, when it is this process's but no
   * write of its owns it, or when it is older than any write takes.
   */
  async sweepAbandoned(prefix: string): Promise<number> {
    checkPrefix(prefix);
    let swept = 0;
    const now = Date.now();
    const walk = async (dir: string): Promise<void> => {
      for (const e of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
        const p = join(dir, e.name);
        if (e.isDirectory()) {
          await walk(p);
          // A folder emptied by a delete that died before its prune (or by an older Den).
          if (relative(this.root, p).startsWith(prefix)) await this.pruneEmpty(p);
          continue;
        }
        const m = e.isFile() ? TEMP.exec(e.name) : null;
        if (!m || writing.has(p) || !relative(this.root, p).startsWith(prefix)) continue;
        const pid = m[1] ? Number(m[1]) : undefined;
        const st = await stat(p).catch(() => undefined);
        if (!st) continue;
        const abandoned = pid === process.pid || (pid !== undefined && !processAlive(pid)) || now - st.mtimeMs > TEMP_ABANDONED_MS;
        if (abandoned) {
          await rm(p, { force: true });
          swept++;
        }
      }
    };
    await walk(join(this.root, prefix.slice(0, prefix.lastIndexOf("/") + 1)));
    return swept;
  }

  async putStream(key: string, stream: Readable, onProgress?: (p: TransferProgress) => void): Promise<void> {
    await this.atomicWrite(key, (tmp) => pipeline(withProgress(stream, key, undefined, onProgress), createWriteStream(tmp)));
  }

  async putFromFd(key: string, write: (fd: number) => Promise<void>, onProgress?: (p: TransferProgress) => void): Promise<{ size: number; sha256: string }> {
    let made = { size: 0, sha256: "" };
    await this.atomicWrite(key, async (tmp) => {
      const fh = await open(tmp, "w+", 0o600);
      try {
        await write(fh.fd);
        made = await hashOpenFile(fh);
      } finally {
        await fh.close();
      }
    });
    onProgress?.({ key, bytes: made.size, total: made.size });
    return made;
  }

  async openFile(key: string): Promise<FileHandle> {
    try {
      return await open(this.path(key), "r");
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") throw new DenError("snapshot_not_found", `no object ${key} in the store`);
      throw e;
    }
  }

  async putBytes(key: string, data: Buffer): Promise<void> {
    await this.atomicWrite(key, (tmp) => writeFile(tmp, data));
  }

  async getStream(key: string, onProgress?: (p: TransferProgress) => void): Promise<Readable> {
    const info = await this.head(key);
    if (!info) throw new DenError("snapshot_not_found", `no object ${key} in the store`);
    return withProgress(createReadStream(this.path(key), { highWaterMark: 1 << 20 }), key, info.size, onProgress);
  }

  async getBytes(key: string): Promise<Buffer> {
    try {
      return await readFile(this.path(key));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") throw new DenError("snapshot_not_found", `no object ${key} in the store`);
      throw e;
    }
  }

  async head(key: string): Promise<ObjectInfo | undefined> {
    const st = await stat(this.path(key)).catch(() => undefined);
    return st?.isFile() ? { key, size: st.size, modifiedAt: st.mtimeMs } : undefined;
  }

  async list(prefix: string): Promise<ObjectInfo[]> {
    checkPrefix(prefix);
    const out: ObjectInfo[] = [];
    const walk = async (dir: string): Promise<void> => {
      const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
      for (const e of entries) {
        const p = join(dir, e.name);
        if (e.isDirectory()) await walk(p);
        else if (e.isFile() && !TEMP.test(e.name)) {
          const key = relative(this.root, p);
          if (key.startsWith(prefix)) {
            const st = await stat(p);
            out.push({ key, size: st.size, modifiedAt: st.mtimeMs });
          }
        }
      }
    };
    // Only the folder the prefix names (up to its last slash) can hold matches.
    await walk(join(this.root, prefix.slice(0, prefix.lastIndexOf("/") + 1)));
    return out.sort((a, b) => a.key.localeCompare(b.key));
  }

  async delete(key: string): Promise<void> {
    const p = this.path(key);
    await rm(p, { force: true });
    // A deleted snapshot leaves no folder behind: a long-lived store would collect one per sandbox.
    await this.pruneEmpty(dirname(p));
  }
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}
