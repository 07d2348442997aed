/**
 * Background processes: start one, wait for it, read its ring-buffered output, feed its stdin,
 * kill it.
 */
import { api } from "@den/protocol";
import { fromBase64, toBase64, toBytes, utf8 } from "./bytes.js";
import { type DenClient, type RequestOptions, listOf, seg } from "./client.js";
import { type Command, type CommandOptions, commandBody } from "./exec.js";
import { type ProcessStatus, toProcessStatus } from "./types.js";

/** Longest single `wait_seconds` long-poll; longer waits are several polls. */
const WAIT_POLL_SECONDS = 30;
/** Input is sent in chunks of this many bytes (base64 of it stays under the 350 000-char cap). */
const INPUT_CHUNK_BYTES = 192 * 1024;

/**
 * Options of {@link Process.logs}.
 *
 * @example
 * ```ts
 * const opts: LogsOptions = { stream: "stderr", offset: 0 };
 * ```
 */
export interface LogsOptions extends RequestOptions {
  /** Which stream to read. Default `"stdout"`. */
  stream?: "stdout" | "stderr";
  /** Byte offset into the stream's whole output to read from. Default 0. */
  offset?: number;
}

/**
 * A slice of a background process's output.
 *
 * @example
 * ```ts
 * let offset = 0;
 * const chunk: ProcessLogs = await proc.logs({ offset });
 * offset = chunk.nextOffset;
 * ```
 */
export interface ProcessLogs {
  data: Uint8Array;
  /** `data` as UTF-8 text. */
  text(): string;
  /** Where `data` starts (later than the requested offset if the ring buffer dropped bytes). */
  offset: number;
  /** The offset to ask for next. */
  nextOffset: number;
  /** Whether bytes between the requested offset and `offset` were dropped from the buffer. */
  dropped: boolean;
  /** Whether the stream is closed and everything has been read. */
  eof: boolean;
}

/**
 * Options of {@link Process.wait}.
 *
 * @example
 * ```ts
 * const st = await proc.wait({ timeoutSeconds: 10 });
 * ```
 */
export interface WaitOptions extends RequestOptions {
  /** Give up after this many seconds and resolve with the still-running status. Default: wait until it exits. */
  timeoutSeconds?: number;
}

/**
 * A handle on a background process in a sandbox.
 *
 * @example
 * ```ts
 * const proc = await sbx.exec("python3 -m http.server 8000", { background: true });
 * console.log(proc.proc, proc.pid);
 * const { text } = await proc.logs();
 * await proc.kill();
 * ```
 */
export class Process {
  readonly #client: DenClient;
  readonly #sandboxId: string;
  #status: ProcessStatus;

  /** @internal Use {@link Processes.start}, {@link Processes.get} or {@link Sandbox.exec} with `background: true`. */
  constructor(client: DenClient, sandboxId: string, status: ProcessStatus) {
    this.#client = client;
    this.#sandboxId = sandboxId;
    this.#status = status;
  }

  /**
   * The process handle id (unique within its sandbox).
   *
   * @example
   * ```ts
   * const again = await sbx.processes.get(proc.proc);
   * ```
   */
  get proc(): number {
    return this.#status.proc;
  }

  /**
   * The process's PID inside the guest.
   *
   * @example
   * ```ts
   * await sbx.exec(`kill -USR1 ${proc.pid}`);
   * ```
   */
  get pid(): number {
    return this.#status.pid;
  }

  /**
   * The id of the sandbox the process runs in.
   *
   * @example
   * ```ts
   * console.log(proc.sandboxId);
   * ```
   */
  get sandboxId(): string {
    return this.#sandboxId;
  }

  /**
   * The last known status (updated by {@link Process.refresh} and {@link Process.wait}).
   *
   * @example
   * ```ts
   * if (proc.status.running) await proc.kill();
   * ```
   */
  get status(): ProcessStatus {
    return this.#status;
  }

