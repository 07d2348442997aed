import { createWriteStream } from "node:fs";
import { rename, rm } from "node:fs/promises";
import { randomBytes } from "node:crypto";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { TransferProgress } from "./object-store.js";

/**
 * Reports progress per chunk as the stream is read; a stream whose size was not known ahead
 * (an object compressed on its way) reports its total once it has ended, so the last report
 * still says it is done.
 */
export function withProgress(stream: Readable, key: string, total: number | undefined, onProgress?: (p: TransferProgress) => void): Readable {
  if (!onProgress) return stream;
  let bytes = 0;
  stream.on("data", (c: Buffer) => {
    bytes += c.length;
    onProgress({ key, bytes, ...(total !== undefined ? { total } : {}) });
  });
  if (total === undefined) stream.once("end", () => onProgress({ key, bytes, total: bytes }));
  return stream;
}

/**
 * Writes an object's bytes to `path` through a temp file renamed at the end (a reader
 * never sees half a file), reporting progress per chunk.
 */
export async function streamToFile(
  stream: Readable, path: string, key: string, total: number | undefined, onProgress?: (p: TransferProgress) => void,
): Promise<void> {
  const tmp = `${path}.tmp-${randomBytes(6).toString("hex")}`;
  try {
    await pipeline(withProgress(stream, key, total, onProgress), createWriteStream(tmp));
    await rename(tmp, path);
  } catch (e) {
    await rm(tmp, { force: true });
    throw e;
  }
}
