// needs: memory host
/**
 * The den CLI's commands that are the control plane's (hibernate, wake, snapshot, restore,
 * fork, events, rm, keys, usage, templates, webhooks, and its errors), against a real server
 * on the in-memory host. What goes through a guest (exec, cp, shell) runs against real
 * microVMs in cli.test.ts.
 */
import { before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { api } from "@den/protocol";
import { ADMIN_KEY, cliCalls, memoryFixture } from "./helpers.js";

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
