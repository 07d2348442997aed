// needs: nothing
/**
 * Template builds through the SDK against a scripted stand-in of the /v1/templates routes:
 * context uploads (the digest the SDK computes, a stream sent as it is read), builds started
 * with wait:false, read, listed and cancelled, and their logs (follow, keepalives skipped).
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { type IncomingMessage, type Server, type ServerResponse, createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { Readable } from "node:stream";
import { after, before, beforeEach, test } from "node:test";
import { api } from "@den/protocol";
import { DenApiError, InvalidArgumentError, InvalidResponseError, NotFoundError, QuotaExceededError, Templates, type TemplateBuildLogLine } from "@den/sdk";
import { KEY, send, sleep } from "./fake-api.js";

interface Seen {
  method: string;
  path: string;
  query: URLSearchParams;
  headers: IncomingMessage["headers"];
  body: Buffer;
}

type Route = (req: Seen, res: ServerResponse) => void | Promise<void>;

const BUILD: api.TemplateBuild = {
  id: "op_aaaaaaaaaaaaaaaa",
  name: "web",
  state: "building",
  source: { kind: "dockerfile", from: "python:3.12" },
  version: null,
  error: null,
  created_at: "2026-01-02T03:04:05.000Z",
  finished_at: null,
};

const line = (seq: number, message: string, level: "info" | "error" = "info"): api.TemplateBuildLogLine => ({ seq, at: `2026-01-02T03:04:0${seq % 10}.000Z`, level, message });

let server: Server;
let url = "";
const routes = new Map<string, Route>();
const seen: Seen[] = [];

before(async () => {
  server = createServer((req, res) => {
    void (async () => {
      const u = new URL(req.url ?? "/", "http://x");
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      const s: Seen = { method: req.method ?? "", path: u.pathname, query: u.searchParams, headers: req.headers, body: Buffer.concat(chunks) };
      seen.push(s);
      if (req.headers.authorization !== `Bearer ${KEY}`) return send(res, 401, { error: { code: "unauthorized", message: "bad key" } });
      const route = routes.get(`${s.method} ${s.path.replace(/^\/v1\/templates\/contexts\/.*/, "/v1/templates/contexts/*")}`);
      if (!route) return send(res, 404, { error: { code: "route_not_found", message: `no route ${s.method} ${s.path}` } });
      await route(s, res);
    })().catch(() => res.destroy());
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

after(async () => {
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
});

beforeEach(() => {
  routes.clear();
  seen.length = 0;
});

const opts = () => ({ apiUrl: url, apiKey: KEY });

/** The context route: checks the digest the way the server does, answers 201 {context, size}. */
function contextRoute(): void {
  routes.set("PUT /v1/templates/contexts/*", (req, res) => {
    const want = req.path.slice("/v1/templates/contexts/".length);
    const got = `sha256:${createHash("sha256").update(req.body).digest("hex")}`;
    if (want !== got) return send(res, 400, { error: { code: "invalid_argument", message: `the context's sha256 is ${got}, not ${want}` } });
    send(res, 201, { context: got, size: req.body.length });
  });
}

test("uploadContext: bytes are hashed by the SDK; a stream with a digest is streamed; an async iterable without one is read and hashed", async () => {
  contextRoute();
  const tar = Buffer.from("pretend this is a tar\n".repeat(1000));
  const digest = `sha256:${createHash("sha256").update(tar).digest("hex")}`;

  const a = await Templates.uploadContext(tar, opts());
  assert.deepEqual(a, { context: digest, size: tar.length });
  assert.equal(seen[0]!.method, "PUT");
  assert.equal(seen[0]!.path, `/v1/templates/contexts/${digest}`);
  assert.equal(seen[0]!.headers["content-type"], "application/octet-stream");
  assert.deepEqual(seen[0]!.body, tar);

  // A plain Uint8Array (not a Buffer) too.
  assert.equal((await Templates.uploadContext(new Uint8Array(tar), opts())).context, digest);

  // A web ReadableStream with its digest: sent as it is read (chunked, no length).
  const stream = new ReadableStream<Uint8Array>({
    start(c) {
      c.enqueue(tar.subarray(0, 5000));
      c.enqueue(tar.subarray(5000));
      c.close();
    },
  });
  assert.equal((await Templates.uploadContext(stream, { ...opts(), digest })).size, tar.length);
  assert.equal(seen.at(-1)!.headers["transfer-encoding"], "chunked");
  assert.deepEqual(seen.at(-1)!.body, tar);

  // A Node Readable (an async iterable) without a digest: hashed by the SDK.
  const b = await Templates.uploadContext(Readable.from([tar.subarray(0, 7), tar.subarray(7)]), opts());
  assert.deepEqual(b, { context: digest, size: tar.length });
  assert.equal(seen.at(-1)!.path, `/v1/templates/contexts/${digest}`);

  // A wrong digest is the server's refusal; a malformed one is refused before any request.
  const wrong = `sha256:${"0".repeat(64)}`;
  await assert.rejects(Templates.uploadContext(Readable.from([tar]), { ...opts(), digest: wrong }), (e: unknown) => e instanceof InvalidArgumentError && /not sha256:0{64}/.test(e.message));
  const n = seen.length;
  await assert.rejects(Templates.uploadContext(tar, { ...opts(), digest: "sha256:XYZ" }), InvalidArgumentError);
  await assert.rejects(Templates.uploadContext("a string" as unknown as Uint8Array, opts()), InvalidArgumentError);
  assert.equal(seen.length, n, "nothing sent for a bad digest or body");
});

