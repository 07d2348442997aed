import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { DenError } from "@den/protocol";

const execFileP = promisify(execFile);

// Ids are the protocol's (the control plane makes them too, without this package).
export { newId, ID_PATTERN } from "@den/protocol";

/** Runs a helper program (qemu-img, cp) and turns a failure into a DenError with its stderr. */
export async function runTool(cmd: string, args: string[], code: "qemu_error" | "io_error" = "io_error"): Promise<string> {
  try {
    const { stdout } = await execFileP(cmd, args, { maxBuffer: 16 * 1024 * 1024 });
    return stdout;
  } catch (e) {
    const err = e as { stderr?: string; message: string };
    throw new DenError(code, `${cmd} ${args[0] ?? ""} failed: ${(err.stderr || err.message).trim().slice(0, 2000)}`);
  }
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Serializes async work: each call runs after the previous one settled. */
export class SerialQueue {
  private tail: Promise<unknown> = Promise.resolve();

  run<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.tail.then(fn, fn);
    this.tail = next.catch(() => undefined);
    return next;
  }
}

/** A small deterministic PRNG (mulberry32): numbers in [0, 1) that replay from a seed (benchmarks, crash tests). */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export { privateDir } from "@den/protocol";

/** Files the process creates from now on are its owner's alone (a server's or host agent's start). */
export function privateFiles(): void {
  process.umask(0o077);
}
