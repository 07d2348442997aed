// needs: nothing
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import {
  DenApiError,
  DenConfigError,
  ForbiddenError,
  InvalidArgumentError,
  InvalidResponseError,
  InvalidStateError,
  Keys,
  QuotaExceededError,
  Sandbox,
  SandboxNotFoundError,
  Templates,
  TimeoutError,
  UnauthorizedError,
  errorFromResponse,
} from "@den/sdk";
import { ADMIN_KEY, FakeDen, KEY } from "./fake-api.js";

let den: FakeDen;
before(async () => {
  den = await new FakeDen().start();
});
after(async () => {
  await den.close();
});

test("404 becomes SandboxNotFoundError with its code and status", async () => {
  await assert.rejects(Sandbox.connect("sbx_aaaaaaaaaaaaaaaa", den.opts), (e: unknown) => {
    assert.ok(e instanceof SandboxNotFoundError);
    assert.ok(e instanceof DenApiError);
    assert.equal(e.code, "sandbox_not_found");
    assert.equal(e.status, 404);
    assert.equal(e.name, "SandboxNotFoundError");
    assert.match(e.message, /no sandbox/);
    return true;
  });
});

test("a wrong key is a 401 UnauthorizedError, and the key is sent as a bearer token", async () => {
  const s = den.addSandbox();
  await assert.rejects(Sandbox.connect(s.id, { ...den.opts, apiKey: "nope" }), (e: unknown) => {
    assert.ok(e instanceof UnauthorizedError);
    assert.equal(e.code, "unauthorized");
    assert.equal(e.status, 401);
    return true;
  });
  const sbx = await Sandbox.connect(s.id, den.opts);
  assert.equal(sbx.id, s.id);
  assert.equal(den.lastRequest("GET", new RegExp(s.id))?.headers.authorization, `Bearer ${KEY}`);
});

test("errorFromResponse: codes pick subclasses, unknown codes and non-JSON bodies give DenApiError", () => {
  const mk = (code: string, status: number) => errorFromResponse(status, JSON.stringify({ error: { code, message: "m", details: { a: 1 } } }));
  assert.ok(mk("invalid_argument", 400) instanceof InvalidArgumentError);
  assert.ok(mk("invalid_state", 409) instanceof InvalidStateError);
  assert.ok(mk("sandbox_not_running", 409) instanceof InvalidStateError);
  assert.ok(mk("quota_exceeded", 429) instanceof QuotaExceededError);
  assert.ok(mk("exec_timeout", 408) instanceof TimeoutError);
  assert.ok(mk("timeout", 504) instanceof TimeoutError);
  assert.deepEqual(mk("timeout", 504).details, { a: 1 });
  const unknown = mk("brand_new_code", 418);
  assert.equal(unknown.constructor, DenApiError);
  assert.equal(unknown.code, "brand_new_code");
  assert.equal(unknown.status, 418);
  const html = errorFromResponse(502, "<html>Bad Gateway</html>", "Bad Gateway");
  assert.equal(html.constructor, DenApiError);
  assert.equal(html.code, "http_502");
  assert.match(html.message, /502 Bad Gateway: <html>/);
});

test("a 200 body that breaks the contract is an InvalidResponseError", async () => {
  const f: typeof fetch = async () => new Response(JSON.stringify({ id: "not-an-id" }), { status: 200 });
  await assert.rejects(Sandbox.connect("sbx_aaaaaaaaaaaaaaaa", { apiUrl: "http://x", apiKey: "k", fetch: f }), InvalidResponseError);
});

test("configuration: a missing key is a DenConfigError; env vars are the fallback", async () => {
  const saved = { url: process.env.DEN_API_URL, key: process.env.DEN_API_KEY };
  try {
    delete process.env.DEN_API_KEY;
    delete process.env.DEN_API_URL;
    await assert.rejects(Sandbox.create(), (e: unknown) => e instanceof DenConfigError && /DEN_API_KEY/.test(e.message));
    await assert.rejects(Sandbox.create({ apiKey: "k", apiUrl: "ftp://x" }), DenConfigError);
    process.env.DEN_API_URL = `${den.url}/`;
    process.env.DEN_API_KEY = KEY;
    const sbx = await Sandbox.create();
    assert.equal(sbx.state, "running");
  } finally {
    if (saved.url === undefined) delete process.env.DEN_API_URL;
    else process.env.DEN_API_URL = saved.url;
    if (saved.key === undefined) delete process.env.DEN_API_KEY;
    else process.env.DEN_API_KEY = saved.key;
  }
});

