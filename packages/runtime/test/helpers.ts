import { readFileSync, readdirSync } from "node:fs";
import { after, before } from "node:test";
import { DenError } from "@den/protocol";
import { Runtime, findInstanceProcesses, type Sandbox } from "../src/index.js";

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

/** Waits until the runtime's pool holds `n` QEMUs (after `prewarm` or a create). */
export async function untilPooled(rt: Runtime, n = 1, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (rt.pooledVms < n) {
    if (Date.now() > deadline) throw new Error(`the VM pool holds ${rt.pooledVms} QEMUs after ${timeoutMs} ms, not ${n}`);
    await new Promise((r) => setTimeout(r, 20));
  }
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

/** For assert.rejects/throws: a DenError with this code. */
export const isCode = (code: string) => (e: unknown) => e instanceof DenError && e.code === code;

/**
 * Registers before/after hooks that open the suite's runtime and one sandbox for a
 * describe block, and destroy it afterwards. Read `.rt` and `.sbx` inside tests.
 */
export function sandboxFixture(): { rt: Runtime; sbx: Sandbox } {
  const f = {} as { rt: Runtime; sbx: Sandbox };
  before(async () => {
    f.rt = await testRuntime();
    f.sbx = await f.rt.create({ template: "base" });
  });
  after(async () => {
    await f.sbx?.destroy();
    f.rt?.close();
  });
  return f;
}
