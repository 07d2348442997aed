/** The `Sandbox` class: create, connect, list, and everything done to one sandbox. */
import "./polyfill.js";
import { Pty, type PtyOptions } from "./pty.js";
import { toCheckpointInfo, type CheckpointInfo } from "./checkpoints.js";
import { api } from "@den/protocol";
import { DenClient, type DenClientOptions, type RequestOptions, listOf, seg, validate } from "./client.js";
import { SandboxNotFoundError } from "./errors.js";
import {
  type BackgroundExecOptions,
  type Command,
  type CommandOptions,
  type ExecOptions,
  type ExecResult,
  ExecStream,
  execBuffered,
  execWithCallbacks,
} from "./exec.js";
import { Filesystem } from "./filesystem.js";
import { CodeContexts, type Execution, type RunCodeOptions, runCode } from "./code.js";
import { readNdjson } from "./ndjson.js";
import { type Process, Processes } from "./processes.js";
import {
  type OnIdle,
  type SandboxEvent,
  type SandboxInfo,
  type SandboxState,
  type WireInput,
  type NetworkPolicy,
  type NetworkStatus,
  type VolumeMount,
  toNetworkPolicy,
  toSandboxEvent,
  toSandboxInfo,
  toWireMounts,
  toWireNetwork,
} from "./types.js";
import type { Duplex } from "node:stream";
import { type ListeningPort, type PortUrl, type PortUrlOptions, connectPort, createPortUrl, listPorts } from "./ports.js";

/**
 * Options of {@link Sandbox.create}: the sandbox's shape and lifetime, plus how to reach the API.
 *
 * @example
 * ```ts
 * const opts: CreateSandboxOptions = { template: "base", ttlSeconds: 3600, idleTimeoutSeconds: 600, onIdle: "hibernate", metadata: { task_id: "t-42" } };
 * ```
 */
export interface CreateSandboxOptions extends DenClientOptions, RequestOptions {
  /** Template name or `name@version`. Default: the server's default template. */
  template?: string;
  /** Keep the sandbox (hibernated) across its idle timeout instead of destroying it. */
  persistent?: boolean;
  /** Hard deadline from creation, in seconds; `null` (with `persistent`) means none. Server default 3600. */
  ttlSeconds?: number | null;
  /** Seconds without activity before `onIdle` applies. */
  idleTimeoutSeconds?: number;
  /** What happens when idle: `"hibernate"` or `"destroy"`. */
  onIdle?: OnIdle;
  /** Your labels (filterable in {@link Sandbox.list}). */
  metadata?: Record<string, string>;
  vcpus?: number;
  memoryMb?: number;
  diskMb?: number;
  /** Environment variables every command in the sandbox gets. */
  env?: Record<string, string>;
  /** Its network (default: egress `none`). */
  network?: NetworkPolicy;
  /** Volumes to mount (see {@link Volumes}); at most 4. */
  volumes?: VolumeMount[];
}

/**
 * Options of {@link Sandbox.connect}.
 *
 * @example
 * ```ts
 * const sbx = await Sandbox.connect(id, { apiUrl: "http://den:8787", signal: AbortSignal.timeout(5000) });
 * ```
 */
export interface ConnectOptions extends DenClientOptions, RequestOptions {}

/**
 * Options of {@link Sandbox.list}.
 *
 * @example
 * ```ts
 * const opts: ListSandboxesOptions = { state: "running", metadata: { task_id: "t-42" }, pageSize: 100 };
 * ```
 */
export interface ListSandboxesOptions extends DenClientOptions, RequestOptions {
  /** Only sandboxes in this state. */
  state?: SandboxState;
  /** Only sandboxes whose metadata has all these key/value pairs. */
  metadata?: Record<string, string>;
  /** Sandboxes per request (the `limit` query parameter; the server caps it at 200). */
  pageSize?: number;
}

/**
 * Options of {@link Sandbox.events}.
 *
 * @example
 * ```ts
 * const opts: EventsOptions = { after: 10 };
 * ```
 */
export interface EventsOptions extends RequestOptions {
  /** Only events with a `seq` greater than this. */
  after?: number;
  /** Keep the connection open and yield new events as they happen. */
  follow?: boolean;
}

/**
 * One sandbox: a long-running microVM. Get one with {@link Sandbox.create},
 * {@link Sandbox.connect} or from {@link Sandbox.list}.
 *
 * @example
 * ```ts
 * import { Sandbox } from "@den/sdk";
 *
 * await using sbx = await Sandbox.create({ template: "base" });
 * await sbx.filesystem.write("/workspace/hello.py", "print('hello')");
 * const { stdout } = await sbx.exec("python3 /workspace/hello.py");
 * console.log(stdout); // "hello\n"
 * // destroyed when the scope ends
 * ```
 */
