import http from "node:http";
import https from "node:https";
import type { Duplex } from "node:stream";
import { DenError, host, type GuestCommand, type GuestExecOptions, type GuestFileOwner, type GuestFileSource, type GuestMetrics, type HostGuest } from "@den/protocol";
import type { DirEntry, FileStat, ListeningPort, ProcInfo, ProcReadReply, ProcWaitReply } from "@den/protocol";
import { WsExecProcess } from "./exec-client.js";
import { transportError, type HostHttp } from "./fetch.js";
import { errorFromResponse } from "./wire-errors.js";

/** Deadlines of calls the runtime gives none: a small call, and the slack over a guest-side timeout. */
const CALL_MS = 60_000;
const SLACK_MS = 60_000;
/** A buffered exec with no timeout of its own still ends, on the host's side too (the host kills it when we hang up). */
const EXEC_NO_TIMEOUT_MS = 6 * 3600_000;
/** A file stream that sends nothing for this long is dead. */
const STREAM_IDLE_MS = 120_000;

function wireOptions(opts: GuestExecOptions & { bufferBytes?: number }): host.ExecRequest["options"] {
  const { stdin, ...rest } = opts;
  return { ...rest, ...(stdin !== undefined ? { stdin_b64: Buffer.from(stdin).toString("base64") } : {}) };
}

async function* chunks(data: GuestFileSource): AsyncGenerator<Uint8Array> {
  if (typeof data === "string" || data instanceof Uint8Array) yield Buffer.from(data);
  else yield* data;
}

/**
 * The guest of one sandbox on a host over `/host/v1/sandboxes/:id/...`: the same surface as
 * the runtime Sandbox the routes use in-process, each call with a deadline, each error the
 * DenError the host threw.
 */
export class HttpGuest implements HostGuest {
  private readonly base: string;

  constructor(private readonly http: HostHttp, private readonly id: string) {
    this.base = `/host/v1/sandboxes/${encodeURIComponent(id)}`;
  }

  async exec(command: GuestCommand, opts: GuestExecOptions = {}): Promise<{ stdout: Buffer; stderr: Buffer; exitCode: number | null; signal: number | null; timedOut: boolean }> {
    const max = opts.maxOutputBytes ?? 64 * 1024 * 1024;
    const r = await this.http.json("POST", `${this.base}/exec`, host.ExecResultWire, {
      json: { command, options: wireOptions(opts) } satisfies host.ExecRequest,
      timeoutMs: opts.timeoutMs ? opts.timeoutMs + SLACK_MS : EXEC_NO_TIMEOUT_MS,
      // Both streams at their bound, base64, plus the envelope.
      maxBytes: 2 * Math.ceil((max * 4) / 3) + 64 * 1024,
    });
    return { stdout: Buffer.from(r.stdout_b64, "base64"), stderr: Buffer.from(r.stderr_b64, "base64"), exitCode: r.exitCode, signal: r.signal, timedOut: r.timedOut };
  }

  execStream(command: GuestCommand, opts: GuestExecOptions = {}): Promise<WsExecProcess> {
    return WsExecProcess.start(this.http, this.id, { command, options: wireOptions(opts) });
  }

  spawn(command: GuestCommand, opts: GuestExecOptions & { bufferBytes?: number } = {}): Promise<{ proc: number; pid: number }> {
    return this.http.json("POST", `${this.base}/spawn`, host.Spawned, { json: { command, options: wireOptions(opts) } satisfies host.ExecRequest, timeoutMs: CALL_MS });
  }

  readonly processes = {
    list: async (): Promise<ProcInfo[]> => (await this.http.json("GET", `${this.base}/processes`, host.ProcList, { timeoutMs: CALL_MS })).processes,
    read: (proc: number, channel: "stdout" | "stderr", offset = 0, max = 256 * 1024): Promise<ProcReadReply> =>
      this.http.json("GET", `${this.base}/processes/${proc}/logs`, host.ProcRead, { query: { channel, offset, max }, timeoutMs: CALL_MS }),
    wait: (proc: number, timeoutMs = 0): Promise<ProcWaitReply> => {
      if (!(timeoutMs >= 0)) throw new DenError("invalid_argument", "timeout must be >= 0");
      return this.http.json("GET", `${this.base}/processes/${proc}/wait`, host.ProcWait, { query: { timeout_ms: timeoutMs }, timeoutMs: timeoutMs + SLACK_MS });
    },
    write: async (proc: number, data: Buffer | string, eof = false): Promise<void> => {
      await this.http.json("POST", `${this.base}/processes/${proc}/input`, host.Ok, { json: { data_b64: Buffer.from(data).toString("base64"), eof }, timeoutMs: CALL_MS });
    },
    signal: async (proc: number, signal: number): Promise<void> => {
      await this.http.json("POST", `${this.base}/processes/${proc}/signal`, host.Ok, { json: { signal }, timeoutMs: CALL_MS });
    },
    kill: async (proc: number): Promise<void> => {
      await this.http.json("DELETE", `${this.base}/processes/${proc}`, host.Ok, { timeoutMs: CALL_MS });
    },
  };