test("startBuild sends the spec snake_cased with wait:false and answers the build; create sends no wait", async () => {
  const bodies: unknown[] = [];
  routes.set("POST /v1/templates", (req, res) => {
    const body = JSON.parse(req.body.toString("utf8")) as unknown;
    bodies.push(body);
    const r = api.CreateTemplateRequest.safeParse(body);
    if (!r.success) return send(res, 400, { error: { code: "invalid_argument", message: r.error.message } });
    if (r.data.wait === false) {
      res.setHeader("den-build-id", BUILD.id);
      return send(res, 202, { build: BUILD });
    }
    send(res, 201, { name: r.data.name, version: "0123456789ab", current: true, owner: "alice", vcpus: 1, memory_mb: 512, disk_mb: 4096, created_at: BUILD.created_at, source: "dockerfile", run: null });
  });
  const context = `sha256:${"a".repeat(64)}`;
  const b = await Templates.startBuild(
    { name: "web", dockerfile: "FROM python:3.12\nARG V\nRUN echo $V\n", context, buildArgs: { V: "1" }, startCmd: "python3 -m http.server", readyCmd: "true", memoryMb: 1024, force: true },
    opts(),
  );
  assert.deepEqual(bodies[0], {
    name: "web", dockerfile: "FROM python:3.12\nARG V\nRUN echo $V\n", context, build_args: { V: "1" }, start_cmd: "python3 -m http.server", ready_cmd: "true", memory_mb: 1024, force: true, wait: false,
  });
  assert.deepEqual(b, {
    id: BUILD.id, name: "web", state: "building", source: { kind: "dockerfile", from: "python:3.12" }, version: null, error: null,
    createdAt: new Date(BUILD.created_at), finishedAt: null,
  });
  await Templates.startBuild({ name: "img", fromImage: { ref: "registry.example:5000/web:1", credentials: { token: "t" } } }, opts());
  assert.deepEqual(bodies[1], { name: "img", from_image: { ref: "registry.example:5000/web:1", credentials: { token: "t" } }, wait: false });
  await Templates.startBuild({ name: "arc", fromArchive: context, startCmd: "nginx -g 'daemon off;'" }, opts());
  assert.deepEqual(bodies.at(-1), { name: "arc", from_archive: context, start_cmd: "nginx -g 'daemon off;'", wait: false });
  const t = await Templates.create({ name: "web", dockerfile: "FROM base\n" }, opts());
  assert.equal(t.version, "0123456789ab");
  assert.deepEqual(bodies.at(-1), { name: "web", dockerfile: "FROM base\n" });

  // Refusals that need no build throw from startBuild itself.
  routes.set("POST /v1/templates", (_req, res) => send(res, 429, { error: { code: "limit_exceeded", message: "2 template builds are running (DEN_MAX_BUILDS_PER_OWNER)" } }));
  await assert.rejects(Templates.startBuild({ name: "web", fromImage: "x" }, opts()), (e: unknown) => e instanceof QuotaExceededError && e.code === "limit_exceeded" && e.status === 429);
  routes.set("POST /v1/templates", (_req, res) => send(res, 400, { error: { code: "invalid_argument", message: "Dockerfile line 3: unknown instruction FRUM", details: { line: 3 } } }));
  await assert.rejects(Templates.startBuild({ name: "web", dockerfile: "FRUM x" }, opts()), (e: unknown) => e instanceof InvalidArgumentError && e.details?.line === 3);
  // A 201 where a 202 {build} was asked for breaks the contract.
  routes.set("POST /v1/templates", (_req, res) => send(res, 201, { name: "web" }));
  await assert.rejects(Templates.startBuild({ name: "web" }, opts()), InvalidResponseError);
});

