// needs: memory host, python3
/**
 * The code interpreter's surfaces (/v1's `code/...` routes, the TS SDK's runCode and
 * codeContexts, `den run-code`, the MCP tool run_code, the Python SDK's run_code) against a
 * real server on the in-memory host. The guest's code server is a stand-in: a small HTTP
 * server in this process, reached through the memory host's tunnel to port 49999, that
 * records what Den forwards and streams scripted NDJSON lines with a delay between them.
 */
import http from "node:http";
import net from "node:net";
import { spawn } from "node:child_process";
import { mkdtemp, readFile, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { InvalidStateError, NotFoundError, Sandbox, TimeoutError, type ExecutionResult } from "@den/sdk";
import { ADMIN_KEY, cliCalls, memoryFixture, waitFor } from "./helpers.js";

const CODE_PORT = 49999;
const GAP_MS = 150;
const PNG = Buffer.alloc(1234, 7).toString("base64");
const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");

interface Seen {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  rawHeaders: string[];
  body: any;
}

/** Lines of the scripted runs, by the code sent. */
const SCRIPTS: Record<string, object[]> = {
  ok: [
    { type: "stdout", text: "hello\n", timestamp: "2025-01-01T00:00:00Z" },
    { type: "stderr", text: "careful\n", timestamp: "2025-01-01T00:00:00Z" },
    { type: "result", is_main_result: false, text: "<Figure size 640x480 with 1 Axes>", png: PNG },
    { type: "result", is_main_result: true, text: "42", html: "<b>42</b>" },
    { type: "number_of_executions", execution_count: 3 },
    { type: "end_of_execution" },
  ],
  raise: [
    { type: "stdout", text: "before\n", timestamp: "2025-01-01T00:00:00Z" },
    { type: "error", name: "ZeroDivisionError", value: "division by zero", traceback: "Traceback (most recent call last):\n  Cell In[4], line 1\nZeroDivisionError: division by zero" },
    { type: "number_of_executions", execution_count: 4 },
    { type: "end_of_execution" },
  ],
};

/** The stand-in for the guest's code server: what it was sent, and runs it is holding open. */
class GuestCodeServer {
  readonly seen: Seen[] = [];
  /** When each line of the last scripted run was written (performance.now()). */
  written: number[] = [];
  /** Runs of `hang` whose connection closed (Den hung up). */
  closedHangs = 0;
  contexts = new Map<string, { id: string; language: string; cwd: string }>();
  private made = 0;
  private server!: http.Server;
  private port = 0;

  async start(): Promise<void> {
    this.server = http.createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((r) => this.server.listen(0, "127.0.0.1", r));
    this.port = (this.server.address() as net.AddressInfo).port;
  }

  /** Serves the sandbox's port 49999 through the memory host's tunnel: each tunnel is a TCP connection to this server. */
  attach(listen: (id: string, port: number, handler: (socket: import("node:stream").Duplex) => void) => () => void, id: string): () => void {
    return listen(id, CODE_PORT, (socket) => {
      const c = net.connect(this.port, "127.0.0.1");
      socket.pipe(c);
      c.pipe(socket);
      const gone = () => {
        c.destroy();
        socket.destroy();
      };
      socket.on("end", gone);
      socket.on("close", gone);
      socket.on("error", gone);
      c.on("close", gone);
      c.on("error", gone);
    });
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise((r) => this.server.close(r));
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const text = Buffer.concat(chunks).toString("utf8");
    const body = text ? JSON.parse(text) : undefined;
    this.seen.push({ method: req.method!, url: req.url!, headers: req.headers, rawHeaders: req.rawHeaders, body });
    const json = (status: number, v?: unknown) => {
      if (v === undefined) return void res.writeHead(status).end();
      res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(v));
    };
    if (req.method === "POST" && req.url === "/execute") {
      if (body.context_id !== undefined && !this.contexts.has(body.context_id)) return json(404, { detail: `Context ${body.context_id} not found` });
      if (body.code === "BAD") return json(400, { detail: "the code server refuses BAD" });
      res.writeHead(200, { "content-type": "application/x-ndjson" });
      res.flushHeaders();
      const line = (v: object) => res.write(JSON.stringify(v) + "\n");
      if (body.code === "hang") {
        res.on("close", () => this.closedHangs++);
        line({ type: "stdout", text: "started\n" });
        return; // never ends: only a hang-up closes it
      }
      if (body.code === "die") {
        line({ type: "stdout", text: "partial\n" });
        setTimeout(() => res.socket?.destroy(), 50);
        return;
      }
      if (body.code === "headers") {
        const env = req.headers["x-den-sandbox-env"];
        line({ type: "result", is_main_result: true, text: "headers", json: { env: typeof env === "string" ? JSON.parse(Buffer.from(env, "base64").toString("utf8")) : env, env_vars: body.env_vars ?? null, authorization: req.headers.authorization ?? null } });
        line({ type: "end_of_execution" });
        return void res.end();
      }
      const script = SCRIPTS[body.code] ?? [{ type: "stdout", text: `ran: ${body.code}\n` }, { type: "end_of_execution" }];
      this.written = [];
      for (const [i, l] of script.entries()) {
        if (i) await new Promise((r) => setTimeout(r, GAP_MS));
        if (res.destroyed) return;
        this.written.push(performance.now());
        line(l);
      }
      return void res.end();
    }
    if (req.url === "/contexts" && req.method === "GET") return json(200, [...this.contexts.values()]);
    if (req.url === "/contexts" && req.method === "POST") {
      const ctx = { id: `ctx${++this.made}`, language: body?.language ?? "python", cwd: body?.cwd ?? "/home/user" };
      this.contexts.set(ctx.id, ctx);
      return json(200, ctx);
    }
    const m = /^\/contexts\/([^/]+)(\/restart)?$/.exec(req.url!);
    if (m) {
      const id = decodeURIComponent(m[1]!);
      if (!this.contexts.has(id)) return json(404, { detail: `Context ${id} not found` });
      if (m[2] && req.method === "POST") return json(204);
      if (!m[2] && req.method === "DELETE") {
        this.contexts.delete(id);
        return json(204);
      }
    }
    json(404, { detail: "no route" });
  }
}

