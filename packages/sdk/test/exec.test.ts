// needs: nothing
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { DenApiError, InvalidResponseError, Process, Sandbox, TimeoutError, UnavailableError } from "@den/sdk";
import { FakeDen, b64, sleep } from "./fake-api.js";

let den: FakeDen;
let sbx: Sandbox;
before(async () => {
  den = await new FakeDen().start();
  sbx = await Sandbox.create(den.opts);
});
after(async () => {
  await den.close();
});

test("buffered exec: a string is cmd, an array is argv, options are snake_case", async () => {
  // A short timeout keeps the buffered route; unbounded commands stream (next test).
  const r = await sbx.exec("echo hello", { timeoutSeconds: 30 });
  assert.equal(r.stdout, "hello\n");
  assert.deepEqual(r.stdoutBytes, new TextEncoder().encode("hello\n"));
  assert.equal(r.stderr, "");
  assert.equal(r.exitCode, 0);
  assert.equal(r.signal, null);
  assert.equal(r.timedOut, false);
  assert.equal(r.durationMs, 3);
  assert.deepEqual(den.lastRequest("POST", /\/exec$/)?.json, { cmd: "echo hello", timeout_seconds: 30 });

  await sbx.exec(["python3", "-c", "print(1)"], { cwd: "/workspace", env: { A: "1" }, stdin: "in\u00e9", timeoutSeconds: 5 });
  assert.deepEqual(den.lastRequest("POST", /\/exec$/)?.json, {
    argv: ["python3", "-c", "print(1)"],
    cwd: "/workspace",
    env: { A: "1" },
    stdin_b64: b64("in\u00e9"),
    timeout_seconds: 5,
  });
  await sbx.exec("cat", { stdin: new Uint8Array([0, 255, 128]), timeoutSeconds: 30 });
  assert.equal((den.lastRequest("POST", /\/exec$/)?.json as { stdin_b64: string }).stdin_b64, "AP+A");
});

test("an exec without a short timeout takes the streaming route and returns the same result", async () => {
  const r = await sbx.exec("echo hello");
  assert.equal(r.exitCode, 0);
  assert.ok(den.lastRequest("POST", /\/exec\/stream$/), "streamed");
  assert.deepEqual(den.lastRequest("POST", /\/exec\/stream$/)?.json, { cmd: "echo hello" });
});

test("buffered exec: non-UTF-8 output comes from the *_b64 fields, timeouts and signals are mapped", async () => {
  const orig = den.onExec;
  den.onExec = () => ({
    stdout: "\ufffd",
    stderr: "boom",
    stdout_b64: b64(new Uint8Array([0xff, 0x00])),
    exit_code: null,
    signal: 9,
    timed_out: true,
    duration_ms: 1000,
  });
  const r = await sbx.exec("head -c2 /dev/urandom", { timeoutSeconds: 1 });
  den.onExec = orig;
  assert.deepEqual(r.stdoutBytes, new Uint8Array([0xff, 0x00]));
  assert.equal(r.stderr, "boom");
  assert.deepEqual(r.stderrBytes, new TextEncoder().encode("boom"));
  assert.equal(r.exitCode, null);
  assert.equal(r.signal, 9);
  assert.equal(r.timedOut, true);
});

test("exec with callbacks streams chunks, decoding characters split across chunks", async () => {
  const euro = Buffer.from("\u20ac"); // e2 82 ac
  const e = Buffer.from("\u00e9"); // c3 a9
  den.onExecStream = async (_req, res, line) => {
    line({ type: "start", pid: 42 });
    line({ type: "stdout", data_b64: b64(Buffer.concat([Buffer.from("caf"), e.subarray(0, 1)])) });
    await sleep(10);
    line({ type: "stdout", data_b64: b64(Buffer.concat([e.subarray(1), Buffer.from(" costs 5"), euro.subarray(0, 1)])) });
    line({ type: "stderr", data_b64: b64("warn\n") });
    // One NDJSON line delivered in two TCP writes.
    const l = JSON.stringify({ type: "stdout", data_b64: b64(Buffer.concat([euro.subarray(1), Buffer.from("\n")])) });
    res.write(l.slice(0, 10));
    await sleep(10);
    res.write(`${l.slice(10)}\n`);
    line({ type: "exit", exit_code: 3, signal: null, timed_out: false });
  };
  const out: string[] = [];
  const err: string[] = [];
  const r = await sbx.exec(["sh", "-c", "x"], { onStdout: (s) => out.push(s), onStderr: (s) => err.push(s), stdin: "q", timeoutSeconds: 9 });
  assert.deepEqual(den.lastRequest("POST", /\/exec\/stream$/)?.json, { argv: ["sh", "-c", "x"], stdin_b64: b64("q"), timeout_seconds: 9 });
  assert.equal(den.lastRequest("POST", /\/exec\/stream$/)?.headers.accept, "application/x-ndjson");
  assert.deepEqual(out, ["caf", "\u00e9 costs 5", "\u20ac\n"]);
  assert.ok(!out.join("").includes("\ufffd"));
  assert.deepEqual(err, ["warn\n"]);
  assert.equal(r.stdout, "caf\u00e9 costs 5\u20ac\n");
  assert.deepEqual(r.stdoutBytes, new TextEncoder().encode("caf\u00e9 costs 5\u20ac\n"));
  assert.equal(r.stderr, "warn\n");
  assert.equal(r.exitCode, 3);
  assert.equal(r.timedOut, false);
});

