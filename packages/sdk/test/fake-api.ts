/**
 * A stand-in for the Den HTTP API (node:http), for the SDK's unit tests only: an in-memory
 * store of sandboxes, files and processes that follows packages/protocol/API.md. It checks
 * the bearer key, parses every JSON request body with the protocol's strict zod schemas (so a
 * camelCase or unknown field is a 400, as on the real server), and answers with bodies typed
 * from the same schemas. Tests can override the exec routes and read the request log.
 */
import { type IncomingMessage, type Server, type ServerResponse, createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { api, ERROR_STATUS, type ErrorCode } from "@den/protocol";

export const KEY = "den_test_user_key";
export const ADMIN_KEY = "den_test_admin_key";

export interface LoggedRequest {
  method: string;
  path: string;
  query: URLSearchParams;
  headers: IncomingMessage["headers"];
  body: Buffer;
  json?: unknown;
}

export class HttpError extends Error {
  constructor(readonly code: ErrorCode, message: string) {
    super(message);
  }
}

interface FakeProc {
  info: api.ProcessInfo;
  argv: string[] | undefined;
  cmd: string | undefined;
  stdin: Buffer[];
  stdout: Buffer;
  stderr: Buffer;
  exited: Promise<void>;
  finish: (code: number | null, signal?: number | null) => void;
}

type ExecHandler = (req: api.ExecRequest) => api.ExecResult | Promise<api.ExecResult>;
type StreamHandler = (req: api.ExecRequest, res: ServerResponse, line: (v: object) => void) => Promise<void> | void;

let seqId = 0;
function newSandboxId(): string {
  const alphabet = "abcdefghijklmnopqrstuvwxyz234567";
  let n = ++seqId;
  let s = "";
  for (let i = 0; i < 16; i++) {
    s += alphabet[n % 32];
    n = Math.floor(n / 32);
  }
  return `sbx_${s}`;
}

export class FakeDen {
  readonly server: Server;
  url = "";
  readonly requests: LoggedRequest[] = [];
  readonly sandboxes = new Map<string, api.Sandbox>();
  readonly files = new Map<string, Map<string, Buffer | "dir">>();
  readonly procs = new Map<string, Map<number, FakeProc>>();
  readonly events = new Map<string, api.SandboxEvent[]>();
  keys: api.ApiKey[] = [
    { id: "key_user", owner: "alice", admin: false, created_at: "2026-01-01T00:00:00.000Z", revoked_at: null },
    { id: "key_admin", owner: "root", admin: true, created_at: "2026-01-01T00:00:00.000Z", revoked_at: null },
  ];
  onExec: ExecHandler = (req) => ({
    stdout: req.cmd?.startsWith("echo ") ? `${req.cmd.slice(5)}\n` : "",
    stderr: "",
    exit_code: 0,
    signal: null,
    timed_out: false,
    duration_ms: 3,
  });
  onExecStream: StreamHandler = (_req, _res, line) => {
    line({ type: "start", pid: 7 });
    line({ type: "stdout", data_b64: Buffer.from("hi\n").toString("base64") });
    line({ type: "exit", exit_code: 0, signal: null, timed_out: false });
  };

  constructor() {
    this.server = createServer((req, res) => {
      this.#handle(req, res).catch((e: unknown) => {
        if (res.headersSent) {
          res.destroy();
          return;
        }
        const code: ErrorCode = e instanceof HttpError ? e.code : "internal";
        const message = e instanceof Error ? e.message : String(e);
        send(res, ERROR_STATUS[code], { error: { code, message } });
      });
    });
  }

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  /** Client options for the user key. */
  get opts(): { apiUrl: string; apiKey: string } {
    return { apiUrl: this.url, apiKey: KEY };
  }

  addSandbox(overrides: Partial<api.Sandbox> = {}): api.Sandbox {
    const now = new Date().toISOString();
    const s: api.Sandbox = {
      id: newSandboxId(),
      state: "running",
      state_reason: null,
      template: "base",
      template_version: "0123456789ab",
      hibernate_mode: null,
      stored_bytes: null,
      network: { egress: "none" }, operation: null,
      persistent: false,
      ttl_seconds: 3600,
      expires_at: new Date(Date.now() + 3600_000).toISOString(),
      idle_timeout_seconds: 600,
      on_idle: "hibernate",
      metadata: {},
      vcpus: 1,
      memory_mb: 512,
      disk_mb: 4096,
      created_at: now,
      last_activity_at: now,
      destroyed_at: null,
      ...overrides,
    };
    this.sandboxes.set(s.id, s);
    this.files.set(s.id, new Map([["/", "dir"]]));
    this.procs.set(s.id, new Map());
    this.events.set(s.id, [{ seq: 1, sandbox_id: s.id, at: now, type: "created", reason: "user", data: {} }]);
    return s;
  }

  lastRequest(method: string, pathPattern: RegExp): LoggedRequest | undefined {
    return [...this.requests].reverse().find((r) => r.method === method && pathPattern.test(r.path));
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "http://x");
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = Buffer.concat(chunks);
    const logged: LoggedRequest = { method: req.method ?? "", path: url.pathname, query: url.searchParams, headers: req.headers, body };
    if ((req.headers["content-type"] ?? "").startsWith("application/json")) logged.json = JSON.parse(body.toString("utf8"));
    this.requests.push(logged);

    const auth = req.headers.authorization;
    const key = auth?.startsWith("Bearer ") ? auth.slice(7) : undefined;
    if (key !== KEY && key !== ADMIN_KEY) throw new HttpError("unauthorized", "missing or invalid API key");
    const isAdmin = key === ADMIN_KEY;
    const m = req.method ?? "GET";
    const p = url.pathname;
    const q = url.searchParams;
    const parse = <T>(schema: { safeParse(v: unknown): { success: true; data: T } | { success: false; error: { message: string } } }): T => {
      const r = schema.safeParse(logged.json);
      if (!r.success) throw new HttpError("invalid_argument", r.error.message);
      return r.data;
    };

    // Admin and global routes.
    if (p === "/v1/templates" && m === "GET") {
      return send(res, 200, {
        templates: [{ name: "base", version: "0123456789ab", current: true, owner: null, vcpus: 1, memory_mb: 512, disk_mb: 4096, created_at: "2026-01-01T00:00:00.000Z" }],
      });
    }
    if (p.startsWith("/v1/keys")) {
      if (!isAdmin) throw new HttpError("forbidden", "admin key required");
      if (p === "/v1/keys" && m === "POST") {
        const r = parse(api.CreateKeyRequest);
        const k: api.ApiKey = { id: `key_${this.keys.length}`, owner: r.owner, admin: r.admin ?? false, created_at: new Date().toISOString(), revoked_at: null };
        this.keys.push(k);
        return send(res, 201, { ...k, key: r.format === "e2b" ? `e2b_${"0".repeat(47)}${this.keys.length}` : `den_secret_${k.id}` });
      }
      if (p === "/v1/keys" && m === "GET") return send(res, 200, { keys: this.keys });
      const km = /^\/v1\/keys\/([^/]+)$/.exec(p);
      if (km && m === "DELETE") {
        const k = this.keys.find((x) => x.id === decodeURIComponent(km[1]!));
        if (!k) throw new HttpError("not_found", "no such key");
        k.revoked_at ??= new Date().toISOString();
        return send(res, 200, k);
      }
    }
    if (p === "/v1/sandboxes" && m === "POST") {
      const r = parse(api.CreateSandboxRequest);
      const s = this.addSandbox({
        template: r.template ?? "base",
        persistent: r.persistent ?? false,
        ttl_seconds: r.ttl_seconds === undefined ? 3600 : r.ttl_seconds,
        idle_timeout_seconds: r.idle_timeout_seconds ?? 600,
        on_idle: r.on_idle ?? "hibernate",
        metadata: r.metadata ?? {},
        vcpus: r.vcpus ?? 1,
        memory_mb: r.memory_mb ?? 512,
        disk_mb: r.disk_mb ?? 4096,
      });
      return send(res, 201, s);
    }
    if (p === "/v1/sandboxes" && m === "GET") {
      let all = [...this.sandboxes.values()];
      const state = q.get("state");
      if (state) all = all.filter((s) => s.state === state);
      for (const [k, v] of q) if (k.startsWith("metadata.")) all = all.filter((s) => s.metadata[k.slice(9)] === v);
      const limit = Number(q.get("limit") ?? 50);
      const start = q.get("cursor") ? Number(q.get("cursor")!.slice(1)) : 0;
      const page = all.slice(start, start + limit);
      const next = start + limit < all.length ? `c${start + limit}` : null;
      return send(res, 200, { sandboxes: page, next_cursor: next } satisfies api.ListSandboxesResponse);
    }

    const sm = /^\/v1\/sandboxes\/([^/]+)(\/.*)?$/.exec(p);
    if (!sm) throw new HttpError("route_not_found", `no route ${m} ${p}`);
    const sbx = this.sandboxes.get(decodeURIComponent(sm[1]!));
    if (!sbx) throw new HttpError("sandbox_not_found", `no sandbox ${sm[1]}`);
    const rest = sm[2] ?? "";
    const files = this.files.get(sbx.id)!;
    const procs = this.procs.get(sbx.id)!;

    if (rest === "" && m === "GET") return send(res, 200, sbx);
    if (rest === "" && m === "DELETE") {
      if (sbx.state !== "destroyed") Object.assign(sbx, { state: "destroyed", state_reason: "user", destroyed_at: new Date().toISOString() });
      return send(res, 200, sbx);
    }
    if (sbx.state === "destroyed") throw new HttpError("sandbox_destroyed", "sandbox is destroyed");
    if (rest === "/hibernate" && m === "POST") {
      parse(api.HibernateRequest);
      Object.assign(sbx, { state: "hibernated", state_reason: "user" });
      return send(res, 200, sbx);
    }
    if (rest === "/wake" && m === "POST") {
      Object.assign(sbx, { state: "running", state_reason: "user" });
      return send(res, 200, sbx);
    }
    if (rest === "/timeout" && m === "POST") {
      const r = parse(api.TimeoutRequest);
      sbx.expires_at = new Date(Date.now() + r.seconds * 1000).toISOString();
      return send(res, 200, sbx);
    }
    if (rest === "/events" && m === "GET") {
      const after = Number(q.get("after") ?? 0);
      const evs = this.events.get(sbx.id)!.filter((e) => e.seq > after);
      if (q.get("follow") !== "true") return send(res, 200, { events: evs });
      res.writeHead(200, { "content-type": "application/x-ndjson" });
      for (const e of evs) res.write(`${JSON.stringify(e)}\n`);
      await sleep(20);
      res.end(`${JSON.stringify({ seq: 99, sandbox_id: sbx.id, at: new Date().toISOString(), type: "destroyed", reason: "ttl", data: { n: 1 } })}\n`);
      return;
    }
    if (rest === "/exec" && m === "POST") return send(res, 200, await this.onExec(parse(api.ExecRequest)));
    if (rest === "/exec/stream" && m === "POST") {
      const r = parse(api.ExecRequest);
      res.writeHead(200, { "content-type": "application/x-ndjson" });
      await this.onExecStream(r, res, (v) => res.write(`${JSON.stringify(v)}\n`));
      res.end();
      return;
    }

    // Background processes. A proc runs until finished; "cat" echoes its stdin when stdin closes.
    if (rest === "/processes" && m === "POST") {
      const r = parse(api.StartProcessRequest);
      const n = procs.size + 1;
      let finish!: FakeProc["finish"];
      const exited = new Promise<void>((resolve) => {
        finish = (code, signal = null) => {
          Object.assign(fp.info, { running: false, exit_code: code, signal });
          resolve();
        };
      });
      const fp: FakeProc = {
        info: { proc: n, pid: 100 + n, running: true, exit_code: null, signal: null, timed_out: false },
        argv: r.argv,
        cmd: r.cmd,
        stdin: r.stdin_b64 ? [Buffer.from(r.stdin_b64, "base64")] : [],
        stdout: Buffer.alloc(0),
        stderr: Buffer.alloc(0),
        exited,
        finish,
      };
      procs.set(n, fp);
      return send(res, 201, fp.info);
    }
    if (rest === "/processes" && m === "GET") return send(res, 200, { processes: [...procs.values()].map((x) => x.info) });
    const pm = /^\/processes\/(\d+)(\/logs|\/input)?$/.exec(rest);
    if (pm) {
      const fp = procs.get(Number(pm[1]));
      if (!fp) throw new HttpError("proc_not_found", `no process ${pm[1]}`);
      if (!pm[2] && m === "GET") {
        const ws = q.get("wait_seconds");
        if (ws !== null) {
          if (!/^\d+$/.test(ws)) throw new HttpError("invalid_argument", "wait_seconds must be an integer");
          if (fp.info.running) await Promise.race([fp.exited, sleep(Number(ws) * 1000, { unref: true })]);
        }
        return send(res, 200, fp.info);
      }
      if (!pm[2] && m === "DELETE") {
        if (fp.info.running) fp.finish(null, 9);
        res.writeHead(204).end();
        return;
      }
      if (pm[2] === "/logs" && m === "GET") {
        const buf = q.get("stream") === "stderr" ? fp.stderr : fp.stdout;
        const offset = Number(q.get("offset") ?? 0);
        const data = buf.subarray(offset);
        return send(res, 200, { data_b64: data.toString("base64"), offset, next_offset: offset + data.length, dropped: false, eof: !fp.info.running } satisfies api.ProcessLogs);
      }
      if (pm[2] === "/input" && m === "POST") {
        const r = parse(api.ProcessInputRequest);
        fp.stdin.push(Buffer.from(r.data_b64, "base64"));
        if (r.eof && (fp.cmd === "cat" || fp.argv?.[0] === "cat")) {
          fp.stdout = Buffer.concat(fp.stdin);
          fp.finish(0);
        }
        res.writeHead(204).end();
        return;
      }
    }

    // Files.
    const path = q.get("path");
    const stat = (pth: string): api.FileStat => {
      const f = files.get(pth);
      if (f === undefined) throw new HttpError("file_not_found", `no such file: ${pth}`);
      return { path: pth, type: f === "dir" ? "dir" : "file", size: f === "dir" ? 4096 : f.length, mode: f === "dir" ? 0o40755 : 0o100644, mtime: "2026-01-02T03:04:05.000Z" };
    };
    if (rest === "/files" && m === "GET") {
      const f = files.get(path ?? "");
      if (f === undefined) throw new HttpError("file_not_found", `no such file: ${path}`);
      if (f === "dir") throw new HttpError("is_a_directory", "is a directory");
      res.writeHead(200, { "content-type": "application/octet-stream", "content-length": f.length }).end(f);
      return;
    }
    if (rest === "/files" && m === "PUT") {
      if (req.headers["content-type"] !== "application/octet-stream") throw new HttpError("invalid_argument", "expected application/octet-stream");
      files.set(path!, body);
      return send(res, 200, stat(path!));
    }
    if (rest === "/files" && m === "DELETE") {
      stat(path!);
      const recursive = q.get("recursive") === "true";
      const children = [...files.keys()].filter((k) => k.startsWith(`${path}/`));
      if (children.length && !recursive) throw new HttpError("not_empty", "directory not empty");
      for (const k of [path!, ...children]) files.delete(k);
      res.writeHead(204).end();
      return;
    }
    if (rest === "/files/stat" && m === "GET") return send(res, 200, stat(path!));
    if (rest === "/files/list" && m === "GET") {
      const dir = path!.replace(/\/$/, "");
      const entries = [...files.keys()].filter((k) => k !== dir && k.startsWith(`${dir}/`) && !k.slice(dir.length + 1).includes("/")).map(stat);
      return send(res, 200, { entries, truncated: false } satisfies api.ListFilesResponse);
    }
    if (rest === "/files/mkdir" && m === "POST") {
      const r = parse(api.MkdirRequest);
      if (files.has(r.path) && !r.parents) throw new HttpError("already_exists", "exists");
      files.set(r.path, "dir");
      res.writeHead(204).end();
      return;
    }
    if (rest === "/files/rename" && m === "POST") {
      const r = parse(api.RenameRequest);
      const f = files.get(r.from);
      if (f === undefined) throw new HttpError("file_not_found", "no such file");
      files.delete(r.from);
      files.set(r.to, f);
      res.writeHead(204).end();
      return;
    }
    throw new HttpError("route_not_found", `no route ${m} ${p}`);
  }
}

export function send(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) }).end(text);
}

/** With `unref`, the timer does not keep the test process alive (for long server-side waits). */
export function sleep(ms: number, opts: { unref?: boolean } = {}): Promise<void> {
  return new Promise((r) => {
    const t = setTimeout(r, ms);
    if (opts.unref) t.unref();
  });
}

export function b64(s: string | Uint8Array): string {
  return Buffer.from(s).toString("base64");
}