test("build, builds (name, limit) and cancelBuild", async () => {
  const failed: api.TemplateBuild = {
    ...BUILD, id: "op_bbbbbbbbbbbbbbbb", state: "error", finished_at: "2026-01-02T03:05:00.000Z",
    error: { code: "setup_failed", message: "RUN exited 1 (Dockerfile line 3)", details: { stdout: "", stderr: "boom\n" } },
  };
  routes.set(`GET /v1/templates/builds/${failed.id}`, (_req, res) => send(res, 200, failed));
  routes.set("GET /v1/templates/builds/op_nope", (_req, res) => send(res, 404, { error: { code: "not_found", message: 'template build "op_nope" does not exist' } }));
  routes.set("GET /v1/templates/builds", (_req, res) => send(res, 200, { builds: [BUILD, failed] }));
  routes.set(`POST /v1/templates/builds/${BUILD.id}/cancel`, (_req, res) => send(res, 200, { ...BUILD, state: "cancelled", error: { code: "aborted", message: "cancelled" }, finished_at: "2026-01-02T03:06:00.000Z" }));

  const b = await Templates.build(failed.id, opts());
  assert.equal(b.state, "error");
  assert.deepEqual(b.error, failed.error);
  assert.deepEqual(b.finishedAt, new Date("2026-01-02T03:05:00.000Z"));
  await assert.rejects(Templates.build("op_nope", opts()), NotFoundError);
  await assert.rejects(Templates.build("", opts()), InvalidArgumentError);

  assert.deepEqual((await Templates.builds({ ...opts(), name: "web", limit: 5 })).map((x) => [x.id, x.state]), [[BUILD.id, "building"], [failed.id, "error"]]);
  assert.deepEqual([...seen.at(-1)!.query], [["name", "web"], ["limit", "5"]]);
  await Templates.builds(opts());
  assert.equal(seen.at(-1)!.query.toString(), "");

  const c = await Templates.cancelBuild(BUILD.id, opts());
  assert.equal(c.state, "cancelled");
  assert.equal(c.error?.code, "aborted");
  assert.equal(seen.at(-1)!.method, "POST");
});

test("buildLogs: the lines so far, or followed as they come with keepalives skipped, until the build ends", async () => {
  let released!: () => void;
  const gate = new Promise<void>((r) => (released = r));
  routes.set(`GET /v1/templates/builds/${BUILD.id}/logs`, async (req, res) => {
    res.writeHead(200, { "content-type": "application/x-ndjson" });
    const from = Number(req.query.get("offset") ?? 0);
    const all = [line(0, "FROM python:3.12"), line(1, "RUN pip install flask"), line(2, "step 2 cached")].filter((l) => l.seq >= from);
    for (const l of all) res.write(`${JSON.stringify(l)}\n`);
    if (req.query.get("follow") !== "true") return void res.end();
    res.write(`${JSON.stringify({ type: "keepalive" })}\n`);
    await gate; // the build goes on: more lines after the client has read the first ones
    res.write(`${JSON.stringify({ type: "keepalive" })}\n`);
    res.write(JSON.stringify(line(3, "build failed: RUN exited 1", "error")).slice(0, 10));
    await sleep(20);
    res.end(`${JSON.stringify(line(3, "build failed: RUN exited 1", "error")).slice(10)}\n`);
  });

  const past: TemplateBuildLogLine[] = [];
  for await (const l of Templates.buildLogs(BUILD.id, opts())) past.push(l);
  assert.deepEqual(past.map((l) => [l.seq, l.message]), [[0, "FROM python:3.12"], [1, "RUN pip install flask"], [2, "step 2 cached"]]);
  assert.ok(past[0]!.at instanceof Date);
  assert.equal(seen.at(-1)!.query.get("follow"), null);
  assert.equal(seen.at(-1)!.headers.accept, "application/x-ndjson");

  const followed: TemplateBuildLogLine[] = [];
  for await (const l of Templates.buildLogs(BUILD.id, { ...opts(), offset: 1, follow: true })) {
    followed.push(l);
    if (followed.length === 2) released(); // lines arrive before the stream ends
  }
  assert.deepEqual(followed.map((l) => [l.seq, l.level, l.message]), [[1, "info", "RUN pip install flask"], [2, "info", "step 2 cached"], [3, "error", "build failed: RUN exited 1"]]);
  assert.equal(seen.at(-1)!.query.get("offset"), "1");
  assert.equal(seen.at(-1)!.query.get("follow"), "true");

  // An error answer throws at the first next(); an abort ends the iteration with the signal's reason.
  routes.set("GET /v1/templates/builds/op_nope/logs", (_req, res) => send(res, 404, { error: { code: "not_found", message: "no such build" } }));
  await assert.rejects(Templates.buildLogs("op_nope", opts()).next(), NotFoundError);
  routes.set(`GET /v1/templates/builds/${BUILD.id}/logs`, async (_req, res) => {
    res.writeHead(200, { "content-type": "application/x-ndjson" });
    res.write(`${JSON.stringify(line(0, "first"))}\n`);
    await sleep(5000, { unref: true });
    res.end();
  });
  const ac = new AbortController();
  const got: string[] = [];
  await assert.rejects(
    (async () => {
      for await (const l of Templates.buildLogs(BUILD.id, { ...opts(), follow: true, signal: ac.signal })) {
        got.push(l.message);
        ac.abort();
      }
    })(),
    (e: unknown) => (e as Error).name === "AbortError" && !(e instanceof DenApiError),
  );
  assert.deepEqual(got, ["first"]);
  // A line that breaks the contract is an InvalidResponseError.
  routes.set(`GET /v1/templates/builds/${BUILD.id}/logs`, (_req, res) => void res.end(`${JSON.stringify({ seq: "x" })}\n`));
  await assert.rejects(Templates.buildLogs(BUILD.id, opts()).next(), InvalidResponseError);
});
