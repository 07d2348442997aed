import { spawn, spawnSync } from "node:child_process";
import { once } from "node:events";
import type { Transform } from "node:stream";
import { createGunzip, createGzip } from "node:zlib";

/**
 * How stored objects are compressed. zstd (Debian's `zstd` tool, in a process of its own, so
 * off the event loop and on another core) is about ten times faster than zlib's gzip at the
 * same ratio on memory images; gzip is what older objects have, and the fallback on a host
 * without the tool.
 */
export type Compression = "gzip" | "zstd";

/** A stage of a stream pipeline: a Transform, or a function from chunks to chunks. */
export type Stage = Transform | ((source: AsyncIterable<Buffer>) => AsyncGenerator<Buffer>);

let zstdPresent: boolean | undefined;

/** zstd where the tool is installed (`DEN_STORE_COMPRESSION=gzip` keeps gzip), else gzip. */
export function preferredCompression(): Compression {
  if (process.env.DEN_STORE_COMPRESSION === "gzip") return "gzip";
  zstdPresent ??= spawnSync("zstd", ["--version"], { stdio: "ignore" }).status === 0;
  return zstdPresent ? "zstd" : "gzip";
}

/** The object-key suffix of a compression. */
export const SUFFIX: Record<Compression, string> = { gzip: ".gz", zstd: ".zst" };

let childSeconds = 0;

/**
 * CPU seconds the codec's processes have used in this process's lifetime: Den's work as
 * much as its own threads' (operations bill it with their CPU).
 */
export function codecCpuSeconds(): number {
  return childSeconds;
}

export function compress(c: Compression): Stage {
  return c === "zstd" ? viaTool("zstd", ["-1", "-q", "-c", "--no-progress"]) : createGzip({ level: 1 });
}

export function decompress(c: Compression): Stage {
  return c === "zstd" ? viaTool("zstd", ["-d", "-q", "-c", "--no-progress"]) : createGunzip();
}

/** The children's user + system seconds in a POSIX shell's `times` output (its second line). */
export function childTimes(out: string): number {
  const lines = out.trim().split("\n");
  const m = /(\d+)m([\d.]+)s\s+(\d+)m([\d.]+)s/.exec(lines[lines.length - 1] ?? "");
  return m ? Number(m[1]) * 60 + Number(m[2]) + Number(m[3]) * 60 + Number(m[4]) : 0;
}

/**
 * A pipeline stage that pipes the chunks through a tool's stdin and stdout. The tool runs
 * under a shell that reports its CPU (`times`) once it has succeeded; a tool that fails is
 * the stage's error, with what it said.
 */
function viaTool(cmd: string, args: string[]): Stage {
  return async function* (source: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
    const child = spawn("sh", ["-c", `"$0" "$@" && times >&2`, cmd, ...args], { stdio: ["pipe", "pipe", "pipe"] });
    let said = "";
    child.stderr.on("data", (d: Buffer) => (said = (said + d.toString()).slice(-4096)));
    const closed = new Promise<number | null>((resolve) => child.once("close", (code) => resolve(code)));
    const failed = new Promise<never>((_, reject) => child.once("error", reject));
    failed.catch(() => undefined);
    child.stdin.on("error", () => undefined); // EPIPE when the tool dies: its exit code says why
    const feeding = (async () => {
      for await (const chunk of source) {
        if (child.stdin.destroyed) return;
        if (!child.stdin.write(chunk)) await Promise.race([once(child.stdin, "drain"), closed]);
      }
      child.stdin.end();
    })();
    feeding.catch(() => child.kill("SIGKILL"));
    try {
      for await (const chunk of child.stdout) yield chunk as Buffer;
      await feeding;
      const code = await Promise.race([closed, failed]);
      if (code !== 0) throw new Error(`${cmd} failed (exit ${code}): ${said.trim().split("\n")[0] ?? ""}`);
      childSeconds += childTimes(said);
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    }
  };
}
