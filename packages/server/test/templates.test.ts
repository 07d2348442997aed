// needs: one VM
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { findInstanceProcesses } from "@den/runtime";
import { client, serverFixture } from "./helpers.js";

/** A project tree, a git repo, compiled Python, and a server process left running: all captured. */
const SETUP = [
  "mkdir -p /workspace/app && cd /workspace/app && printf 'def answer():\\n    return 42\\n' > lib.py && echo 'import lib; print(lib.answer())' > main.py",
  "cd /workspace/app && git init -q && git -c user.email=a@b -c user.name=den add . && git -c user.email=a@b -c user.name=den commit -qm init",
  "cd /workspace/app && python3 -m compileall -q . && ls __pycache__ | grep -q lib",
  "cd /workspace/app && nohup python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 & for i in $(seq 100); do curl -sf http://127.0.0.1:8000/main.py >/dev/null && exit 0; sleep 0.2; done; exit 1",
];

describe("custom templates", () => {
  const fx = serverFixture();
  const api: ReturnType<typeof client> = (...args) => fx.api(...args);

  test("from a recipe: creates see its files, repo and running server; the same recipe is built once", async () => {
    const t = await api("POST", "/v1/templates", { name: "proj", setup: SETUP });
    assert.equal(t.status, 201, t.text);
    assert.equal(t.body.name, "proj");
    assert.equal(t.body.owner, "admin");
    assert.match(t.body.version, /^[0-9a-f]{12}$/);
    const [a, b] = await Promise.all([0, 1].map(async () => (await api("POST", "/v1/sandboxes", { template: "proj" })).body));
    assert.equal(a.template, "proj");
    const r = await api("POST", `/v1/sandboxes/${a.id}/exec`, {
      cmd: "cd /workspace/app && python3 main.py && git log --format=%s && curl -sf http://127.0.0.1:8000/lib.py | head -1",
    });
    assert.equal(r.body.stdout, "42\ninit\ndef answer():\n", r.text);
    // Two sandboxes from it are independent.
    await api("POST", `/v1/sandboxes/${a.id}/exec`, { cmd: "echo mine > /workspace/app/only-a" });
    const ls = await api("POST", `/v1/sandboxes/${b.id}/exec`, { cmd: "ls /workspace/app" });
    assert.equal(ls.body.stdout, "__pycache__\nlib.py\nmain.py\n", `${b.id}: ${ls.status} ${ls.text}`);
    const again = await api("POST", "/v1/templates", { name: "proj", setup: SETUP });
    assert.equal(again.status, 201, again.text);
    assert.equal(again.body.version, t.body.version, "the same recipe is the same version");
    const listed = (await api("GET", "/v1/templates")).body.templates as Array<{ name: string; owner: string | null }>;
    assert.ok(listed.some((x) => x.name === "proj" && x.owner === "admin"));
    assert.ok(listed.some((x) => x.name === "base" && x.owner === null));
  });

  test("a failing setup command is a 422 with its output; nothing is left behind", async () => {
    const before = findInstanceProcesses(fx.server.cp.hosts.first!.instance).size;
    const r = await api("POST", "/v1/templates", { name: "broken", setup: ["echo ok", "echo oops >&2; exit 3"] });
    assert.equal(r.status, 422, r.text);
    assert.equal(r.body.error.code, "setup_failed");
    assert.match(r.body.error.message, /setup command 2 exited with 3/);
    assert.equal(r.body.error.details.stderr, "oops\n");
    assert.equal(findInstanceProcesses(fx.server.cp.hosts.first!.instance).size, before, "the building VM is gone");
    assert.ok(!((await api("GET", "/v1/templates")).body.templates as Array<{ name: string }>).some((x) => x.name === "broken"));
    assert.equal((await api("POST", "/v1/sandboxes", { template: "broken" })).status, 404);
    assert.equal((await api("POST", "/v1/templates", { name: "Bad.Name" })).status, 400);
    assert.equal((await api("POST", "/v1/templates", { name: "base" })).status, 409, "the host's own templates cannot be replaced");
  });

  test("from a checkpoint; another owner can neither see, use nor take the name", async () => {
    const s = (await api("POST", "/v1/sandboxes", {})).body;
    await api("POST", `/v1/sandboxes/${s.id}/exec`, { cmd: "echo from-checkpoint > /workspace/state" });
    const cp = (await api("POST", `/v1/sandboxes/${s.id}/checkpoints`, {})).body;
    const t = await api("POST", "/v1/templates", { name: "fromcp", from_checkpoint: cp.id, setup: ["echo more >> /workspace/state"] });
    assert.equal(t.status, 201, t.text);
    const c = (await api("POST", "/v1/sandboxes", { template: "fromcp" })).body;
    assert.equal((await api("POST", `/v1/sandboxes/${c.id}/exec`, { cmd: "cat /workspace/state" })).body.stdout, "from-checkpoint\nmore\n");

    const other = client(fx.server.url, (await api("POST", "/v1/keys", { owner: "someone-else" })).body.key);
    assert.equal((await other("POST", "/v1/sandboxes", { template: "fromcp" })).status, 404);
    assert.ok(!((await other("GET", "/v1/templates")).body.templates as Array<{ name: string }>).some((x) => x.name === "fromcp"));
    assert.equal((await other("POST", "/v1/templates", { name: "fromcp" })).status, 409);
    assert.equal((await other("POST", "/v1/templates", { name: "theirs", from_checkpoint: cp.id })).status, 404, "not their checkpoint");
    assert.equal((await other("DELETE", "/v1/templates/fromcp")).status, 404, "not theirs to delete");
    assert.equal((await api("DELETE", "/v1/templates/base")).status, 403, "the host's own templates are not deleted through the API");

    // Deleted: it no longer resolves or lists, while the sandbox made from it keeps working.
    assert.equal((await api("DELETE", "/v1/templates/fromcp")).status, 204);
    assert.equal((await api("POST", "/v1/sandboxes", { template: "fromcp" })).status, 404);
    assert.ok(!((await api("GET", "/v1/templates")).body.templates as Array<{ name: string }>).some((x) => x.name === "fromcp"));
    assert.equal((await api("POST", `/v1/sandboxes/${c.id}/exec`, { cmd: "cat /workspace/state" })).body.stdout, "from-checkpoint\nmore\n");
    assert.equal((await api("POST", `/v1/sandboxes/${c.id}/hibernate`, { mode: "cold" })).status, 200);
    assert.equal((await api("POST", `/v1/sandboxes/${c.id}/exec`, { cmd: "cat /workspace/state" })).body.stdout, "from-checkpoint\nmore\n", "and wakes from the store");
  });
});