/** Commands bounded by this timeout may use the buffered exec route. */
const BUFFERED_EXEC_MAX_SECONDS = 240;

export class Sandbox {
  readonly #client: DenClient;
  #info: SandboxInfo;
  /**
   * The sandbox's background processes.
   *
   * @example
   * ```ts
   * const procs = await sbx.processes.list();
   * ```
   */
  readonly processes: Processes;
  /**
   * The sandbox's files.
   *
   * @example
   * ```ts
   * const text = await sbx.filesystem.readText("/etc/os-release");
   * ```
   */
  readonly filesystem: Filesystem;
  /**
   * The code interpreter's contexts (a sandbox made from `code-interpreter-v1`): kernels whose
   * state persists between {@link Sandbox.runCode} runs.
   *
   * @example
   * ```ts
   * const ctx = await sbx.codeContexts.create({ language: "python" });
   * ```
   */
  readonly codeContexts: CodeContexts;

  /** @internal Use {@link Sandbox.create}, {@link Sandbox.connect} or {@link Sandbox.list}. */
  constructor(client: DenClient, info: SandboxInfo) {
    this.#client = client;
    this.#info = info;
    this.processes = new Processes(client, info.id);
    this.filesystem = new Filesystem(client, info.id);
    this.codeContexts = new CodeContexts(client, info.id);
  }

  /**
   * Creates a sandbox and resolves once the API has answered (the returned `state` says whether
   * it is already `running`).
   *
   * @example
   * ```ts
   * const sbx = await Sandbox.create({
   *   template: "base",
   *   ttlSeconds: 2 * 3600,
   *   idleTimeoutSeconds: 900,
   *   onIdle: "hibernate",
   *   metadata: { task_id: "t-42" },
   *   memoryMb: 2048,
   * });
   * ```
   */
  static async create(opts: CreateSandboxOptions = {}): Promise<Sandbox> {
    const client = new DenClient(opts);
    const body: WireInput<typeof api.CreateSandboxRequest> = {};
    if (opts.template !== undefined) body.template = opts.template;
    if (opts.persistent !== undefined) body.persistent = opts.persistent;
    if (opts.ttlSeconds !== undefined) body.ttl_seconds = opts.ttlSeconds;
    if (opts.idleTimeoutSeconds !== undefined) body.idle_timeout_seconds = opts.idleTimeoutSeconds;
    if (opts.onIdle !== undefined) body.on_idle = opts.onIdle;
    if (opts.metadata !== undefined) body.metadata = opts.metadata;
    if (opts.vcpus !== undefined) body.vcpus = opts.vcpus;
    if (opts.memoryMb !== undefined) body.memory_mb = opts.memoryMb;
    if (opts.diskMb !== undefined) body.disk_mb = opts.diskMb;
    if (opts.env !== undefined) body.env = opts.env;
    if (opts.network !== undefined) body.network = toWireNetwork(opts.network);
    if (opts.volumes !== undefined) body.volumes = toWireMounts(opts.volumes);
    const w = await client.json({ method: "POST", path: "/v1/sandboxes", json: body, signal: opts.signal }, api.Sandbox.parse);
    return new Sandbox(client, toSandboxInfo(w));
  }

  /**
   * Attaches to an existing sandbox by id (fetching its info; throws
   * {@link SandboxNotFoundError} if there is none, or it belongs to another owner).
   *
   * @example
   * ```ts
   * const sbx = await Sandbox.connect("sbx_abcdefghijklmnop");
   * console.log(sbx.state);
   * ```
   */
  static async connect(id: string, opts: ConnectOptions = {}): Promise<Sandbox> {
    const client = new DenClient(opts);
    const w = await client.json({ method: "GET", path: `/v1/sandboxes/${seg(id)}`, signal: opts.signal }, api.Sandbox.parse);
    return new Sandbox(client, toSandboxInfo(w));
  }

