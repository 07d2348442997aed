import type { ConnectionOptions } from "node:tls";
import type { z } from "zod";
import type { Agent } from "undici";
import { DenError } from "@den/protocol";
import { clientTlsOptions, type Identity, type MachineTls } from "@den/pki";
import { reportHostWork, WORK_HEADER } from "../work.js";
import { errorFromResponse } from "./wire-errors.js";

/** The most of an error response read (its JSON is small; anything longer is not ours). */
const ERROR_BYTES = 64 * 1024;
/** The most of a control call's JSON answer read (an inventory of many VMs is the largest). */
export const JSON_BYTES = 16 * 1024 * 1024;

export type Query = Record<string, string | number | boolean | undefined>;

export interface CallOptions {
  json?: unknown;
  /** A streamed request body (sent as application/octet-stream). */
  stream?: AsyncIterable<Uint8Array>;
  query?: Query;
  /** Abort the call after this long. */
  timeoutMs?: number;
  signal?: AbortSignal;
}

/** Reads a body up to `limit` bytes; past it the body is dropped and the call fails. */
export async function readBounded(res: Response, limit: number, what: string): Promise<Buffer> {
  const parts: Buffer[] = [];
  let n = 0;
  if (res.body) {
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      n += chunk.length;
      if (n > limit) {
        await res.body.cancel().catch(() => undefined);
        throw new DenError("payload_too_large", `${what}: the host agent's answer exceeds ${limit} bytes`);
      }
      parts.push(Buffer.from(chunk));
    }
  }
  return Buffer.concat(parts);
}

/** What went wrong reaching the host, as a DenError (unreachable, timed out, aborted). */
export function transportError(e: unknown, what: string, base: string, timeoutMs: number | undefined): DenError {
  if (e instanceof DenError) return e;
  const err = e as Error & { cause?: { code?: string; message?: string } };
  if (err.name === "TimeoutError") return new DenError("timeout", `${what}: the host agent at ${base} did not answer within ${timeoutMs} ms`);
  if (err.name === "AbortError") return new DenError("aborted", `${what}: aborted`);
  const why = err.cause?.code ?? err.cause?.message ?? err.message;
  return new DenError("agent_unavailable", `${what}: the host agent at ${base} is unreachable (${why})`);
}

/**
 * How a machine authenticates a link to another: mutual TLS, each end with its certificate of
 * the deployment's CA (`peer`: who the other end must be; its id when known).
 */
export type HostLink = { tls: MachineTls; peer: { kind: Identity["kind"]; id?: string } };

/** HTTP to one host agent: its base URL, its link's credentials, timeouts, and error bodies turned back into DenErrors. */
export class HostHttp {
  /** undici and its pool, loaded at the first request (loading undici cost every process ~0.15 s at start, single-machine ones too). */
  private client: Promise<{ agent: Agent; fetch: typeof import("undici").fetch }> | undefined;
  private closed = false;
  /** The TLS options of this link's other connections (WebSockets, tunnels). */
  readonly tls: ConnectionOptions;

  constructor(readonly base: string, readonly link: HostLink) {
    if (!base.startsWith("https://")) throw new DenError("invalid_argument", `a link between machines is mutual TLS and needs an https:// URL, got ${base}`);
    this.tls = clientTlsOptions(link.tls, link.peer);
  }

  private undici(): Promise<{ agent: Agent; fetch: typeof import("undici").fetch }> {
    this.client ??= import("undici").then((u) => ({ agent: new u.Agent({ connect: this.tls }), fetch: u.fetch }));
    return this.client;
  }

  /** Lets go of the link's pooled connections. */
  close(): void {
    this.closed = true;
    void this.client?.then((c) => c.agent.close()).catch(() => undefined);
  }

  url(path: string, query?: Query): string {
    const u = new URL(path, this.base);
    for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined) u.searchParams.set(k, String(v));
    return u.toString();
  }

  /** One request; a non-2xx answer is thrown as the DenError the host threw. */
  async request(method: string, path: string, opts: CallOptions = {}): Promise<Response> {
    const what = `${method} ${path}`;
    const signals = [opts.signal, opts.timeoutMs !== undefined ? AbortSignal.timeout(opts.timeoutMs) : undefined].filter((s): s is AbortSignal => s !== undefined);
    const headers: Record<string, string> = {};
    let body: string | AsyncIterable<Uint8Array> | undefined;
    if (opts.json !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(opts.json);
    } else if (opts.stream) {
      headers["content-type"] = "application/octet-stream";
      body = opts.stream;
    }
    let res: Response;
    try {
      const init = {
        method, headers, ...(body !== undefined ? { body } : {}), ...(opts.stream ? { duplex: "half" } : {}),
        ...(signals.length ? { signal: signals.length === 1 ? signals[0] : AbortSignal.any(signals) } : {}),
      };
      // undici's own fetch, with a dispatcher holding this machine's certificate.
      // (As undici's closed pool refused: reported as the host being unreachable.)
      if (this.closed) throw new Error("this link was closed");
      const u = await this.undici();
      res = (await u.fetch(this.url(path, opts.query), { ...init, dispatcher: u.agent } as Parameters<typeof u.fetch>[1])) as unknown as Response;
    } catch (e) {
      throw transportError(e, what, this.base, opts.timeoutMs);
    }
    // What the host spent on it, failed or not, is billed to the sandbox it was for.
    reportHostWork(res.headers.get(WORK_HEADER));
    if (!res.ok) {
      const text = (await readBounded(res, ERROR_BYTES, what).catch(() => Buffer.alloc(0))).toString("utf8");
      throw errorFromResponse(res.status, text, what);
    }
    return res;
  }

  /** A JSON call whose answer is checked against its schema. */
  async json<S extends z.ZodType>(method: string, path: string, schema: S, opts: CallOptions & { maxBytes?: number } = {}): Promise<z.infer<S>> {
    const what = `${method} ${path}`;
    const res = await this.request(method, path, opts);
    let text: string;
    try {
      text = (await readBounded(res, opts.maxBytes ?? JSON_BYTES, what)).toString("utf8");
    } catch (e) {
      throw transportError(e, what, this.base, opts.timeoutMs);
    }
    const parsed = schema.safeParse(text ? JSON.parse(text) : {});
    if (!parsed.success) throw new DenError("agent_protocol_error", `${what}: the host agent's answer does not match the protocol: ${parsed.error.issues[0]?.message ?? "invalid"}`);
    return parsed.data;
  }
}
