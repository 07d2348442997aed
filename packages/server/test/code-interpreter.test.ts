// needs: one VM, python3, the code-interpreter-v1 template
/**
 * The code interpreter through Den's own SDKs against a real server and real microVMs of
 * `code-interpreter-v1`: kernels that keep their state across a cold hibernation and a
 * fork, and the bad inputs (a cell that never ends, a kernel killed from another
 * execution, 10 MB of output, an unknown context). The unchanged `@e2b/code-interpreter`
 * client runs in test/e2b/code-interpreter.test.ts.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Sandbox, TimeoutError } from "@den/sdk";
import type { RunningServer } from "../src/index.js";
import { ADMIN_KEY, testServer } from "./helpers.js";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");
const PNG = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
const TEMPLATE = "code-interpreter-v1";

/** A ~200 MB DataFrame (3.3 M rows x 8 float64 columns) and its checksum, computed in the kernel. */
const BUILD_FRAME = [
  "import hashlib, numpy as np, pandas as pd",
  "df = pd.DataFrame(np.random.default_rng(7).random((3_300_000, 8)), copy=False)",
  "def checksum(d):",
  "    return hashlib.sha256(np.ascontiguousarray(d.to_numpy()).data).hexdigest()",
  "(df.memory_usage(index=False).sum() // 2**20, checksum(df))",
].join("\n");

