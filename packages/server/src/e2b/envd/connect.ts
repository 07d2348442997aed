/**
 * The Connect protocol with the JSON codec, by hand: unary calls are a JSON body and a JSON
 * answer; server streams are length-prefixed envelopes ending with an end-of-stream one.
 * No compression is offered, so the client never sends any.
 */
import { once } from "node:events";
import type { ServerResponse } from "node:http";
import type { z } from "zod";
import { DenError, e2b, parseInput } from "@den/protocol";
import { EnvdDenied, EnvdUnavailable } from "./seam.js";

const FLAG_COMPRESSED = 0x01;
const FLAG_END_STREAM = 0x02;
/** The longest a client may ask a stream to live; longer asks are clamped to it. */
const MAX_TIMEOUT_MS = 24 * 3600_000;

export class ConnectError extends Error {
  constructor(readonly code: e2b.ConnectCode, message: string) {
    super(message);
    this.name = "ConnectError";
  }
}

/** Guest error codes -> Connect codes; anything unexpected is `internal` with a generic message. */
const FROM_DEN: Partial<Record<string, e2b.ConnectCode>> = {
  file_not_found: "not_found", not_found: "not_found", proc_not_found: "not_found",
  invalid_argument: "invalid_argument", cwd_not_found: "invalid_argument", not_a_directory: "invalid_argument",
  is_a_directory: "invalid_argument", path_too_long: "invalid_argument", unreadable: "invalid_argument",
  already_exists: "already_exists", not_empty: "failed_precondition", permission_denied: "permission_denied",
  sandbox_not_running: "unavailable", sandbox_destroyed: "unavailable", sandbox_not_found: "unavailable", agent_unavailable: "unavailable",
  exec_timeout: "deadline_exceeded", timeout: "deadline_exceeded",
  limit_exceeded: "resource_exhausted", quota_exceeded: "resource_exhausted", payload_too_large: "resource_exhausted",
  unknown_op: "unimplemented", unauthorized: "unauthenticated",
};

export function toConnectError(e: unknown): ConnectError {
  if (e instanceof ConnectError) return e;
  if (e instanceof EnvdDenied) return new ConnectError("unauthenticated", e.message);
  if (e instanceof EnvdUnavailable) return new ConnectError("unavailable", e.message);
  if (e instanceof DenError) {
    const code = FROM_DEN[e.code];
    return code ? new ConnectError(code, e.message) : new ConnectError("internal", e.status < 500 ? e.message : `internal error (${e.code})`);
  }
  return new ConnectError("internal", "internal error");
}

/** Validates a decoded message against its schema; a mismatch is the caller's `invalid_argument` (a DenError, which toConnectError maps). */
export function parseMessage<S extends z.ZodType>(schema: S, value: unknown): z.infer<S> {
  return parseInput(schema, value, "message");
}

/** The single envelope of a server-streaming request. */
export function decodeRequestEnvelope(body: Buffer): unknown {
  if (body.length < 5) throw new ConnectError("invalid_argument", "request is not a Connect envelope");
  const flags = body[0]!;
  const len = body.readUInt32BE(1);
  if (flags & FLAG_COMPRESSED) throw new ConnectError("unimplemented", "compressed envelopes are not supported");
  if (len !== body.length - 5) throw new ConnectError("invalid_argument", "envelope length does not match the body (one message expected)");
  return parseJson(body.subarray(5));
}

export function parseJson(b: Buffer): unknown {
  try {
    return b.length ? JSON.parse(b.toString("utf8")) : {};
  } catch {
    throw new ConnectError("invalid_argument", "request body is not JSON");
  }
}

export function envelope(flags: number, msg: unknown): Buffer {
  const json = Buffer.from(JSON.stringify(msg));
  const head = Buffer.alloc(5);
  head[0] = flags;
  head.writeUInt32BE(json.length, 1);
  return Buffer.concat([head, json]);
}

/** `Connect-Timeout-Ms`: undefined when absent; at most a day. */
export function timeoutOf(header: string | string[] | undefined): number | undefined {
  const v = Array.isArray(header) ? header[0] : header;
  if (v === undefined || !/^\d{1,10}$/.test(v)) return undefined;
  return Math.min(Number(v), MAX_TIMEOUT_MS);
}

/** `Keepalive-Ping-Interval` (seconds) in ms, between 1 s and 10 min; undefined when absent. */
export function keepaliveOf(header: string | string[] | undefined): number | undefined {
  const v = Array.isArray(header) ? header[0] : header;
  if (v === undefined || !/^\d{1,6}$/.test(v)) return undefined;
  return Math.min(Math.max(Number(v), 1), 600) * 1000;
}

export function sendUnaryError(res: ServerResponse, e: ConnectError, status = e2b.CONNECT_HTTP_STATUS[e.code]): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = JSON.stringify({ code: e.code, message: e.message });
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}

export function sendUnary(res: ServerResponse, msg: unknown): void {
  const body = JSON.stringify(msg);
  res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}

/**
 * One server stream's reply: messages go out at the socket's pace (a writer awaits
 * `send`), and it ends with an end-of-stream envelope, or abruptly (`abort`) when the
 * sandbox is gone, so the client sees a dropped connection.
 */
export class EnvelopeStream {
  private done = false;
  private started = false;
  readonly closed: Promise<void>;

  constructor(private readonly res: ServerResponse) {
    this.closed = new Promise((resolve) => res.once("close", () => {
      this.done = true;
      resolve();
    }));
  }

  get isDone(): boolean {
    return this.done;
  }

  private start(): void {
    if (this.started) return;
    this.started = true;
    // No proxy may hold the events back.
    this.res.writeHead(200, { "content-type": "application/connect+json", "cache-control": "no-store", "x-accel-buffering": "no" });
    this.res.flushHeaders();
  }

  /** Resolves once the message is handed to the socket (waits while the socket is full). */
  async send(msg: unknown): Promise<void> {
    if (this.done) return;
    this.start();
    if (!this.res.write(envelope(0, msg)) && !this.done) await Promise.race([once(this.res, "drain"), this.closed]);
  }

  end(error?: ConnectError): void {
    if (this.done) return;
    this.done = true;
    this.start();
    this.res.end(envelope(FLAG_END_STREAM, error ? { error: { code: error.code, message: error.message } } : {}));
  }

  /** Cuts the connection with no end-of-stream: what a killed sandbox looks like. */
  abort(): void {
    this.done = true;
    this.res.socket?.destroy();
    this.res.destroy();
  }
}