test("create sends a snake_case body and maps the answer to camelCase", async () => {
  const sbx = await Sandbox.create({
    ...den.opts,
    template: "base",
    persistent: true,
    ttlSeconds: null,
    idleTimeoutSeconds: 120,
    onIdle: "destroy",
    metadata: { task_id: "t-1" },
    vcpus: 2,
    memoryMb: 1024,
    diskMb: 8192,
    env: { FOO: "bar" },
  });
  assert.deepEqual(den.lastRequest("POST", /^\/v1\/sandboxes$/)?.json, {
    template: "base",
    persistent: true,
    ttl_seconds: null,
    idle_timeout_seconds: 120,
    on_idle: "destroy",
    metadata: { task_id: "t-1" },
    vcpus: 2,
    memory_mb: 1024,
    disk_mb: 8192,
    env: { FOO: "bar" },
  });
  assert.match(sbx.id, /^sbx_[a-z2-7]{16}$/);
  assert.equal(sbx.state, "running");
  assert.equal(sbx.info.persistent, true);
  assert.equal(sbx.info.ttlSeconds, null);
  assert.equal(sbx.info.idleTimeoutSeconds, 120);
  assert.equal(sbx.info.onIdle, "destroy");
  assert.equal(sbx.info.memoryMb, 1024);
  assert.equal(sbx.info.diskMb, 8192);
  assert.ok(sbx.info.createdAt instanceof Date && !Number.isNaN(sbx.info.createdAt.getTime()));
  assert.equal(sbx.info.destroyedAt, null);
  // An invalid value is the server's 400, typed.
  await assert.rejects(Sandbox.create({ ...den.opts, vcpus: 999 }), InvalidArgumentError);
});

test("list follows next_cursor across pages and passes the filters", async () => {
  const ids = new Set<string>();
  for (let i = 0; i < 7; i++) ids.add(den.addSandbox({ metadata: { batch: "pages", i: String(i) } }).id);
  den.addSandbox({ metadata: { batch: "other" } });
  const before = den.requests.length;
  const seen: string[] = [];
  for await (const info of Sandbox.list({ ...den.opts, metadata: { batch: "pages" }, state: "running", pageSize: 3 })) seen.push(info.id);
  assert.deepEqual(new Set(seen), ids);
  assert.equal(seen.length, 7);
  const pages = den.requests.slice(before).filter((r) => r.path === "/v1/sandboxes");
  assert.equal(pages.length, 3);
  assert.equal(pages[0]!.query.get("metadata.batch"), "pages");
  assert.equal(pages[0]!.query.get("state"), "running");
  assert.equal(pages[0]!.query.get("limit"), "3");
  assert.equal(pages[0]!.query.get("cursor"), null);
  assert.equal(pages[1]!.query.get("cursor"), "c3");
  assert.equal(pages[2]!.query.get("cursor"), "c6");
});

test("refresh, hibernate, wake, setTimeout update the info", async () => {
  const sbx = await Sandbox.create(den.opts);
  await sbx.hibernate({ mode: "warm" });
  assert.deepEqual(den.lastRequest("POST", /\/hibernate$/)?.json, { mode: "warm" });
  assert.equal(sbx.state, "hibernated");
  await sbx.wake();
  assert.equal(sbx.state, "running");
  const info = await sbx.setTimeout(120);
  assert.deepEqual(den.lastRequest("POST", /\/timeout$/)?.json, { seconds: 120 });
  const left = info.expiresAt!.getTime() - Date.now();
  assert.ok(left > 100_000 && left <= 120_000, String(left));
  den.sandboxes.get(sbx.id)!.state = "hibernated";
  assert.equal((await sbx.refresh()).state, "hibernated");
  assert.equal(sbx.state, "hibernated");
});

test("events: an array, or an NDJSON stream with follow", async () => {
  const sbx = await Sandbox.create(den.opts);
  const evs = await sbx.events();
  assert.equal(evs.length, 1);
  assert.equal(evs[0]!.type, "created");
  assert.equal(evs[0]!.sandboxId, sbx.id);
  assert.ok(evs[0]!.at instanceof Date);
  assert.deepEqual(await sbx.events({ after: 1 }), []);
  assert.equal(den.lastRequest("GET", /\/events$/)?.query.get("after"), "1");
  const followed = [];
  for await (const ev of sbx.events({ follow: true })) followed.push(ev);
  assert.deepEqual(followed.map((e) => [e.seq, e.type, e.reason]), [[1, "created", "user"], [99, "destroyed", "ttl"]]);
  assert.deepEqual(followed[1]!.data, { n: 1 });
  assert.equal(den.lastRequest("GET", /\/events$/)?.query.get("follow"), "true");
});

