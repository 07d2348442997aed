// needs: one VM
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import type { RunningServer } from "../src/index.js";
import WebSocket from "ws";
import { Validator } from "@seriousme/openapi-schema-validator";
import { ADMIN_KEY, client, testServer, untilWarmSnapshot, vmPid, waitFor } from "./helpers.js";

describe("the /v1 API against real microVMs", () => {
  let server: RunningServer;
  let admin: ReturnType<typeof client>;
  let id: string;
  before(async () => {
    server = await testServer();
    admin = client(server.url);
    const r = await admin("POST", "/v1/sandboxes", { metadata: { task_id: "refactor-auth", user_id: "u_8821" }, persistent: true, ttl_seconds: 3600 });
    assert.equal(r.status, 201, r.text);
    id = r.body.id;
  });
  after(async () => {
    for (const s of (await admin("GET", "/v1/sandboxes?limit=200")).body?.sandboxes ?? []) await admin("DELETE", `/v1/sandboxes/${s.id}`);
    await server?.close();
  });

  test("create returns the sandbox with its deadline; get and list with metadata filters", async () => {
    const got = await admin("GET", `/v1/sandboxes/${id}`);
    assert.equal(got.status, 200);
    assert.equal(got.body.state, "running");
    assert.equal(got.body.persistent, true);
    assert.ok(Math.abs(Date.parse(got.body.expires_at) - (Date.parse(got.body.created_at) + 3600_000)) < 1000);
    const hit = await admin("GET", "/v1/sandboxes?metadata.task_id=refactor-auth");
    assert.deepEqual(hit.body.sandboxes.map((s: { id: string }) => s.id), [id]);
    const miss = await admin("GET", "/v1/sandboxes?metadata.task_id=other");
    assert.deepEqual(miss.body.sandboxes, []);
    // Filters combine; scoped to this test's metadata, as the suite's files share one database.
    const running = await admin("GET", "/v1/sandboxes?state=running&metadata.task_id=refactor-auth");
    assert.deepEqual(running.body.sandboxes.map((s: { id: string }) => s.id), [id]);
    const byState = await admin("GET", "/v1/sandboxes?state=hibernated&metadata.task_id=refactor-auth");
    assert.deepEqual(byState.body.sandboxes, []);
  });

  test("GET /v1/hosts lists the host agent: in-process, or over HTTP with DEN_HOST_TRANSPORT=loopback", async () => {
    const r = await admin("GET", "/v1/hosts");
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.hosts.length, 1);
    const [h] = r.body.hosts;
    assert.equal(h.id, server.cp.hosts.first!.instance);
    if (process.env.DEN_HOST_TRANSPORT === "loopback") assert.match(h.url, /^https:\/\/127\.0\.0\.1:\d+$/, "the loopback host is reached over mutual TLS, as a remote one");
    else assert.equal(h.url, "local");
    assert.deepEqual({ capacity: h.capacity, used: h.used }, (await admin("GET", "/v1/host")).body);
    assert.ok(h.used.sandboxes >= 1);
    assert.equal((await client(server.url, "den_not_a_key")("GET", "/v1/hosts")).status, 401);
  });

  test("exec buffered and streamed; state accumulates across calls", async () => {
    const w = await admin("POST", `/v1/sandboxes/${id}/exec`, { cmd: "git init -q /work && cd /work && echo hi > a.txt && git add a.txt && echo done" });
    assert.equal(w.status, 200, w.text);
    assert.equal(w.body.stdout, "done\n");
    const r = await admin("POST", `/v1/sandboxes/${id}/exec`, { argv: ["cat", "/work/a.txt"], timeout_seconds: 120 });
    assert.equal(r.body.stdout, "hi\n");
    assert.equal(r.body.exit_code, 0);
    const fail = await admin("POST", `/v1/sandboxes/${id}/exec`, { cmd: "echo oops >&2; exit 42" });
    assert.equal(fail.body.exit_code, 42);
    assert.equal(fail.body.stderr, "oops\n");
    const bin = await admin("POST", `/v1/sandboxes/${id}/exec`, { cmd: "printf '\\377\\000'" });
    assert.equal(Buffer.from(bin.body.stdout_b64, "base64").toString("hex"), "ff00");
    const s = await admin("POST", `/v1/sandboxes/${id}/exec/stream`, { cmd: "echo one; sleep 0.2; echo two >&2; exit 7" });
    const lines = s.text.trim().split("\n").map((l) => JSON.parse(l));
    assert.equal(lines[0].type, "start");
    const out = lines.filter((l) => l.type === "stdout").map((l) => Buffer.from(l.data_b64, "base64").toString()).join("");
    const err = lines.filter((l) => l.type === "stderr").map((l) => Buffer.from(l.data_b64, "base64").toString()).join("");
    assert.equal(out, "one\n");
    assert.equal(err, "two\n");
    assert.deepEqual(lines.at(-1), { type: "exit", exit_code: 7, signal: null, timed_out: false });
    // A client that hangs up mid-stream takes its command with it.
    const ac = new AbortController();
    const hung = await fetch(`${server.url}/v1/sandboxes/${id}/exec/stream`, {
      method: "POST", signal: ac.signal, body: JSON.stringify({ cmd: "sleep 611.5" }),
      headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
    });
    const reader = hung.body!.getReader();
    assert.match(new TextDecoder().decode((await reader.read()).value), /"type":"start"/);
    ac.abort();
    await waitFor("the command killed", async () => ((await admin("POST", `/v1/sandboxes/${id}/exec`, { cmd: "pgrep -f 'sleep 61[1]' || echo none" })).body.stdout === "none\n" ? true : undefined), 15_000, 500);
  });

  test("files up and down, binary-safe; list, stat, mkdir, rename, remove", async () => {
    const data = randomBytes(300_000);
    const up = await admin("PUT", `/v1/sandboxes/${id}/files?path=/work/bin.dat`, data, { "content-type": "application/octet-stream" });
    assert.equal(up.status, 200, up.text);
    assert.equal(up.body.size, data.length);
    const res = await fetch(`${server.url}/v1/sandboxes/${id}/files?path=/work/bin.dat`, { headers: { authorization: `Bearer ${process.env.DEN_API_KEY ?? "den_test_admin_key_0123456789"}` } });
    assert.ok(Buffer.from(await res.arrayBuffer()).equals(data));
    assert.equal((await admin("POST", `/v1/sandboxes/${id}/files/mkdir`, { path: "/work/d/e" })).status, 204);
    assert.equal((await admin("POST", `/v1/sandboxes/${id}/files/rename`, { from: "/work/bin.dat", to: "/work/d/e/moved.dat" })).status, 204);
    const ls = await admin("GET", `/v1/sandboxes/${id}/files/list?path=/work/d/e`);
    assert.deepEqual(ls.body.entries.map((e: { path: string }) => e.path), ["/work/d/e/moved.dat"]);
    assert.equal((await admin("GET", `/v1/sandboxes/${id}/files/stat?path=/work/d/e/moved.dat`)).body.size, data.length);
    assert.equal((await admin("DELETE", `/v1/sandboxes/${id}/files?path=/work/d&recursive=true`)).status, 204);
    const gone = await admin("GET", `/v1/sandboxes/${id}/files/stat?path=/work/d`);
    assert.equal(gone.status, 404);
    assert.equal(gone.body.error.code, "file_not_found");
  });

  test("background processes: start, logs, input, wait, kill", async () => {
    const p = await admin("POST", `/v1/sandboxes/${id}/processes`, { cmd: "while read -r l; do echo \"got $l\"; done" });
    assert.equal(p.status, 201, p.text);
    assert.equal((await admin("POST", `/v1/sandboxes/${id}/processes/${p.body.proc}/input`, { data_b64: Buffer.from("x\n").toString("base64"), eof: true })).status, 204);
    const done = await admin("GET", `/v1/sandboxes/${id}/processes/${p.body.proc}?wait_seconds=10`);
    assert.equal(done.body.running, false);
    const logs = await admin("GET", `/v1/sandboxes/${id}/processes/${p.body.proc}/logs`);
    assert.equal(Buffer.from(logs.body.data_b64, "base64").toString(), "got x\n");
    const long = await admin("POST", `/v1/sandboxes/${id}/processes`, { cmd: "sleep 1000" });
    assert.equal((await admin("DELETE", `/v1/sandboxes/${id}/processes/${long.body.proc}`)).status, 204);
    const killed = await admin("GET", `/v1/sandboxes/${id}/processes/${long.body.proc}?wait_seconds=10`);
    assert.equal(killed.body.running, false);
  });

  test("warm hibernate and wake are idempotent; exec on a hibernated sandbox wakes it", async () => {
    await admin("POST", `/v1/sandboxes/${id}/exec`, { cmd: "echo kept > /tmp/k" });
    const h1 = await admin("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "warm" });
    assert.equal(h1.body.state, "hibernated");
    assert.equal((await admin("POST", `/v1/sandboxes/${id}/hibernate`)).body.state, "hibernated");
    const w = await admin("POST", `/v1/sandboxes/${id}/wake`);
    assert.equal(w.body.state, "running");
    assert.equal((await admin("POST", `/v1/sandboxes/${id}/wake`)).body.state, "running");
    await admin("POST", `/v1/sandboxes/${id}/hibernate`);
    const r = await admin("POST", `/v1/sandboxes/${id}/exec`, { cmd: "cat /tmp/k" });
    assert.equal(r.body.stdout, "kept\n");
    assert.equal((await admin("GET", `/v1/sandboxes/${id}`)).body.state, "running");
    const ev = await admin("GET", `/v1/sandboxes/${id}/events`);
    const types = ev.body.events.map((e: { type: string }) => e.type);
    for (const t of ["creating", "running", "hibernated", "exec.started", "exec.ended"]) assert.ok(types.includes(t), `event ${t}`);
  });

  test("a warm hibernate answers once paused; a wake or a move to the store right after it, while its snapshot is written, loses nothing", async () => {
    const localBefore = (await server.cp.hosts.first!.inventory()).snapshots;
    const c = await admin("POST", "/v1/sandboxes", {});
    const cid = c.body.id;
    await admin("POST", `/v1/sandboxes/${cid}/exec`, { cmd: "echo one > /workspace/f; nohup sleep 1000 >/dev/null 2>&1 &" });
    // Woken at once: the snapshot being written is let go of.
    assert.equal((await admin("POST", `/v1/sandboxes/${cid}/hibernate`, { mode: "warm" })).body.hibernate_mode, "warm");
    assert.equal((await admin("POST", `/v1/sandboxes/${cid}/wake`)).body.state, "running");
    assert.equal((await admin("POST", `/v1/sandboxes/${cid}/exec`, { cmd: "echo two >> /workspace/f; cat /workspace/f; pgrep -c -x sleep" })).body.stdout, "one\ntwo\n1\n");
    // Moved to the store at once: the move takes the warm snapshot once it is written.
    await admin("POST", `/v1/sandboxes/${cid}/hibernate`, { mode: "warm" });
    const cold = await admin("POST", `/v1/sandboxes/${cid}/hibernate`, { mode: "cold" });
    assert.equal(cold.body.hibernate_mode, "cold", cold.text);
    assert.equal((await admin("POST", `/v1/sandboxes/${cid}/exec`, { cmd: "cat /workspace/f; pgrep -c -x sleep" })).body.stdout, "one\ntwo\n1\n");
    // No local snapshot is left behind by either.
    assert.deepEqual((await server.cp.hosts.first!.inventory()).snapshots.filter((s) => !localBefore.includes(s)), []);
    await admin("DELETE", `/v1/sandboxes/${cid}`);
  });

  test("a crashed warm-hibernated VM wakes from its snapshot with its state", async () => {
    const c = await admin("POST", "/v1/sandboxes", {});
    const cid = c.body.id;
    const pid = (await admin("POST", `/v1/sandboxes/${cid}/exec`, { cmd: "echo before > /workspace/f; nohup sleep 1000 >/dev/null 2>&1 & echo $!" })).body.stdout.trim();
    await admin("POST", `/v1/sandboxes/${cid}/hibernate`);
    // (A VM that dies before its warm snapshot is written is lost as a running one would be.)
    await untilWarmSnapshot(server, cid);
    const qemuPid = vmPid(server, cid);
    process.kill(qemuPid, "SIGKILL");
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(existsSync(`/proc/${qemuPid}/status`) && !/State:\s+Z/.test(await import("node:fs").then((f) => f.readFileSync(`/proc/${qemuPid}/status`, "utf8"))), false);
    const w = await admin("POST", `/v1/sandboxes/${cid}/wake`);
    assert.equal(w.status, 200, w.text);
    const r = await admin("POST", `/v1/sandboxes/${cid}/exec`, { cmd: `cat /workspace/f; kill -0 ${pid} && echo proc-alive` });
    assert.equal(r.body.stdout, "before\nproc-alive\n");
  });

  test("another vCPU/memory shape restores a snapshot of that shape, baked once on first use", async () => {
    const a = await admin("POST", "/v1/sandboxes", { vcpus: 2, memory_mb: 768 });
    assert.equal(a.status, 201, a.text);
    assert.equal(a.body.vcpus, 2);
    assert.equal(a.body.memory_mb, 768);
    assert.equal(a.body.template, "base");
    const r = await admin("POST", `/v1/sandboxes/${a.body.id}/exec`, { cmd: "nproc; awk '/MemTotal/ {print int($2/1024)}' /proc/meminfo" });
    const [cpus, memMb] = r.body.stdout.trim().split("\n").map(Number);
    assert.equal(cpus, 2);
    assert.ok(memMb > 600 && memMb <= 768, `MemTotal ${memMb} MiB`);
    const variants = (await admin("GET", "/v1/templates")).body.templates.filter((t: { name: string }) => t.name === "base.2c768m");
    assert.equal(variants.length, 1, "the shape's snapshot is kept as a template");
    const b = await admin("POST", "/v1/sandboxes", { vcpus: 2, memory_mb: 768 });
    assert.equal(b.status, 201);
    assert.equal((await admin("GET", "/v1/templates")).body.templates.filter((t: { name: string }) => t.name === "base.2c768m").length, 1, "baked once");
    const over = await admin("POST", "/v1/sandboxes", { vcpus: 16 });
    assert.equal(over.status, 400);
    await admin("DELETE", `/v1/sandboxes/${a.body.id}`);
    await admin("DELETE", `/v1/sandboxes/${b.body.id}`);
  });

  test("TTL can be moved with /timeout; responses show the absolute deadline", async () => {
    const t0 = Date.now();
    const r = await admin("POST", `/v1/sandboxes/${id}/timeout`, { seconds: 7200 });
    assert.ok(Math.abs(Date.parse(r.body.expires_at) - (t0 + 7200_000)) < 2000);
  });

  test("keys: owners are isolated; missing, wrong and revoked keys get 401", async () => {
    const k = await admin("POST", "/v1/keys", { owner: "bob" });
    assert.equal(k.status, 201);
    const bob = client(server.url, k.body.key);
    assert.equal((await bob("GET", `/v1/sandboxes/${id}`)).status, 404);
    assert.equal((await bob("GET", `/v1/sandboxes/${id}`)).body.error.code, "sandbox_not_found");
    assert.equal((await bob("POST", `/v1/sandboxes/${id}/exec`, { cmd: "id" })).status, 404);
    assert.equal((await bob("DELETE", `/v1/sandboxes/${id}`)).status, 404);
    assert.deepEqual((await bob("GET", "/v1/sandboxes")).body.sandboxes, []);
    assert.equal((await bob("GET", "/v1/keys")).status, 403);
    assert.equal((await client(server.url, "nope")("GET", "/v1/sandboxes")).status, 401);
    assert.equal((await fetch(`${server.url}/v1/sandboxes`)).status, 401);
    assert.equal((await admin("DELETE", `/v1/keys/${k.body.id}`)).status, 200);
    const revoked = await bob("GET", "/v1/sandboxes");
    assert.equal(revoked.status, 401);
    assert.equal(revoked.body.error.code, "unauthorized");
  });

  test("bad input gets a 4xx with a code; the server and the sandbox are untouched", async () => {
    const cases: Array<[string, string, unknown, number, string]> = [
      ["POST", "/v1/sandboxes", { ttl_seconds: -5 }, 400, "invalid_argument"],
      ["POST", "/v1/sandboxes", { ttl_seconds: 1e12 }, 400, "invalid_argument"],
      ["POST", "/v1/sandboxes", { nope: 1 }, 400, "invalid_argument"],
      ["POST", "/v1/sandboxes", "{not json", 400, "invalid_argument"],
      ["POST", "/v1/sandboxes", { template: "../../etc/passwd" }, 400, "invalid_argument"],
      ["POST", "/v1/sandboxes", { template: "/etc/passwd" }, 400, "invalid_argument"],
      ["POST", "/v1/sandboxes", { template: "base\u0000x" }, 400, "invalid_argument"],
      ["POST", "/v1/sandboxes", { template: "nosuchtemplate" }, 404, "template_not_found"],
      ["POST", "/v1/sandboxes", { ttl_seconds: null }, 400, "invalid_argument"],
      ["GET", "/v1/sandboxes/..%2F..%2Fetc%2Fpasswd", undefined, 404, "sandbox_not_found"],
      ["GET", "/v1/sandboxes/sbx_%00", undefined, 404, "sandbox_not_found"],
      ["POST", `/v1/sandboxes/${id}/exec`, { cmd: "true", argv: ["true"] }, 400, "invalid_argument"],
      ["POST", `/v1/sandboxes/${id}/exec`, { cmd: "true", timeout_seconds: -1 }, 400, "invalid_argument"],
      ["GET", `/v1/sandboxes/${id}/files?path=relative`, undefined, 400, "invalid_argument"],
      ["GET", `/v1/sandboxes/${id}/files?path=/etc/passwd%00x`, undefined, 400, "invalid_argument"],
      ["POST", `/v1/sandboxes/${id}/timeout`, { seconds: 0 }, 400, "invalid_argument"],
      ["GET", "/v1/nothing-here", undefined, 404, "route_not_found"],
    ];
    for (const [method, path, body, status, code] of cases) {
      const r = await admin(method, path, body);
      assert.equal(r.status, status, `${method} ${path} ${JSON.stringify(body)} -> ${r.status} ${r.text}`);
      assert.equal(r.body?.error?.code, code, `${method} ${path}: ${r.text}`);
    }
    const huge = await admin("POST", `/v1/sandboxes/${id}/exec`, { cmd: "x".repeat(20 * 1024 * 1024) });
    assert.equal(huge.status, 413);
    // Uploads stream to the guest and stop at the configured limit.
    const limits = server.cp.config.limits;
    const saved = limits.uploadBytes;
    limits.uploadBytes = 64 * 1024;
    try {
      const big = await admin("PUT", `/v1/sandboxes/${id}/files?path=/work/too-big`, randomBytes(200 * 1024), { "content-type": "application/octet-stream" });
      assert.equal(big.status, 413, big.text);
      assert.equal(big.body.error.code, "payload_too_large");
      assert.equal((await admin("GET", `/v1/sandboxes/${id}/files/stat?path=/work/too-big`)).status, 404, "nothing half-written");
    } finally {
      limits.uploadBytes = saved;
    }
    assert.equal((await admin("POST", `/v1/sandboxes/${id}/exec`, { cmd: "cat /work/a.txt" })).body.stdout, "hi\n");
    assert.equal((await fetch(`${server.url}/healthz`)).status, 200);
  });

  test("PTY over WebSocket: resize reaches stty, Ctrl-C interrupts, exit code arrives", async () => {
    const ws = new WebSocket(`${server.url.replace("http", "ws")}/v1/sandboxes/${id}/pty?rows=24&cols=80`, { headers: { authorization: `Bearer ${ADMIN_KEY}` } });
    let out = "";
    let exit: { exit_code: number } | undefined;
    ws.on("message", (d: Buffer, binary: boolean) => {
      if (binary) out += d.toString();
      else {
        const m = JSON.parse(d.toString());
        if (m.type === "exit") exit = m;
      }
    });
    await new Promise((r, j) => { ws.once("open", r); ws.once("error", j); });
    const waitOut = (re: RegExp) => waitFor(`${re}`, async () => (re.test(out) ? true : undefined), 20_000, 50);
    ws.send(JSON.stringify({ type: "resize", rows: 40, cols: 100 }));
    ws.send(Buffer.from("stty size\n"));
    await waitOut(/40 100/);
    ws.send(Buffer.from("sleep 1000\n"));
    await new Promise((r) => setTimeout(r, 1000));
    ws.send(Buffer.from("\x03"));
    // The shell answers again only if Ctrl-C reached the sleep in the foreground.
    ws.send(Buffer.from("echo alive-$((6*7))\n"));
    await waitOut(/alive-42/);
    ws.send(Buffer.from("exit 5\n"));
    await waitFor("exit", async () => exit, 20_000, 50);
    assert.equal(exit!.exit_code, 5);
    ws.close();
  });

  test("the OpenAPI document covers every route and matches the committed copy", async () => {
    const doc = (await (await fetch(`${server.url}/openapi.json`)).json()) as { openapi: string; paths: Record<string, Record<string, unknown>> };
    assert.match(doc.openapi, /^3\./);
    assert.ok(server.app.denRoutes.length >= 20);
    for (const r of server.app.denRoutes) {
      const path = r.url.replace(/:(\w+)/g, "{$1}");
      assert.ok(doc.paths[path]?.[r.method.toLowerCase()], `OpenAPI documents ${r.method} ${path}`);
    }
    const validation = await new Validator().validate(doc as Parameters<Validator["validate"]>[0]);
    assert.equal(validation.valid, true, JSON.stringify(validation.errors));
    const { readFileSync } = await import("node:fs");
    const committed = JSON.parse(readFileSync(new URL("../../openapi.json", import.meta.url), "utf8"));
    assert.deepEqual(committed, doc, "packages/server/openapi.json is stale: run `npm run openapi`");
  });
});