  /**
   * Every sandbox of this key that matches the filters, newest first, fetched a page at a time
   * (following `next_cursor`) as you iterate.
   *
   * @example
   * ```ts
   * for await (const info of Sandbox.list({ state: "running", metadata: { task_id: "t-42" } })) {
   *   console.log(info.id, info.createdAt);
   * }
   * ```
   */
  static async *list(opts: ListSandboxesOptions = {}): AsyncGenerator<SandboxInfo, void, undefined> {
    const client = new DenClient(opts);
    let cursor: string | null = null;
    do {
      const qs = new URLSearchParams();
      if (opts.state !== undefined) qs.set("state", opts.state);
      for (const [k, v] of Object.entries(opts.metadata ?? {})) qs.set(`metadata.${k}`, v);
      if (opts.pageSize !== undefined) qs.set("limit", String(opts.pageSize));
      if (cursor !== null) qs.set("cursor", cursor);
      const page: api.ListSandboxesResponse = await client.json(
        { method: "GET", path: "/v1/sandboxes", query: qs, signal: opts.signal },
        api.ListSandboxesResponse.parse,
      );
      for (const s of page.sandboxes) yield toSandboxInfo(s);
      if (page.next_cursor !== null && page.next_cursor === cursor) break; // a server bug; never loop forever
      cursor = page.next_cursor;
    } while (cursor !== null);
  }

  /**
   * The sandbox id (`sbx_...`).
   *
   * @example
   * ```ts
   * saveForLater(sbx.id); // then Sandbox.connect(id)
   * ```
   */
  get id(): string {
    return this.#info.id;
  }

  /**
   * The last known state (call {@link Sandbox.refresh} for the current one).
   *
   * @example
   * ```ts
   * if (sbx.state === "hibernated") await sbx.wake();
   * ```
   */
  get state(): SandboxState {
    return this.#info.state;
  }

  /**
   * The last known info, as of creation or the last call that returned it.
   *
   * @example
   * ```ts
   * console.log(sbx.info.template, sbx.info.expiresAt);
   * ```
   */
  get info(): SandboxInfo {
    return this.#info;
  }

