// needs: one VM, network namespace (open egress), the e2b client
/**
 * The seeds' two agent loops, written for the `e2b` client as E2B users write them, run
 * unchanged against Den (E2B_API_URL, E2B_API_KEY, E2B_SANDBOX_URL) with real microVMs:
 * one sandbox that lives across every turn of a task, and one durable run that pauses
 * across the model's think-gaps, resumes where it left off, checkpoints and forks.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { CommandExitError, Sandbox } from "e2b";
import type { RunningServer } from "../../src/index.js";
import { ADMIN_KEY, client, testServer, waitFor } from "../helpers.js";

describe("the seeds' agent loops through the e2b client", () => {
  let server: RunningServer;

  before(async () => {
    server = await testServer();
    process.env.E2B_API_URL = server.url;
    process.env.E2B_API_KEY = ADMIN_KEY;
    process.env.E2B_SANDBOX_URL = server.envdUrl!;
  });

  after(async () => {
    await server?.close();
  });

  test("seed 000: one sandbox across a task's turns (setup, failing test, edit, passing test), killed in finally", async () => {
    const sbx = await Sandbox.create("base", { timeoutMs: 3_600_000, metadata: { task_id: "refactor-auth-module", user_id: "u_8821" } });
    let killed = false;
    try {
      // Turn 1: setup that every later turn relies on.
      await sbx.commands.run("mkdir -p api && cd api && git init -q && printf 'def token(u):\\n    return u\\n' > auth.py");
      await sbx.files.write("api/test_auth.py", "import unittest\nfrom auth import token\n\nclass T(unittest.TestCase):\n    def test_token(self):\n        self.assertEqual(token('u'), 'tok:u')\n\nunittest.main()\n");
      // Turn 2: the failing test, and its traceback for the model.
      const failing = await sbx.commands.run("cd api && python3 test_auth.py", { timeoutMs: 120_000 }).catch((e: unknown) => e);
      assert.ok(failing instanceof CommandExitError, "the test fails first");
      assert.match(failing.stderr, /AssertionError/);
      // Turn 3: the model's edit lands in the same tree.
      await sbx.files.write("api/auth.py", "def token(u):\n    return 'tok:' + u\n");
      // Turn 4: the same tree, edited: no re-setup.
      const passing = await sbx.commands.run("cd api && python3 test_auth.py", { timeoutMs: 120_000 });
      assert.equal(passing.exitCode, 0);
      assert.match(passing.stderr, /OK/);
      assert.equal((await sbx.commands.run("cd api && git status --porcelain | wc -l")).stdout.trim(), "3", "the turns' files are all there");
      const info = await sbx.getInfo();
      assert.deepEqual(info.metadata, { task_id: "refactor-auth-module", user_id: "u_8821" });
    } finally {
      killed = await sbx.kill();
    }
    assert.equal(killed, true);
    assert.equal(await sbx.isRunning(), false);
  });

  test("seed 001: a durable run that pauses across think-gaps, resumes where it left off, checkpoints and forks", async () => {
    const sbx = await Sandbox.create("base", { timeoutMs: 3_600_000 });
    const extra: string[] = [];
    try {
      // A process that lives across every pause (a dev server, a kernel): its pid must stay.
      const bg = await sbx.commands.run("sleep 100000", { background: true });
      const steps = ["echo step1 > log.txt", "echo step2 >> log.txt", "echo step3 >> log.txt"];
      for (const [i, step] of steps.entries()) {
        const live = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 600_000 });     // resume (a wake)
        const r = await live.commands.run(step);
        assert.equal(r.exitCode, 0);
        await live.files.write(`notes/${i}.md`, `observed step ${i + 1}`);
        assert.equal(await live.pause(), true);                                           // the model thinks
        assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, "paused");
      }
      const back = await Sandbox.connect(sbx.sandboxId);
      assert.equal((await back.commands.run("cat log.txt")).stdout, "step1\nstep2\nstep3\n");
      assert.equal(await back.files.read("notes/2.md"), "observed step 3");
      assert.equal((await back.commands.run(`kill -0 ${bg.pid} && echo alive`)).stdout, "alive\n", "the background process outlived every pause");

      // A milestone checkpoint; a crash later resumes from it, not from step one.
      const snap = await back.createSnapshot();
      await back.commands.run("echo after-checkpoint >> log.txt");
      const resumed = await Sandbox.create(snap.snapshotId, { timeoutMs: 600_000 });
      extra.push(resumed.sandboxId);
      assert.equal((await resumed.commands.run("cat log.txt")).stdout, "step1\nstep2\nstep3\n");
      // Two approaches tried from the same state.
      const forks = await back.fork({ count: 2 });
      for (const f of forks) {
        assert.ok(f instanceof Sandbox, String(f));
        extra.push(f.sandboxId);
      }
      const [a, b] = forks as Sandbox[];
      await a!.commands.run("echo a >> log.txt");
      await b!.commands.run("echo b >> log.txt");
      assert.equal((await a!.commands.run("tail -n1 log.txt")).stdout, "a\n");
      assert.equal((await b!.commands.run("tail -n1 log.txt")).stdout, "b\n");
      await Sandbox.deleteSnapshot(snap.snapshotId);
    } finally {
      for (const id of extra) await Sandbox.kill(id);
      await sbx.kill();
    }
  });

  test("a pause keeps the process (same pid), its env vars and files; health says paused; autoResume wakes on envd traffic; killed is not running", async () => {
    const sbx = await Sandbox.create("base", { timeoutMs: 600_000, envs: { RUN_ID: "r-42" }, lifecycle: { onTimeout: "pause", autoResume: true } });
    try {
      const bg = await sbx.commands.run("sleep 100000", { background: true });
      await sbx.files.write("kept.txt", "kept");
      assert.equal(await sbx.pause(), true);
      // /health answers 502 for a paused sandbox (isRunning reads it); a probe does not wake it.
      assert.equal(await sbx.isRunning(), false);
      assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, "paused");
      // Any other envd call is traffic: the sandbox wakes for it (autoResume), state intact.
      const r = await sbx.commands.run(`echo $RUN_ID; cat kept.txt; kill -0 ${bg.pid} && echo alive`);
      assert.equal(r.stdout, "r-42\nkeptalive\n");
      assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, "running");
      assert.equal(await sbx.isRunning(), true);
    } finally {
      await sbx.kill();
    }
    assert.equal(await sbx.isRunning(), false, "killed: health is 502");
    await assert.rejects(sbx.commands.run("true"), "no command runs on a killed sandbox");
  });

  test("a background command is found again after a pause and resume, warm and cold: listed, connected to (its further output), killed", async () => {
    const sbx = await Sandbox.create("base", { timeoutMs: 600_000 });
    try {
      const bg = await sbx.commands.run("n=0; while true; do n=$((n+1)); echo tick $n; sleep 0.2; done", { background: true, timeoutMs: 0 });
      for (const mode of ["warm", "cold"] as const) {
        if (mode === "warm") assert.equal(await sbx.pause(), true);
        else assert.equal((await client(server.url)("POST", `/v1/sandboxes/${sbx.sandboxId}/hibernate`, { mode: "cold" })).status, 200);
        const again = await Sandbox.connect(sbx.sandboxId);
        const listed = (await again.commands.list()).find((p) => p.pid === bg.pid);
        assert.ok(listed, `${mode}: listed after the resume`);
        assert.equal(listed.cmd, "/bin/bash");
        assert.ok(listed.args.join(" ").includes("echo tick"), JSON.stringify(listed));
        let seen = "";
        const c = await again.commands.connect(bg.pid, { onStdout: (d) => void (seen += d) });
        await waitFor(`${mode}: output after connecting`, async () => (/tick \d+/.test(seen) ? true : undefined), 15_000, 100);
        await c.disconnect();
      }
      const again = await Sandbox.connect(sbx.sandboxId);
      assert.equal(await again.commands.kill(bg.pid), true);
      await waitFor("gone from the list once killed", async () => ((await again.commands.list()).some((p) => p.pid === bg.pid) ? undefined : true), 15_000, 200);
      const alive = await again.commands.run(`kill -0 ${bg.pid}`).catch((x: unknown) => x);
      assert.ok(alive instanceof CommandExitError, "the killed process is gone");
    } finally {
      await sbx.kill();
    }
  });
});
