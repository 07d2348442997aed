/**
 * The HTTP layer: configuration (options, then `DEN_API_URL`/`DEN_API_KEY`), the bearer
 * header, query strings, JSON bodies, and turning error responses into typed errors.
 */
import { DenConfigError, InvalidArgumentError, InvalidResponseError, errorFromResponse } from "./errors.js";

/**
 * The default API address when neither `apiUrl` nor `DEN_API_URL` is set.
 *
 * @example
 * ```ts
 * const url = process.env.DEN_API_URL ?? DEFAULT_API_URL;
 * ```
 */
export const DEFAULT_API_URL = "http://127.0.0.1:8787";

/**
 * How to reach the API. Every field falls back to the environment: `apiUrl` to
 * `DEN_API_URL` (then `http://127.0.0.1:8787`), `apiKey` to `DEN_API_KEY`.
 *
 * @example
 * ```ts
 * const opts: DenClientOptions = { apiUrl: "https://den.example.com", apiKey: process.env.MY_KEY };
 * const sbx = await Sandbox.create({ ...opts, template: "base" });
 * ```
 */
export interface DenClientOptions {
  /** Base URL of the API, e.g. `http://127.0.0.1:8787` (a path prefix is kept). */
  apiUrl?: string;
  /** The API key, sent as `Authorization: Bearer <key>`. */
  apiKey?: string;
  /**
   * A `fetch` to use instead of the global one (for proxies, retries, tests). Node's global
   * fetch (undici) gives up on a response whose headers take more than 300 s, or a body that is
   * silent for 300 s; for buffered execs of longer commands pass a fetch whose dispatcher has
   * larger `headersTimeout`/`bodyTimeout`, or use `execStream`/background processes.
   */
  fetch?: typeof globalThis.fetch;
}

/**
 * Options every call accepts.
 *
 * @example
 * ```ts
 * const ac = new AbortController();
 * setTimeout(() => ac.abort(), 5000);
 * await sbx.exec("make", { signal: ac.signal });
 * ```
 */
export interface RequestOptions {
  /** Aborts the request; the call then rejects with the signal's reason (an `AbortError`). */
  signal?: AbortSignal;
}

/**
 * Query values; `undefined` entries are left out.
 *
 * @example
 * ```ts
 * const q: Query = { stream: "stdout", offset: 0, recursive: undefined };
 * ```
 */
export type Query = Record<string, string | number | boolean | undefined>;

/**
 * One request's description, for {@link DenClient.request}.
 *
 * @example
 * ```ts
 * const spec: RequestSpec = { method: "POST", path: "/v1/sandboxes", json: { template: "base" } };
 * ```
 */
export interface RequestSpec {
  method: "GET" | "POST" | "PUT" | "DELETE";
  path: string;
  query?: Query | URLSearchParams;
  /** A JSON body (serialized here). */
  json?: unknown;
  /** A raw body, sent as `application/octet-stream`. */
  body?: Uint8Array | ReadableStream<Uint8Array>;
  accept?: string;
  signal?: AbortSignal | undefined;
}

function env(name: string): string | undefined {
  const proc = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  const v = proc?.env?.[name];
  return v === undefined || v === "" ? undefined : v;
}

/**
 * A configured connection to the API. The SDK's classes share one per sandbox; most code never
 * builds one directly.
 *
 * @example
 * ```ts
 * const client = new DenClient({ apiKey: "den_..." });
 * const res = await client.request({ method: "GET", path: "/v1/templates" });
 * ```
 */
export class DenClient {
  /**
   * The resolved base URL, without a trailing slash.
   *
   * @example
   * ```ts
   * console.log(new DenClient().apiUrl); // "http://127.0.0.1:8787" unless DEN_API_URL says otherwise
   * ```
   */
  readonly apiUrl: string;
  readonly #apiKey: string;

  /** Headers that authenticate a request outside `request()` (WebSockets). */
  authHeaders(): Record<string, string> {
    return { authorization: `Bearer ${this.#apiKey}` };
  }
  readonly #fetch: typeof globalThis.fetch;