/** Reads an NDJSON response line by line, noting when each arrived. */
async function readLines(res: Response, stopAfter?: (line: any) => boolean): Promise<Array<{ line: any; at: number }>> {
  const out: Array<{ line: any; at: number }> = [];
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let nl: number;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const l = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (!l.trim()) continue;
      const line = JSON.parse(l);
      out.push({ line, at: performance.now() });
      if (stopAfter?.(line)) {
        await reader.cancel();
        return out;
      }
    }
  }
  return out;
}

describe("the code interpreter's surfaces on the in-memory host", () => {
  const f = memoryFixture();
  const guest = new GuestCodeServer();
  const { run } = cliCalls(() => f.server.url);
  let id = "";
  let plain = "";
  let otherKey = "";
  const removers: Array<() => void> = [];

  before(async () => {
    await guest.start();
    const created = await f.api("POST", "/v1/sandboxes", { persistent: true, env: { FOO: "bar", GREETING: "hi there" } });
    assert.equal(created.status, 201, created.text);
    id = created.body.id;
    removers.push(guest.attach((...a) => f.host.listen(...a), id));
    const other = await f.api("POST", "/v1/sandboxes", { persistent: true });
    plain = other.body.id;
    const key = await f.api("POST", "/v1/keys", { owner: "someone-else" });
    assert.equal(key.status, 201, key.text);
    otherKey = key.body.key;
  });
  after(async () => {
    for (const r of removers) r();
    await guest.stop();
  });

  const execute = (sandbox: string, body: unknown, headers: Record<string, string> = {}, signal?: AbortSignal) =>
    fetch(`${f.server.url}/v1/sandboxes/${sandbox}/code/execute`, {
      method: "POST", headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json", ...headers }, body: JSON.stringify(body), ...(signal ? { signal } : {}),
    });

  test("execute streams the guest's lines in order, each as it comes", async () => {
    const res = await execute(id, { code: "ok" });
    assert.equal(res.status, 200);
    assert.match(res.headers.get("content-type") ?? "", /application\/x-ndjson/);
    const lines = await readLines(res);
    assert.deepEqual(lines.map((l) => l.line.type), ["stdout", "stderr", "result", "result", "number_of_executions", "end_of_execution"]);
    assert.deepEqual(lines.map((l) => l.line), SCRIPTS.ok);
    // Unbuffered: the first line was here before the guest wrote its last one (5 gaps of 150 ms later).
    assert.equal(guest.written.length, 6);
    assert.ok(lines[0]!.at < guest.written[5]!, `the first line came at ${lines[0]!.at}, after the last was written at ${guest.written[5]}`);
    assert.ok(lines[0]!.at < guest.written[2]!, "the first line came before the third was written");
    const sent = guest.seen.at(-1)!;
    assert.deepEqual(sent.body, { code: "ok" });
    assert.equal(sent.url, "/execute");
  });

  test("the guest gets the sandbox's env in X-Den-Sandbox-Env (never the client's) and no Den key", async () => {
    const forged = Buffer.from(JSON.stringify({ FOO: "forged" })).toString("base64");
    const res = await execute(id, { code: "headers", env_vars: { ONLY_THIS_RUN: "1" } }, { "x-den-sandbox-env": forged, "X-Den-Extra": "nope" });
    assert.equal(res.status, 200);
    const lines = await readLines(res);
    const echoed = lines[0]!.line.json;
    assert.equal(echoed.env.FOO, "bar");
    assert.equal(echoed.env.GREETING, "hi there");
    assert.deepEqual(echoed.env_vars, { ONLY_THIS_RUN: "1" });
    assert.equal(echoed.authorization, null, "the Den key does not enter the sandbox");
    const sent = guest.seen.at(-1)!;
    const envHeaders = sent.rawHeaders.filter((_, i) => i % 2 === 0 && sent.rawHeaders[i]!.toLowerCase() === "x-den-sandbox-env");
    assert.equal(envHeaders.length, 1, "exactly one X-Den-Sandbox-Env");
    assert.equal(sent.headers["x-den-extra"], undefined, "the client's headers are not forwarded");
  });

  test("errors: no code interpreter, unknown context, the guest's 400, both context and language, another owner's sandbox", async () => {
    const none = await f.api("POST", `/v1/sandboxes/${plain}/code/execute`, { code: "1" });
    assert.equal(none.status, 409, none.text);
    assert.equal(none.body.error.code, "code_interpreter_unavailable");
    assert.match(none.body.error.message, /code-interpreter-v1/);
    const noneCtx = await f.api("GET", `/v1/sandboxes/${plain}/code/contexts`);
    assert.equal(noneCtx.body.error.code, "code_interpreter_unavailable");

    const ctx = await f.api("POST", `/v1/sandboxes/${id}/code/execute`, { code: "1", context_id: "nope" });
    assert.equal(ctx.status, 404, ctx.text);
    assert.equal(ctx.body.error.code, "context_not_found");
    assert.match(ctx.body.error.message, /"nope"/);

    const bad = await f.api("POST", `/v1/sandboxes/${id}/code/execute`, { code: "BAD" });
    assert.equal(bad.status, 400, bad.text);
    assert.equal(bad.body.error.code, "invalid_argument");
    assert.equal(bad.body.error.message, "the code server refuses BAD");

    const both = await f.api("POST", `/v1/sandboxes/${id}/code/execute`, { code: "1", context_id: "ctx1", language: "python" });
    assert.equal(both.status, 400);
    assert.match(both.body.error.message, /context_id or language/);

    const before = guest.seen.length;
    const auth = { authorization: `Bearer ${otherKey}` };
    for (const [method, path, body] of [
      ["POST", "code/execute", { code: "ok" }], ["GET", "code/contexts", undefined], ["POST", "code/contexts", {}],
      ["POST", "code/contexts/ctx1/restart", undefined], ["DELETE", "code/contexts/ctx1", undefined],
    ] as const) {
      const r = await fetch(`${f.server.url}/v1/sandboxes/${id}/${path}`, { method, headers: body ? { ...auth, "content-type": "application/json" } : auth, ...(body ? { body: JSON.stringify(body) } : {}) });
      assert.equal(r.status, 404, `${method} ${path}`);
      assert.equal(((await r.json()) as any).error.code, "sandbox_not_found");
    }
    assert.equal(guest.seen.length, before, "nothing of another owner's reached the guest");
  });

  test("the guest's stream breaking off ends the run with unexpected_end_of_execution and Den's code", async () => {
    const lines = (await readLines(await execute(id, { code: "die" }))).map((l) => l.line);
    assert.deepEqual(lines[0], { type: "stdout", text: "partial\n" });
    assert.equal(lines.at(-1).type, "unexpected_end_of_execution");
    assert.equal(lines.at(-1).error.code, "agent_unavailable");
  });

  test("a client that hangs up closes the guest connection", async () => {
    const closed = guest.closedHangs;
    const ac = new AbortController();
    const res = await execute(id, { code: "hang" }, {}, ac.signal);
    const lines = await readLines(res, () => true);
    assert.equal(lines[0]!.line.text, "started\n");
    ac.abort();
    await waitFor("the guest's connection to close", async () => (guest.closedHangs > closed ? true : undefined), 10_000, 50);
  });

  test("contexts: create, list, restart, remove; an unknown one is context_not_found", async () => {
    const created = await f.api("POST", `/v1/sandboxes/${id}/code/contexts`, { language: "python", cwd: "/tmp" });
    assert.equal(created.status, 201, created.text);
    assert.deepEqual(created.body, { id: "ctx1", language: "python", cwd: "/tmp" });
    assert.deepEqual(guest.seen.at(-1)!.body, { language: "python", cwd: "/tmp" });
    const list = await f.api("GET", `/v1/sandboxes/${id}/code/contexts`);
    assert.deepEqual(list.body, { contexts: [created.body] });
    const restart = await f.api("POST", `/v1/sandboxes/${id}/code/contexts/ctx1/restart`);
    assert.equal(restart.status, 204, restart.text);
    assert.equal(guest.seen.at(-1)!.url, "/contexts/ctx1/restart");
    const ran = (await readLines(await execute(id, { code: "print(1)", context_id: "ctx1" }))).map((l) => l.line);
    assert.equal(ran.at(-1).type, "end_of_execution");
    assert.equal((await f.api("DELETE", `/v1/sandboxes/${id}/code/contexts/ctx1`)).status, 204);
    const gone = await f.api("POST", `/v1/sandboxes/${id}/code/contexts/ctx1/restart`);
    assert.equal(gone.status, 404);
    assert.equal(gone.body.error.code, "context_not_found");
    assert.equal((await f.api("DELETE", `/v1/sandboxes/${id}/code/contexts/ctx1`)).body.error.code, "context_not_found");
    const noBody = await f.api("POST", `/v1/sandboxes/${id}/code/contexts`);
    assert.equal(noBody.status, 201, noBody.text);
    assert.equal(noBody.body.language, "python");
    await f.api("DELETE", `/v1/sandboxes/${id}/code/contexts/${noBody.body.id}`);
  });

  test("TS SDK: runCode's callbacks in order and its Execution; contexts; errors; timeoutMs", async () => {
    const sbx = await Sandbox.connect(id, { apiUrl: f.server.url, apiKey: ADMIN_KEY });
    const events: string[] = [];
    const e = await sbx.runCode("ok", {
      envs: { X: "1" },
      onStdout: (s) => void events.push(`out:${s}`),
      onStderr: (s) => void events.push(`err:${s}`),
      onResult: (r: ExecutionResult) => void events.push(`result:${r.text}`),
      onError: () => void events.push("error"),
    });
    assert.deepEqual(events, ["out:hello\n", "err:careful\n", "result:<Figure size 640x480 with 1 Axes>", "result:42"]);
    assert.deepEqual(e.logs, { stdout: ["hello\n"], stderr: ["careful\n"] });
    assert.equal(e.text, "42");
    assert.equal(e.executionCount, 3);
    assert.equal(e.error, undefined);
    assert.equal(e.results.length, 2);
    assert.equal(e.results[0]!.png, PNG);
    assert.equal(e.results[0]!.isMainResult, false);
    assert.deepEqual(e.results[1], { isMainResult: true, text: "42", html: "<b>42</b>" });
    assert.deepEqual(guest.seen.at(-1)!.body, { code: "ok", env_vars: { X: "1" } });

    let raised: unknown;
    const r = await sbx.runCode("raise", { onError: (err) => void (raised = err) });
    assert.equal(r.error?.name, "ZeroDivisionError");
    assert.equal(r.error?.value, "division by zero");
    assert.match(r.error!.traceback, /Traceback/);
    assert.deepEqual(raised, r.error);

    const ctx = await sbx.codeContexts.create({ language: "python", cwd: "/work" });
    assert.equal(ctx.cwd, "/work");
    assert.deepEqual(await sbx.codeContexts.list(), [ctx]);
    await sbx.runCode("print(2)", { context: ctx });
    assert.equal(guest.seen.at(-1)!.body.context_id, ctx.id);
    await sbx.codeContexts.restart(ctx);
    await sbx.codeContexts.remove(ctx.id);
    await assert.rejects(sbx.codeContexts.remove(ctx), (err) => err instanceof NotFoundError && err.code === "context_not_found");
    await assert.rejects(sbx.runCode("1", { context: "nope" }), (err) => err instanceof NotFoundError && err.code === "context_not_found");

    const other = await Sandbox.connect(plain, { apiUrl: f.server.url, apiKey: ADMIN_KEY });
    await assert.rejects(other.runCode("1"), (err) => err instanceof InvalidStateError && err.code === "code_interpreter_unavailable");

    const closed = guest.closedHangs;
    const t0 = Date.now();
    let started = "";
    await assert.rejects(sbx.runCode("hang", { timeoutMs: 500, onStdout: (s) => void (started = s) }), (err) => {
      assert.ok(err instanceof TimeoutError, `a TimeoutError, not ${String(err)}`);
      assert.deepEqual((err.details?.execution as { logs: unknown }).logs, { stdout: ["started\n"], stderr: [] });
      return true;
    });
    assert.equal(started, "started\n");
    assert.ok(Date.now() - t0 < 5000);
    await waitFor("the timed-out run's connection to close", async () => (guest.closedHangs > closed ? true : undefined), 10_000, 50);
  });

  test("den run-code: code from stdin, output as it streams, images described or saved, exit 1 and the traceback on an error, --json", async () => {
    const okRun = await run(["run-code", id], { input: "ok" });
    assert.equal(okRun.code, 0, okRun.err);
    assert.deepEqual(guest.seen.at(-1)!.body, { code: "ok" });
    assert.equal(okRun.out, `hello\n[image/png, 1234 bytes]\n42\n`);
    assert.equal(okRun.err, "careful\n");

    const dir = await mkdtemp(join(tmpdir(), "den-run-code-"));
    try {
      const saved = await run(["run-code", id, "ok", "--save-images", dir]);
      assert.equal(saved.code, 0, saved.err);
      assert.deepEqual(await readdir(dir), ["result-1.png"]);
      assert.equal((await readFile(join(dir, "result-1.png"))).length, 1234);
      assert.match(saved.out, /\[image\/png, 1234 bytes: .*result-1\.png\]/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }

    const raised = await run(["run-code", id], { input: "raise" });
    assert.equal(raised.code, 1);
    assert.equal(raised.out, "before\n");
    assert.match(raised.err, /Traceback[\s\S]*ZeroDivisionError: division by zero/);

    const json = await run(["run-code", id, "ok", "--json"]);
    assert.equal(json.code, 0, json.err);
    const e = JSON.parse(json.out);
    assert.equal(e.text, "42");
    assert.equal(e.executionCount, 3);
    assert.deepEqual(e.logs, { stdout: ["hello\n"], stderr: ["careful\n"] });
    const jsonRaised = await run(["run-code", id, "raise", "--json"]);
    assert.equal(jsonRaised.code, 1);
    assert.equal(JSON.parse(jsonRaised.out).error.name, "ZeroDivisionError");

    const inCtx = await run(["run-code", id, "--language", "r", "print(1)"]);
    assert.equal(inCtx.code, 0, inCtx.err);
    assert.deepEqual(guest.seen.at(-1)!.body, { code: "print(1)", language: "r" });

    const none = await run(["run-code", plain, "1"]);
    assert.equal(none.code, 1);
    assert.match(none.err, /^den: code_interpreter_unavailable: .*code-interpreter-v1/);
    const ctxs = await run(["run-code", id, "--contexts", "--json"]);
    assert.equal(ctxs.code, 0, ctxs.err);
    assert.ok(Array.isArray(JSON.parse(ctxs.out)));
  });

  test("MCP run_code: text of stdout, stderr, results and error; images as image content", async () => {
    const client = new Client({ name: "den-test", version: "1.0.0" });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${f.server.url}/mcp`), { requestInit: { headers: { authorization: `Bearer ${ADMIN_KEY}` } } }));
    try {
      const { tools } = await client.listTools();
      const tool = tools.find((t) => t.name === "run_code");
      assert.ok(tool?.description?.includes("code-interpreter-v1"));
      const props = (tool!.inputSchema as { properties: Record<string, unknown>; required?: string[] });
      for (const p of ["sandbox_id", "code", "language", "context_id", "timeout_ms"]) assert.ok(props.properties[p], `run_code has ${p}`);
      assert.deepEqual([...(props.required ?? [])].sort(), ["code", "sandbox_id"]);

      const ok = (await client.callTool({ name: "run_code", arguments: { sandbox_id: id, code: "ok" } })) as CallToolResult & { structuredContent?: any };
      assert.ok(!ok.isError, JSON.stringify(ok.content).slice(0, 500));
      const text = ok.content[0]!.type === "text" ? ok.content[0]!.text : "";
      assert.match(text, /^ok \(execution 3\)/);
      assert.match(text, /--- stdout ---\nhello/);
      assert.match(text, /--- stderr ---\ncareful/);
      assert.match(text, /\[image\/png, 1234 bytes: image 1 below\]/);
      assert.match(text, /--- result 2 \(the cell's value\) ---[\s\S]*42/);
      const image = ok.content.find((c) => c.type === "image");
      assert.deepEqual(image, { type: "image", data: PNG, mimeType: "image/png" });
      assert.equal(ok.structuredContent.execution_count, 3);

      const raised = (await client.callTool({ name: "run_code", arguments: { sandbox_id: id, code: "raise" } })) as CallToolResult;
      assert.equal(raised.isError, true);
      const rt = raised.content[0]!.type === "text" ? raised.content[0]!.text : "";
      assert.match(rt, /^raised ZeroDivisionError: division by zero/);
      assert.match(rt, /--- traceback ---\nTraceback/);

      const none = (await client.callTool({ name: "run_code", arguments: { sandbox_id: plain, code: "1" } })) as CallToolResult;
      assert.equal(none.isError, true);
      assert.match(none.content[0]!.type === "text" ? none.content[0]!.text : "", /^code_interpreter_unavailable: /);

      const closed = guest.closedHangs;
      const timedOut = (await client.callTool({ name: "run_code", arguments: { sandbox_id: id, code: "hang", timeout_ms: 1000 } })) as CallToolResult;
      assert.equal(timedOut.isError, true);
      const tt = timedOut.content[0]!.type === "text" ? timedOut.content[0]!.text : "";
      assert.match(tt, /^timeout: /);
      assert.match(tt, /--- stdout ---\nstarted/);
      await waitFor("the MCP run's connection to close", async () => (guest.closedHangs > closed ? true : undefined), 10_000, 50);
    } finally {
      await client.close();
    }
  });

  test("Python SDK: run_code and contexts, sync and async", { timeout: 120_000 }, async () => {
    const script = `
import asyncio, json, sys
from den_sdk import Sandbox, AsyncSandbox, DenTimeoutError, NotFoundError, InvalidStateError
sid, plain = sys.argv[1], sys.argv[2]
out = {}
sbx = Sandbox.connect(sid)
events = []
e = sbx.run_code("ok", envs={"Y": "2"}, on_stdout=lambda s: events.append("out:" + s), on_stderr=lambda s: events.append("err:" + s),
                 on_result=lambda r: events.append("result:" + str(r.text)), on_error=lambda err: events.append("error"))
out["events"] = events
out["text"] = e.text
out["count"] = e.execution_count
out["png"] = len(e.results[0].png)
out["formats"] = e.results[1].formats()
out["stdout"] = e.logs.stdout
r = sbx.run_code("raise")
out["error"] = [r.error.name, r.error.value]
ctx = sbx.code_contexts.create(language="python", cwd="/srv")
out["ctx"] = [ctx.id, ctx.language, ctx.cwd]
out["listed"] = [c.id for c in sbx.code_contexts.list()]
sbx.run_code("print(3)", context=ctx)
sbx.code_contexts.restart(ctx)
sbx.code_contexts.remove(ctx.id)
try:
    sbx.code_contexts.restart(ctx)
except NotFoundError as err:
    out["gone"] = err.code
try:
    Sandbox.connect(plain).run_code("1")
except InvalidStateError as err:
    out["plain"] = err.code
try:
    sbx.run_code("hang", timeout=0.5)
except DenTimeoutError as err:
    out["timeout"] = err.details["execution"].logs.stdout

async def main():
    a = await AsyncSandbox.connect(sid)
    seen = []
    e = await a.run_code("ok", on_stdout=seen.append, on_result=lambda r: seen.append(r.text))
    out["async_text"] = e.text
    out["async_seen"] = seen
    c = await a.code_contexts.create(language="python")
    out["async_ctx"] = [x.id for x in await a.code_contexts.list()] == [c.id]
    await a.code_contexts.remove(c)
    try:
        await a.run_code("hang", timeout=0.5)
    except DenTimeoutError:
        out["async_timeout"] = True
asyncio.run(main())
print(json.dumps(out))
`;
    const noProxy = ["127.0.0.1", "localhost", process.env.NO_PROXY ?? ""].filter(Boolean).join(",");
    const r = await new Promise<{ code: number | null; out: string; err: string }>((resolve, reject) => {
      const child = spawn("python3", ["-c", script, id, plain], {
        cwd: join(ROOT, "packages", "sdk-python"),
        env: { ...process.env, DEN_API_URL: f.server.url, DEN_API_KEY: ADMIN_KEY, PYTHONPATH: join(ROOT, "packages", "sdk-python"), PYTHONDONTWRITEBYTECODE: "1", NO_PROXY: noProxy, no_proxy: noProxy },
        stdio: ["ignore", "pipe", "pipe"],
      });
      let out = "";
      let err = "";
      child.stdout.on("data", (d: Buffer) => (out += d.toString()));
      child.stderr.on("data", (d: Buffer) => (err += d.toString()));
      const timer = setTimeout(() => child.kill("SIGKILL"), 90_000);
      child.on("error", reject);
      child.on("close", (code) => {
        clearTimeout(timer);
        resolve({ code, out, err });
      });
    });
    assert.equal(r.code, 0, `python3 failed:\n${r.err}\n${r.out}`);
    const out = JSON.parse(r.out.trim().split("\n").at(-1)!);
    assert.deepEqual(out.events, ["out:hello\n", "err:careful\n", "result:<Figure size 640x480 with 1 Axes>", "result:42"]);
    assert.equal(out.text, "42");
    assert.equal(out.count, 3);
    assert.equal(out.png, PNG.length);
    assert.deepEqual(out.formats, ["text", "html"]);
    assert.deepEqual(out.stdout, ["hello\n"]);
    assert.deepEqual(out.error, ["ZeroDivisionError", "division by zero"]);
    assert.deepEqual(out.ctx.slice(1), ["python", "/srv"]);
    assert.deepEqual(out.listed, [out.ctx[0]]);
    assert.equal(out.gone, "context_not_found");
    assert.equal(out.plain, "code_interpreter_unavailable");
    assert.deepEqual(out.timeout, ["started\n"]);
    assert.equal(out.async_text, "42");
    assert.deepEqual(out.async_seen, ["hello\n", "<Figure size 640x480 with 1 Axes>", "42"]);
    assert.equal(out.async_ctx, true);
    assert.equal(out.async_timeout, true);
  });
});

describe("the code interpreter's bounds: a connection cap per owner, the body limit; a hibernated sandbox wakes", () => {
  const f = memoryFixture({ DEN_MAX_PORT_CONNECTIONS_PER_OWNER: "1", DEN_MAX_BODY_BYTES: String(64 * 1024) });
  const guest = new GuestCodeServer();
  let id = "";
  const removers: Array<() => void> = [];
  before(async () => {
    await guest.start();
    const created = await f.api("POST", "/v1/sandboxes", { persistent: true });
    id = created.body.id;
    removers.push(guest.attach((...a) => f.host.listen(...a), id));
  });
  after(async () => {
    for (const r of removers) r();
    await guest.stop();
  });

  test("one connection at once per owner here: a second is 429 until the first hangs up", async () => {
    const ac = new AbortController();
    const first = await fetch(`${f.server.url}/v1/sandboxes/${id}/code/execute`, {
      method: "POST", headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" }, body: JSON.stringify({ code: "hang" }), signal: ac.signal,
    });
    // The first line is here (the run holds its connection); the response stays open.
    const reader = first.body!.getReader();
    assert.match(new TextDecoder().decode((await reader.read()).value), /started/);
    const second = await f.api("POST", `/v1/sandboxes/${id}/code/execute`, { code: "ok" });
    assert.equal(second.status, 429, second.text);
    assert.equal(second.body.error.code, "limit_exceeded");
    const list = await f.api("GET", `/v1/sandboxes/${id}/code/contexts`);
    assert.equal(list.status, 429, `context calls count too: ${list.text}`);
    ac.abort();
    const third = await waitFor("the slot to come back", async () => {
      const r = await f.api("POST", `/v1/sandboxes/${id}/code/execute`, { code: "ok" });
      return r.status === 429 ? undefined : r;
    }, 10_000, 50);
    assert.equal(third.status, 200, third.text);
    assert.match(third.text, /"end_of_execution"/);
  });

  test("code over the body limit is 413; a hibernated sandbox wakes for a run", async () => {
    const big = await f.api("POST", `/v1/sandboxes/${id}/code/execute`, { code: "x".repeat(100 * 1024) });
    assert.equal(big.status, 413, big.text);
    assert.equal(big.body.error.code, "payload_too_large");
    const hib = await f.api("POST", `/v1/sandboxes/${id}/hibernate`, {});
    assert.equal(hib.body.state, "hibernated", hib.text);
    const r = await f.api("POST", `/v1/sandboxes/${id}/code/execute`, { code: "ok" });
    assert.equal(r.status, 200, r.text);
    assert.match(r.text, /"end_of_execution"/);
    assert.equal((await f.api("GET", `/v1/sandboxes/${id}`)).body.state, "running");
  });
});
