/**
 * The code interpreter's /v1 side: requests to the code server a `code-interpreter-v1`
 * sandbox runs on its guest port 49999 (E2B's code-interpreter wire protocol), through the
 * same tunnels the port proxy uses (`(await cp.guests.reach(id)).tunnel(port)`), so they work
 * whatever the sandbox's egress policy and wake a hibernated sandbox. Den builds every
 * request itself (nothing of the client's headers goes in), with `X-Den-Sandbox-Env`
 * carrying the sandbox's env vars; the guest's errors become Den's codes.
 */
import http from "node:http";
import type { Duplex } from "node:stream";
import { DenError, api } from "@den/protocol";
import type { ControlPlane } from "@den/control-plane";
import { OwnerSlots } from "@den/control-plane";
import { CODE_PORT, SANDBOX_ENV_HEADER, sandboxEnvHeader } from "../ports/code-port.js";
import type { Principal, SandboxRow } from "@den/control-plane";

/** The longest line of a run's stream Den passes on (an image's base64 is one line). */
export const MAX_CODE_LINE_BYTES = 32 * 1024 * 1024;
/** How long a context call (create, list, restart, remove) may take: a kernel's start or restart. */
export const CONTEXT_CALL_TIMEOUT_MS = 120_000;
/** What Den reads of a guest's error or context answer. */
const MAX_ANSWER_BYTES = 1024 * 1024;

/** One request to the code server, its response, and how to hang up (the tunnel with it). */
interface GuestCall {
  res: http.IncomingMessage;
  close(): void;
}

/** Why a run's stream ended early, as its last line says. */
function unexpectedEnd(code: string, message: string): string {
  return JSON.stringify({ type: "unexpected_end_of_execution", error: { code, message } }) + "\n";
}

/** The message of a guest's error body: FastAPI's `detail`, `{error}`, `{message}`, or its text. */
function guestMessage(text: string): string {
  try {
    const v = JSON.parse(text) as Record<string, unknown>;
    const d = v?.detail ?? v?.error ?? v?.message;
    if (typeof d === "string") return d;
    if (d && typeof d === "object" && typeof (d as { message?: unknown }).message === "string") return (d as { message: string }).message;
    if (d !== undefined) return JSON.stringify(d);
  } catch {
    // not JSON
  }
  return text.trim();
}

async function readBounded(res: http.IncomingMessage, max: number): Promise<string> {
  const parts: Buffer[] = [];
  let n = 0;
  for await (const c of res as AsyncIterable<Buffer>) {
    n += c.length;
    if (n > max) throw new DenError("agent_protocol_error", `the code interpreter's answer is over ${max} bytes`);
    parts.push(c);
  }
  return Buffer.concat(parts).toString("utf8");
}

/**
 * Forwards /v1's code routes to the sandbox's code server. Every connection counts against
 * its owner's limit (`DEN_MAX_PORT_CONNECTIONS_PER_OWNER`, as the port proxy's), and holds
 * the sandbox active while it is open.
 */
export class CodeInterpreter {
  private readonly open: OwnerSlots;

  constructor(private readonly cp: ControlPlane, maxPerOwner = cp.config.ports.maxConnectionsPerOwner) {
    this.open = new OwnerSlots(maxPerOwner, "connections to code interpreters", "DEN_MAX_PORT_CONNECTIONS_PER_OWNER");
  }

  private async tunnel(id: string): Promise<Duplex> {
    const guest = await this.cp.guests.reach(id);
    try {
      return await guest.tunnel(CODE_PORT);
    } catch (e) {
      if (e instanceof DenError && e.code === "connection_refused") {
        throw new DenError("code_interpreter_unavailable",
          `sandbox ${id} has no code interpreter (nothing listens on its port ${CODE_PORT}): create the sandbox from the template ${api.CODE_INTERPRETER_TEMPLATE} (or a template built on it)`);
      }
      throw e;
    }
  }