  /**
   * Resolves the configuration; throws {@link DenConfigError} when there is no API key or the
   * URL is not http(s).
   *
   * @example
   * ```ts
   * const client = new DenClient({ apiUrl: "http://127.0.0.1:8787", apiKey: "den_..." });
   * ```
   */
  constructor(opts: DenClientOptions = {}) {
    const url = opts.apiUrl ?? env("DEN_API_URL") ?? DEFAULT_API_URL;
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      throw new DenConfigError(`Den API URL is not a URL: ${JSON.stringify(url)}`);
    }
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
      throw new DenConfigError(`Den API URL must be http(s): ${JSON.stringify(url)}`);
    }
    this.apiUrl = url.replace(/\/+$/, "");
    const key = opts.apiKey ?? env("DEN_API_KEY");
    if (!key) {
      throw new DenConfigError("No Den API key: pass { apiKey } or set the DEN_API_KEY environment variable");
    }
    this.#apiKey = key;
    const f = opts.fetch ?? globalThis.fetch;
    if (typeof f !== "function") throw new DenConfigError("No fetch implementation: pass { fetch } (Node 20+ has a global fetch)");
    this.#fetch = f;
  }

  /**
   * Sends one request and returns the response if it is 2xx; otherwise reads the body and
   * throws the typed error (see {@link errorFromResponse}).
   *
   * @example
   * ```ts
   * const res = await client.request({ method: "GET", path: "/v1/sandboxes", query: { limit: 10 } });
   * console.log(await res.json());
   * ```
   */
  async request(spec: RequestSpec): Promise<Response> {
    let url = this.apiUrl + spec.path;
    if (spec.query) {
      const qs = spec.query instanceof URLSearchParams ? spec.query : toSearchParams(spec.query);
      const s = qs.toString();
      if (s) url += `?${s}`;
    }
    const headers: Record<string, string> = { authorization: `Bearer ${this.#apiKey}`, accept: spec.accept ?? "application/json" };
    const init: RequestInit = { method: spec.method, headers };
    if (spec.json !== undefined) {
      headers["content-type"] = "application/json";
      init.body = JSON.stringify(spec.json);
    } else if (spec.body !== undefined) {
      headers["content-type"] = "application/octet-stream";
      init.body = spec.body;
      // A stream body needs half-duplex in undici (Node) and in browsers that stream uploads.
      if (!(spec.body instanceof Uint8Array)) init.duplex = "half";
    }
    if (spec.signal) init.signal = spec.signal;
    const res = await this.#fetch(url, init);
    if (res.ok) return res;
    const text = await res.text();
    throw errorFromResponse(res.status, text, res.statusText);
  }

  /**
   * Sends a request and parses its JSON body with `parse` (a zod schema's `.parse`, or any
   * function); a body that is not JSON or does not parse is an {@link InvalidResponseError}.
   *
   * @example
   * ```ts
   * const body = await client.json({ method: "GET", path: "/v1/templates" }, (v) => v as { templates: unknown[] });
   * ```
   */
  async json<T>(spec: RequestSpec, parse: (v: unknown) => T): Promise<T> {
    const res = await this.request(spec);
    const text = await res.text();
    return parseJson(text, parse, res.status);
  }

  /**
   * Sends a request whose answer has no body we need (e.g. 204) and drains the response.
   *
   * @example
   * ```ts
   * await client.empty({ method: "DELETE", path: `/v1/sandboxes/${id}/processes/3` });
   * ```
   */
  async empty(spec: RequestSpec): Promise<void> {
    const res = await this.request(spec);
    await res.arrayBuffer();
  }
}

/**
 * Parses a JSON text with `parse`; failures become {@link InvalidResponseError}.
 *
 * @example
 * ```ts
 * const n = parseJson("42", (v) => v as number, 200);
 * ```
 */
export function parseJson<T>(text: string, parse: (v: unknown) => T, status: number): T {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new InvalidResponseError("invalid_response", `response is not JSON: ${text.slice(0, 200)}`, status);
  }
  return validate(value, parse, status);
}

/**
 * Runs `parse` on a decoded value; a throw (e.g. a ZodError) becomes {@link InvalidResponseError}
 * with the original error as its `cause`.
 *
 * @example
 * ```ts
 * const info = validate(body, api.Sandbox.parse, 200);
 * ```
 */
export function validate<T>(value: unknown, parse: (v: unknown) => T, status: number): T {
  try {
    return parse(value);
  } catch (e) {
    const detail = e instanceof Error ? e.message.slice(0, 1000) : String(e);
    throw new InvalidResponseError("invalid_response", `response does not match the API contract: ${detail}`, status, undefined, { cause: e });
  }
}

/**
 * A parser for the `{ <key>: T[] }` list bodies, from the parser of one item.
 *
 * @example
 * ```ts
 * const templates = await client.json({ method: "GET", path: "/v1/templates" }, listOf("templates", api.Template.parse));
 * ```
 */
export function listOf<T>(key: string, parse: (v: unknown) => T): (v: unknown) => T[] {
  return (v) => {
    const list = typeof v === "object" && v !== null ? (v as Record<string, unknown>)[key] : undefined;
    if (!Array.isArray(list)) throw new Error(`expected an object with an array "${key}"`);
    return list.map((item) => parse(item));
  };
}

function toSearchParams(q: Query): URLSearchParams {
  const qs = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) if (v !== undefined) qs.set(k, String(v));
  return qs;
}

/**
 * Percent-encodes one path segment.
 *
 * @example
 * ```ts
 * const path = `/v1/sandboxes/${seg(id)}`;
 * ```
 */
export function seg(s: string | number): string {
  // An empty id would turn `/v1/sandboxes/{id}` into the list route.
  if (String(s) === "") throw new InvalidArgumentError("invalid_argument", "an id must not be empty", 400);
  return encodeURIComponent(String(s));
}
