// needs: many VMs
/**
 * The data dir is its owner's alone: another local user can read neither the database
 * (sandboxes' env vars are users' secrets) nor a sandbox's disk or memory image.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync, type ChildProcess } from "node:child_process";
import { readFileSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { client, dataDir, sandboxCalls, spawnServer, stopProcess } from "./helpers.js";

const PORT = 19253;

/** Runs `argv` as the unprivileged user `nobody`; true if it succeeded. */
const asNobody = (...argv: string[]) => spawnSync("setpriv", ["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--", ...argv], { stdio: "ignore" }).status === 0;

describe("private files", () => {
  let server: ChildProcess;
  const api = client(`http://127.0.0.1:${PORT}`);
  const { create, exec } = sandboxCalls(api);
  before(async () => {
    server = await spawnServer(PORT);
  });
  after(async () => {
    for (const s of (await api("GET", "/v1/sandboxes?limit=200")).body?.sandboxes ?? []) await api("DELETE", `/v1/sandboxes/${s.id}`);
    await stopProcess(server, "SIGTERM");
  });

  test("another local user reads neither the database, nor a sandbox's disk, nor its memory", async () => {
    const id = await create({ env: { API_TOKEN: "secret-of-the-user" } });
    assert.equal(await exec(id, "echo $API_TOKEN"), "secret-of-the-user\n");
    // The check itself can fail: nobody reads a world-readable file.
    assert.ok(asNobody("cat", "/etc/hostname"), "setpriv runs a command as nobody");
    const dir = dataDir();
    assert.equal(statSync(dir).mode & 0o077, 0, "the data dir is 0700");
    assert.equal(statSync(join(dir, "den.db")).mode & 0o077, 0, "the database is 0600");
    assert.ok(!asNobody("cat", join(dir, "den.db")), "nobody cannot read den.db");
    const files = readdirSync(join(dir, "sandboxes", id));
    assert.ok(files.includes("disk.qcow2"), files.join(", "));
    for (const f of files) assert.ok(!asNobody("cat", join(dir, "sandboxes", id, f)), `nobody cannot read its ${f}`);
    // A fork's children map their parent's memory from a file in /dev/shm: that dir is private too.
    assert.equal((await api("POST", `/v1/sandboxes/${id}/fork`, { count: 1 })).status, 201);
    const instance = readFileSync(join(dir, "instance-id"), "utf8").trim();
    const ram = `/dev/shm/den-${instance}`;
    assert.equal(statSync(ram).mode & 0o077, 0, "the memory images' dir is 0700");
    assert.ok(!asNobody("ls", ram), "nobody cannot list it");
  });
});
