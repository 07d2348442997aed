import { codecCpuSeconds } from "@den/store";
import { nativeCpuSeconds } from "@den/runtime";
import { AsyncLocalStorage } from "node:async_hooks";

/**
 * The CPU a host agent spends on an operation (snapshots, compression, hashing, transfers)
 * is Den's own work for that sandbox and is billed to it. In-process, the control plane
 * measures it itself; a host over HTTP reports it with every answer (`WORK_HEADER`), and
 * the client adds it to whatever `withHostWork` call the request was made under.
 */
export const WORK_HEADER = "den-work-cpu-us";

const current = new AsyncLocalStorage<{ seconds: number }>();

/** Runs `fn`; `charge` gets the host CPU seconds that hosts reported for the calls `fn` made (0 if none did). */
export async function withHostWork<T>(fn: () => Promise<T>, charge: (hostSeconds: number) => void): Promise<T> {
  const box = { seconds: 0 };
  try {
    return await current.run(box, fn);
  } finally {
    charge(box.seconds);
  }
}

/** Called by the HTTP client with a host's report (a header value in microseconds). */
export function reportHostWork(header: string | null): void {
  const us = Number(header);
  const box = current.getStore();
  if (box && Number.isFinite(us) && us > 0) box.seconds += us / 1e6;
}

/**
 * This process's CPU seconds, threads, the store's codec processes and the native helpers
 * included (reaped children in general not: a QEMU that ends would land there).
 */
export function processCpuSeconds(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1e6 + codecCpuSeconds() + nativeCpuSeconds();
}
