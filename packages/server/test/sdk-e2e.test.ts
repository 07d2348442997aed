// needs: one VM
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Checkpoints, DenApiError, Sandbox, SandboxNotFoundError, Templates, UnauthorizedError } from "@den/sdk";
import type { RunningServer } from "../src/index.js";
import { ADMIN_KEY, testServer } from "./helpers.js";

/** The seeds' agent loop, with the SDK as the client of a real server and real microVMs. */
describe("the SDK drives an agent loop end to end", () => {
  let server: RunningServer;
  let opts: { apiUrl: string; apiKey: string };
  before(async () => {
    server = await testServer();
    opts = { apiUrl: server.url, apiKey: ADMIN_KEY };
  });
  after(async () => {
    for await (const s of Sandbox.list(opts)) await (await Sandbox.connect(s.id, opts)).destroy();
    await server?.close();
  });

  async function agentLoop(sbx: Sandbox): Promise<void> {
    await sbx.exec("git init -q /work && cd /work && git config user.email a@b && git config user.name agent && echo 0 > n.txt && git add . && git commit -qm init");
    for (let turn = 1; turn <= 10; turn++) {
      const before = await sbx.exec("cat /work/n.txt", { timeoutSeconds: 120 });
      assert.equal(before.stdout.trim(), String(turn - 1), `turn ${turn} sees the previous turn's write`);
      await sbx.filesystem.write("/work/n.txt", `${turn}\n`);
      const after = await sbx.exec(["python3", "-c", "print(int(open('/work/n.txt').read()) * 2)"]);
      assert.equal(after.stdout, `${turn * 2}\n`);
      assert.equal(after.exitCode, 0);
      if (turn === 5) {
        // The model thinks: hibernate while waiting, wake on the next turn.
        await sbx.hibernate();
        assert.equal(sbx.state, "hibernated");
        await sbx.wake();
        assert.equal(sbx.state, "running");
      }
      if (turn === 8) {
        // A longer wait: cold, so it costs nothing; the next exec wakes it.
        await sbx.hibernate({ mode: "cold" });
        assert.equal(sbx.info.hibernateMode, "cold");
        assert.ok(sbx.info.storedBytes! > 0 && sbx.info.storedBytes! < sbx.info.memoryMb * 1024 * 1024, `stored ${sbx.info.storedBytes} bytes`);
      }
    }
    const log = await sbx.exec("cd /work && git status --porcelain");
    assert.equal(log.stdout, " M n.txt\n");
  }

  test("explicit destroy in finally", async () => {
    const sbx = await Sandbox.create({ ...opts, template: "base", persistent: true, ttlSeconds: 3600, metadata: { task_id: "refactor-auth", user_id: "u_8821" } });
    try {
      assert.equal(sbx.info.metadata.task_id, "refactor-auth");
      await agentLoop(sbx);
      const chunks: string[] = [];
      const r = await sbx.exec("for i in 1 2 3; do echo line$i; sleep 0.1; done", { onStdout: (c) => chunks.push(c) });
      assert.equal(chunks.join(""), "line1\nline2\nline3\n");
      assert.equal(r.exitCode, 0);
    } finally {
      await sbx.destroy();
    }
    await assert.rejects(Sandbox.connect(sbx.id, opts).then((s) => s.exec("true")), (e: unknown) => e instanceof Error);
    assert.equal((await Sandbox.connect(sbx.id, opts)).state, "destroyed");
  });

  test("await using destroys at scope exit", async () => {
    let id = "";
    {
      await using sbx = await Sandbox.create({ ...opts, persistent: true });
      id = sbx.id;
      await agentLoop(sbx);
    }
    assert.equal((await Sandbox.connect(id, opts)).state, "destroyed");
  });

  test("an interactive terminal: resize, Ctrl-C, exit code", async () => {
    await using sbx = await Sandbox.create(opts);
    let out = "";
    const term = await sbx.pty({ rows: 24, cols: 80, onData: (d) => (out += Buffer.from(d).toString()) });
    const until = async (re: RegExp) => {
      const t0 = Date.now();
      while (!re.test(out)) {
        if (Date.now() - t0 > 20_000) throw new Error(`no ${re} in ${JSON.stringify(out.slice(-300))}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    await term.resize(33, 99);
    term.write("stty size\n");
    await until(/33 99/);
    term.write("sleep 1000\n");
    await new Promise((r) => setTimeout(r, 1000));
    term.write("\x03");
    term.write("echo back-$((40+2))\n");
    await until(/back-42/);
    term.write("exit 9\n");
    assert.deepEqual(await term.wait(), { exitCode: 9, signal: null });
  });

  test("checkpoint, fork and restore from the SDK", async () => {
    await using sbx = await Sandbox.create(opts);
    await sbx.filesystem.write("/workspace/plan.md", "step 1");
    const cp = await sbx.snapshot({ name: "planned" });
    assert.equal(cp.name, "planned");
    const [a, b] = await sbx.fork({ count: 2 });
    await using ka = a!;
    await using kb = b!;
    await ka.filesystem.write("/workspace/plan.md", "approach A");
    assert.equal(await kb.filesystem.readText("/workspace/plan.md"), "step 1");
    await using restored = await Sandbox.restore(cp, opts);
    assert.equal(await restored.filesystem.readText("/workspace/plan.md"), "step 1");
    assert.equal(restored.info.metadata.restored_from, cp.id);
    await Checkpoints.delete(cp.id, opts);
    assert.equal((await Checkpoints.list({ ...opts, sandboxId: sbx.id })).length, 0);
  });

  test("a custom template from the SDK; a failed setup is a typed error with the output", async () => {
    const t = await Templates.create({ name: "sdk-project", setup: ["mkdir -p /workspace/p && echo from-setup > /workspace/p/readme"] }, opts);
    assert.equal(t.owner, "admin");
    await using sbx = await Sandbox.create({ template: "sdk-project", ...opts });
    assert.equal((await sbx.exec("cat /workspace/p/readme")).stdout, "from-setup\n");
    await assert.rejects(Templates.create({ name: "sdk-broken", setup: ["echo nope >&2; false"] }, opts), (e: unknown) => e instanceof DenApiError && e.code === "setup_failed" && e.status === 422 && e.details?.stderr === "nope\n");
  });

  test("typed errors from the server's codes", async () => {
    await assert.rejects(Sandbox.connect("sbx_aaaaaaaaaaaaaaaa", opts), SandboxNotFoundError);
    await assert.rejects(Sandbox.create({ ...opts, apiKey: "wrong" }), UnauthorizedError);
  });
});
