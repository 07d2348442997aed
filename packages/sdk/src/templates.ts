/** Templates: the images sandboxes are created from. */
import { api } from "@den/protocol";
import { concatBytes } from "./bytes.js";
import { DenClient, type DenClientOptions, type RequestOptions, listOf, seg, validate } from "./client.js";
import { DenConfigError, InvalidArgumentError } from "./errors.js";
import { readNdjson } from "./ndjson.js";
import {
  type BuildContextInfo,
  type TemplateBuild,
  type TemplateBuildLogLine,
  type TemplateInfo,
  type WireInput,
  toTemplateBuild,
  toTemplateBuildLogLine,
  toTemplateInfo,
} from "./types.js";

/** What {@link Templates.create} and {@link Templates.startBuild} build from, and how. */
export interface CreateTemplateSpec {
  name: string;
  /** Start from this template (default `base`)... */
  fromTemplate?: string;
  /** ...or from a checkpoint's exact state... */
  fromCheckpoint?: string;
  /** ...or from an OCI image: `python:3.12`, `registry:5000/repo@sha256:...`, with credentials for a private one... */
  fromImage?: string | { ref: string; credentials?: { username: string; password: string } | { token: string } };
  /** ...or from an image archive (an OCI layout or `docker save` tar) uploaded with {@link Templates.uploadContext}: its `sha256:<hex>`... */
  fromArchive?: string;
  /** ...or from a Dockerfile's text: its FROM names an image or a template; each RUN runs in a build microVM and is cached. */
  dockerfile?: string;
  /** The build context COPY takes files from: the `sha256:<hex>` {@link Templates.uploadContext} answered (Dockerfile builds). */
  context?: string;
  /** Values for the Dockerfile's ARGs. */
  buildArgs?: Record<string, string>;
  /** Shell commands run in order in the building sandbox; each must exit 0. */
  setup?: string[];
  setupTimeoutSeconds?: number;
  /** Image and Dockerfile builds: a command kept running in every sandbox (default: the image's ENTRYPOINT + CMD). */
  startCmd?: string;
  /** Image and Dockerfile builds: run until it exits 0, then the template is baked (e.g. `curl -fs localhost:8080`). */
  readyCmd?: string;
  readyTimeoutSeconds?: number;
  vcpus?: number;
  memoryMb?: number;
  diskMb?: number;
  /** Build again even if the same content was built before. */
  force?: boolean;
}

/**
 * Options of {@link Templates.uploadContext}.
 *
 * @example
 * ```ts
 * const opts: UploadContextOptions = { digest: "sha256:3b1f...", signal: AbortSignal.timeout(60_000) };
 * ```
 */
export interface UploadContextOptions extends DenClientOptions, RequestOptions {
  /**
   * The tar's `sha256:<hex>` if you know it: a stream is then sent as it is read, never held in
   * memory (the server checks it). Without it the SDK hashes the bytes itself, reading a
   * stream whole into memory first.
   */
  digest?: string;
}

/**
 * Options of {@link Templates.builds}.
 *
 * @example
 * ```ts
 * const opts: ListBuildsOptions = { name: "web", limit: 10 };
 * ```
 */
export interface ListBuildsOptions extends DenClientOptions, RequestOptions {
  /** Only the builds of this template. */
  name?: string;
  /** At most this many (1 to 200; default 50), newest first. */
  limit?: number;
}

/**
 * Options of {@link Templates.buildLogs}.
 *
 * @example
 * ```ts
 * const opts: BuildLogsOptions = { offset: 0, follow: true };
 * ```
 */
export interface BuildLogsOptions extends DenClientOptions, RequestOptions {
  /** The first line's `seq` (default 0: from the start); `line.seq + 1` resumes after a line. */
  offset?: number;
  /** Keep the stream open and yield lines as the build writes them, until the build ends. */
  follow?: boolean;
}

/** The tar bodies {@link Templates.uploadContext} takes. */
export type ContextBody = Uint8Array | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>;

const DIGEST = /^sha256:[0-9a-f]{64}$/;

