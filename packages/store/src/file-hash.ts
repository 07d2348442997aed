import { createHash } from "node:crypto";
import type { FileHandle } from "node:fs/promises";

/** Bytes read per call: one buffer, reused, so hashing a file faults in no fresh memory per chunk. */
const CHUNK = 1 << 20;

/**
 * The sha256 and size of an open file, read by position (the descriptor's offset is left
 * alone, so a tool may read the same descriptor meanwhile). Past `limit` bytes it stops
 * reading: the size it returns is then over the limit (and the sum is of a prefix).
 */
export async function hashOpenFile(fh: FileHandle, limit = Infinity): Promise<{ size: number; sha256: string }> {
  const h = createHash("sha256");
  const buf = Buffer.allocUnsafe(CHUNK);
  let size = 0;
  for (;;) {
    const { bytesRead } = await fh.read(buf, 0, CHUNK, size);
    if (bytesRead === 0) break;
    h.update(buf.subarray(0, bytesRead));
    size += bytesRead;
    if (size > limit) break;
  }
  return { size, sha256: h.digest("hex") };
}
