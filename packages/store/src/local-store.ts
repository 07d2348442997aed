import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { dirname, join, relative } from "node:path";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { randomBytes } from "node:crypto";
import { DenError } from "@den/protocol";
import { withProgress } from "./progress.js";
import { checkKey, checkPrefix, type ObjectInfo, type ObjectStore, type TransferProgress } from "./object-store.js";

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
    await mkdir(dirname(final), { recursive: true });
    const tmp = `${final}.tmp-${randomBytes(6).toString("hex")}`;
    try {
      await write(tmp);
      await rename(tmp, final);
    } catch (e) {
      await rm(tmp, { force: true });
      throw e;
    }
  }

  async putStream(key: string, stream: Readable, onProgress?: (p: TransferProgress) => void): Promise<void> {
    await this.atomicWrite(key, (tmp) => pipeline(withProgress(stream, key, undefined, onProgress), createWriteStream(tmp)));
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
        else if (e.isFile() && !/\.tmp-[0-9a-f]{12}$/.test(e.name)) {
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
    await rm(this.path(key), { force: true });
  }
}
