// needs: one VM, network namespace (open egress), the e2b client, the code-interpreter-v1 template
/**
 * The unchanged `@e2b/code-interpreter` client (pinned) against `den serve` and real
 * microVMs of the `code-interpreter-v1` template, configured as a self-hoster does
 * (E2B_API_URL, E2B_API_KEY, E2B_SANDBOX_URL): its requests reach the guest's code server
 * through Den's envd listener, routed by their `E2b-Sandbox-Port` header.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox } from "@e2b/code-interpreter";
import type { RunningServer } from "../../src/index.js";
import { ADMIN_KEY, testServer } from "../helpers.js";

const PNG = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

describe("@e2b/code-interpreter against Den", () => {
  let server: RunningServer;
  let sbx: Sandbox;

  before(async () => {
    server = await testServer();
    process.env.E2B_API_URL = server.url;
    process.env.E2B_API_KEY = ADMIN_KEY;
    process.env.E2B_SANDBOX_URL = server.envdUrl!;
    // The client's default template: code-interpreter-v1.
    sbx = await Sandbox.create({ timeoutMs: 1_800_000 });
  });

  after(async () => {
    await sbx?.kill().catch(() => undefined);
    await server?.close();
  });

  test("Python: a value, stdout through its callback, a matplotlib PNG, an exception's traceback, envs for one execution", async () => {
    const value = await sbx.runCode("x = 20\nx + 22");
    assert.equal(value.text, "42");
    assert.equal(value.error, undefined);
    assert.ok((value.executionCount ?? 0) >= 1, "number_of_executions");

    const lines: string[] = [];
    const printed = await sbx.runCode("for i in range(3):\n    print('line', i)", { onStdout: (m) => void lines.push(m.line) });
    assert.equal(printed.logs.stdout.join(""), "line 0\nline 1\nline 2\n");
    assert.equal(lines.join(""), "line 0\nline 1\nline 2\n", "the stdout callback saw every line");

    const plot = await sbx.runCode("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()");
    const png = plot.results.find((r) => r.png);
    assert.ok(png, `a PNG result: ${JSON.stringify(plot.results.map((r) => r.formats()))}`);
    assert.deepEqual(Buffer.from(png.png!, "base64").subarray(0, 8), PNG);

    const failed = await sbx.runCode("def f():\n    raise ValueError('bad value')\nf()");
    assert.equal(failed.error?.name, "ValueError");
    assert.equal(failed.error?.value, "bad value");
    // (IPython colours its tracebacks, as on E2B.)
    assert.match((failed.error?.traceback ?? "").replace(/\x1b\[[0-9;]*m/g, ""), /----> 3 f\(\)/);

    const withEnv = await sbx.runCode("import os\nos.environ.get('CI_VAR')", { envs: { CI_VAR: "only-now" } });
    assert.equal(withEnv.text, "'only-now'");
    const after = await sbx.runCode("import os\nstr(os.environ.get('CI_VAR'))");
    assert.equal(after.text, "'None'", "envs apply to one execution only");
  });

  test("a timeout interrupts the cell, and the context still answers with its variables", async () => {
    await sbx.runCode("kept = 'still here'");
    const slow = await sbx.runCode("import time\ntime.sleep(600)", { timeoutMs: 3_000 }).catch((e: unknown) => e);
    assert.ok(slow instanceof Error, "the client gives up at its timeout");
    const t0 = Date.now();
    const next = await sbx.runCode("kept", { timeoutMs: 60_000 });
    assert.equal(next.text, "'still here'");
    assert.ok(Date.now() - t0 < 30_000, "the next execution did not wait for the sleep");
  });

  test("bash, and contexts: create, list, restart, remove", async () => {
    const bash = await sbx.runCode("cd /tmp && X=7; echo \"$X $(pwd)\"", { language: "bash" });
    assert.equal(bash.logs.stdout.join(""), "7 /tmp\n");

    const ctx = await sbx.createCodeContext({ language: "python", cwd: "/tmp" });
    assert.equal(ctx.language, "python");
    assert.equal(ctx.cwd, "/tmp");
    await sbx.runCode("in_ctx = 5", { context: ctx });
    assert.equal((await sbx.runCode("import os\nos.getcwd()", { context: ctx })).text, "'/tmp'");
    assert.equal((await sbx.runCode("in_ctx * 2", { context: ctx })).text, "10");
    assert.equal((await sbx.runCode("'in_ctx' in globals()")).text, "False", "the default context does not share it");
    const listed = await sbx.listCodeContexts();
    assert.ok(listed.some((c) => c.id === ctx.id), "listed");

    await sbx.restartCodeContext(ctx);
    const gone = await sbx.runCode("in_ctx", { context: ctx });
    assert.equal(gone.error?.name, "NameError", "a restart forgets the context's variables");

    await sbx.removeCodeContext(ctx);
    assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id), "removed");
    // (requestTimeoutMs: 0: the client leaves its request timer running when /execute answers an error, which would hold the test process 60 s.)
    const unknown = await sbx.runCode("1", { context: ctx, requestTimeoutMs: 0 }).catch((e: unknown) => e);
    assert.ok(unknown instanceof Error && /not.?found|404/i.test(`${unknown.name} ${unknown.message}`), `an unknown context: ${String(unknown)}`);
  });

  test("a variable survives sbx.pause() and Sandbox.connect()", async () => {
    await sbx.runCode("import hashlib\nsurvivor = hashlib.sha256(b'den').hexdigest()");
    assert.equal(await sbx.pause(), true);
    const back = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 1_800_000 });
    const r = await back.runCode("survivor");
    assert.match(r.text ?? "", /^'[0-9a-f]{64}'$/, `the variable after the resume: ${JSON.stringify(r)}`);
    const again = await back.runCode("import hashlib\nhashlib.sha256(b'den').hexdigest() == survivor");
    assert.equal(again.text, "True", "the same kernel, with its variable");
    sbx = back;
  });

  test("a port header naming a closed port answers 502", async () => {
    const res = await fetch(`${server.envdUrl}/anything`, { headers: { "E2b-Sandbox-Id": sbx.sandboxId, "E2b-Sandbox-Port": "49998" } });
    assert.equal(res.status, 502, await res.text());
  });
});