function wireSpec(spec: CreateTemplateSpec): WireInput<typeof api.CreateTemplateRequest> {
  const body: WireInput<typeof api.CreateTemplateRequest> = { name: spec.name };
  if (spec.fromTemplate !== undefined) body.from_template = spec.fromTemplate;
  if (spec.fromCheckpoint !== undefined) body.from_checkpoint = spec.fromCheckpoint;
  if (spec.fromImage !== undefined) body.from_image = spec.fromImage;
  if (spec.fromArchive !== undefined) body.from_archive = spec.fromArchive;
  if (spec.dockerfile !== undefined) body.dockerfile = spec.dockerfile;
  if (spec.context !== undefined) body.context = spec.context;
  if (spec.buildArgs !== undefined) body.build_args = spec.buildArgs;
  if (spec.setup !== undefined) body.setup = spec.setup;
  if (spec.setupTimeoutSeconds !== undefined) body.setup_timeout_seconds = spec.setupTimeoutSeconds;
  if (spec.startCmd !== undefined) body.start_cmd = spec.startCmd;
  if (spec.readyCmd !== undefined) body.ready_cmd = spec.readyCmd;
  if (spec.readyTimeoutSeconds !== undefined) body.ready_timeout_seconds = spec.readyTimeoutSeconds;
  if (spec.vcpus !== undefined) body.vcpus = spec.vcpus;
  if (spec.memoryMb !== undefined) body.memory_mb = spec.memoryMb;
  if (spec.diskMb !== undefined) body.disk_mb = spec.diskMb;
  if (spec.force !== undefined) body.force = spec.force;
  return body;
}

function isAsyncIterable(v: unknown): v is AsyncIterable<Uint8Array> {
  return typeof v === "object" && v !== null && typeof (v as { [Symbol.asyncIterator]?: unknown })[Symbol.asyncIterator] === "function";
}

/** A ReadableStream of an async iterable's chunks (pulled as the upload reads). */
function streamOf(it: AsyncIterable<Uint8Array>): ReadableStream<Uint8Array> {
  const iter = it[Symbol.asyncIterator]();
  return new ReadableStream<Uint8Array>({
    async pull(c) {
      const { done, value } = await iter.next();
      if (done) c.close();
      else c.enqueue(value instanceof Uint8Array ? value : new Uint8Array(value));
    },
    async cancel(reason) {
      await iter.return?.(reason);
    },
  });
}

async function readAll(body: ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>, signal: AbortSignal | undefined): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  const it = body instanceof ReadableStream ? readerChunks(body) : body;
  for await (const chunk of it) {
    signal?.throwIfAborted();
    parts.push(chunk);
  }
  return concatBytes(parts);
}

async function* readerChunks(s: ReadableStream<Uint8Array>): AsyncGenerator<Uint8Array> {
  const reader = s.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      yield value;
    }
  } finally {
    reader.releaseLock();
  }
}

/** `sha256:<hex>` of some bytes (WebCrypto: Node 20+ and browsers). */
async function sha256(bytes: Uint8Array): Promise<string> {
  const subtle = (globalThis as { crypto?: { subtle?: { digest(alg: string, data: Uint8Array): Promise<ArrayBuffer> } } }).crypto?.subtle;
  if (!subtle) throw new DenConfigError("No WebCrypto (globalThis.crypto.subtle) to hash the context: pass { digest }");
  const d = new Uint8Array(await subtle.digest("SHA-256", bytes));
  let hex = "";
  for (const b of d) hex += b.toString(16).padStart(2, "0");
  return `sha256:${hex}`;
}

/**
 * The templates available to `Sandbox.create({ template })`.
 *
 * @example
 * ```ts
 * for (const t of await Templates.list()) console.log(`${t.name}@${t.version}`, t.current ? "(current)" : "");
 * ```
 */
