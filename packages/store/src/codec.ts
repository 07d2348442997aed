import { spawn, spawnSync } from "node:child_process";
import { once } from "node:events";
import { createReadStream, createWriteStream } from "node:fs";
import { open } from "node:fs/promises";
import type { Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
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

/** The store's zstd level: the fastest (memory images are mostly incompressible or zero pages, which any level takes). */
export const ZSTD_LEVEL = 1;

/** zstd's arguments to decompress stdin to stdout (it checks the frames' content checksums as it goes). */
const ZSTD_DECOMPRESS: readonly string[] = ["-d", "-q", "-c", "--no-progress"];

/** How the store compresses with zstd: a command that reads stdin and writes stdout (another process may run it for the store). */
export const ZSTD_COMMAND: readonly string[] = ["zstd", `-${ZSTD_LEVEL}`, "-q", "-c", "--no-progress"];

export function compress(c: Compression): Stage {
  return c === "zstd" ? viaTool(ZSTD_COMMAND[0]!, ZSTD_COMMAND.slice(1)) : createGzip({ level: 1 });
}

/**
 * A file, compressed: zstd reads the file itself, so only the compressed bytes pass
 * through Den (gzip reads it here).
 */
export function compressedFile(c: Compression, path: string): AsyncIterable<Buffer> {
  if (c === "gzip") return createReadStream(path, { highWaterMark: 1 << 20 }).pipe(createGzip({ level: 1 }));
  return viaTool(ZSTD_COMMAND[0]!, [...ZSTD_COMMAND.slice(1), "--", path], "ignore")(emptySource());
}

/**
 * A pipeline's last stage that decompresses into `path`, writing at most `maxBytes` (a
 * decompression bomb fails: zstd runs under that file-size limit, gzip is counted here).
 * zstd writes the file itself, so the decompressed bytes never pass through Den, and it
 * checks them against the frame's own content checksum as it goes.
 */
export function decompressToFile(c: Compression, path: string, maxBytes: number): (source: AsyncIterable<Buffer>) => Promise<void> {
  return async (source) => {
    if (c === "gzip") {
      let n = 0;
      const counted = async function* (s: AsyncIterable<Buffer>) {
        for await (const chunk of s) {
          n += chunk.length;
          if (n > maxBytes) throw new Error(`more than the ${maxBytes} bytes expected`);
          yield chunk;
        }
      };
      await pipeline(source, createGunzip(), counted, createWriteStream(path));
      return;
    }
    const out = await open(path, "w");
    try {
      const drained = viaTool("prlimit", [`--fsize=${maxBytes}:${maxBytes}`, "zstd", ...ZSTD_DECOMPRESS], out.fd)(source);
      for await (const _ of drained) {
        // (the tool's stdout is the file: nothing comes back)
      }
    } catch (e) {
      throw ioError(e);
    } finally {
      await out.close();
    }
  };
}

/**
 * A pipeline's last stage that decompresses (zstd) into descriptor `fd`, a file, writing at
 * most `maxBytes` (zstd runs under that file-size limit). zstd checks the frames' content
 * checksums as it goes; its failure is the stage's error.
 */
export function decompressToFd(fd: number, maxBytes: number): (source: AsyncIterable<Buffer>) => Promise<void> {
  return async (source) => {
    try {
      for await (const _ of viaTool("prlimit", [`--fsize=${maxBytes}:${maxBytes}`, "zstd", ...ZSTD_DECOMPRESS], fd)(source)) {
        // (the tool's stdout is the file: nothing comes back)
      }
    } catch (e) {
      throw ioError(e);
    }
  };
}

/** zstd from descriptor `from` (a stored file, read from its offset) into descriptor `to` (a file, at most `maxBytes`): no byte through Den. */
export async function decompressFdToFd(from: number, to: number, maxBytes: number): Promise<void> {
  try {
    for await (const _ of viaTool("prlimit", [`--fsize=${maxBytes}:${maxBytes}`, "zstd", ...ZSTD_DECOMPRESS], to, from)(emptySource())) {
      // (the tool's stdout is `to`: nothing comes back)
    }
  } catch (e) {
    throw ioError(e);
  }
}

/** A host that could not take the file is an I/O error, not a corrupt object (the caller tells them apart by code). */
function ioError(e: unknown): unknown {
  if (/No space left/i.test((e as Error).message)) return Object.assign(new Error((e as Error).message), { code: "ENOSPC" });
  if (/write error|cannot write/i.test((e as Error).message)) return Object.assign(new Error((e as Error).message), { code: "EIO" });
  return e;
}

async function* emptySource(): AsyncGenerator<Buffer> {}

/** The children's user + system seconds in a POSIX shell's `times` output (its second line). */
export function childTimes(out: string): number {
  const lines = out.trim().split("\n");
  const m = /(\d+)m([\d.]+)s\s+(\d+)m([\d.]+)s/.exec(lines[lines.length - 1] ?? "");
  return m ? Number(m[1]) * 60 + Number(m[2]) + Number(m[3]) * 60 + Number(m[4]) : 0;
}

/**
 * A pipeline stage that pipes the chunks through a tool's stdin and stdout (with `io` a
 * descriptor, its stdout is that file; with "ignore", or with `input` a descriptor that is its
 * stdin, the source is not read). The tool runs under a shell that reports its CPU (`times`) once it has
 * succeeded; a tool that fails is the stage's error, with what it said.
 */
function viaTool(cmd: string, args: string[], io: number | "ignore" | "pipe" = "pipe", input?: number): (source: AsyncIterable<Buffer>) => AsyncGenerator<Buffer> {
  return async function* (source: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
    const stdin = input ?? (io === "ignore" ? "ignore" : "pipe");
    const stdout = typeof io === "number" ? io : "pipe";
    const child = spawn("sh", ["-c", `"$0" "$@" && times >&2`, cmd, ...args], { stdio: [stdin, stdout, "pipe"] });
    let said = "";
    child.stderr!.on("data", (d: Buffer) => (said = (said + d.toString()).slice(-4096)));
    const closed = new Promise<number | null>((resolve) => child.once("close", (code) => resolve(code)));
    const failed = new Promise<never>((_, reject) => child.once("error", reject));
    failed.catch(() => undefined);
    const feeding = (async () => {
      const sink = child.stdin;
      if (!sink) return;
      sink.on("error", () => undefined); // EPIPE when the tool dies: its exit code says why
      // Only the source's errors are the feeder's: a tool that stopped reading says why by its
      // exit. The rest of the source is read and dropped (leaving it early would abort the
      // pipeline before the tool's reason is known; what a stage reads is bounded upstream).
      for await (const chunk of source) {
        if (sink.destroyed) continue;
        if (!sink.write(chunk)) await Promise.race([once(sink, "drain").catch(() => undefined), closed]);
      }
      sink.end();
    })();
    feeding.catch(() => child.kill("SIGKILL"));
    try {
      if (child.stdout) for await (const chunk of child.stdout) yield chunk as Buffer;
      await feeding;
      const code = await Promise.race([closed, failed]);
      if (code !== 0) throw new Error(`${cmd} failed (exit ${code}): ${said.trim().split("\n")[0] ?? ""}`);
      childSeconds += childTimes(said);
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    }
  };
}
