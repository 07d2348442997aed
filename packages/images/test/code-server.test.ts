// needs: python3-ipykernel
// Den's code interpreter (packages/images/guest/code-interpreter/server.py) on this host, no VM:
// the wire protocol @e2b/code-interpreter speaks to port 49999, spoken here with plain fetch.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

const SERVER = new URL("../../guest/code-interpreter/server.py", import.meta.url).pathname;
// Debian's python3 (the one with python3-ipykernel), not a python3 of pyenv's earlier on PATH.
const PYTHON = existsSync("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
const work = mkdtempSync(join(tmpdir(), "den-code-server-test-"));
let server: ChildProcess;
let base = "";
let serverLog = "";

type Event = { type: string; [k: string]: unknown };
type Run = { status: number; events: Event[]; ms: number };

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

before(async () => {
  const port = await freePort();
  base = `http://127.0.0.1:${port}`;
  server = spawn(PYTHON, [SERVER], {
    cwd: work,
    env: { ...process.env, DEN_CODE_PORT: String(port), DEN_CODE_CWD: work },
    stdio: ["ignore", "ignore", "pipe"],
  });
  server.stderr!.on("data", (d: Buffer) => (serverLog += d.toString()));
  const t0 = Date.now();
  for (;;) {
    assert.equal(server.exitCode, null, `the server exited: ${serverLog}`);
    assert.ok(Date.now() - t0 < 30_000, `no healthy server in 30 s: ${serverLog}`);
    const res = await fetch(`${base}/health`).catch(() => undefined);
    if (res?.status === 200) {
      assert.equal(await res.json(), "OK");
      break;
    }
    if (res) assert.equal(res.status, 503, "before it is ready /health says 503");
    await new Promise((r) => setTimeout(r, 100));
  }
});

after(async () => {
  if (server.exitCode === null) {
    const exited = new Promise((r) => server.once("exit", r));
    server.kill("SIGTERM");
    await exited;
  }
  rmSync(work, { recursive: true, force: true });
});

/** Reads an NDJSON body to its end; every line must be a non-empty JSON object. */
async function readEvents(res: Response, onEvent?: (e: Event) => void): Promise<Event[]> {
  const events: Event[] = [];
  const decoder = new TextDecoder();
  let buffer = "";
  const reader = res.body!.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (value) buffer += decoder.decode(value, { stream: true });
    let nl: number;
    while ((nl = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, nl);
      buffer = buffer.slice(nl + 1);
      assert.notEqual(line.trim(), "", "no empty lines (the client JSON.parses each)");
      const e = JSON.parse(line) as Event;
      events.push(e);
      onEvent?.(e);
    }
    if (done) break;
  }
  assert.equal(buffer, "", "the last line ends with a newline");
  return events;
}