describe("the code interpreter through Den's SDKs", () => {
  let server: RunningServer;
  let opts: { apiUrl: string; apiKey: string };
  const made: Sandbox[] = [];

  before(async () => {
    server = await testServer();
    opts = { apiUrl: server.url, apiKey: ADMIN_KEY };
  });
  after(async () => {
    for (const s of made) await s.destroy().catch(() => undefined);
    await server?.close();
  });

  const create = async (body: Record<string, unknown> = {}) => {
    const sbx = await Sandbox.create({ template: TEMPLATE, ...body, ...opts });
    made.push(sbx);
    return sbx;
  };

  test("runCode: a value, stdout as it comes, a PNG, an exception, envs for one run, bash, contexts; also reachable as `code-interpreter`", async () => {
    const sbx = await create({ template: "code-interpreter", env: { FROM_CREATE: "sandbox-env" } });
    assert.equal(sbx.info.template, TEMPLATE, "the alias is the template's other name");

    const value = await sbx.runCode("x = 40\nx + 2");
    assert.equal(value.text, "42");
    assert.ok((value.executionCount ?? 0) >= 1);

    const seen: string[] = [];
    const printed = await sbx.runCode("import sys\nprint('out')\nprint('err', file=sys.stderr)", { onStdout: (t) => void seen.push(t) });
    assert.deepEqual(printed.logs, { stdout: ["out\n"], stderr: ["err\n"] });
    assert.deepEqual(seen, ["out\n"]);

    const plot = await sbx.runCode("import matplotlib.pyplot as plt\nplt.bar(['a', 'b'], [3, 5])\nplt.show()");
    const png = plot.results.find((r) => r.png);
    assert.ok(png, "a PNG result");
    assert.deepEqual(Buffer.from(png.png!, "base64").subarray(0, 8), PNG);

    const failed = await sbx.runCode("{}['missing']");
    assert.equal(failed.error?.name, "KeyError");
    assert.match(failed.error?.traceback ?? "", /missing/);

    const env = await sbx.runCode("import os\n(os.environ.get('ONE_RUN'), os.environ.get('FROM_CREATE'))", { envs: { ONE_RUN: "yes" } });
    assert.equal(env.text, "('yes', 'sandbox-env')", "a run's envs over the sandbox's own");
    assert.equal((await sbx.runCode("import os\nstr(os.environ.get('ONE_RUN'))")).text, "'None'", "a run's envs are gone after it");

    const bash = await sbx.runCode("cd /tmp; N=3; echo \"$N $(pwd)\"", { language: "bash" });
    assert.equal(bash.logs.stdout.join(""), "3 /tmp\n");
    const bash2 = await sbx.runCode("echo \"$N $(pwd)\"", { language: "bash" });
    assert.equal(bash2.logs.stdout.join(""), "3 /tmp\n", "a bash context keeps its variables and directory");

    const ctx = await sbx.codeContexts.create({ language: "python", cwd: "/tmp" });
    await sbx.runCode("mine = 1", { context: ctx });
    assert.ok((await sbx.codeContexts.list()).some((c) => c.id === ctx.id));
    await sbx.codeContexts.restart(ctx);
    assert.equal((await sbx.runCode("mine", { context: ctx })).error?.name, "NameError");
    await sbx.codeContexts.remove(ctx);
    const unknown = await sbx.runCode("1", { context: ctx }).catch((e: unknown) => e);
    assert.ok(unknown instanceof Error && "status" in unknown && (unknown as { status: number }).status === 404, `an unknown context: ${String(unknown)}`);
  });

  test("a 200 MB DataFrame survives a cold hibernation; a fork's child changes a variable its parent keeps", async () => {
    const sbx = await create({ persistent: true });
    const built = await sbx.runCode(BUILD_FRAME, { timeoutMs: 600_000 });
    assert.equal(built.error, undefined, JSON.stringify(built.error));
    const m = /^\((\d+), '([0-9a-f]{64})'\)$/.exec(built.text ?? "");
    assert.ok(m, `size and checksum: ${built.text}`);
    assert.ok(Number(m[1]) >= 190, `about 200 MiB: ${m[1]}`);

    await sbx.hibernate({ mode: "cold" });
    assert.equal(sbx.info.hibernateMode, "cold");
    await sbx.wake();
    const after = await sbx.runCode("checksum(df)", { timeoutMs: 600_000 });
    assert.equal(after.text, `'${m[2]}'`, "the same DataFrame after the cold wake");

    await sbx.runCode("flag = 'parent'");
    const [child] = await sbx.fork({ count: 1 });
    assert.ok(child);
    made.push(child);
    await child.runCode("flag = 'child'");
    assert.equal((await child.runCode("flag")).text, "'child'");
    assert.equal((await sbx.runCode("flag")).text, "'parent'", "the parent keeps its own");
    assert.equal((await child.runCode("checksum(df)", { timeoutMs: 600_000 })).text, `'${m[2]}'`, "the child has its copy of the frame");
  });

  test("bad input: a cell that never ends, a kernel killed from another execution, 10 MB of output, an unknown context", async () => {
    const sbx = await create();
    await sbx.runCode("keep = 'kept'");
    const never = await sbx.runCode("while True:\n    pass", { timeoutMs: 3_000 }).catch((e: unknown) => e);
    assert.ok(never instanceof TimeoutError, `a timeout: ${String(never)}`);
    assert.equal((await sbx.runCode("keep", { timeoutMs: 60_000 })).text, "'kept'", "interrupted, the context answers with its variables");

    // Another execution (a bash one) kills the Python kernel; the next Python run says so, then works again.
    const kernelPid = (await sbx.runCode("import os\nos.getpid()")).text;
    assert.match(kernelPid ?? "", /^\d+$/);
    await sbx.runCode(`kill -9 ${kernelPid}`, { language: "bash" });
    const died = await sbx.runCode("1 + 1", { timeoutMs: 120_000 });
    const again = died.error ? await sbx.runCode("1 + 1", { timeoutMs: 120_000 }) : died;
    if (died.error) assert.match(`${died.error.name} ${died.error.value}`, /kernel|died|restart/i);
    assert.equal(again.text, "2", "the context restarted");

    const seenBytes = { n: 0 };
    const flood = await sbx.runCode("import sys\nfor _ in range(10):\n    sys.stdout.write('x' * (1 << 20))\n'done'", {
      timeoutMs: 300_000, onStdout: (t) => void (seenBytes.n += t.length),
    });
    const out = flood.logs.stdout.join("") + flood.logs.stderr.join("");
    assert.ok(seenBytes.n < 4 << 20, `the output was cut: ${seenBytes.n} bytes came`);
    assert.match(out, /truncat/i, "with a marker");
    assert.equal(flood.text, "'done'", "the run ended normally");

    const unknown = await sbx.runCode("1", { context: "no-such-context" }).catch((e: unknown) => e);
    assert.ok(unknown instanceof Error && (unknown as { status?: number }).status === 404, String(unknown));
  });

  test("the Python SDK: run_code sync and async, contexts", async () => {
    const sbx = await create();
    const script = [
      "import asyncio, os",
      "from den_sdk import Sandbox",
      "from den_sdk.aio import AsyncSandbox",
      "sbx = Sandbox.connect(os.environ['SBX'], api_url=os.environ['DEN_API_URL'], api_key=os.environ['DEN_API_KEY'])",
      "seen = []",
      "e = sbx.run_code(\"v = 6 * 7\\nprint('py')\\nv\", on_stdout=seen.append)",
      "assert e.text == '42', e",
      "assert seen == ['py\\n'], seen",
      "err = sbx.run_code('1/0')",
      "assert err.error.name == 'ZeroDivisionError', err.error",
      "ctx = sbx.code_contexts.create(language='python')",
      "sbx.run_code('w = 1', context=ctx)",
      "assert any(c.id == ctx.id for c in sbx.code_contexts.list())",
      "sbx.code_contexts.remove(ctx)",
      "async def main():",
      "    a = await AsyncSandbox.connect(os.environ['SBX'], api_url=os.environ['DEN_API_URL'], api_key=os.environ['DEN_API_KEY'])",
      "    r = await a.run_code('v + 1')",
      "    assert r.text == '43', r",
      "asyncio.run(main())",
      "print('python sdk ok')",
    ].join("\n");
    const out = await new Promise<{ code: number | null; text: string }>((resolve, reject) => {
      const child = spawn("python3", ["-c", script], {
        cwd: join(ROOT, "packages", "sdk-python"),
        env: { ...process.env, SBX: sbx.id, DEN_API_URL: server.url, DEN_API_KEY: ADMIN_KEY, PYTHONPATH: join(ROOT, "packages", "sdk-python") },
        stdio: ["ignore", "pipe", "pipe"],
      });
      let text = "";
      child.stdout.on("data", (d: Buffer) => (text += d.toString()));
      child.stderr.on("data", (d: Buffer) => (text += d.toString()));
      child.on("error", reject);
      child.on("close", (code) => resolve({ code, text }));
    });
    assert.equal(out.code, 0, out.text);
    assert.match(out.text, /python sdk ok/);
  });
});
