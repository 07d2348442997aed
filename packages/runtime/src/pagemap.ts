import { open, readFile } from "node:fs/promises";

/**
 * Which pages of a paused QEMU's guest RAM differ from the file they were mapped from, read
 * from the kernel's page tables instead of by comparing bytes: a sandbox's RAM is its
 * template's RAM file mapped copy-on-write (MAP_PRIVATE), so a page the guest wrote is an
 * anonymous page of QEMU's (present and not file-backed, or swapped out), and every other
 * page is still the file's. /proc/<pid>/pagemap gives 8 bytes a page (its flags need no
 * privilege beyond reading the process; Den has CAP_SYS_PTRACE for its QEMUs).
 *
 * Returns a bitmap (bit i: page i changed), or undefined when the RAM is not a mapping of
 * `file` of `bytes` bytes (a fork child maps its parent's RAM file): the caller compares.
 */
export async function changedPages(pid: number, file: string, bytes: number): Promise<Uint8Array | undefined> {
  const start = await ramMapping(pid, file, bytes);
  if (start === undefined) return undefined;
  const pages = bytes / PAGE;
  const entries = Buffer.allocUnsafe(pages * 8);
  const fh = await open(`/proc/${pid}/pagemap`, "r").catch(() => undefined);
  if (!fh) return undefined;
  try {
    // Read in pieces: the kernel answers pagemap reads in bounded chunks anyway.
    for (let at = 0; at < entries.length;) {
      const { bytesRead } = await fh.read(entries, at, Math.min(entries.length - at, 1 << 20), (start / PAGE) * 8 + at);
      if (bytesRead <= 0) return undefined;
      at += bytesRead;
    }
  } finally {
    await fh.close();
  }
  const changed = new Uint8Array(Math.ceil(pages / 8));
  for (let p = 0; p < pages; p++) {
    const hi = entries.readUInt32LE(p * 8 + 4);
    const present = (hi & (1 << 31)) !== 0;
    const swapped = (hi & (1 << 30)) !== 0;
    const fileBacked = (hi & (1 << 29)) !== 0;
    if (swapped || (present && !fileBacked)) changed[p >> 3]! |= 1 << (p & 7);
  }
  return changed;
}

/** Where `pid` maps the whole of `file` (`bytes` long) privately from its start, or undefined. */
async function ramMapping(pid: number, file: string, bytes: number): Promise<number | undefined> {
  let maps: string;
  try {
    maps = await readFile(`/proc/${pid}/maps`, "utf8");
  } catch {
    return undefined;
  }
  // "start-end perms offset dev inode path": the whole file, from its start, privately.
  const line = maps.split("\n").find((l) => l.endsWith(` ${file}`) && / [r-][w-][x-]p 00000000 /.test(l));
  if (!line) return undefined;
  const [startHex, endHex] = line.split(" ")[0]!.split("-");
  const start = Number.parseInt(startHex!, 16);
  const end = Number.parseInt(endHex!, 16);
  return end - start === bytes && start % PAGE === 0 ? start : undefined;
}

/**
 * Copies the pages set in `changed` from a paused QEMU's private mapping of `file` into
 * `out` at the same offsets (`out` holds `file`'s content already): `out` is then the
 * guest's RAM as a file. Reads /proc/<pid>/mem (Den has CAP_SYS_PTRACE for its QEMUs).
 * Returns the bytes copied, or undefined when the mapping is not there as `changed` was read.
 */
export async function copyChangedPages(pid: number, file: string, bytes: number, changed: Uint8Array, out: string): Promise<number | undefined> {
  const start = await ramMapping(pid, file, bytes);
  if (start === undefined) return undefined;
  const pages = bytes / PAGE;
  const mem = await open(`/proc/${pid}/mem`, "r");
  try {
    const dst = await open(out, "r+");
    try {
      const RUN = 256; // pages a read (1 MiB)
      const buf = Buffer.allocUnsafe(RUN * PAGE);
      let copied = 0;
      for (let p = 0; p < pages;) {
        if (!(changed[p >> 3]! & (1 << (p & 7)))) {
          // Skip a whole clean byte of the bitmap at once.
          p = changed[p >> 3] === 0 ? (p | 7) + 1 : p + 1;
          continue;
        }
        let n = 1;
        while (p + n < pages && n < RUN && changed[(p + n) >> 3]! & (1 << ((p + n) & 7))) n++;
        const len = n * PAGE;
        const { bytesRead } = await mem.read(buf, 0, len, start + p * PAGE);
        if (bytesRead !== len) throw new Error(`reading guest RAM of QEMU ${pid} at page ${p}: ${bytesRead} of ${len} bytes`);
        await dst.write(buf, 0, len, p * PAGE);
        copied += len;
        p += n;
      }
      return copied;
    } finally {
      await dst.close();
    }
  } finally {
    await mem.close();
  }
}

const PAGE = 4096;
