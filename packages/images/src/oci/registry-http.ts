/**
 * The registry client's HTTP: one GET over node:http/node:https with a deadline for the
 * response headers, a stall guard on the body, the caller's AbortSignal, certificate checks
 * always on, and plain http only to hosts listed as insecure. Network failures become
 * `image_pull_failed` naming the host (never a URL: a redirect's query may hold a signature).
 */
import http from "node:http";
import https from "node:https";
import type { IncomingHttpHeaders, IncomingMessage } from "node:http";
import { DenError } from "@den/protocol";

export interface HttpSettings {
  /** `host[:port]` (as URL.host writes it) that may be reached over plain http. */
  insecure: ReadonlySet<string>;
  /** Trusted CAs when a CA file is configured (Node's roots plus its certificates); else Node's defaults. */
  ca?: string[];
  /** The response headers must arrive within this. */
  requestTimeoutMs: number;
  /** The body must not go this long without a byte. */
  stallTimeoutMs: number;
}

export interface HttpReply {
  status: number;
  headers: IncomingHttpHeaders;
  url: URL;
  /** The body; ends with `image_pull_failed` after a stall, with `aborted` on the signal. */
  body: AsyncIterable<Buffer>;
  /** Drops the connection (and what is left of the body). Always call it, read or not. */
  close(): void;
}

export const USER_AGENT = "den-image-pull/0.1";

export function pullFailed(message: string): DenError {
  return new DenError("image_pull_failed", message);
}

export function abortedError(): DenError {
  return new DenError("aborted", "image pull aborted");
}

export function isAborted(e: unknown): boolean {
  return e instanceof DenError && e.code === "aborted";
}

function seconds(ms: number): string {
  return `${Math.round(ms / 100) / 10} s`;
}

/** GET `url`. `label` names the other end in errors ("registry 127.0.0.1:5000"). */
export function httpGet(url: URL, headers: Record<string, string>, label: string, s: HttpSettings, signal?: AbortSignal): Promise<HttpReply> {
  if (signal?.aborted) return Promise.reject(abortedError());
  if (url.protocol === "http:" && !s.insecure.has(url.host)) {
    return Promise.reject(pullFailed(`${label}: refusing plain http to ${url.host} (list it in DEN_INSECURE_REGISTRIES to allow it)`));
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") return Promise.reject(pullFailed(`${label}: unsupported URL scheme ${url.protocol}`));
  return new Promise((resolve, reject) => {
    const tls = url.protocol === "https:";
    const req = (tls ? https : http).request(url, {
      method: "GET",
      headers: { "user-agent": USER_AGENT, ...headers },
      agent: false,
      ...(tls ? { rejectUnauthorized: true, ...(s.ca ? { ca: s.ca } : {}) } : {}),
    });
    let res: IncomingMessage | undefined;
    const headersTimer = setTimeout(() => req.destroy(pullFailed(`${label} did not answer within ${seconds(s.requestTimeoutMs)}`)), s.requestTimeoutMs);
    const onAbort = () => (res ?? req).destroy(abortedError());
    signal?.addEventListener("abort", onAbort, { once: true });
    const done = () => {
      clearTimeout(headersTimer);
      signal?.removeEventListener("abort", onAbort);
    };
    // Errors after the response show up in the body's iteration; this listener only keeps
    // a late socket error from being an uncaught exception.
    req.on("error", (e) => {
      done();
      reject(networkError(e, label));
    });
    req.on("response", (r) => {
      clearTimeout(headersTimer);
      res = r;
      r.on("error", () => {});
      const close = () => {
        done();
        r.destroy();
      };
      resolve({ status: r.statusCode ?? 0, headers: r.headers, url, body: guardedBody(r, label, s.stallTimeoutMs, close), close });
    });
    req.end();
  });
}

/** The response body, failing if no chunk comes for `stallMs` (measured while waiting, not while the consumer works). */
async function* guardedBody(res: IncomingMessage, label: string, stallMs: number, close: () => void): AsyncGenerator<Buffer> {
  const chunks = res[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
  try {
    for (;;) {
      let timer: NodeJS.Timeout | undefined;
      const stalled = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(pullFailed(`${label} stalled: no data for ${seconds(stallMs)}`)), stallMs);
      });
      let step: IteratorResult<Buffer>;
      try {
        step = await Promise.race([chunks.next(), stalled]);
      } catch (e) {
        throw networkError(e, label);
      } finally {
        clearTimeout(timer);
      }
      if (step.done) return;
      yield step.value;
    }
  } finally {
    close();
  }
}

/** Reads a whole body of at most `max` bytes (else `tooBig()`), then closes the reply. */
export async function readBody(reply: HttpReply, max: number, tooBig: () => DenError): Promise<Buffer> {
  try {
    const declared = Number(reply.headers["content-length"]);
    if (Number.isFinite(declared) && declared > max) throw tooBig();
    const parts: Buffer[] = [];
    let total = 0;
    for await (const chunk of reply.body) {
      total += chunk.length;
      if (total > max) throw tooBig();
      parts.push(chunk);
    }
    return Buffer.concat(parts, total);
  } finally {
    reply.close();
  }
}

const TLS_TRUST_CODES = /CERT|SELF_SIGNED|UNABLE_TO_(GET|VERIFY)|ALTNAME/;

/** A socket/TLS error as `image_pull_failed` naming `label`; DenErrors pass through. Only error codes are quoted, never URLs. */
export function networkError(e: unknown, label: string): DenError {
  if (e instanceof DenError) return e;
  const err = e as NodeJS.ErrnoException;
  const code = typeof err?.code === "string" ? err.code : "";
  const message = typeof err?.message === "string" ? err.message : "";
  if (code === "ERR_SSL_WRONG_VERSION_NUMBER" || /wrong version number|packet length too long/i.test(message)) {
    return pullFailed(`${label} does not speak TLS (a plain-http registry? list it in DEN_INSECURE_REGISTRIES to allow http)`);
  }
  if (TLS_TRUST_CODES.test(code)) return pullFailed(`${label}: its TLS certificate is not trusted (${code}); give its CA in DEN_REGISTRY_CA_FILE`);
  if (code === "ECONNREFUSED") return pullFailed(`${label} is unreachable: connection refused`);
  if (code === "ENOTFOUND" || code === "EAI_AGAIN") return pullFailed(`${label} is unreachable: its host name does not resolve (${code})`);
  if (code === "ETIMEDOUT" || code === "EHOSTUNREACH" || code === "ENETUNREACH") return pullFailed(`${label} is unreachable (${code})`);
  if (/^ERR_SSL|^ERR_TLS|EPROTO/.test(code)) return pullFailed(`${label}: TLS handshake failed (${code})`);
  return pullFailed(`connection to ${label} failed (${code || "closed"})`);
}
