import { open, rm } from "node:fs/promises";
import { join } from "node:path";

/**
 * Writes a saved state into descriptor `fd` (an empty file) and resolves once all of it is
 * written and checked (a cold wake's: against the digests its upload recorded); rejects if it
 * is not what it should be. Nothing reads the file before it resolves. It must not close `fd`.
 */
export type StateFeed = (fd: number) => Promise<void>;

/** A fed state's file in its sandbox's directory, until QEMU has loaded it. */
export const FED_STATE = "fed-state.bin";

/** A state being fed into a file of `dir`: where it is, and the feed's outcome. */
export interface StateFile {
  path: string;
  /** Resolves once the feed has written and checked all of it (the file is closed then). */
  fed: Promise<void>;
  /** Removes the file (QEMU keeps what it loaded). */
  remove(): Promise<void>;
}

/**
 * Starts `feed` on a new file in `dir` (only this process may read it: QEMU gets it as a
 * descriptor at its spawn, and is told to read it only once `fed` has resolved).
 */
export async function feedStateFile(dir: string, feed: StateFeed): Promise<StateFile> {
  const path = join(dir, FED_STATE);
  const fh = await open(path, "wx", 0o600);
  let fed: Promise<void>;
  try {
    fed = feed(fh.fd);
  } catch (e) {
    await fh.close();
    throw e;
  }
  const done = fed.finally(() => fh.close());
  done.catch(() => undefined);
  return { path, fed: done, remove: () => rm(path, { force: true }) };
}
