/**
 * Running commands: the request body shared by exec and background processes, buffered exec,
 * and the NDJSON exec stream (`start`, `stdout`/`stderr` chunks, then `exit` or `error`).
 */
import { ERROR_STATUS, api, isErrorCode } from "@den/protocol";
import { concatBytes, fromBase64, toBase64, toBytes, utf8 } from "./bytes.js";
import { type DenClient, type RequestOptions, seg, validate } from "./client.js";
import { type DenApiError, InvalidResponseError, apiError } from "./errors.js";
import { readNdjson } from "./ndjson.js";
import type { WireInput } from "./types.js";

/**
 * A command: a string runs with `bash -c`, an array is an argv run directly (no shell).
 *
 * @example
 * ```ts
 * const a: Command = "ls -la | wc -l";
 * const b: Command = ["python3", "-c", "print(42)"];
 * ```
 */
export type Command = string | readonly string[];

/**
 * Options of a command, shared by {@link Sandbox.exec}, {@link Sandbox.execStream} and
 * {@link Processes.start}.
 *
 * @example
 * ```ts
 * const opts: CommandOptions = { cwd: "/workspace", env: { CI: "1" }, stdin: "data", timeoutSeconds: 60 };
 * ```
 */
export interface CommandOptions extends RequestOptions {
  /** Kill the command (its whole process tree) after this many seconds. */
  timeoutSeconds?: number;
  /** Working directory inside the sandbox (absolute). */
  cwd?: string;
  /** Extra environment variables. */
  env?: Record<string, string>;
  /** Bytes (or UTF-8 text) fed to the command's stdin, which is then closed. */
  stdin?: string | Uint8Array;
}

/**
 * Options of {@link Sandbox.exec} when it waits for the command.
 *
 * @example
 * ```ts
 * const r = await sbx.exec("npm test", { timeoutSeconds: 600, onStdout: (s) => process.stdout.write(s) });
 * ```
 */
export interface ExecOptions extends CommandOptions {
  /** Called with each stdout chunk as it arrives (switches to the streaming route). */
  onStdout?(chunk: string): void;
  /** Called with each stderr chunk as it arrives (switches to the streaming route). */
  onStderr?(chunk: string): void;
  /** `false` or absent: wait for the command. */
  background?: false;
}

/**
 * Options of {@link Sandbox.exec} with `background: true` and of {@link Processes.start}.
 *
 * @example
 * ```ts
 * const proc = await sbx.exec("python3 -m http.server 8000", { background: true, bufferBytes: 1 << 20 });
 * ```
 */
export interface BackgroundExecOptions extends CommandOptions {
  /** Start the command as a background process and return its {@link Process} handle. */
  background: true;
  /** Size of the ring buffer that keeps each output stream (4 KiB to 8 MiB). */
  bufferBytes?: number;
}

/**
 * What a finished command left behind.
 *
 * @example
 * ```ts
 * const { stdout, exitCode } = await sbx.exec("echo hi");
 * console.log(stdout, exitCode); // "hi\n" 0
 * ```
 */
export interface ExecResult {
  /** stdout as UTF-8 text (invalid sequences become U+FFFD; use `stdoutBytes` for binary). */
  stdout: string;
  stderr: string;
  /** null when the command was killed by a signal (see `signal`). */
  exitCode: number | null;
  signal: number | null;
  /** Whether `timeoutSeconds` ran out and the command was killed. */
  timedOut: boolean;
  /** The exact bytes of stdout. */
  stdoutBytes: Uint8Array;
  stderrBytes: Uint8Array;
  /** Run time: the server's measure (buffered), or the client's wall time (streamed). */
  durationMs: number;
}

/**
 * One chunk of output from {@link ExecStream}.
 *
 * @example
 * ```ts
 * for await (const c of sbx.execStream("make")) (c.stream === "stdout" ? process.stdout : process.stderr).write(c.data);
 * ```
 */
export interface ExecChunk {
  stream: "stdout" | "stderr";
  data: Uint8Array;
  /**
   * The chunk as text. Decoded in order with one streaming decoder per stream, so a character
   * split across two chunks comes out whole in the second one.
   */
  text(): string;
}

/**
 * How a streamed command ended.
 *
 * @example
 * ```ts
 * const { exitCode, timedOut } = await sbx.execStream("make").wait();
 * ```
 */
export interface ExecExit {
  /** The guest PID, from the stream's `start` line (null if there was none). */
  pid: number | null;
  exitCode: number | null;
  signal: number | null;
  timedOut: boolean;
}

