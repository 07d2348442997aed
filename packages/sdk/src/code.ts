/**
 * The code interpreter: running code in a sandbox made from `code-interpreter-v1` (its
 * kernels keep variables and imports between runs), and its contexts. A run streams what the
 * code prints and returns as NDJSON lines (`POST /v1/sandboxes/{id}/code/execute`).
 */
import { ERROR_STATUS, api, isErrorCode } from "@den/protocol";
import { type DenClient, type RequestOptions, listOf, seg, validate } from "./client.js";
import { type DenApiError, TimeoutError, UnavailableError, apiError } from "./errors.js";
import { readNdjson } from "./ndjson.js";

/**
 * The longest line of a run's stream the SDK reads: 32 MiB (an image's base64 is one line).
 *
 * @example
 * ```ts
 * console.log(CODE_MAX_LINE_BYTES); // 33554432
 * ```
 */
export const CODE_MAX_LINE_BYTES = 32 * 1024 * 1024;

/**
 * A code context: a kernel of one language whose state (variables, imports, working
 * directory) persists between runs.
 *
 * @example
 * ```ts
 * const ctx: CodeContext = await sbx.codeContexts.create({ language: "python", cwd: "/tmp" });
 * ```
 */
export interface CodeContext {
  id: string;
  language: string;
  cwd: string;
}

/**
 * One result of a run: the value of the cell's last expression (`isMainResult`) or an object
 * it displayed (a plot), in every MIME form the kernel gave. `png`, `jpeg` and `pdf` are
 * base64; `json` and `extra` are JSON values.
 *
 * @example
 * ```ts
 * const { results } = await sbx.runCode("import matplotlib.pyplot as plt; plt.plot([1, 2]); plt.show()");
 * const png = results.find((r) => r.png)?.png; // base64
 * ```
 */
export interface ExecutionResult {
  isMainResult: boolean;
  text?: string;
  html?: string;
  markdown?: string;
  svg?: string;
  png?: string;
  jpeg?: string;
  pdf?: string;
  latex?: string;
  json?: unknown;
  javascript?: string;
  extra?: unknown;
}

/**
 * An exception the code raised: its class `name`, its message (`value`) and the formatted
 * `traceback`. A run that raises still resolves: check {@link Execution.error}.
 *
 * @example
 * ```ts
 * const { error } = await sbx.runCode("1 / 0");
 * console.log(error?.name, error?.value); // ZeroDivisionError division by zero
 * ```
 */
export interface ExecutionError {
  name: string;
  value: string;
  traceback: string;
}

/**
 * What a run left behind: its results, what it printed (`logs`, one entry per chunk as it
 * came), the exception it raised if any, and the kernel's execution count. `text` is the
 * main result's text (the cell's value, as a REPL shows it).
 *
 * @example
 * ```ts
 * const e = await sbx.runCode("x = 41\nprint('hi')\nx + 1");
 * console.log(e.text, e.logs.stdout); // "42" ["hi\n"]
 * ```
 */
export interface Execution {
  results: ExecutionResult[];
  logs: { stdout: string[]; stderr: string[] };
  error?: ExecutionError;
  executionCount?: number;
  text?: string;
}

/**
 * Options of {@link Sandbox.runCode}.
 *
 * @example
 * ```ts
 * const opts: RunCodeOptions = { language: "python", envs: { DEBUG: "1" }, timeoutMs: 30_000, onStdout: (s) => process.stdout.write(s) };
 * ```
 */
export interface RunCodeOptions extends RequestOptions {
  /** The language's default context (`python` when neither this nor `context` is given). Not with `context`. */
  language?: string;
  /** Run in this context (its id, or the object {@link CodeContexts.create} returned). */
  context?: string | CodeContext;
  /** Environment variables for this run, on top of the sandbox's own. */
  envs?: Record<string, string>;
  /**
   * Give up after this many milliseconds: the request is aborted (Den's server then
   * interrupts the run) and the call rejects with a {@link TimeoutError}. Default: none.
   */
  timeoutMs?: number;
  /** Called with each piece of stdout as it is printed. */
  onStdout?(text: string): void | Promise<void>;
  /** Called with each piece of stderr as it is printed. */
  onStderr?(text: string): void | Promise<void>;
  /** Called with each result as it comes (a displayed plot before the cell ends). */
  onResult?(result: ExecutionResult): void | Promise<void>;
  /** Called with the exception the code raised. */
  onError?(error: ExecutionError): void | Promise<void>;
}

