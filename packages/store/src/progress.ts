import type { Readable } from "node:stream";
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