type CommandBody = WireInput<typeof api.StartProcessRequest>;

/** Builds the snake_case body of an exec or start-process request. */
export function commandBody(cmd: Command, opts: CommandOptions & { bufferBytes?: number }): CommandBody {
  const body: CommandBody = typeof cmd === "string" ? { cmd } : { argv: [...cmd] };
  if (opts.cwd !== undefined) body.cwd = opts.cwd;
  if (opts.env !== undefined) body.env = opts.env;
  if (opts.stdin !== undefined) body.stdin_b64 = toBase64(toBytes(opts.stdin));
  if (opts.timeoutSeconds !== undefined) body.timeout_seconds = opts.timeoutSeconds;
  if (opts.bufferBytes !== undefined) body.buffer_bytes = opts.bufferBytes;
  return body;
}

function execBody(cmd: Command, opts: CommandOptions): WireInput<typeof api.ExecRequest> {
  const { buffer_bytes: _ignored, ...body } = commandBody(cmd, opts);
  return body;
}

/** Buffered exec: one request, one `ExecResult`. */
export async function execBuffered(client: DenClient, sandboxId: string, cmd: Command, opts: CommandOptions): Promise<ExecResult> {
  const r = await client.json(
    { method: "POST", path: `/v1/sandboxes/${seg(sandboxId)}/exec`, json: execBody(cmd, opts), signal: opts.signal },
    api.ExecResult.parse,
  );
  const stdoutBytes = r.stdout_b64 !== undefined ? fromBase64(r.stdout_b64) : toBytes(r.stdout);
  const stderrBytes = r.stderr_b64 !== undefined ? fromBase64(r.stderr_b64) : toBytes(r.stderr);
  return {
    stdout: r.stdout,
    stderr: r.stderr,
    exitCode: r.exit_code,
    signal: r.signal,
    timedOut: r.timed_out,
    stdoutBytes,
    stderrBytes,
    durationMs: r.duration_ms,
  };
}

/** An `error` line's typed error; its status is the one the code maps to (the response itself was a 200). */
function streamError(e: { code: string; message: string }): DenApiError {
  return apiError(e.code, e.message, isErrorCode(e.code) ? ERROR_STATUS[e.code] : 500);
}

const KNOWN_LINE_TYPES: ReadonlySet<string> = new Set<api.ExecStreamLine["type"]>(["start", "stdout", "stderr", "exit", "error"]);

/** The validated lines of an exec stream; the request starts when this is called. */
function execLines(client: DenClient, sandboxId: string, cmd: Command, opts: CommandOptions): AsyncGenerator<api.ExecStreamLine, void, undefined> {
  const response = client.request({
    method: "POST",
    path: `/v1/sandboxes/${seg(sandboxId)}/exec/stream`,
    json: execBody(cmd, opts),
    accept: "application/x-ndjson",
    signal: opts.signal,
  });
  // The request runs before anyone iterates; its failure is reported by the iteration.
  response.catch(() => {});
  return (async function* () {
    const res = await response;
    if (!res.body) throw new InvalidResponseError("invalid_response", "exec stream response has no body", res.status);
    for await (const v of readNdjson(res.body, { status: res.status })) {
      // Lines of a type this SDK does not know (say, a future keep-alive) are skipped.
      const type = typeof v === "object" && v !== null ? (v as { type?: unknown }).type : undefined;
      if (typeof type === "string" && !KNOWN_LINE_TYPES.has(type)) continue;
      yield validate(v, api.ExecStreamLine.parse, res.status);
    }
  })();
}

/**
 * Runs a command on the streaming route, calling `onStdout`/`onStderr` as chunks arrive, and
 * returns the same {@link ExecResult} a buffered exec would.
 */