/**
 * Options of {@link CodeContexts.create}.
 *
 * @example
 * ```ts
 * const opts: CreateCodeContextOptions = { language: "python", cwd: "/home/user" };
 * ```
 */
export interface CreateCodeContextOptions extends RequestOptions {
  /** The context's language (default: python). */
  language?: string;
  /** Its working directory (absolute). */
  cwd?: string;
}

function toResult(line: api.CodeResult): ExecutionResult {
  const r: ExecutionResult = { isMainResult: line.is_main_result === true };
  for (const k of ["text", "html", "markdown", "svg", "png", "jpeg", "pdf", "latex", "javascript"] as const) {
    const v = line[k];
    if (typeof v === "string") r[k] = v;
  }
  if (line.json !== undefined && line.json !== null) r.json = line.json;
  if (line.extra !== undefined && line.extra !== null) r.extra = line.extra;
  return r;
}

const KNOWN: ReadonlySet<string> = new Set(["stdout", "stderr", "result", "error", "number_of_executions", "end_of_execution", "unexpected_end_of_execution"]);

/** Runs code on the code interpreter's streaming route (see {@link Sandbox.runCode}). */
export async function runCode(client: DenClient, sandboxId: string, code: string, opts: RunCodeOptions = {}): Promise<Execution> {
  const body: api.RunCodeRequest = { code };
  if (opts.language !== undefined) body.language = opts.language;
  if (opts.context !== undefined) body.context_id = typeof opts.context === "string" ? opts.context : opts.context.id;
  if (opts.envs !== undefined) body.env_vars = opts.envs;
  const timer = opts.timeoutMs !== undefined ? new AbortController() : undefined;
  const signals = [opts.signal, timer?.signal].filter((s): s is AbortSignal => s !== undefined);
  const signal = signals.length > 1 ? AbortSignal.any(signals) : signals[0];
  const handle = timer ? setTimeout(() => timer.abort(), opts.timeoutMs) : undefined;
  const execution: Execution = { results: [], logs: { stdout: [], stderr: [] } };
  try {
    const res = await client.request({ method: "POST", path: `/v1/sandboxes/${seg(sandboxId)}/code/execute`, json: body, accept: "application/x-ndjson", signal });
    if (!res.body) throw new UnavailableError("agent_unavailable", "the code interpreter's answer has no body", res.status);
    for await (const v of readNdjson(res.body, { status: res.status, maxLineBytes: CODE_MAX_LINE_BYTES })) {
      const type = typeof v === "object" && v !== null ? (v as { type?: unknown }).type : undefined;
      // Lines of a type this SDK does not know (keepalive, or a later addition) are skipped.
      if (typeof type !== "string" || !KNOWN.has(type)) continue;
      const line = validate(v, api.CodeStreamLine.parse, res.status);
      switch (line.type) {
        case "stdout":
          execution.logs.stdout.push(line.text);
          await opts.onStdout?.(line.text);
          break;
        case "stderr":
          execution.logs.stderr.push(line.text);
          await opts.onStderr?.(line.text);
          break;
        case "result": {
          const r = toResult(line);
          execution.results.push(r);
          if (r.isMainResult && r.text !== undefined) execution.text = r.text;
          await opts.onResult?.(r);
          break;
        }
        case "error":
          execution.error = { name: line.name, value: line.value, traceback: line.traceback };
          await opts.onError?.(execution.error);
          break;
        case "number_of_executions":
          execution.executionCount = line.execution_count;
          break;
        case "end_of_execution":
          return execution;
        case "unexpected_end_of_execution":
          throw endError(line.error, execution);
      }
    }
    throw endError(undefined, execution);
  } catch (e) {
    if (timer?.signal.aborted && !opts.signal?.aborted) {
      throw new TimeoutError("timeout", `the code ran past timeoutMs (${opts.timeoutMs} ms); it was interrupted`, ERROR_STATUS.timeout, { execution });
    }
    throw e;
  } finally {
    if (handle !== undefined) clearTimeout(handle);
  }
}