test("execStream yields chunks and wait() gives the exit", async () => {
  den.onExecStream = async (_req, _res, line) => {
    line({ type: "start", pid: 9 });
    line({ type: "keepalive" }); // unknown line types are skipped (forward compatibility)
    for (const s of ["a", "b", "c"]) {
      line({ type: "stdout", data_b64: b64(s) });
      await sleep(5);
    }
    line({ type: "stderr", data_b64: b64(new Uint8Array([0xe2])) }); // an incomplete character: no text yet
    line({ type: "exit", exit_code: null, signal: 15, timed_out: true });
  };
  const run = sbx.execStream("x");
  const got: [string, string][] = [];
  for await (const c of run) got.push([c.stream, c.text()]);
  assert.deepEqual(got, [["stdout", "a"], ["stdout", "b"], ["stdout", "c"], ["stderr", ""]]);
  assert.deepEqual(await run.wait(), { pid: 9, exitCode: null, signal: 15, timedOut: true });
  assert.throws(() => run[Symbol.asyncIterator](), /only once/);

  // wait() alone drains the output.
  assert.equal((await sbx.execStream("x").wait()).pid, 9);
});

test("execStream: an error line throws its typed error; a stream without exit is an InvalidResponseError", async () => {
  den.onExecStream = (_req, _res, line) => {
    line({ type: "start", pid: 1 });
    line({ type: "error", error: { code: "agent_unavailable", message: "agent went away" } });
  };
  const run = sbx.execStream("x");
  await assert.rejects(run.wait(), (e: unknown) => e instanceof UnavailableError && e.code === "agent_unavailable" && e.status === 503);
  await assert.rejects(sbx.exec("x", { onStdout: () => {} }), UnavailableError);

  den.onExecStream = (_req, _res, line) => {
    line({ type: "start", pid: 1 });
  };
  await assert.rejects(sbx.execStream("x").wait(), InvalidResponseError);
  den.onExecStream = (_req, _res, line) => {
    line({ type: "stdout", nope: 1 });
  };
  await assert.rejects(sbx.execStream("x").wait(), InvalidResponseError);
});

test("execStream: HTTP errors surface on iteration; breaking out closes the stream", async () => {
  await assert.rejects(sbx.execStream("x", { cwd: "relative" }).wait(), (e: unknown) => e instanceof DenApiError && e.code === "invalid_argument");

  let closed = false;
  den.onExecStream = async (_req, res, line) => {
    res.on("close", () => (closed = true));
    line({ type: "start", pid: 1 });
    for (let i = 0; i < 1000 && !closed; i++) {
      line({ type: "stdout", data_b64: b64(`line ${i}\n`) });
      await sleep(5);
    }
  };
  const run = sbx.execStream("yes");
  for await (const c of run) {
    assert.equal(c.text(), "line 0\n");
    break;
  }
  await assert.rejects(run.wait(), { name: "AbortError" });
  for (let i = 0; i < 100 && !closed; i++) await sleep(5);
  assert.ok(closed, "the server saw the connection close");
});