  #path(suffix = ""): string {
    return `/v1/sandboxes/${seg(this.#info.id)}${suffix}`;
  }

  async #update(spec: Parameters<DenClient["json"]>[0]): Promise<SandboxInfo> {
    const w = await this.#client.json(spec, api.Sandbox.parse);
    this.#info = toSandboxInfo(w);
    return this.#info;
  }

  /**
   * Fetches the current info (and updates `state` and `info`).
   *
   * @example
   * ```ts
   * const { state, lastActivityAt } = await sbx.refresh();
   * ```
   */
  async refresh(opts: RequestOptions = {}): Promise<SandboxInfo> {
    return this.#update({ method: "GET", path: this.#path(), signal: opts.signal });
  }

  /**
   * Runs a command and waits for it. A string runs with `bash -c`; an array is an argv.
   * - Plain: one buffered request (the server caps the output it keeps).
   * - With `onStdout`/`onStderr`: the streaming route; the callbacks get UTF-8 text as it
   *   arrives (characters split across chunks are decoded whole), and the result still has
   *   all the output.
   * - With `background: true`: starts a background process and resolves with its
   *   {@link Process} handle at once.
   *
   * A command that outlives `timeoutSeconds` is killed and resolves with `timedOut: true`.
   * A non-zero exit is not an error: check `exitCode`.
   *
   * @example
   * ```ts
   * const r = await sbx.exec("ls /workspace");
   * const py = await sbx.exec(["python3", "-c", "import sys; print(sys.stdin.read().upper())"], { stdin: "hi" });
   * await sbx.exec("npm ci", { cwd: "/app", timeoutSeconds: 600, onStdout: (s) => process.stdout.write(s) });
   * const server = await sbx.exec("python3 -m http.server", { background: true });
   * ```
   */
  exec(cmd: Command, opts: BackgroundExecOptions): Promise<Process>;
  exec(cmd: Command, opts?: ExecOptions): Promise<ExecResult>;
  exec(cmd: Command, opts?: ExecOptions | BackgroundExecOptions): Promise<ExecResult | Process>;
  async exec(cmd: Command, opts: ExecOptions | BackgroundExecOptions = {}): Promise<ExecResult | Process> {
    if (opts.background === true) return this.processes.start(cmd, opts);
    // Long or unbounded commands use the streaming route: its keepalive lines outlast
    // fetch's 300 s limits, which a buffered response (nothing until the end) would hit.
    const short = opts.timeoutSeconds !== undefined && opts.timeoutSeconds > 0 && opts.timeoutSeconds <= BUFFERED_EXEC_MAX_SECONDS;
    if (opts.onStdout || opts.onStderr || !short) return execWithCallbacks(this.#client, this.id, cmd, opts);
    return execBuffered(this.#client, this.id, cmd, opts);
  }

  /**
   * Runs a command on the streaming route: iterate the result for output chunks as they
   * arrive, then `await wait()` for the exit. The request starts at once.
   *
   * @example
   * ```ts
   * const run = sbx.execStream("for i in 1 2 3; do echo $i; sleep 1; done");
   * for await (const chunk of run) console.log(chunk.stream, chunk.text());
   * const { exitCode, timedOut } = await run.wait();
   * ```
   */
  execStream(cmd: Command, opts: CommandOptions = {}): ExecStream {
    return new ExecStream(this.#client, this.id, cmd, opts);
  }

  /**
   * Runs code in the sandbox's code interpreter (a sandbox made from `code-interpreter-v1`):
   * in the language's default context (python unless `language` says), or in `context`,
   * whose variables and imports persist between runs. The callbacks get what the code prints
   * and returns as it comes; the {@link Execution} has it all. An exception the code raises
   * is not a rejection: check `error`. `timeoutMs` (or `signal`) hangs up, which interrupts
   * the run, and rejects (a `TimeoutError` for `timeoutMs`). A sandbox without a code
   * interpreter: `InvalidStateError` (`code_interpreter_unavailable`).
   *
   * @example
   * ```ts
   * const sbx = await Sandbox.create({ template: "code-interpreter-v1" });
   * const e = await sbx.runCode("import math\nprint('pi')\nmath.pi", { onStdout: (s) => process.stdout.write(s) });
   * console.log(e.text); // "3.141592653589793"
   * ```
   */
  runCode(code: string, opts: RunCodeOptions = {}): Promise<Execution> {
    return runCode(this.#client, this.id, code, opts);
  }

  /**
   * Takes a durable checkpoint while the sandbox runs (it pauses only while its memory is
   * copied); the checkpoint outlives the sandbox. Restore it with {@link Sandbox.restore}.
   *
   * @example
   * ```ts
   * const cp = await sbx.snapshot({ name: "deps-installed" });
   * const copy = await Sandbox.restore(cp);
   * ```
   */
  async snapshot(opts: RequestOptions & { name?: string } = {}): Promise<CheckpointInfo> {
    const body = opts.name !== undefined ? { name: opts.name } : {};
    const w = await this.#client.json({ method: "POST", path: `/v1/sandboxes/${seg(this.id)}/checkpoints`, json: body, signal: opts.signal }, api.Checkpoint.parse);
    return toCheckpointInfo(w);
  }

  /**
   * Forks the running sandbox: new, independent sandboxes with its exact state (files,
   * processes, memory), copy-on-write. `count` defaults to 1. The children do not get the
   * parent's volumes; `volumes` are what each of them mounts (a read-write one: one child).
   *
   * @example
   * ```ts
   * const [a, b] = await sbx.fork({ count: 2 });
   * await Promise.all([a.exec("try-approach-a"), b.exec("try-approach-b")]);
   * ```
   */
  async fork(opts: RequestOptions & { count?: number; volumes?: VolumeMount[] } = {}): Promise<Sandbox[]> {
    const body: WireInput<typeof api.ForkRequest> = {};
    if (opts.count !== undefined) body.count = opts.count;
    if (opts.volumes !== undefined) body.volumes = toWireMounts(opts.volumes);
    const w = await this.#client.json({ method: "POST", path: `/v1/sandboxes/${seg(this.id)}/fork`, json: body, signal: opts.signal }, api.ForkResponse.parse);
    return w.sandboxes.map((s) => new Sandbox(this.#client, toSandboxInfo(s)));
  }

  /**
   * Creates a new sandbox from a checkpoint (by id or as returned by {@link Sandbox.snapshot}).
   * A checkpoint holds no volume: the restored sandbox mounts only `volumes`.
   *
   * @example
   * ```ts
   * const again = await Sandbox.restore(cp, { ttlSeconds: 600 });
   * ```
   */
  static async restore(checkpoint: string | { id: string }, opts: DenClientOptions & RequestOptions & { persistent?: boolean; ttlSeconds?: number | null; idleTimeoutSeconds?: number; onIdle?: "hibernate" | "destroy"; metadata?: Record<string, string>; network?: NetworkPolicy; volumes?: VolumeMount[] } = {}): Promise<Sandbox> {
    const client = new DenClient(opts);
    const id = typeof checkpoint === "string" ? checkpoint : checkpoint.id;
    const body: Record<string, unknown> = {};
    if (opts.persistent !== undefined) body.persistent = opts.persistent;
    if (opts.ttlSeconds !== undefined) body.ttl_seconds = opts.ttlSeconds;
    if (opts.idleTimeoutSeconds !== undefined) body.idle_timeout_seconds = opts.idleTimeoutSeconds;
    if (opts.onIdle !== undefined) body.on_idle = opts.onIdle;
    if (opts.metadata !== undefined) body.metadata = opts.metadata;
    if (opts.network !== undefined) body.network = toWireNetwork(opts.network);
    if (opts.volumes !== undefined) body.volumes = toWireMounts(opts.volumes);
    const w = await client.json({ method: "POST", path: `/v1/checkpoints/${seg(id)}/restore`, json: body, signal: opts.signal }, api.Sandbox.parse);
    return new Sandbox(client, toSandboxInfo(w));
  }

  /**
   * Opens an interactive terminal (PTY over a WebSocket) running `cmd` (default: a login shell).
   *
   * @example
   * ```ts
   * const term = await sbx.pty({ onData: (d) => process.stdout.write(d) });
   * term.write("echo hi\n");
   * term.write("exit\n");
   * await term.wait();
   * ```
   */
  pty(opts: PtyOptions = {}): Promise<Pty> {
    return Pty.open(this.#client, this.id, opts);
  }

  /**
   * Hibernates the sandbox (idempotent). `mode: "warm"` (default) pauses it in place for an
   * instant wake; `mode: "cold"` moves it to the snapshot store so it costs no CPU or RAM;
   * `mode: "disk"` shuts it down keeping only its files (no CPU or RAM; its processes and
   * memory are gone, and a wake boots it in a few seconds).
   * Exec, file and process calls on a hibernated sandbox wake it first.
   *
   * @example
   * ```ts
   * await sbx.hibernate();
   * console.log(sbx.state); // "hibernated"
   * ```
   */
  async hibernate(opts: RequestOptions & { mode?: "warm" | "cold" | "disk" } = {}): Promise<SandboxInfo> {
    const body: WireInput<typeof api.HibernateRequest> = {};
    if (opts.mode !== undefined) body.mode = opts.mode;
    return this.#update({ method: "POST", path: this.#path("/hibernate"), json: body, signal: opts.signal });
  }

  /**
   * Wakes a hibernated sandbox (idempotent).
   *
   * @example
   * ```ts
   * await sbx.wake();
   * ```
   */
  async wake(opts: RequestOptions = {}): Promise<SandboxInfo> {
    return this.#update({ method: "POST", path: this.#path("/wake"), signal: opts.signal });
  }

  /**
   * Changes the sandbox's network policy: at once if it runs, at its wake if hibernated.
   *
   * @example
   * ```ts
   * await sbx.setNetwork({ egress: "allowlist", allow: ["registry.npmjs.org"] });
   * await sbx.exec("npm install");
   * await sbx.setNetwork({ egress: "none" });
   * ```
   */
  async setNetwork(policy: NetworkPolicy, opts: RequestOptions = {}): Promise<SandboxInfo> {
    return this.#update({ method: "PUT", path: this.#path("/network"), json: toWireNetwork(policy), signal: opts.signal });
  }

  /**
   * The network policy, whether the network is up, and how many attempts it refused (by why).
   *
   * @example
   * ```ts
   * const { refused } = await sbx.networkStatus();
   * console.log(refused.private, refused.policy);
   * ```
   */
  async networkStatus(opts: RequestOptions = {}): Promise<NetworkStatus> {
    const w = await this.#client.json({ method: "GET", path: this.#path("/network"), signal: opts.signal }, api.NetworkStatus.parse);
    return { policy: toNetworkPolicy(w.policy), active: w.active, refused: w.refused };
  }

  /**
   * TCP ports listening inside the sandbox (empty while it is hibernated; listing never wakes it).
   *
   * @example
   * ```ts
   * await sbx.exec("python3 -m http.server 8000", { background: true });
   * console.log(await sbx.ports()); // [{ port: 8000, address: "0.0.0.0", family: 4, process: "python3", ... }]
   * ```
   */
  ports(opts: RequestOptions = {}): Promise<ListeningPort[]> {
    return listPorts(this.#client, this.id, opts);
  }

  /**
   * A signed URL to `port` that works in a browser, without a key, until it expires. A
   * request to it wakes the sandbox if hibernated.
   *
   * @example
   * ```ts
   * const u = await sbx.createPortUrl(3000, { expiresInSeconds: 900 });
   * console.log(`open ${u.vhostUrl}`); // the app at "/" of its own host name
   * ```
   */
  createPortUrl(port: number, opts: PortUrlOptions = {}): Promise<PortUrl> {
    return createPortUrl(this.#client, this.id, port, opts);
  }

  /**
   * The URL of a server listening on `port` in the sandbox: a signed one (see
   * {@link Sandbox.createPortUrl}), under the API's path, so it works for any client; a
   * browser opening it is sent on to the port's own origin (`PortUrl.url`).
   *
   * @example
   * ```ts
   * const url = await sbx.getUrl(8000);
   * const page = await (await fetch(url)).text();
   * ```
   */
  async getUrl(port: number, opts: PortUrlOptions = {}): Promise<string> {
    return (await this.createPortUrl(port, opts)).pathUrl;
  }

  /**
   * A raw TCP connection to `port` inside the sandbox (Node only), whatever its network
   * policy: what `den forward` serves on a local port.
   *
   * @example
   * ```ts
   * const sock = await sbx.connectPort(5432);
   * sock.write(startupMessage);
   * ```
   */
  connectPort(port: number, opts: RequestOptions = {}): Promise<Duplex> {
    return connectPort(this.#client, this.id, port, opts);
  }

  /**
   * Sets the sandbox's deadline to `seconds` from now (`expiresAt`).
   *
   * @example
   * ```ts
   * await sbx.setTimeout(30 * 60); // 30 more minutes
   * ```
   */
  async setTimeout(seconds: number, opts: RequestOptions = {}): Promise<SandboxInfo> {
    const body: WireInput<typeof api.TimeoutRequest> = { seconds };
    return this.#update({ method: "POST", path: this.#path("/timeout"), json: body, signal: opts.signal });
  }

  /**
   * The sandbox's event log (state changes and the like). Without `follow`, resolves with the
   * events after `after`; with `follow: true`, returns an async iterable that yields them and
   * then new ones as they happen, until the server ends the stream or you stop iterating.
   *
   * @example
   * ```ts
   * const past = await sbx.events();
   * for await (const ev of sbx.events({ follow: true, after: past.at(-1)?.seq })) {
   *   console.log(ev.type, ev.reason);
   *   if (ev.type === "destroyed") break;
   * }
   * ```
   */
  events(opts: EventsOptions & { follow: true }): AsyncIterable<SandboxEvent>;
  events(opts?: EventsOptions & { follow?: false }): Promise<SandboxEvent[]>;
  events(opts: EventsOptions = {}): Promise<SandboxEvent[]> | AsyncIterable<SandboxEvent> {
    if (opts.follow) return this.#followEvents(opts);
    return this.#client
      .json({ method: "GET", path: this.#path("/events"), query: { after: opts.after }, signal: opts.signal }, listOf("events", api.SandboxEvent.parse))
      .then((events) => events.map(toSandboxEvent));
  }

  async *#followEvents(opts: EventsOptions): AsyncGenerator<SandboxEvent, void, undefined> {
    const res = await this.#client.request({
      method: "GET",
      path: this.#path("/events"),
      query: { after: opts.after, follow: true },
      accept: "application/x-ndjson",
      signal: opts.signal,
    });
    if (!res.body) return;
    for await (const v of readNdjson(res.body, { status: res.status })) yield toSandboxEvent(validate(v, api.SandboxEvent.parse, res.status));
  }

  /**
   * Destroys the sandbox (idempotent) and resolves with its final info (state `destroyed`).
   *
   * @example
   * ```ts
   * await sbx.destroy();
   * ```
   */
  async destroy(opts: RequestOptions = {}): Promise<SandboxInfo> {
    return this.#update({ method: "DELETE", path: this.#path(), signal: opts.signal });
  }

  /**
   * Alias of {@link Sandbox.destroy}.
   *
   * @example
   * ```ts
   * await sbx.delete();
   * ```
   */
  async delete(opts: RequestOptions = {}): Promise<SandboxInfo> {
    return this.destroy(opts);
  }

  /**
   * Destroys the sandbox when an `await using` scope ends (a sandbox that is already gone is
   * not an error).
   *
   * @example
   * ```ts
   * {
   *   await using sbx = await Sandbox.create();
   *   await sbx.exec("echo scoped");
   * } // DELETE /v1/sandboxes/{id} here
   * ```
   */
  async [Symbol.asyncDispose](): Promise<void> {
    try {
      await this.destroy();
    } catch (e) {
      if (!(e instanceof SandboxNotFoundError)) throw e;
    }
  }
}
