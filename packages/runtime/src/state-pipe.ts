import { constants } from "node:fs";
import { open, rm, type FileHandle } from "node:fs/promises";
import { join } from "node:path";
import { runTool } from "./util.js";

/**
 * Writes a saved state into descriptor `fd` (the pipe's write end) and resolves once all of
 * it is written and checked; rejects if it is not what it should be. It must not close `fd`.
 */
export type StateFeed = (fd: number) => Promise<void>;

/** A pipe from a feed to a QEMU that loads the state as it arrives (no state file on disk). */
export interface StatePipe {
  /** The read end, for QEMU's spawn (INCOMING_STATE_FD). */
  readFd: number;
  /** The feed's outcome. */
  fed: Promise<void>;
  /** Drops Den's read end (QEMU holds its own once spawned). */
  closeRead(): Promise<void>;
}

/**
 * Opens a named pipe in `dir` (removed again at once: the descriptors keep it) and starts
 * `feed` on its write end, which is closed when the feed settles, so a reader sees the end.
 */
export async function openStatePipe(dir: string, feed: StateFeed): Promise<StatePipe> {
  const path = join(dir, "state.fifo");
  await rm(path, { force: true });
  await runTool("mkfifo", ["-m", "600", path]);
  try {
    // Each open waits for the other end: both at once, each blocking (QEMU reads it as a plain pipe).
    const opening = [open(path, constants.O_RDONLY), open(path, constants.O_WRONLY)] as const;
    let r: FileHandle, w: FileHandle;
    try {
      [r, w] = await Promise.all(opening);
    } catch (e) {
      // One end failed: the other would wait for it forever (in a thread of libuv's pool). An
      // O_RDWR open of a FIFO never blocks and counts as both ends, which releases it.
      const both = await open(path, constants.O_RDWR | constants.O_NONBLOCK).catch(() => undefined);
      await Promise.allSettled(opening.map((o) => o.then((h) => h.close())));
      await both?.close();
      throw e;
    }
    let fed: Promise<void>;
    try {
      fed = feed(w.fd);
    } catch (e) {
      await Promise.all([r.close(), w.close()]);
      throw e;
    }
    const done = fed.finally(() => w.close());
    done.catch(() => undefined);
    return { readFd: r.fd, fed: done, closeRead: () => r.close() };
  } finally {
    await rm(path, { force: true });
  }
}