async function execute(body: Record<string, unknown>, headers: Record<string, string> = {}): Promise<Run> {
  const t0 = Date.now();
  const res = await fetch(`${base}/execute`, {
    method: "POST",
    headers: { "Content-Type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
  if (res.status !== 200) return { status: res.status, events: [{ type: "body", text: await res.text() }], ms: Date.now() - t0 };
  assert.equal(res.headers.get("content-type"), "application/x-ndjson");
  const events = await readEvents(res);
  assert.equal(events.at(-1)?.type, "end_of_execution", JSON.stringify(events).slice(0, 2000));
  return { status: 200, events, ms: Date.now() - t0 };
}

const of = (run: Run, type: string) => run.events.filter((e) => e.type === type);
const mainText = (run: Run) => of(run, "result").find((e) => e.is_main_result)?.text;
const stdout = (run: Run) => of(run, "stdout").map((e) => e.text).join("");
const stderr = (run: Run) => of(run, "stderr").map((e) => e.text).join("");

async function createContext(body: Record<string, unknown> = {}): Promise<{ id: string; language: string; cwd: string }> {
  const res = await fetch(`${base}/contexts`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  assert.equal(res.status, 200, await res.clone().text());
  return (await res.json()) as { id: string; language: string; cwd: string };
}

test("a bare expression is the main result; the execution count comes with it", async () => {
  const run = await execute({ code: "1+1" });
  assert.equal(run.status, 200);
  assert.equal(mainText(run), "2");
  const count = of(run, "number_of_executions")[0]?.execution_count;
  assert.equal(typeof count, "number");
  const next = await execute({ code: "40 + 2", language: "python" });
  assert.equal(mainText(next), "42");
  assert.equal(of(next, "number_of_executions")[0]?.execution_count, (count as number) + 1);
  assert.equal(of(next, "error").length, 0);
});

test("stdout and stderr stream; a variable is kept across executions", async () => {
  const run = await execute({ code: "import sys\nkept = 'v' * 3\nprint('hello')\nprint('oops', file=sys.stderr)" });
  assert.equal(stdout(run), "hello\n");
  assert.equal(stderr(run), "oops\n");
  assert.equal(of(run, "result").length, 0, "an assignment has no result");
  assert.equal(mainText(await execute({ code: "kept" })), "'vvv'");
  // Non-ASCII comes through whole (the lines are ASCII JSON).
  assert.equal(stdout(await execute({ code: "print('héllo ✓ 🐍')" })), "héllo ✓ 🐍\n");
});

test("the warm-up binds no names in the user's namespace", async () => {
  const run = await execute({ code: "[n for n in ('np', 'numpy', 'pd', 'pandas', 'plt', 'matplotlib', 'importlib', 'io', 'fig') if n in dir()]" });
  assert.equal(mainText(run), "[]");
});

test("matplotlib: plt.show() comes back as a PNG result; a DataFrame as text and HTML", async () => {
  const run = await execute({ code: "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()" });
  const images = of(run, "result").filter((e) => typeof e.png === "string");
  assert.equal(images.length, 1, JSON.stringify(run.events).slice(0, 500));
  assert.equal(images[0]!.is_main_result, false);
  const png = Buffer.from(images[0]!.png as string, "base64");
  assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  const df = await execute({ code: "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})" });
  const main = of(df, "result").find((e) => e.is_main_result)!;
  assert.match(main.text as string, /a\s+b/);
  assert.match(main.html as string, /<table/);
});

test("an exception is an error event with name, value and a traceback string", async () => {
  const run = await execute({ code: "def f():\n    raise ValueError('bad thing')\nf()" });
  const [err] = of(run, "error");
  assert.ok(err, JSON.stringify(run.events));
  assert.equal(err.name, "ValueError");
  assert.equal(err.value, "bad thing");
  assert.equal(typeof err.traceback, "string");
  // (ANSI colours kept, as E2B does)
  assert.match((err.traceback as string).replace(/\x1b\[[0-9;]*m/g, ""), /raise ValueError\("bad thing"\)|raise ValueError\(.bad thing.\)/);
  // The context goes on.
  assert.equal(mainText(await execute({ code: "kept" })), "'vvv'");
});

test("env_vars and the X-Den-Sandbox-Env header apply to one execution only", async () => {
  const header = Buffer.from(JSON.stringify({ DEN_T_BASE: "sandbox", DEN_T_BOTH: "sandbox" })).toString("base64");
  const code = "import os\n[os.environ.get(k) for k in ('DEN_T_BASE', 'DEN_T_BOTH', 'DEN_T_ONLY')]";
  const run = await execute({ code, env_vars: { DEN_T_BOTH: "call", DEN_T_ONLY: "x" } }, { "X-Den-Sandbox-Env": header });
  assert.equal(mainText(run), "['sandbox', 'call', 'x']");
  assert.equal(mainText(await execute({ code })), "[None, None, None]");
  // Bash too.
  const sh = await execute({ code: 'echo "$DEN_T_BASE-$DEN_T_ONLY"', language: "bash", env_vars: { DEN_T_ONLY: "y z" } }, { "X-Den-Sandbox-Env": header });
  assert.equal(stdout(sh), "sandbox-y z\n");
  assert.equal(stdout(await execute({ code: 'echo "[$DEN_T_BASE$DEN_T_ONLY]"', language: "bash" })), "[]\n");
  const bad = await execute({ code: "1" }, { "X-Den-Sandbox-Env": Buffer.from("[1]").toString("base64") });
  assert.equal(bad.status, 400);
});

test("contexts: created, listed, restarted (variables gone), deleted; unknown ones are 404", async () => {
  const ctx = await createContext({ cwd: tmpdir() });
  assert.equal(ctx.language, "python");
  assert.equal(ctx.cwd, tmpdir());
  const list = (await (await fetch(`${base}/contexts`)).json()) as { id: string }[];
  assert.ok(list.some((c) => c.id === ctx.id));
  assert.equal(mainText(await execute({ code: "import os\nmine = 1\nos.getcwd()", context_id: ctx.id })), `'${tmpdir()}'`);
  assert.equal(mainText(await execute({ code: "'mine' in dir(), 'kept' in dir()", context_id: ctx.id })), "(True, False)");
  assert.ok((await fetch(`${base}/contexts/${ctx.id}/restart`, { method: "POST" })).ok);
  assert.equal(mainText(await execute({ code: "'mine' in dir()", context_id: ctx.id })), "False");
  assert.equal((await fetch(`${base}/contexts/${ctx.id}`, { method: "DELETE" })).status, 204);
  const gone = await execute({ code: "1", context_id: ctx.id });
  assert.equal(gone.status, 404);
  assert.match(gone.events[0]!.text as string, /not found/);
  assert.equal((await fetch(`${base}/contexts/${ctx.id}`, { method: "DELETE" })).status, 404);
  assert.equal((await fetch(`${base}/contexts/nope/restart`, { method: "POST" })).status, 404);
  const after = (await (await fetch(`${base}/contexts`)).json()) as { id: string }[];
  assert.ok(!after.some((c) => c.id === ctx.id));
});

test("bad requests: context_id with language, no code, bad JSON, an unsupported language", async () => {
  assert.equal((await execute({ code: "1", context_id: "x", language: "python" })).status, 400);
  assert.equal((await execute({ language: "python" })).status, 400);
  const badJson = await fetch(`${base}/execute`, { method: "POST", body: "{nope" });
  assert.equal(badJson.status, 400);
  const r = await execute({ code: "1", language: "cobol" });
  assert.equal(r.status, 400);
  assert.match(r.events[0]!.text as string, /python/);
  const big = await fetch(`${base}/execute`, { method: "POST", body: JSON.stringify({ code: "#" + "x".repeat(17 * 1024 * 1024) }) });
  assert.equal(big.status, 413);
});

test("bash: cwd and variables persist, a non-zero exit status is an error", async () => {
  const a = await execute({ code: `cd ${JSON.stringify(tmpdir())}\nV=41\necho "v=$V"\necho warn >&2`, language: "bash" });
  assert.equal(stdout(a), "v=41\n");
  assert.equal(stderr(a), "warn\n");
  assert.equal(of(a, "error").length, 0);
  const b = await execute({ code: "echo $((V + 1)) $(pwd)\nfalse", language: "bash" });
  assert.equal(stdout(b), `42 ${tmpdir()}\n`);
  const [err] = of(b, "error");
  assert.equal(err?.name, "CommandExitError");
  assert.match(err?.value as string, /1/);
  const ctx = await createContext({ language: "bash" });
  assert.equal(ctx.language, "bash");
  assert.equal(stdout(await execute({ code: 'echo "[$V]"; printf tail', context_id: ctx.id })), "[]\ntail");
});

test("two executions in one context run one after the other", async () => {
  const [a, b] = await Promise.all([
    execute({ code: "import time\ntime.sleep(0.7)\nseq = 'first'" }),
    (async () => {
      await new Promise((r) => setTimeout(r, 150));
      return execute({ code: "seq" });
    })(),
  ]);
  assert.equal(of(a, "error").length, 0);
  assert.equal(mainText(b), "'first'");
});

/** Starts a cell, waits for its first stdout event, then aborts the request as the client's timeout does. */
async function abortAfterStart(body: Record<string, unknown>): Promise<void> {
  const controller = new AbortController();
  const res = await fetch(`${base}/execute`, { method: "POST", body: JSON.stringify(body), signal: controller.signal });
  assert.equal(res.status, 200);
  await assert.rejects(
    readEvents(res, (e) => {
      if (e.type === "stdout") controller.abort();
    }),
  );
}

test("a request aborted mid-cell interrupts the kernel; the context stays usable with its variables", async () => {
  await execute({ code: "survivor = 7" });
  await abortAfterStart({ code: "import time\nprint('started', flush=True)\ntime.sleep(60)" });
  const next = await execute({ code: "survivor" });
  assert.equal(mainText(next), "7");
  assert.ok(next.ms < 8000, `the next execution took ${next.ms} ms`);
  await execute({ code: "B=5", language: "bash" });
  await abortAfterStart({ code: "echo started; sleep 60", language: "bash" });
  const sh = await execute({ code: "echo $B", language: "bash" });
  assert.equal(stdout(sh), "5\n");
  assert.ok(sh.ms < 8000, `the next bash execution took ${sh.ms} ms`);
});

test("a kernel that dies mid-cell is an error; the next execution gets a fresh kernel", async () => {
  const ctx = await createContext();
  await execute({ code: "doomed = 1", context_id: ctx.id });
  const run = await execute({ code: "import os\nos.kill(os.getpid(), 9)", context_id: ctx.id });
  const [err] = of(run, "error");
  assert.equal(err?.name, "DeadKernelError");
  assert.match(err?.value as string, /gone/);
  const next = await execute({ code: "'doomed' in dir(), 1 + 1", context_id: ctx.id });
  assert.equal(mainText(next), "(False, 2)");
  // Killed from elsewhere while idle: the next execution says so on stderr and runs.
  const pid = mainText(await execute({ code: "import os\nos.getpid()", context_id: ctx.id }));
  await execute({ code: `import os, signal\nos.kill(${pid}, signal.SIGKILL)` });
  const again = await execute({ code: "3 * 3", context_id: ctx.id });
  assert.equal(mainText(again), "9");
  assert.match(stderr(again), /restarted/);
  await fetch(`${base}/contexts/${ctx.id}`, { method: "DELETE" });
});

test("output is bounded: 10 MB of prints end promptly with one marker", async () => {
  const run = await execute({ code: "import sys\nfor i in range(200_000):\n    sys.stdout.write('%06d %s\\n' % (i, 'x' * 43))\nprint('x' * 2_000_000)\n'done'" });
  const text = stdout(run);
  assert.ok(text.length <= 1024 * 1024 && text.length > 1000_000, `${text.length} bytes of stdout`);
  assert.ok(text.startsWith("000000 "));
  assert.equal(of(run, "stderr").filter((e) => /output truncated after 1048576 bytes/.test(e.text as string)).length, 1);
  assert.ok(run.ms < 20_000, `took ${run.ms} ms`);
  assert.equal(mainText(run), "'done'", "the cell's value still comes: results have a budget of their own");
  // The context is fine afterwards.
  assert.equal(mainText(await execute({ code: "survivor" })), "7");
});

test("on SIGTERM the server takes its kernels with it", async () => {
  const pid = Number(mainText(await execute({ code: "import os\nos.getpid()" })));
  assert.ok(pid > 0);
  const exited = new Promise((r) => server.once("exit", r));
  server.kill("SIGTERM");
  await exited;
  let alive = true;
  for (let i = 0; i < 50 && alive; i++) {
    try {
      process.kill(pid, 0);
      await new Promise((r) => setTimeout(r, 100));
    } catch {
      alive = false;
    }
  }
  assert.equal(alive, false, "the kernel outlived the server");
});
