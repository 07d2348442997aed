/** A `den serve` of a benchmark's own (its own process, so its RSS and CPU are its own), and a JSON client for it. */
import { spawn, type ChildProcess } from "node:child_process";
import { openSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const CLI = join(HERE, "..", "..", "..", "cli", "dist", "src", "bin.js");
export const KEY = "den_bench_process_admin_key_0123456789";

export type Reply = { status: number; body: any; text: string };

export function client(base: string) {
  return async (method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Reply> => {
    const res = await fetch(base + path, {
      method,
      headers: { authorization: `Bearer ${KEY}`, ...(body !== undefined && !(body instanceof Uint8Array) ? { "content-type": "application/json" } : {}), ...headers },
      ...(body !== undefined ? { body: body instanceof Uint8Array ? body : JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    let parsed: unknown;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      parsed = undefined;
    }
    return { status: res.status, body: parsed, text };
  };
}

/** Starts `den serve` on `port` with `dataDir` and `env` on top of the benchmark's own; resolves once it answers. */
export async function spawnDen(port: number, dataDir: string, env: Record<string, string> = {}): Promise<ChildProcess> {
  // DEN_BENCH_SERVER_LOG=FILE keeps the server's log (JSON lines) for a look afterwards.
  const logTo = process.env.DEN_BENCH_SERVER_LOG ? openSync(process.env.DEN_BENCH_SERVER_LOG, "a") : "ignore";
  const child = spawn(process.execPath, [CLI, "serve", "--port", String(port)], {
    env: { ...process.env, DEN_DATA_DIR: dataDir, DEN_API_KEY: KEY, DEN_LOG_LEVEL: process.env.DEN_BENCH_SERVER_LOG ? "info" : "warn", DEN_ENVD_PORT: "0", ...env },
    stdio: ["ignore", logTo, "pipe"],
  });
  let err = "";
  child.stderr!.on("data", (d: Buffer) => (err = (err + d.toString()).slice(-4000)));
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`den serve exited: ${err}`);
    try {
      if ((await fetch(`http://127.0.0.1:${port}/healthz`)).ok) return child;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`den serve did not come up: ${err}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

export const rssMb = (pid: number) => Number(/^VmRSS:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0) / 1024;