test("execStream: aborting the signal mid-stream rejects the iteration with AbortError", async () => {
  den.onExecStream = async (_req, _res, line) => {
    line({ type: "start", pid: 1 });
    line({ type: "stdout", data_b64: b64("first") });
    await sleep(10_000, { unref: true });
  };
  const ac = new AbortController();
  const run = sbx.execStream("x", { signal: ac.signal });
  const seen: string[] = [];
  await assert.rejects(
    (async () => {
      for await (const c of run) {
        seen.push(c.text());
        ac.abort();
      }
    })(),
    { name: "AbortError" },
  );
  assert.deepEqual(seen, ["first"]);
  await assert.rejects(run.wait(), { name: "AbortError" });
});

test("exec timeout as an HTTP error is a TimeoutError", async () => {
  // The contract has a 408 exec_timeout code; a custom fetch stands in for a server that uses it.
  const f: typeof fetch = async () =>
    new Response(JSON.stringify({ error: { code: "exec_timeout", message: "command timed out" } }), { status: 408 });
  const s = await Sandbox.connect(sbx.id, { ...den.opts, fetch: async (i, init) => (String(i).endsWith("/exec") ? f(i, init) : fetch(i, init)) });
  await assert.rejects(s.exec("sleep 9", { timeoutSeconds: 1 }), (e: unknown) => e instanceof TimeoutError && e.status === 408);
});

test("background exec returns a Process handle: wait, logs, write, closeStdin, kill, list", async () => {
  const proc = await sbx.exec("cat", { background: true, cwd: "/tmp", bufferBytes: 65536 });
  assert.ok(proc instanceof Process);
  assert.deepEqual(den.lastRequest("POST", /\/processes$/)?.json, { cmd: "cat", cwd: "/tmp", buffer_bytes: 65536 });
  assert.equal(proc.proc, 1);
  assert.equal(proc.pid, 101);
  assert.equal(proc.status.running, true);

  const st0 = await proc.wait({ timeoutSeconds: 0.2 });
  assert.equal(st0.running, true);
  assert.equal(den.lastRequest("GET", /\/processes\/1$/)?.query.get("wait_seconds"), "1");

  await proc.write("hello ");
  await proc.write(new Uint8Array([0xe2, 0x82, 0xac]));
  assert.deepEqual(den.lastRequest("POST", /\/processes\/1\/input$/)?.json, { data_b64: "4oKs" });
  const waiting = proc.wait();
  await sleep(20);
  await proc.closeStdin();
  assert.deepEqual(den.lastRequest("POST", /\/processes\/1\/input$/)?.json, { data_b64: "", eof: true });
  const st = await waiting;
  assert.equal(st.running, false);
  assert.equal(st.exitCode, 0);
  assert.equal(proc.status.exitCode, 0);

  const logs = await proc.logs();
  assert.equal(logs.text(), "hello \u20ac");
  assert.equal(logs.nextOffset, 9);
  assert.equal(logs.eof, true);
  const tail = await proc.logs({ stream: "stdout", offset: 6 });
  assert.deepEqual(tail.data, new Uint8Array([0xe2, 0x82, 0xac]));
  assert.equal(den.lastRequest("GET", /\/logs$/)?.query.get("offset"), "6");
  assert.equal((await proc.logs({ stream: "stderr" })).data.length, 0);

  const p2 = await sbx.processes.start(["sleep", "100"]);
  assert.equal(p2.proc, 2);
  const listed = await sbx.processes.list();
  assert.deepEqual(listed.map((p) => [p.proc, p.status.running]), [[1, false], [2, true]]);
  await p2.kill();
  assert.ok(den.lastRequest("DELETE", /\/processes\/2$/));
  const after = await p2.refresh();
  assert.equal(after.running, false);
  assert.equal(after.signal, 9);
  assert.equal((await sbx.processes.get(2)).status.signal, 9);
  await assert.rejects(sbx.processes.get(77), (e: unknown) => e instanceof DenApiError && e.code === "proc_not_found");
});

test("large process input is split into requests under the body cap", async () => {
  const proc = await sbx.processes.start("cat");
  const before = den.requests.length;
  const big = new Uint8Array(500_000).map((_, i) => i % 251);
  await proc.write(big);
  const inputs = den.requests.slice(before).filter((r) => r.path.endsWith("/input"));
  assert.equal(inputs.length, 3);
  for (const r of inputs) assert.ok((r.json as { data_b64: string }).data_b64.length <= 350_000);
  await proc.closeStdin();
  const out = await proc.logs();
  assert.deepEqual(out.data, big);
});
