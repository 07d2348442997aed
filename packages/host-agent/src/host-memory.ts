import { readFileSync } from "node:fs";
import { readFile } from "node:fs/promises";

/** Anonymous and shmem PSS in MiB, from a smaps_rollup's text. */
function privateOf(t: string): number {
  const kb = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, "m").exec(t)?.[1] ?? NaN);
  const pss = kb("Pss_Anon") + kb("Pss_Shmem");
  return (Number.isFinite(pss) ? pss : kb("Anonymous")) / 1024;
}

/**
 * MiB a process holds that the kernel cannot reclaim: its anonymous and shmem pages, shared
 * ones split among their sharers (PSS; a fork's children share their parent's pages). Its
 * template's RAM file pages are page cache, not counted. Undefined if it is gone.
 */
export function privateMemoryMb(pid: number): number | undefined {
  try {
    return privateOf(readFileSync(`/proc/${pid}/smaps_rollup`, "utf8"));
  } catch {
    return undefined;
  }
}

/** `privateMemoryMb`, read off the event loop (the kernel's walk of every mapping takes 1-3 ms for a VM). */
export async function privateMemoryMbAsync(pid: number): Promise<number | undefined> {
  try {
    return privateOf(await readFile(`/proc/${pid}/smaps_rollup`, "utf8"));
  } catch {
    return undefined;
  }
}

/** The host's available memory in MiB (`MemAvailable`: free plus what the kernel can reclaim). */
export function availableMemoryMb(meminfo = "/proc/meminfo"): number {
  const t = readFileSync(meminfo, "utf8");
  return Number(/^MemAvailable:\s+(\d+) kB/m.exec(t)?.[1] ?? 0) / 1024;
}

/**
 * Each VM's private memory, read at most once per `maxAgeMs`: the first reading of a process
 * at once, later ones in the background (a stale value is returned meanwhile). smaps_rollup
 * walks every mapping, 1-3 ms for a VM: read on the event loop for a hundred VMs at every
 * admission check or reaper pass, it held every API call up by a few hundred ms.
 */
export class PrivateMemoryCache {
  private readings = new Map<number, { at: number; mb: number | undefined }>();
  private refreshing = new Map<number, Promise<void>>();

  constructor(private readonly maxAgeMs = 2000, private readonly now = () => Date.now()) {}

  get(pid: number): number | undefined {
    const r = this.readings.get(pid);
    if (!r) {
      const mb = privateMemoryMb(pid);
      this.set(pid, mb);
      return mb;
    }
    if (this.now() - r.at >= this.maxAgeMs && !this.refreshing.has(pid)) {
      this.refreshing.set(pid, privateMemoryMbAsync(pid).then((mb) => this.set(pid, mb)).finally(() => this.refreshing.delete(pid)));
    }
    return r.mb;
  }

  /** Resolves once the readings under way are in (tests). */
  async settled(): Promise<void> {
    await Promise.all(this.refreshing.values());
  }

  private set(pid: number, mb: number | undefined): void {
    if (this.readings.size > 4096) this.readings.clear();
    this.readings.set(pid, { at: this.now(), mb });
  }
}