  /**
   * Sends one request to the code server and resolves with its response headers. `signal`
   * hangs up (the tunnel is destroyed: the guest's server sees its client gone).
   */
  private async call(row: SandboxRow, method: string, path: string, body: unknown, accept: string, signal?: AbortSignal): Promise<GuestCall> {
    const tunnel = await this.tunnel(row.id);
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body), "utf8");
    const headers: http.OutgoingHttpHeaders = {
      host: `localhost:${CODE_PORT}`,
      accept,
      [SANDBOX_ENV_HEADER]: sandboxEnvHeader(JSON.parse(row.env) as Record<string, string>),
      ...(payload ? { "content-type": "application/json", "content-length": payload.length } : {}),
    };
    return await new Promise<GuestCall>((resolve, reject) => {
      const req = http.request({ method, path, headers, createConnection: () => tunnel as never });
      const close = () => {
        req.destroy();
        tunnel.destroy();
      };
      const onAbort = () => {
        close();
        reject(new DenError("aborted", "the client went away"));
      };
      if (signal?.aborted) return onAbort();
      signal?.addEventListener("abort", onAbort, { once: true });
      req.on("error", (e) => {
        signal?.removeEventListener("abort", onAbort);
        close();
        reject(e instanceof DenError ? e : new DenError("agent_unavailable", `the code interpreter of sandbox ${row.id}: ${e.message}`));
      });
      req.on("response", (res) => {
        signal?.removeEventListener("abort", onAbort);
        res.on("error", () => undefined);
        resolve({ res, close });
      });
      req.end(payload);
    });
  }

  /** The guest's non-2xx answer as Den's error. */
  private async guestError(call: GuestCall, notFound: () => string): Promise<DenError> {
    const status = call.res.statusCode ?? 502;
    let message = "";
    try {
      message = guestMessage(await readBounded(call.res, 64 * 1024)).slice(0, 2000);
    } catch {
      // its status says enough
    }
    call.close();
    if (status === 404) return new DenError("context_not_found", notFound());
    if (status === 400 || status === 422) return new DenError("invalid_argument", message || `the code interpreter refused the request (HTTP ${status})`);
    if (status === 429) return new DenError("limit_exceeded", message || "the code interpreter has as many contexts as it may");
    return new DenError("agent_protocol_error", `the code interpreter answered HTTP ${status}${message ? `: ${message}` : ""}`);
  }

  /**
   * Runs code: resolves once the guest's server has answered 200, with the lines of its
   * stream (each a JSON object, `\n`-terminated, passed on as they come) and `close`, which
   * hangs up (the guest's server interrupts the cell). The sandbox is active, and the
   * owner's slot held, until the lines are consumed or `close` is called.
   */
  async execute(p: Principal, id: string, body: api.RunCodeRequest, signal?: AbortSignal): Promise<{ lines: AsyncGenerator<string>; close(): void }> {
    const row = await this.cp.owned(p, id);
    const release = this.open.take(row.owner);
    let call: GuestCall;
    try {
      call = await this.cp.activity.withExec(row.id, () => this.call(row, "POST", "/execute", body, "application/x-ndjson", signal));
      if ((call.res.statusCode ?? 502) >= 300) {
        throw await this.guestError(call, () => body.context_id !== undefined
          ? `code context ${JSON.stringify(body.context_id)} does not exist in sandbox ${row.id}`
          : `the code interpreter of sandbox ${row.id} has no /execute`);
      }
    } catch (e) {
      release();
      throw e;
    }
    const c = call;
    async function* lines(): AsyncGenerator<string> {
      let pending: Buffer[] = [];
      let pendingBytes = 0;
      let ended = false;
      try {
        for await (const chunk of c.res as AsyncIterable<Buffer>) {
          let start = 0;
          for (;;) {
            const nl = chunk.indexOf(10, start);
            if (nl < 0) break;
            const piece = chunk.subarray(start, nl);
            start = nl + 1;
            const raw = pendingBytes ? Buffer.concat([...pending, piece]) : piece;
            pending = [];
            pendingBytes = 0;
            const line = passOn(raw);
            if (line === undefined) continue;
            yield line.text;
            if (line.last) {
              ended = true;
              return;
            }
          }
          if (start < chunk.length) {
            pending.push(chunk.subarray(start));
            pendingBytes += chunk.length - start;
            if (pendingBytes > MAX_CODE_LINE_BYTES) {
              ended = true;
              yield unexpectedEnd("payload_too_large", `a line of the code interpreter's stream is over ${MAX_CODE_LINE_BYTES} bytes`);
              return;
            }
          }
        }
        if (pendingBytes) {
          const line = passOn(Buffer.concat(pending));
          if (line) {
            yield line.text;
            if (line.last) ended = true;
          }
        }
      } catch {
        // the tunnel broke: said below
      } finally {
        c.close();
        release();
      }
      if (!ended) yield unexpectedEnd("agent_unavailable", `the code interpreter of sandbox ${row.id} ended the run's stream before its end`);
    }
    return { lines: this.cp.activity.withExecStream(row.id, lines()), close: () => { c.close(); release(); } };
  }

  /** A context call: its JSON answer (undefined for an empty one, or when `parse` is false: its body is not read as JSON). */
  async contextCall(p: Principal, id: string, method: "GET" | "POST" | "DELETE", path: string, body: unknown, ctx?: string, parse = true): Promise<unknown> {
    const row = await this.cp.owned(p, id);
    const release = this.open.take(row.owner);
    const deadline = AbortSignal.timeout(CONTEXT_CALL_TIMEOUT_MS);
    try {
      return await this.cp.activity.withExec(row.id, async () => {
        let call: GuestCall;
        try {
          call = await this.call(row, method, path, body, "application/json", deadline);
        } catch (e) {
          if (deadline.aborted) throw new DenError("timeout", `the code interpreter of sandbox ${row.id} did not answer in ${CONTEXT_CALL_TIMEOUT_MS / 1000} s`);
          throw e;
        }
        const timer = () => call.close();
        deadline.addEventListener("abort", timer, { once: true });
        try {
          if ((call.res.statusCode ?? 502) >= 300) {
            throw await this.guestError(call, () => ctx !== undefined ? `code context ${JSON.stringify(ctx)} does not exist in sandbox ${row.id}` : `the code interpreter of sandbox ${row.id} has no ${path}`);
          }
          let text: string;
          try {
            text = await readBounded(call.res, MAX_ANSWER_BYTES);
          } catch (e) {
            if (deadline.aborted) throw new DenError("timeout", `the code interpreter of sandbox ${row.id} did not answer in ${CONTEXT_CALL_TIMEOUT_MS / 1000} s`);
            throw e instanceof DenError ? e : new DenError("agent_unavailable", `the code interpreter of sandbox ${row.id} hung up`);
          }
          if (!parse || !text.trim()) return undefined;
          try {
            return JSON.parse(text) as unknown;
          } catch {
            throw new DenError("agent_protocol_error", `the code interpreter's answer is not JSON: ${text.slice(0, 200)}`);
          }
        } finally {
          deadline.removeEventListener("abort", timer);
          call.close();
        }
      });
    } finally {
      release();
    }
  }

  async createContext(p: Principal, id: string, body: api.CreateCodeContextRequest): Promise<api.CodeContext> {
    return context(await this.contextCall(p, id, "POST", "/contexts", body));
  }

  async listContexts(p: Principal, id: string): Promise<api.CodeContext[]> {
    const v = await this.contextCall(p, id, "GET", "/contexts", undefined);
    const list = Array.isArray(v) ? v : (v as { contexts?: unknown } | undefined)?.contexts;
    if (!Array.isArray(list)) throw new DenError("agent_protocol_error", "the code interpreter's context list is not a list");
    return list.map(context);
  }

  async restartContext(p: Principal, id: string, ctx: string): Promise<void> {
    await this.contextCall(p, id, "POST", `/contexts/${encodeURIComponent(ctx)}/restart`, undefined, ctx, false);
  }

  async removeContext(p: Principal, id: string, ctx: string): Promise<void> {
    await this.contextCall(p, id, "DELETE", `/contexts/${encodeURIComponent(ctx)}`, undefined, ctx, false);
  }
}

function context(v: unknown): api.CodeContext {
  const r = api.CodeContext.safeParse(v);
  if (!r.success) throw new DenError("agent_protocol_error", "the code interpreter's context is not {id, language, cwd}");
  return { id: r.data.id, language: r.data.language, cwd: r.data.cwd };
}

/** A line of the guest's stream to pass on (a JSON object with a `type`), and whether it is the run's last; others are dropped. */
function passOn(raw: Buffer): { text: string; last: boolean } | undefined {
  const text = raw.toString("utf8").trim();
  if (!text) return undefined;
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (!v || typeof v !== "object" || Array.isArray(v)) return undefined;
  const type = (v as { type?: unknown }).type;
  if (typeof type !== "string" || type === "keepalive") return undefined;
  return { text: text + "\n", last: type === "end_of_execution" || type === "unexpected_end_of_execution" };
}