  readonly files = {
    /** Streamed as the host sends it, pulled as the caller reads (fetch's body is flow-controlled). */
    readStream: (path: string, opts: { offset?: number; length?: number } = {}): AsyncGenerator<Buffer> => this.readStream(path, opts),
    write: async (path: string, data: GuestFileSource, opts: { mode?: number; parents?: boolean } & GuestFileOwner = {}): Promise<number> => {
      // No deadline while the caller's bytes flow (their pace is theirs); once sent, the host has a while to answer.
      const ac = new AbortController();
      let timer: NodeJS.Timeout | undefined;
      async function* body(): AsyncGenerator<Uint8Array> {
        yield* chunks(data);
        timer = setTimeout(() => ac.abort(new DenError("timeout", `file write ${path}: the host did not answer within ${CALL_MS} ms`)), CALL_MS);
      }
      try {
        const r = await this.http.json("PUT", `${this.base}/files`, host.Written, { stream: body(), query: { path, mode: opts.mode, parents: opts.parents, user: opts.user }, signal: ac.signal });
        return r.bytes;
      } catch (e) {
        throw ac.signal.aborted && ac.signal.reason instanceof DenError ? ac.signal.reason : e;
      } finally {
        clearTimeout(timer);
      }
    },
    stat: (path: string): Promise<FileStat> => this.http.json("GET", `${this.base}/files/stat`, host.FileStatWire, { query: { path }, timeoutMs: CALL_MS }),
    list: (path: string): Promise<{ entries: DirEntry[]; truncated: boolean }> => this.http.json("GET", `${this.base}/files/list`, host.FileList, { query: { path }, timeoutMs: CALL_MS }),
    mkdir: async (path: string, opts: { parents?: boolean; mode?: number } & GuestFileOwner = {}): Promise<void> => {
      await this.http.json("POST", `${this.base}/files/mkdir`, host.Ok, { json: { path, ...opts }, timeoutMs: CALL_MS });
    },
    remove: async (path: string, opts: { recursive?: boolean } = {}): Promise<void> => {
      await this.http.json("DELETE", `${this.base}/files`, host.Ok, { query: { path, recursive: opts.recursive ?? false }, timeoutMs: CALL_MS });
    },
    rename: async (from: string, to: string): Promise<void> => {
      await this.http.json("POST", `${this.base}/files/rename`, host.Ok, { json: { from, to }, timeoutMs: CALL_MS });
    },
    setXattrs: async (path: string, attrs: Record<string, string>): Promise<void> => {
      await this.http.json("PUT", `${this.base}/files/xattrs`, host.Ok, { json: { path, attrs }, timeoutMs: CALL_MS });
    },
    getXattrs: async (path: string): Promise<Record<string, string>> =>
      (await this.http.json("GET", `${this.base}/files/xattrs`, host.XattrsWire, { query: { path }, timeoutMs: CALL_MS })).attrs,
  };

  private async *readStream(path: string, opts: { offset?: number; length?: number }): AsyncGenerator<Buffer> {
    const ac = new AbortController();
    const what = `file read ${path}`;
    // A deadline for the answer to begin; the body then flows for as long as it has bytes.
    const begin = setTimeout(() => ac.abort(new DenError("timeout", `${what}: the host did not answer within ${CALL_MS} ms`)), CALL_MS);
    let res: Response;
    try {
      res = await this.http.request("GET", `${this.base}/files`, { query: { path, offset: opts.offset, length: opts.length }, signal: ac.signal });
    } finally {
      clearTimeout(begin);
    }
    const reader = res.body!.getReader();
    try {
      for (;;) {
        // Only the wait for the host counts: a slow reader is the caller's business.
        let timer: NodeJS.Timeout | undefined;
        const idle = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new DenError("timeout", `${what}: the host sent nothing for ${STREAM_IDLE_MS} ms`)), STREAM_IDLE_MS)));
        let r: Awaited<ReturnType<typeof reader.read>>;
        try {
          r = await Promise.race([reader.read(), idle]);
        } catch (e) {
          throw transportError(e, what, this.http.base, undefined);
        } finally {
          clearTimeout(timer);
        }
        if (r.done) return;
        yield Buffer.from(r.value.buffer, r.value.byteOffset, r.value.byteLength);
      }
    } finally {
      // A reader that stops early hangs up: the host stops reading the guest.
      ac.abort();
      reader.releaseLock();
    }
  }

  /** `Upgrade: den-tcp` to the host, which splices it to the port in the guest. */
  tunnel(port: number): Promise<Duplex> {
    const url = new URL(host.tunnelPath(this.id, port), this.http.base);
    const what = `tunnel to port ${port} of ${this.id}`;
    return new Promise((resolve, reject) => {
      const headers = { connection: "Upgrade", upgrade: "den-tcp" };
      // https.request with this link's certificate (every link is mutual TLS).
      const req = https.request(url, { ...this.http.tls, headers, timeout: CALL_MS });
      req.on("upgrade", (_res, socket, head) => {
        socket.setTimeout(0);
        if (head.length) socket.unshift(head);
        resolve(socket);
      });
      req.on("response", (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (text = (text + c).slice(0, 64 * 1024)));
        res.on("end", () => reject(errorFromResponse(res.statusCode ?? 500, text, what)));
      });
      req.on("timeout", () => req.destroy(new DenError("timeout", `${what}: the host did not answer within ${CALL_MS} ms`)));
      req.on("error", (e) => reject(transportError(e, what, this.http.base, CALL_MS)));
      req.end();
    });
  }

  metrics(): Promise<GuestMetrics> {
    return this.http.json("GET", `${this.base}/metrics`, host.MetricsWire, { timeoutMs: CALL_MS });
  }

  async listeningPorts(): Promise<ListeningPort[]> {
    return (await this.http.json("GET", `${this.base}/ports`, host.Ports, { timeoutMs: CALL_MS })).ports;
  }
}