  #path(suffix = ""): string {
    return `/v1/sandboxes/${seg(this.#sandboxId)}/processes/${seg(this.proc)}${suffix}`;
  }

  /**
   * Fetches the current status without waiting.
   *
   * @example
   * ```ts
   * const { running } = await proc.refresh();
   * ```
   */
  async refresh(opts: RequestOptions = {}): Promise<ProcessStatus> {
    return this.#get(undefined, opts.signal);
  }

  async #get(waitSeconds: number | undefined, signal: AbortSignal | undefined): Promise<ProcessStatus> {
    const w = await this.#client.json(
      { method: "GET", path: this.#path(), query: { wait_seconds: waitSeconds }, signal },
      api.ProcessInfo.parse,
    );
    this.#status = toProcessStatus(w);
    return this.#status;
  }

  /**
   * Waits until the process exits (long-polling the server, 30 s at a time) and resolves with
   * its final status. With `timeoutSeconds`, resolves after at most about that long even if it
   * is still running (check `running`).
   *
   * @example
   * ```ts
   * const st = await proc.wait({ timeoutSeconds: 60 });
   * if (st.running) await proc.kill();
   * else console.log("exit", st.exitCode);
   * ```
   */
  async wait(opts: WaitOptions = {}): Promise<ProcessStatus> {
    const deadline = opts.timeoutSeconds === undefined ? Infinity : Date.now() + opts.timeoutSeconds * 1000;
    for (;;) {
      const left = deadline - Date.now();
      const waitSeconds = Math.max(0, Math.min(WAIT_POLL_SECONDS, Math.ceil(left / 1000)));
      const st = await this.#get(waitSeconds, opts.signal);
      if (!st.running || Date.now() >= deadline || waitSeconds === 0) return st;
    }
  }

  /**
   * Reads buffered output from `offset` on. The server keeps a ring buffer per stream, so old
   * output may be gone (`dropped`).
   *
   * @example
   * ```ts
   * let offset = 0;
   * for (;;) {
   *   const chunk = await proc.logs({ offset });
   *   process.stdout.write(chunk.data);
   *   offset = chunk.nextOffset;
   *   if (chunk.eof) break;
   *   await new Promise((r) => setTimeout(r, 500));
   * }
   * ```
   */
  async logs(opts: LogsOptions = {}): Promise<ProcessLogs> {
    const w = await this.#client.json(
      { method: "GET", path: this.#path("/logs"), query: { stream: opts.stream ?? "stdout", offset: opts.offset ?? 0 }, signal: opts.signal },
      api.ProcessLogs.parse,
    );
    const data = fromBase64(w.data_b64);
    return { data, text: () => utf8(data), offset: w.offset, nextOffset: w.next_offset, dropped: w.dropped, eof: w.eof };
  }

  /**
   * Writes to the process's stdin (UTF-8 for a string). Large data is sent in several requests.
   *
   * @example
   * ```ts
   * const proc = await sbx.exec("cat > /tmp/out", { background: true });
   * await proc.write("hello\n");
   * await proc.closeStdin();
   * ```
   */
  async write(data: string | Uint8Array, opts: RequestOptions = {}): Promise<void> {
    const bytes = toBytes(data);
    for (let i = 0; i < bytes.length; i += INPUT_CHUNK_BYTES) {
      await this.#input(bytes.subarray(i, i + INPUT_CHUNK_BYTES), false, opts.signal);
    }
  }

  /**
   * Closes the process's stdin (it reads end-of-file).
   *
   * @example
   * ```ts
   * await proc.closeStdin();
   * ```
   */
  async closeStdin(opts: RequestOptions = {}): Promise<void> {
    await this.#input(new Uint8Array(0), true, opts.signal);
  }

  async #input(bytes: Uint8Array, eof: boolean, signal: AbortSignal | undefined): Promise<void> {
    const body: WireInputBody = { data_b64: toBase64(bytes) };
    if (eof) body.eof = true;
    await this.#client.empty({ method: "POST", path: this.#path("/input"), json: body, signal });
  }

  /**
   * Kills the process and its whole process tree.
   *
   * @example
   * ```ts
   * await proc.kill();
   * ```
   */
  async kill(opts: RequestOptions = {}): Promise<void> {
    await this.#client.empty({ method: "DELETE", path: this.#path(), signal: opts.signal });
  }
}

type WireInputBody = (typeof api.ProcessInputRequest)["_input"];

/**
 * The background processes of one sandbox: `sbx.processes`.
 *
 * @example
 * ```ts
 * for (const p of await sbx.processes.list()) if (p.status.running) await p.kill();
 * ```
 */
export class Processes {
  readonly #client: DenClient;
  readonly #sandboxId: string;

  /** @internal Use `sbx.processes`. */
  constructor(client: DenClient, sandboxId: string) {
    this.#client = client;
    this.#sandboxId = sandboxId;
  }

  /**
   * Starts a command in the background. Same as `sbx.exec(cmd, { background: true, ... })`.
   *
   * @example
   * ```ts
   * const server = await sbx.processes.start(["node", "server.js"], { cwd: "/app", env: { PORT: "3000" } });
   * ```
   */
  async start(cmd: Command, opts: CommandOptions & { bufferBytes?: number } = {}): Promise<Process> {
    const w = await this.#client.json(
      { method: "POST", path: `/v1/sandboxes/${seg(this.#sandboxId)}/processes`, json: commandBody(cmd, opts), signal: opts.signal },
      api.ProcessInfo.parse,
    );
    return new Process(this.#client, this.#sandboxId, toProcessStatus(w));
  }

  /**
   * The sandbox's background processes (running and exited ones the server still tracks).
   *
   * @example
   * ```ts
   * const running = (await sbx.processes.list()).filter((p) => p.status.running);
   * ```
   */
  async list(opts: RequestOptions = {}): Promise<Process[]> {
    const w = await this.#client.json(
      { method: "GET", path: `/v1/sandboxes/${seg(this.#sandboxId)}/processes`, signal: opts.signal },
      listOf("processes", api.ProcessInfo.parse),
    );
    return w.map((p) => new Process(this.#client, this.#sandboxId, toProcessStatus(p)));
  }

  /**
   * A handle on one process by its `proc` id (throws {@link ProcessNotFoundError} if unknown).
   *
   * @example
   * ```ts
   * const proc = await sbx.processes.get(3);
   * ```
   */
  async get(proc: number, opts: RequestOptions = {}): Promise<Process> {
    const w = await this.#client.json(
      { method: "GET", path: `/v1/sandboxes/${seg(this.#sandboxId)}/processes/${seg(proc)}`, signal: opts.signal },
      api.ProcessInfo.parse,
    );
    return new Process(this.#client, this.#sandboxId, toProcessStatus(w));
  }
}