export async function execWithCallbacks(client: DenClient, sandboxId: string, cmd: Command, opts: ExecOptions): Promise<ExecResult> {
  const started = Date.now();
  const out: Uint8Array[] = [];
  const err: Uint8Array[] = [];
  const outDec = new TextDecoder();
  const errDec = new TextDecoder();
  for await (const line of execLines(client, sandboxId, cmd, opts)) {
    switch (line.type) {
      case "start":
        break;
      case "stdout": {
        const data = fromBase64(line.data_b64);
        out.push(data);
        const s = outDec.decode(data, { stream: true });
        if (s && opts.onStdout) opts.onStdout(s);
        break;
      }
      case "stderr": {
        const data = fromBase64(line.data_b64);
        err.push(data);
        const s = errDec.decode(data, { stream: true });
        if (s && opts.onStderr) opts.onStderr(s);
        break;
      }
      case "error":
        throw streamError(line.error);
      case "exit": {
        // Bytes left of an incomplete character at the very end come out as U+FFFD.
        const restOut = outDec.decode();
        if (restOut && opts.onStdout) opts.onStdout(restOut);
        const restErr = errDec.decode();
        if (restErr && opts.onStderr) opts.onStderr(restErr);
        const stdoutBytes = concatBytes(out);
        const stderrBytes = concatBytes(err);
        return {
          stdout: utf8(stdoutBytes),
          stderr: utf8(stderrBytes),
          exitCode: line.exit_code,
          signal: line.signal,
          timedOut: line.timed_out,
          stdoutBytes,
          stderrBytes,
          durationMs: Date.now() - started,
        };
      }
    }
  }
  throw new InvalidResponseError("invalid_response", "exec stream ended without an exit line", 200);
}

/**
 * A command running on the streaming route: an async iterable of its output chunks, and
 * {@link ExecStream.wait} for how it ended. The request starts as soon as the stream is
 * created; iterate it or call `wait()` (which discards output nobody read), or the command
 * may block on a full pipe. It can be iterated once. Leaving the loop early (`break`) or
 * aborting `signal` closes the connection (Den's server then kills the command), and `wait()`
 * rejects with an `AbortError`.
 *
 * @example
 * ```ts
 * const run = sbx.execStream(["pytest", "-x"]);
 * for await (const chunk of run) process.stdout.write(chunk.text());
 * const { exitCode } = await run.wait();
 * ```
 */
export class ExecStream implements AsyncIterable<ExecChunk> {
  readonly #lines: AsyncGenerator<api.ExecStreamLine, void, undefined>;
  readonly #exit: Promise<ExecExit>;
  #resolve!: (e: ExecExit) => void;
  #reject!: (e: unknown) => void;
  #settled = false;
  #claimed = false;

  /** @internal Use {@link Sandbox.execStream}. */
  constructor(client: DenClient, sandboxId: string, cmd: Command, opts: CommandOptions = {}) {
    this.#exit = new Promise<ExecExit>((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
    this.#exit.catch(() => {});
    this.#lines = execLines(client, sandboxId, cmd, opts);
  }

  /**
   * The output chunks, in order, until the command exits. An `error` line from the server
   * throws its typed error.
   *
   * @example
   * ```ts
   * for await (const { stream, data } of sbx.execStream("cat big.bin")) sink(stream, data);
   * ```
   */
  [Symbol.asyncIterator](): AsyncIterator<ExecChunk> {
    if (this.#claimed) throw new Error("an ExecStream can be iterated only once");
    this.#claimed = true;
    return this.#chunks();
  }

  /**
   * Resolves with how the command ended. If nobody iterates the stream, this reads (and drops)
   * the output itself.
   *
   * @example
   * ```ts
   * const exit = await sbx.execStream("sleep 1; exit 3").wait();
   * console.log(exit.exitCode); // 3
   * ```
   */
  async wait(): Promise<ExecExit> {
    if (!this.#claimed) {
      this.#claimed = true;
      for await (const _ of this.#chunks());
    }
    return this.#exit;
  }

  async *#chunks(): AsyncGenerator<ExecChunk, void, undefined> {
    const decoders = { stdout: new TextDecoder(), stderr: new TextDecoder() };
    let pid: number | null = null;
    try {
      for await (const line of this.#lines) {
        if (line.type === "start") {
          pid = line.pid;
        } else if (line.type === "stdout" || line.type === "stderr") {
          const data = fromBase64(line.data_b64);
          const text = decoders[line.type].decode(data, { stream: true });
          yield { stream: line.type, data, text: () => text };
        } else if (line.type === "exit") {
          this.#settle({ pid, exitCode: line.exit_code, signal: line.signal, timedOut: line.timed_out });
          return;
        } else if (line.type === "error") {
          throw streamError(line.error);
        }
      }
      throw new InvalidResponseError("invalid_response", "exec stream ended without an exit line", 200);
    } catch (e) {
      this.#settle(undefined, e);
      throw e;
    } finally {
      if (!this.#settled) this.#settle(undefined, new DOMException("the exec stream was closed before the command exited", "AbortError"));
      await this.#lines.return();
    }
  }

  #settle(exit: ExecExit | undefined, error?: unknown): void {
    if (this.#settled) return;
    this.#settled = true;
    if (exit) this.#resolve(exit);
    else this.#reject(error);
  }
}