/** A run that ended without its end: Den's error if it said one, else the kernel's end. `details.execution` holds what came. */
function endError(e: { code: string; message: string } | undefined, execution: Execution): DenApiError {
  const code = e?.code ?? "agent_unavailable";
  const message = e?.message ?? "the run ended before its end (did the kernel die?)";
  return apiError(code, message, isErrorCode(code) ? ERROR_STATUS[code] : 503, { execution });
}

/**
 * The code interpreter's contexts of one sandbox (`sbx.codeContexts`): each a kernel whose
 * state persists between runs; pass one to {@link Sandbox.runCode} as `context`.
 *
 * @example
 * ```ts
 * const ctx = await sbx.codeContexts.create({ language: "python" });
 * await sbx.runCode("x = 1", { context: ctx });
 * console.log((await sbx.runCode("x + 1", { context: ctx })).text); // "2"
 * await sbx.codeContexts.remove(ctx);
 * ```
 */
export class CodeContexts {
  readonly #client: DenClient;
  readonly #id: string;

  /** @internal Use `sbx.codeContexts`. */
  constructor(client: DenClient, sandboxId: string) {
    this.#client = client;
    this.#id = sandboxId;
  }

  #path(ctx?: string | CodeContext, suffix = ""): string {
    const base = `/v1/sandboxes/${seg(this.#id)}/code/contexts`;
    return ctx === undefined ? base : `${base}/${seg(typeof ctx === "string" ? ctx : ctx.id)}${suffix}`;
  }

  /**
   * Starts a context (a kernel of `language`, default python, in `cwd`).
   *
   * @example
   * ```ts
   * const ctx = await sbx.codeContexts.create({ language: "python", cwd: "/tmp" });
   * ```
   */
  async create(opts: CreateCodeContextOptions = {}): Promise<CodeContext> {
    const body: api.CreateCodeContextRequest = {};
    if (opts.language !== undefined) body.language = opts.language;
    if (opts.cwd !== undefined) body.cwd = opts.cwd;
    const c = await this.#client.json({ method: "POST", path: this.#path(), json: body, signal: opts.signal }, api.CodeContext.parse);
    return { id: c.id, language: c.language, cwd: c.cwd };
  }

  /**
   * The sandbox's contexts (the default ones too, once used).
   *
   * @example
   * ```ts
   * for (const c of await sbx.codeContexts.list()) console.log(c.id, c.language);
   * ```
   */
  async list(opts: RequestOptions = {}): Promise<CodeContext[]> {
    const list = await this.#client.json({ method: "GET", path: this.#path(), signal: opts.signal }, listOf("contexts", api.CodeContext.parse));
    return list.map((c) => ({ id: c.id, language: c.language, cwd: c.cwd }));
  }

  /**
   * Restarts a context: its kernel starts over (its variables are gone). An unknown one is a
   * `NotFoundError` (`context_not_found`).
   *
   * @example
   * ```ts
   * await sbx.codeContexts.restart(ctx);
   * ```
   */
  async restart(ctx: string | CodeContext, opts: RequestOptions = {}): Promise<void> {
    const res = await this.#client.request({ method: "POST", path: this.#path(ctx, "/restart"), signal: opts.signal });
    await res.body?.cancel();
  }

  /**
   * Removes a context (its kernel stops). An unknown one is a `NotFoundError` (`context_not_found`).
   *
   * @example
   * ```ts
   * await sbx.codeContexts.remove(ctx.id);
   * ```
   */
  async remove(ctx: string | CodeContext, opts: RequestOptions = {}): Promise<void> {
    const res = await this.#client.request({ method: "DELETE", path: this.#path(ctx), signal: opts.signal });
    await res.body?.cancel();
  }
}