export const Templates = {
  /**
   * Every template version on the server.
   *
   * @example
   * ```ts
   * const names = [...new Set((await Templates.list()).map((t) => t.name))];
   * ```
   */
  async list(opts: DenClientOptions & RequestOptions = {}): Promise<TemplateInfo[]> {
    const client = new DenClient(opts);
    const list = await client.json({ method: "GET", path: "/v1/templates", signal: opts.signal }, listOf("templates", api.Template.parse));
    return list.map(toTemplateInfo);
  },

  /**
   * Builds a template: a sandbox from `fromTemplate` (default `base`) or from a checkpoint
   * runs the `setup` commands in order (each must exit 0; no network), then its memory and
   * disk are captured. Sandboxes created from the template start in that state, processes
   * included, as fast as from `base`. The same recipe again returns the version built before.
   *
   * @example
   * ```ts
   * const t = await Templates.create({
   *   name: "myproject",
   *   setup: ["mkdir -p /workspace/app && cd /workspace/app && git init -q", "echo 'print(42)' > /workspace/app/main.py"],
   * });
   * const sbx = await Sandbox.create({ template: t.name });
   * // Or from an image in a registry, its server started and baked warm:
   * await Templates.create({ name: "web", fromImage: "registry.example:5000/web:1", readyCmd: "curl -fs localhost:8080" });
   * ```
   *
   * The call answers when the build is done, which for an image or a Dockerfile may be
   * minutes: {@link Templates.startBuild} answers at once and {@link Templates.buildLogs}
   * follows it. A failure is the build's error: `setup_failed` (details: `stdout`, `stderr`),
   * `image_not_found`, `image_pull_failed`, `image_invalid`, `invalid_argument` (e.g. a
   * Dockerfile line), `limit_exceeded`.
   */
  async create(spec: CreateTemplateSpec, opts: DenClientOptions & RequestOptions = {}): Promise<TemplateInfo> {
    const client = new DenClient(opts);
    const body = wireSpec(spec);
    return toTemplateInfo(await client.json({ method: "POST", path: "/v1/templates", json: body, signal: opts.signal }, api.Template.parse));
  },

  /**
   * Uploads a build context, a tar (optionally gzipped) of the files a Dockerfile's COPY
   * takes, and answers the `sha256:<hex>` to pass as `context`. Given bytes (a `Buffer` or
   * `Uint8Array`), the SDK computes their sha256 itself; given a stream (a `ReadableStream`
   * or any async iterable of bytes, e.g. a Node `Readable`), it streams it when you pass
   * `digest`, else reads it whole to hash it first. The server checks the digest
   * (`invalid_argument` if it does not match) and keeps the context for the builds that
   * name it; `payload_too_large` past its size limit.
   *
   * @example
   * ```ts
   * import { execFileSync } from "node:child_process";
   * const tar = execFileSync("tar", ["-C", "./app", "-cf", "-", "."], { maxBuffer: 1 << 30 });
   * const { context } = await Templates.uploadContext(tar);
   * const build = await Templates.startBuild({ name: "app", dockerfile: readFileSync("./app/Dockerfile", "utf8"), context });
   * ```
   */
  async uploadContext(tar: ContextBody, opts: UploadContextOptions = {}): Promise<BuildContextInfo> {
    const client = new DenClient(opts);
    let digest = opts.digest;
    if (digest !== undefined && !DIGEST.test(digest)) throw new InvalidArgumentError("invalid_argument", `a context digest is sha256:<64 hex digits>, got ${JSON.stringify(digest)}`, 400);
    let body: Uint8Array | ReadableStream<Uint8Array>;
    if (tar instanceof Uint8Array) body = tar;
    else if (digest !== undefined) body = tar instanceof ReadableStream ? tar : streamOf(tar);
    else if (tar instanceof ReadableStream || isAsyncIterable(tar)) body = await readAll(tar, opts.signal);
    else throw new InvalidArgumentError("invalid_argument", "a context is a Uint8Array, a ReadableStream or an async iterable of bytes", 400);
    digest ??= await sha256(body as Uint8Array);
    const w = await client.json({ method: "PUT", path: `/v1/templates/contexts/${digest}`, body, signal: opts.signal }, api.BuildContext.parse);
    return { context: w.context, size: w.size };
  },

  /**
   * Starts a build and answers at once with it (`state: "building"`): the same spec as
   * {@link Templates.create}, sent with `wait: false`. Follow it with
   * {@link Templates.buildLogs} (`follow: true` ends when the build does), then read its end
   * with {@link Templates.build}: `ready` with the `version` it made, or `error`/`cancelled`
   * with the `error`. Refusals that need no build (a bad spec, `limit_exceeded`) throw here.
   *
   * @example
   * ```ts
   * const b = await Templates.startBuild({ name: "web", fromImage: "nginx:1.27", readyCmd: "curl -fs localhost" });
   * for await (const line of Templates.buildLogs(b.id, { follow: true })) console.log(line.message);
   * const done = await Templates.build(b.id);
   * console.log(done.state === "ready" ? `${done.name}@${done.version}` : done.error?.message);
   * ```
   */
  async startBuild(spec: CreateTemplateSpec, opts: DenClientOptions & RequestOptions = {}): Promise<TemplateBuild> {
    const client = new DenClient(opts);
    const body = { ...wireSpec(spec), wait: false };
    const w = await client.json({ method: "POST", path: "/v1/templates", json: body, signal: opts.signal }, api.CreateTemplateAccepted.parse);
    return toTemplateBuild(w.build);
  },

  /**
   * One build of yours (an admin key sees every build); {@link NotFoundError} (`not_found`)
   * for an id there is none of.
   *
   * @example
   * ```ts
   * const { state, version, error } = await Templates.build("op_...");
   * ```
   */
  async build(id: string, opts: DenClientOptions & RequestOptions = {}): Promise<TemplateBuild> {
    const client = new DenClient(opts);
    return toTemplateBuild(await client.json({ method: "GET", path: `/v1/templates/builds/${seg(id)}`, signal: opts.signal }, api.TemplateBuild.parse));
  },

  /**
   * Your builds, newest first (`name`: of one template; `limit`: at most that many, default 50).
   * Builds that ended are kept for a while, then pruned.
   *
   * @example
   * ```ts
   * for (const b of await Templates.builds({ name: "web", limit: 5 })) console.log(b.id, b.state, b.version ?? "");
   * ```
   */
  async builds(opts: ListBuildsOptions = {}): Promise<TemplateBuild[]> {
    const client = new DenClient(opts);
    const list = await client.json(
      { method: "GET", path: "/v1/templates/builds", query: { name: opts.name, limit: opts.limit }, signal: opts.signal },
      listOf("builds", api.TemplateBuild.parse),
    );
    return list.map(toTemplateBuild);
  },

  /**
   * Cancels a running build: its host stops it and it ends `cancelled` (error `aborted`).
   * Resolves with the build as it stands (a build that already ended is left as it is).
   *
   * @example
   * ```ts
   * await Templates.cancelBuild(b.id);
   * ```
   */
  async cancelBuild(id: string, opts: DenClientOptions & RequestOptions = {}): Promise<TemplateBuild> {
    const client = new DenClient(opts);
    return toTemplateBuild(await client.json({ method: "POST", path: `/v1/templates/builds/${seg(id)}/cancel`, signal: opts.signal }, api.TemplateBuild.parse));
  },

  /**
   * A build's log lines from `offset`: without `follow`, those written so far; with
   * `follow: true`, those and then new ones as they come, until the build ends (keepalive
   * lines are skipped). The request is made when iteration starts; stopping early
   * (`break`, `signal`) closes it.
   *
   * @example
   * ```ts
   * for await (const line of Templates.buildLogs(b.id, { follow: true })) {
   *   (line.level === "error" ? console.error : console.log)(line.message);
   * }
   * ```
   */
  async *buildLogs(id: string, opts: BuildLogsOptions = {}): AsyncGenerator<TemplateBuildLogLine, void, undefined> {
    const client = new DenClient(opts);
    const res = await client.request({
      method: "GET",
      path: `/v1/templates/builds/${seg(id)}/logs`,
      query: { offset: opts.offset, follow: opts.follow ? true : undefined },
      accept: "application/x-ndjson",
      signal: opts.signal,
    });
    if (!res.body) return;
    for await (const v of readNdjson(res.body, { status: res.status })) {
      if (typeof v === "object" && v !== null && (v as { type?: unknown }).type === "keepalive") continue;
      yield toTemplateBuildLogLine(validate(v, api.TemplateBuildLogLine.parse, res.status));
    }
  },

  /**
   * Deletes a template you built; sandboxes and checkpoints made from it keep working.
   *
   * @example
   * ```ts
   * await Templates.delete("myproject");
   * ```
   */
  async delete(name: string, opts: DenClientOptions & RequestOptions = {}): Promise<void> {
    const client = new DenClient(opts);
    await client.request({ method: "DELETE", path: `/v1/templates/${seg(name)}`, signal: opts.signal });
  },
};
