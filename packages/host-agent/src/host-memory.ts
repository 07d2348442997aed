import { readFileSync } from "node:fs";

/**
 * MiB a process holds that the kernel cannot reclaim: its anonymous and shmem pages, shared
 * ones split among their sharers (PSS; a fork's children share their parent's pages). Its
 * template's RAM file pages are page cache, not counted. Undefined if it is gone.
 */
export function privateMemoryMb(pid: number): number | undefined {
  try {
    const t = readFileSync(`/proc/${pid}/smaps_rollup`, "utf8");
    const kb = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, "m").exec(t)?.[1] ?? NaN);
    const pss = kb("Pss_Anon") + kb("Pss_Shmem");
    return (Number.isFinite(pss) ? pss : kb("Anonymous")) / 1024;
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
 * Reads each VM's private memory at most once per `maxAgeMs` (smaps_rollup walks every
 * mapping: cheap for one VM, not for a hundred on every admission check).
 */
export class PrivateMemoryCache {
  private readings = new Map<number, { at: number; mb: number | undefined }>();

  constructor(private readonly maxAgeMs = 2000, private readonly now = () => Date.now()) {}

  get(pid: number): number | undefined {
    const r = this.readings.get(pid);
    if (r && this.now() - r.at < this.maxAgeMs) return r.mb;
    const mb = privateMemoryMb(pid);
    this.readings.set(pid, { at: this.now(), mb });
    if (this.readings.size > 4096) this.readings.clear();
    return mb;
  }
}
