import { execFile } from "node:child_process";
import { rm, truncate, writeFile } from "node:fs/promises";
import { promisify } from "node:util";
import { DenError } from "@den/protocol";

const execFileP = promisify(execFile);

/** Room a root disk gets beyond what its image holds (ext4's own, and a first `apt install`). */
const HEADROOM_MB = 1024;
const MIN_DISK_MB = 2048;

/** The root disk size for an image of `unpackedBytes` (at least what was asked for). */
export function diskSizeFor(unpackedBytes: number, askedMb?: number): number {
  const fits = Math.ceil((unpackedBytes * 1.15) / 1024 ** 2) + HEADROOM_MB;
  return Math.max(askedMb ?? 0, fits, MIN_DISK_MB);
}

/**
 * Makes `out` (qcow2): an ext4 filesystem of `sizeMb` holding the tree at `rootfs`, owners,
 * modes, xattrs and hard links as they are there. mke2fs reads the tree itself (no mount, no
 * loop device); the raw image in between is sparse and removed.
 */
export async function makeRootDisk(rootfs: string, sizeMb: number, out: string, timeoutMs = 30 * 60_000): Promise<void> {
  const raw = `${out}.raw`;
  try {
    await writeFile(raw, "");
    await truncate(raw, sizeMb * 1024 * 1024);
    await execFileP("mkfs.ext4", ["-q", "-F", "-L", "denroot", "-E", "root_owner=0:0", "-d", rootfs, raw], { timeout: timeoutMs, maxBuffer: 1 << 20 })
      .catch((e: { stderr?: string; message: string }) => {
        const why = (e.stderr ?? e.message).trim().split("\n").slice(-2).join(" ");
        throw new DenError(/No space|Could not allocate/i.test(why) ? "image_invalid" : "build_failed", `the root disk (${sizeMb} MiB) could not be made: ${why}`);
      });
    await execFileP("qemu-img", ["convert", "-q", "-O", "qcow2", raw, out], { timeout: timeoutMs });
  } finally {
    await rm(raw, { force: true });
  }
}
