import { readFileSync, readdirSync } from "node:fs";
import { Runtime, findInstanceProcesses } from "../src/index.js";

/** The suite's runtime: a data dir of its own where scripts/setup.sh built the base template. */
export async function testRuntime(): Promise<Runtime> {
  const dataDir = process.env.DEN_DATA_DIR;
  if (!dataDir) throw new Error("DEN_DATA_DIR is not set: run the suite with `npm test`");
  return Runtime.open({ dataDir });
}

/** QEMU processes of this runtime's instance, by sandbox id. */
export function qemuProcesses(rt: Runtime): Map<string, number> {
  return findInstanceProcesses(rt.instance);
}

export function sandboxDirs(rt: Runtime): string[] {
  return readdirSync(`${rt.dataDir}/sandboxes`);
}

/** Resident set size of a process in KiB (0 if it is gone). */
export function rssKb(pid = process.pid): number {
  try {
    return Number(/VmRSS:\s*(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0);
  } catch {
    return 0;
  }
}
