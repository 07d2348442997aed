// needs: memory host
/**
 * The den CLI's commands that are the control plane's (hibernate, wake, snapshot, restore,
 * fork, events, rm, keys, usage, templates and their builds, webhooks, and its errors), against a real server
 * on the in-memory host. What goes through a guest (exec, cp, shell) runs against real
 * microVMs in cli.test.ts.
 */
import { spawn } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { api } from "@den/protocol";
import { ADMIN_KEY, CLI, cliCalls, memoryFixture, waitFor } from "./helpers.js";

describe("the den CLI's control-plane commands", () => {
  const f = memoryFixture();
  const { run, ok, json } = cliCalls(() => f.server.url);

  let id = "";
  before(async () => {
    id = (await json(["create", "--template", "base", "--ttl", "1800", "--persistent"])).id;
  });

  test("hibernate warm and cold, wake, snapshot, restore, fork, events, rm", async () => {
    await ok(["exec", id, "--", "sh", "-c", "mkdir -p /work && echo state > /work/state.txt"]);
    assert.equal((await json(["hibernate", id])).state, "hibernated");
    const cold = await json(["hibernate", id, "--cold"]);
    assert.equal(cold.hibernateMode, "cold");
    assert.equal((await json(["wake", id])).state, "running");
    assert.equal((await ok(["exec", id, "--", "cat", "/work/state.txt"])).out, "state\n");

    const cp = await json(["snapshot", id, "--name", "cli"]);
    assert.match(cp.id, /^snap_/);
    assert.equal(cp.name, "cli");
    const restored = await json(["restore", cp.id, "--meta", "from=cli"]);
    assert.equal(restored.metadata.from, "cli");
    assert.equal((await ok(["exec", restored.id, "--", "cat", "/work/state.txt"])).out, "state\n");
    const kids = await json(["fork", id, "-n", "2"]);
    assert.equal(kids.length, 2);
    for (const k of kids) assert.equal(k.metadata.forked_from, id);
    const plainKids = (await ok(["fork", id])).out.trim().split("\n");
    assert.equal(plainKids.length, 1);

    const events = (await ok(["events", id, "--json"])).out.trim().split("\n").map((l) => JSON.parse(l) as { type: string; reason: string | null });
    for (const t of ["creating", "running", "hibernated", "checkpoint", "forked"]) assert.ok(events.some((e) => e.type === t), `event ${t}`);
    // --follow ends when the sandbox is destroyed.
    const follow = run(["events", restored.id, "--follow"]);
    await new Promise((r) => setTimeout(r, 1500));
    const rm = await json(["rm", restored.id]);
    assert.equal(rm.state, "destroyed");
    const followed = await follow;
    assert.equal(followed.code, 0);
    assert.match(followed.out, /destroyed \(user\)/);
    assert.equal((await json(["rm", restored.id])).state, "destroyed", "rm is idempotent");
    await ok(["rm", ...kids.map((k: { id: string }) => k.id), ...plainKids]);
    await fetch(`${f.server.url}/v1/checkpoints/${cp.id}`, { method: "DELETE", headers: { authorization: `Bearer ${ADMIN_KEY}` } });
  });

  test("keys, usage, and errors: one line, the shared code, an exit code scripts can rely on", async () => {
    const key = await json(["keys", "create", "--owner", "cli-owner"]);
    assert.equal(key.owner, "cli-owner");
    assert.match(key.key, /\S{20,}/);
    assert.ok((await json(["keys", "ls"])).some((k: { id: string }) => k.id === key.id));
    const theirs = await run(["ls", "--json"], { key: key.key });
    assert.equal(theirs.code, 0);
    assert.deepEqual(JSON.parse(theirs.out), [], "another owner sees none of ours");
    const foreign = await run(["exec", id, "--", "true"], { key: key.key });
    assert.equal(foreign.code, 1);
    assert.match(foreign.err, /^den: sandbox_not_found: /);
    assert.equal((await json(["keys", "revoke", key.id])).revokedAt !== null, true);
    const revoked = await run(["ls"], { key: key.key });
    assert.equal(revoked.code, 1);
    assert.equal(revoked.err.trim().split("\n").length, 1, "one line, no stack trace");
    assert.match(revoked.err, /^den: unauthorized: /);
    // --e2b: the e2b_<hex> form E2B's Python client insists on, a key like any other.
    const e2bKey = await json(["keys", "create", "--owner", "cli-owner", "--e2b"]);
    assert.match(e2bKey.key, /^e2b_[0-9a-f]{48}$/);
    const listed = await run(["ls", "--json"], { key: e2bKey.key });
    assert.equal(listed.code, 0, listed.err);
    assert.deepEqual(JSON.parse(listed.out), []);
    const usage = await json(["usage"]);
    assert.ok(Array.isArray(usage.groups));
    // Templates through the server: list, build one from base plus a setup command, use it.
    const templates = await json(["template", "ls"]);
    assert.ok(templates.some((t: { name: string; current: boolean }) => t.name === "base" && t.current));
    const built = await json(["template", "create", "cli-tpl", "--run", "echo from-setup > /etc/cli-tpl"]);
    assert.equal(built.name, "cli-tpl");
    const fromTpl = (await ok(["create", "--template", "cli-tpl"])).out.trim();
    assert.equal((await ok(["exec", fromTpl, "--", "cat", "/etc/cli-tpl"])).out, "from-setup\n");
    await ok(["rm", fromTpl]);
    await fetch(`${f.server.url}/v1/templates/cli-tpl`, { method: "DELETE", headers: { authorization: `Bearer ${ADMIN_KEY}` } });
    const bad = await run(["create", "--meta", "novalue"]);
    assert.equal(bad.code, 1);
    assert.match(bad.err, /^den: --meta wants key=value/);
    const unknown = await run(["frobnicate"]);
    assert.notEqual(unknown.code, 0);
  });

  test("template create streams its build's log and ends with name@version; template builds, logs, cancel", async () => {
    // A build that takes a while: its first lines are on stdout before it ends.
    const c = spawn(process.execPath, [CLI, "template", "create", "cli-stream", "--run", "echo one > /etc/one", "--run", "sleep 3", "--run", "echo two"], {
      env: { ...process.env, DEN_API_URL: f.server.url, DEN_API_KEY: ADMIN_KEY },
    });
    let out = "";
    let err = "";
    let firstAt = 0;
    c.stdout.on("data", (d: Buffer) => {
      out += d;
      if (!firstAt && out.includes("setup: echo one")) firstAt = Date.now();
    });
    c.stderr.on("data", (d: Buffer) => (err += d));
    const code = await new Promise<number | null>((r) => c.on("close", r));
    assert.equal(code, 0, err);
    assert.ok(firstAt > 0 && Date.now() - firstAt > 1500, `the log streamed: its first line came ${Date.now() - firstAt} ms before the end`);
    const lines = out.trimEnd().split("\n");
    const last = /^cli-stream@([0-9a-f]+) \(\d+\.\d s\)$/.exec(lines.at(-1)!);
    assert.ok(last, `ends with name@version: ${out}`);
    const version = last[1]!;
    const log = lines.slice(0, -1);
    assert.deepEqual(log.filter((l) => l.startsWith("setup: ")), ["setup: echo one > /etc/one", "setup: sleep 3", "setup: echo two"]);
    assert.ok(log.includes(`template cli-stream@${version}`), out);
    const buildId = /^build (\S+) of cli-stream started/m.exec(err)?.[1];
    assert.ok(buildId, err);

    // The builds: as JSON and as a table; one template's or all.
    const builds = await json(["template", "builds", "cli-stream"]);
    assert.equal(builds.length, 1);
    assert.equal(builds[0].id, buildId);
    assert.equal(builds[0].state, "ready");
    assert.equal(builds[0].version, version);
    assert.equal(builds[0].error, null);
    assert.ok((await json(["template", "builds"])).some((b: { id: string }) => b.id === buildId));
    const table = await ok(["template", "builds", "cli-stream", "--limit", "5"]);
    assert.match(table.out, /^ID\s+NAME\s+STATE\s+VERSION\s+SOURCE\s+CREATED\s+TOOK\s+ERROR\n/);
    assert.match(table.out, new RegExp(`${buildId}\\s+cli-stream\\s+ready\\s+${version}\\s+`));

    // Its log again, after the fact: the same lines; from an offset; as JSON lines.
    assert.equal((await ok(["template", "logs", buildId])).out, log.join("\n") + "\n");
    assert.equal((await ok(["template", "logs", buildId, "--offset", "1"])).out, log.slice(1).join("\n") + "\n");
    const jsonLines = (await ok(["template", "logs", buildId, "--json"])).out.trim().split("\n").map((l) => JSON.parse(l) as { seq: number; level: string; message: string });
    assert.deepEqual(jsonLines.map((l) => l.seq), log.map((_, i) => i));
    assert.deepEqual(jsonLines.map((l) => l.message), log);
    assert.equal((await ok(["template", "logs", buildId, "--follow"])).out, log.join("\n") + "\n", "--follow of an ended build: its log, then the end");

    // --follow of a running build: the lines as they come, until it ends.
    // (Found once it exists: on a loaded machine each CLI call takes a second, so the build
    // gets long enough to be running when it is followed, and following an ended one ends the same.)
    const slow = run(["template", "create", "cli-follow", "--run", "sleep 6", "--run", "echo done"]);
    const running = await waitFor("the build to start", async () => {
      const list = (await json(["template", "builds", "cli-follow"])) as Array<{ id: string; state: string }>;
      return list[0];
    }, 60_000);
    const followed = await ok(["template", "logs", running.id, "--follow"]);
    assert.match(followed.out, /setup: echo done\ntemplate cli-follow@[0-9a-f]+\n$/);
    const slowDone = await slow;
    assert.equal(slowDone.code, 0, slowDone.err);

    // A failing build: its log, then the error on one line and exit 1.
    const bad = await run(["template", "create", "cli-bad", "--run", "echo nope >&2; false"]);
    assert.equal(bad.code, 1);
    assert.match(bad.out, /^setup: echo nope >&2; false\nerror: build failed: /m);
    assert.match(bad.err.trimEnd().split("\n").at(-1)!, /^den: setup_failed: setup command 1 /);
    assert.doesNotMatch(bad.out, /^cli-bad@/m);
    assert.equal((await json(["template", "builds", "cli-bad"]))[0].error.code, "setup_failed");

    // Cancel: a build that ended is left as it is; an unknown one is not_found. Usage mistakes are one line.
    assert.equal((await ok(["template", "cancel", buildId])).out, `${buildId} ready\n`);
    const unknown = await run(["template", "cancel", "op_nope"]);
    assert.equal(unknown.code, 1);
    assert.match(unknown.err, /^den: \w*not_found: /);
    assert.match((await run(["template", "logs", "op_nope"])).err, /^den: \w*not_found: /);
    const misuse = await run(["template", "create", "x", "--build-arg", "A=1"]);
    assert.equal(misuse.code, 1);
    assert.match(misuse.err, /^den: --context and --build-arg go with --dockerfile\n$/);
    assert.match((await run(["template", "create", "x", "--dockerfile", "/nonexistent/Dockerfile"])).err, /^den: cannot read the Dockerfile "\/nonexistent\/Dockerfile": ENOENT\n$/);

    // A Dockerfile with a context directory: the directory is tarred, uploaded by its digest (the
    // server checks it), and named in the build (the in-memory host builds a FROM-only Dockerfile).
    const dir = await mkdtemp(join(tmpdir(), "den-cli-ctx-"));
    try {
      await mkdir(join(dir, "app", "src"), { recursive: true });
      await writeFile(join(dir, "app", "src", "main.py"), "print(42)\n".repeat(1000));
      await writeFile(join(dir, "Dockerfile"), "ARG V=1\nFROM base\n");
      const df = await run(["template", "create", "cli-df", "--dockerfile", join(dir, "Dockerfile"), "--context", join(dir, "app"), "--build-arg", "V=2"]);
      assert.equal(df.code, 0, df.err);
      assert.match(df.err, /^context .*app: \d+(\.\d)? KiB uploaded \(sha256:[0-9a-f]{12}\)$/m);
      assert.match(df.out, /\ncli-df@[0-9a-f]+ \(\d+\.\d s\)\n$/);
      const [dfBuild] = await json(["template", "builds", "cli-df"]);
      assert.equal(dfBuild.source.kind, "dockerfile");
      assert.equal(dfBuild.source.from, "base");
      assert.match(dfBuild.source.context, /^sha256:[0-9a-f]{64}$/);
      // A Dockerfile the server refuses: its line, on one line, before any build.
      await writeFile(join(dir, "Dockerfile"), "FROM base\nFRUM x\n");
      const refused = await run(["template", "create", "cli-df", "--dockerfile", join(dir, "Dockerfile")]);
      assert.equal(refused.code, 1);
      assert.match(refused.err, /^den: invalid_argument: .*line 2/m);
      assert.equal(refused.err.trim().split("\n").length, 1, refused.err);
      await writeFile(join(dir, "Dockerfile"), "FROM base\nCOPY . /app\n");
      assert.equal((await run(["template", "create", "cli-df", "--dockerfile", join(dir, "Dockerfile")])).err, "den: Dockerfile line 2: COPY needs a build context: give --context DIR\n");
      // An image archive: uploaded by its digest, then built from (not on the in-memory host: its refusal is the build's error).
      await writeFile(join(dir, "image.tar"), Buffer.alloc(20_000, 7));
      const archive = await run(["template", "create", "cli-archive", "--from-archive", join(dir, "image.tar")]);
      assert.match(archive.err, /^archive .*image\.tar: 20 KiB uploaded \(sha256:[0-9a-f]{12}\)$/m);
      assert.equal(archive.code, 1, archive.err);
      assert.match(archive.err.trimEnd().split("\n").at(-1)!, /^den: invalid_argument: the in-memory host does not build templates from images/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }

    for (const name of ["cli-stream", "cli-follow", "cli-df"]) await fetch(`${f.server.url}/v1/templates/${name}`, { method: "DELETE", headers: { authorization: `Bearer ${ADMIN_KEY}` } });
  });

  test("webhook add, ls, deliveries, rm", async () => {
    // A public address (TEST-NET-2) that nothing here sends an event to: this owner's
    // sandboxes are all gone by now and the webhook is deleted before this test ends.
    const url = "http://198.51.100.7:9/hook";
    const added = await json(["webhook", "add", url, "--event", "sandbox.created", "--description", "cli test"]);
    assert.match(added.id, /^wh_[a-z2-7]{16}$/);
    assert.equal(added.url, url);
    assert.deepEqual(added.events, ["sandbox.created"]);
    assert.equal(added.description, "cli test");
    assert.match(added.secret, /^whsec_[A-Za-z0-9+/=]{20,}$/, "the signing secret, in the Standard Webhooks format");
    // Without --json: the secret alone on stdout, the once-only note on stderr.
    const plain = await ok(["webhook", "add", url]);
    const secret = plain.out.trim();
    assert.match(secret, /^whsec_\S+$/);
    assert.match(plain.err, /^webhook (wh_[a-z2-7]{16}) for .*not shown again\n$/);
    const plainId = /^webhook (wh_[a-z2-7]{16})/.exec(plain.err)![1]!;

    const listed = await json(["webhook", "ls"]);
    const mine = listed.find((w: { id: string }) => w.id === added.id);
    assert.ok(mine, JSON.stringify(listed));
    assert.equal("secret" in mine, false, "the secret is never listed");
    assert.deepEqual(mine.events, ["sandbox.created"]);
    assert.ok(listed.some((w: { id: string; events: string[] }) => w.id === plainId && w.events.length === api.WebhookEventType.options.length), "no --event: every event type");
    const table = await ok(["webhook", "ls"]);
    assert.match(table.out, /^ID\s+URL\s+EVENTS\s+CREATED\n/);
    assert.match(table.out, new RegExp(`${added.id}\\s+${url.replace(/[./]/g, "\\$&")}\\s+sandbox\\.created\\s+\\d{4}-`));
    assert.match(table.out, new RegExp(`${plainId}\\s+\\S+\\s+all\\s`));
    assert.doesNotMatch(table.out, /whsec_/);

    assert.deepEqual(await json(["webhook", "deliveries", added.id]), [], "nothing happened since it was added");
    assert.deepEqual(await json(["webhook", "deliveries", added.id, "--status", "failed", "--limit", "5"]), []);
    const empty = await ok(["webhook", "deliveries", added.id]);
    assert.equal(empty.out, "ID  TYPE  SANDBOX  STATUS  ATTEMPTS  HTTP  CREATED  ERROR\n", "an empty table: its header alone");
    const badStatus = await run(["webhook", "deliveries", added.id, "--status", "lost"]);
    assert.equal(badStatus.code, 1);
    assert.match(badStatus.err, /^den: --status wants one of pending, delivered, failed/);
    const badEvent = await run(["webhook", "add", url, "--event", "sandbox.exploded"]);
    assert.equal(badEvent.code, 1);
    assert.match(badEvent.err, /^den: --event wants one of sandbox\.created, /);

    assert.equal((await ok(["webhook", "rm", added.id])).out, `${added.id} deleted\n`);
    await ok(["webhook", "rm", plainId]);
    const after = await json(["webhook", "ls"]);
    assert.ok(!after.some((w: { id: string }) => w.id === added.id || w.id === plainId), JSON.stringify(after));
    const missing = await run(["webhook", "rm", "wh_aaaaaaaaaaaaaaaa"]);
    assert.equal(missing.code, 1);
    assert.equal(missing.err.trim().split("\n").length, 1, "one line, no stack trace");
    assert.match(missing.err, /^den: \w*not_found: /);
    const gone = await run(["webhook", "deliveries", added.id]);
    assert.equal(gone.code, 1);
    assert.match(gone.err, /^den: \w*not_found: /);
  });
});
