import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync } from "node:fs";
import type { Socket } from "node:net";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { PageFilterStats } from "./migration-stream.js";

/**
 * Den's native helpers (`packages/runtime/native/*.c`): small C programs for the data paths
 * where Node's per-chunk cost is most of the work. Each is compiled once per source on the
 * host (`cc`, which the host's packages include) into the data dir, named by the source's
 * hash; a host without a compiler, or `DEN_NATIVE=0`, uses the JavaScript path instead,
 * which does the same thing more slowly.
 */

const SOURCE_DIR = fileURLToPath(new URL("../../native/", import.meta.url));

let pageFilterBin: string | undefined;
/** Whether that build compresses with libzstd itself (`--zstd LEVEL`). */
let pageFilterZstd = false;
let cpuSeconds = 0;

/** CPU seconds the native helpers have used in this process's lifetime (Den's work as much as its own threads'). */
export function nativeCpuSeconds(): number {
  return cpuSeconds;
}

/** Compiles the helpers into `<dataDir>/bin` if they are not there yet (a runtime's open). */
export function prepareNativeTools(dataDir: string): void {
  pageFilterBin = undefined;
  pageFilterZstd = false;
  if (process.env.DEN_NATIVE === "0") return;
  // With libzstd's headers (Debian's libzstd-dev) the filter compresses in its own process.
  if (existsSync("/usr/include/zstd.h") && process.env.DEN_NATIVE_ZSTD !== "0") {
    pageFilterBin = compiled(join(dataDir, "bin"), "pagefilter", ["-DDEN_ZSTD"], ["-lzstd"], "z");
    pageFilterZstd = pageFilterBin !== undefined;
  }
  pageFilterBin ??= compiled(join(dataDir, "bin"), "pagefilter");
}

function compiled(binDir: string, name: string, flags: string[] = [], libs: string[] = [], variant = ""): string | undefined {
  const src = join(SOURCE_DIR, `${name}.c`);
  if (!existsSync(src)) return undefined;
  const hash = createHash("sha256").update(readFileSync(src)).update(flags.concat(libs).join(" ")).digest("hex").slice(0, 12);
  const bin = join(binDir, `den-${name}${variant ? `-${variant}` : ""}-${hash}`);
  if (existsSync(bin)) return bin;
  mkdirSync(binDir, { recursive: true, mode: 0o700 });
  const tmp = `${bin}.tmp-${process.pid}`;
  const r = spawnSync("cc", ["-O2", ...flags, "-o", tmp, src, ...libs], { encoding: "utf8", timeout: 60_000 });
  if (r.status !== 0) {
    rmSync(tmp, { force: true });
    process.emitWarning(`native helper ${name} not built (${(r.error?.message ?? r.stderr ?? "").trim().slice(0, 300)}); Den uses its JavaScript path`, "DenNativeWarning");
    return undefined;
  }
  renameSync(tmp, bin);
  // Builds of older sources (or the other variant) are of no use any more.
  for (const f of readdirSync(binDir)) if (f.startsWith(`den-${name}-`) && join(binDir, f) !== bin && !f.includes(".tmp-")) rmSync(join(binDir, f), { force: true });
  return bin;
}

/** Whether the native page filter compresses with its own libzstd (else through a zstd process). */
export function nativePageFilterCompresses(): boolean {
  return pageFilterBin !== undefined && pageFilterZstd;
}

/** Whether the native page filter is there (else `keepChangedPages` does its work). */
export function hasNativePageFilter(): boolean {
  return pageFilterBin !== undefined;
}

/**
 * `keepChangedPages` in its bitmap mode, natively: QEMU's migration stream comes straight
 * from the socket `from` (the helper reads it; Node never does), the filtered stream out.
 * `from` must not have been read (a server with `pauseOnConnect`); it is closed here.
 * `compressor`: a command the filtered stream goes through (stdin to stdout) before it comes
 * out (`stats.bytesOut` still counts the filtered bytes; its CPU is counted with the filter's),
 * or the filter's own libzstd at `zstdLevel` where it was built with it.
 */
export async function* nativeKeepChangedPages(from: Socket, changed: Uint8Array, ramBytes: number, stats: PageFilterStats, compressor?: Compressor, block = "ram"): AsyncGenerator<Buffer> {
  const run = startPageFilter(from, changed, ramBytes, compressor, block, "pipe");
  try {
    for await (const chunk of run.child.stdout!) yield chunk as Buffer;
    await run.done(stats);
  } finally {
    run.stop();
  }
}

/**
 * The same, with the output written by the helper (or its compressor) straight into
 * descriptor `to` (a store's file): not a byte of the state passes through Node.
 */
export async function nativeKeepChangedPagesTo(to: number, from: Socket, changed: Uint8Array, ramBytes: number, stats: PageFilterStats, compressor?: Compressor, block = "ram"): Promise<void> {
  const run = startPageFilter(from, changed, ramBytes, compressor, block, to);
  try {
    await run.done(stats);
  } finally {
    run.stop();
  }
}

/** How the filtered stream is compressed: a command (stdin to stdout), and the same as a zstd level. */
export interface Compressor {
  command: string[];
  zstdLevel?: number;
}

function startPageFilter(from: Socket, changed: Uint8Array, ramBytes: number, compressor: Compressor | undefined, block: string, out: "pipe" | number) {
  const bin = pageFilterBin;
  if (!bin) throw new Error("the native page filter is not built");
  const packing = compressor?.zstdLevel && pageFilterZstd ? ["--zstd", String(compressor.zstdLevel)] : compressor?.command.length ? ["--", ...compressor.command] : [];
  const child = spawn(bin, [block, String(ramBytes), ...packing], { stdio: [from, out, "pipe", "pipe"] });
  // The helper holds its own copy of the connection now.
  from.destroy();
  let said = "";
  child.stderr!.on("data", (d: Buffer) => (said = (said + d.toString()).slice(-4096)));
  const closed = new Promise<number | null>((resolve) => child.once("close", (code) => resolve(code)));
  const failed = new Promise<never>((_, reject) => child.once("error", reject));
  failed.catch(() => undefined);
  const bitmapIn = child.stdio[3] as NodeJS.WritableStream & { on(e: "error", f: () => void): void };
  bitmapIn.on("error", () => undefined); // a helper that died says why by its exit
  const bitmap = Buffer.alloc(Math.ceil(ramBytes / 4096 / 8));
  bitmap.set(changed.subarray(0, bitmap.length));
  bitmapIn.end(bitmap);
  return {
    child,
    /** Waits for the helper's exit and adds what it says it did to `stats`. */
    async done(stats: PageFilterStats): Promise<void> {
      const code = await Promise.race([closed, failed]);
      const m = /pages (\d+) kept (\d+) passed (\d) in (\d+) out (\d+) cpu ([\d.]+)\s*$/.exec(said);
      if (code !== 0 || !m) throw new Error(`den-pagefilter failed (exit ${code}): ${said.trim().split("\n")[0] ?? ""}`);
      stats.pages += Number(m[1]);
      stats.kept += Number(m[2]);
      stats.passedThrough ||= m[3] === "1";
      stats.bytesIn += Number(m[4]);
      stats.bytesOut += Number(m[5]);
      cpuSeconds += Number(m[6]);
    },
    stop(): void {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    },
  };
}