test("await using destroys the sandbox at the end of the scope", async () => {
  let id: string;
  {
    await using sbx = await Sandbox.create(den.opts);
    id = sbx.id;
    assert.equal(den.lastRequest("DELETE", new RegExp(id)), undefined);
  }
  const del = den.lastRequest("DELETE", new RegExp(`^/v1/sandboxes/${id}$`));
  assert.ok(del, "DELETE was sent");
  assert.equal(del.headers.authorization, `Bearer ${KEY}`);
  assert.equal(den.sandboxes.get(id)!.state, "destroyed");
});

test("destroy and delete are idempotent and return the destroyed info", async () => {
  const sbx = await Sandbox.create(den.opts);
  const info = await sbx.destroy();
  assert.equal(info.state, "destroyed");
  assert.ok(info.destroyedAt instanceof Date);
  assert.equal((await sbx.delete()).state, "destroyed");
  assert.equal(sbx.state, "destroyed");
  await assert.rejects(sbx.exec("echo x"), (e: unknown) => e instanceof InvalidStateError && e.code === "sandbox_destroyed" && e.status === 410);
});

test("abort: a pre-aborted signal and an abort mid-request both reject with AbortError", async () => {
  const sbx = await Sandbox.create(den.opts);
  const ac = new AbortController();
  ac.abort();
  await assert.rejects(sbx.refresh({ signal: ac.signal }), { name: "AbortError" });
  let hung = false;
  // A server that never answers: hold the exec request.
  const orig = den.onExec;
  den.onExec = () => {
    hung = true;
    return new Promise(() => {});
  };
  const ac2 = new AbortController();
  const p = sbx.exec("sleep 100", { signal: ac2.signal, timeoutSeconds: 200 });
  setTimeout(() => ac2.abort(), 50);
  await assert.rejects(p, { name: "AbortError" });
  assert.ok(hung);
  den.onExec = orig;
});

test("Templates.list and the admin Keys helpers", async () => {
  const templates = await Templates.list(den.opts);
  assert.deepEqual(templates.map((t) => [t.name, t.version, t.current, t.memoryMb]), [["base", "0123456789ab", true, 512]]);
  await assert.rejects(Keys.list(den.opts), ForbiddenError);
  const admin = { apiUrl: den.url, apiKey: ADMIN_KEY };
  const created = await Keys.create({ ...admin, owner: "ci", admin: false });
  assert.deepEqual(den.lastRequest("POST", /^\/v1\/keys$/)?.json, { owner: "ci", admin: false });
  assert.match(created.key ?? "", /^den_secret_/);
  assert.equal(created.revokedAt, null);
  const e2bKey = await Keys.create({ ...admin, owner: "py", format: "e2b" });
  assert.deepEqual(den.lastRequest("POST", /^\/v1\/keys$/)?.json, { owner: "py", format: "e2b" });
  assert.match(e2bKey.key ?? "", /^e2b_[0-9a-f]+$/);
  const all = await Keys.list(admin);
  assert.ok(all.some((k) => k.id === created.id && k.key === undefined));
  const revoked = await Keys.revoke(created.id, admin);
  assert.ok(revoked.revokedAt instanceof Date);
});

test("a custom fetch is used, and a path prefix in apiUrl is kept", async () => {
  const urls: string[] = [];
  const f: typeof fetch = async (input, init) => {
    urls.push(String(input));
    return fetch(String(input).replace("/prefix", ""), init);
  };
  const s = den.addSandbox();
  const sbx = await Sandbox.connect(s.id, { apiUrl: `${den.url}/prefix/`, apiKey: KEY, fetch: f });
  assert.equal(sbx.id, s.id);
  assert.deepEqual(urls, [`${den.url}/prefix/v1/sandboxes/${s.id}`]);
});

test("an error answer without the error envelope is still a DenApiError", async () => {
  const orig = den.onExec;
  den.onExec = () => {
    throw Object.assign(new Error("x"), {});
  };
  const sbx = await Sandbox.create(den.opts);
  await assert.rejects(sbx.exec("boom", { timeoutSeconds: 10 }), (e: unknown) => e instanceof DenApiError && e.code === "internal" && e.status === 500);
  den.onExec = orig;
  // And a raw 503 from a "proxy":
  const f: typeof fetch = async () => new Response("upstream down", { status: 503, statusText: "Service Unavailable" });
  await assert.rejects(Sandbox.connect(sbx.id, { apiUrl: "http://x", apiKey: "k", fetch: f }), (e: unknown) => e instanceof DenApiError && e.code === "http_503");
});
