// needs: many VMs
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { findInstanceProcesses } from "@den/runtime";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { client, dataDir, spawnServer, waitFor } from "./helpers.js";

const PORT = 18787;
const BASE = `http://127.0.0.1:${PORT}`;
const api = client(BASE);

async function killHard(child: ChildProcess): Promise<void> {
  const exited = new Promise((r) => child.once("exit", r));
  child.kill("SIGKILL");
  await exited;
}

describe("den serve survives kill -9", () => {
  let server: ChildProcess | undefined;
  after(async () => {
    if (server && server.exitCode === null) {
      for (const s of (await api("GET", "/v1/sandboxes?limit=200")).body?.sandboxes ?? []) await api("DELETE", `/v1/sandboxes/${s.id}`);
      await killHard(server);
    }
  });

  test("a persistent sandbox's TTL fires at its deadline across a crash", async () => {
    server = await spawnServer(PORT);
    const t0 = Date.now();
    const c = await api("POST", "/v1/sandboxes", { persistent: true, ttl_seconds: 10 });
    assert.equal(c.status, 201, c.text);
    await new Promise((r) => setTimeout(r, 3000 - (Date.now() - t0)));
    await killHard(server);
    server = await spawnServer(PORT);
    const destroyed = await waitFor("TTL destroy", async () => {
      const r = await api("GET", `/v1/sandboxes/${c.body.id}`);
      return r.body.state === "destroyed" ? r.body : undefined;
    }, 30_000, 100);
    const at = Date.now() - t0;
    assert.equal(destroyed.state_reason, "ttl");
    assert.ok(at > 8_000 && at < 12_500, `destroyed ${at} ms after create`);
    const events = (await api("GET", `/v1/sandboxes/${c.body.id}/events`)).body.events;
    assert.ok(events.some((e: { type: string; reason: string }) => e.type === "destroyed" && e.reason === "ttl"));
  });

  test("three running sandboxes are adopted; a VM killed meanwhile is lost; strays are cleaned, others left alone", async (t) => {
    server ??= await spawnServer(PORT);
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const c = await api("POST", "/v1/sandboxes", { persistent: true });
      assert.equal(c.status, 201, c.text);
      ids.push(c.body.id);
      await api("POST", `/v1/sandboxes/${c.body.id}/exec`, { cmd: "nohup sh -c 'while true; do date +%s%N > /tmp/tick; sleep 0.2; done' >/dev/null 2>&1 &" });
    }
    const victim = await api("POST", "/v1/sandboxes", { persistent: true });
    await killHard(server);
    server = undefined;

    const instance = readFileSync(`${dataDir()}/instance-id`, "utf8").trim();
    const procs = findInstanceProcesses(instance);
    process.kill(procs.get(victim.body.id)!, "SIGKILL");
    const stray = spawn("qemu-system-x86_64", ["-M", "none", "-display", "none", "-nodefaults"], {
      env: { ...process.env, DEN_INSTANCE: instance, DEN_SANDBOX: "sbx_strayqemuprocess" }, stdio: "ignore",
    });
    const foreign = spawn("qemu-system-x86_64", ["-M", "none", "-display", "none", "-nodefaults"], { stdio: "ignore" });
    const strayExit = new Promise((r) => stray.once("exit", r));
    // A failed check must not leave them running: this file's process would wait on them for ever.
    t.after(() => {
      for (const q of [stray, foreign]) if (q.exitCode === null && q.signalCode === null) q.kill("SIGKILL");
    });
    await new Promise((r) => setTimeout(r, 500));

    server = await spawnServer(PORT);
    for (const id of ids) {
      // Still ticking (within 10 s: three TCG guests and a restarting Den share two cores).
      const r = await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "a=$(cat /tmp/tick); for i in $(seq 50); do sleep 0.2; [ \"$(cat /tmp/tick)\" != \"$a\" ] && echo ticking && exit 0; done; exit 1" });
      assert.equal(r.body.stdout, "ticking\n", `sandbox ${id} adopted with its background process: ${r.text}`);
    }
    const lost = await api("GET", `/v1/sandboxes/${victim.body.id}`);
    assert.equal(lost.body.state, "lost");
    assert.equal(lost.body.state_reason, "host_lost");
    await strayExit;
    assert.equal(stray.signalCode, "SIGKILL");
    assert.equal(foreign.exitCode, null);
    assert.equal(foreign.signalCode, null);
    foreign.kill("SIGKILL");
  });
});

describe("a clean stop", () => {
  test("SIGTERM cold-hibernates running sandboxes; the next start wakes them with their state", async () => {
    let server = await spawnServer(PORT);
    const id = (await api("POST", "/v1/sandboxes", { persistent: true })).body.id;
    const pid = (await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "echo kept > /workspace/k; nohup sleep 1000 >/dev/null 2>&1 & echo $!" })).body.stdout.trim();
    const exited = new Promise((r) => server.once("exit", r));
    server.kill("SIGTERM");
    await exited;
    assert.equal(server.exitCode, 0);
    const instance = readFileSync(`${dataDir()}/instance-id`, "utf8").trim();
    assert.equal(findInstanceProcesses(instance).has(id), false, "no VM outlives a clean stop");
    assert.deepEqual([...findInstanceProcesses(instance, { pooled: true }).keys()].filter((t) => t.startsWith("vm_")), [], "nor a pooled QEMU");
    server = await spawnServer(PORT);
    try {
      const row = (await api("GET", `/v1/sandboxes/${id}`)).body;
      assert.equal(row.state, "hibernated");
      assert.equal(row.hibernate_mode, "cold");
      const r = await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: `cat /workspace/k; kill -0 ${pid} && echo alive` });
      assert.equal(r.body.stdout, "kept\nalive\n", r.text);
      await api("DELETE", `/v1/sandboxes/${id}`);
    } finally {
      await killHard(server);
    }
  });
});

describe("a crash in the middle of a cold-hibernate upload", () => {
  test("after the restart the sandbox runs with its state; the half upload is never taken for a snapshot and is collected", async () => {
    const markerDir = mkdtempSync(join(tmpdir(), "den-fault-"));
    const marker = join(markerDir, "hit");
    let server = await spawnServer(PORT, { DEN_FAULT_POINT: "snapshot-upload-mid", DEN_FAULT_MARKER: marker });
    try {
      const id = (await api("POST", "/v1/sandboxes", { persistent: true })).body.id;
      const pid = (await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "echo kept > /workspace/k; nohup sleep 1000 >/dev/null 2>&1 & echo $!" })).body.stdout.trim();
      // Stored snapshots (the store nests them under the deployment's id) that hold objects, as paths.
      const root = join(dataDir(), "store");
      const nonEmpty = () => (existsSync(root) ? readdirSync(root) : []).filter((d) => d.startsWith("dep_") && existsSync(join(root, d, "snapshots")))
        .flatMap((d) => readdirSync(join(root, d, "snapshots")).map((snap) => join(root, d, "snapshots", snap)))
        .filter((dir) => readdirSync(dir).length > 0);
      const earlier = new Set(nonEmpty());
      const exited = new Promise((r) => server.once("exit", r));
      const h = await api("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "cold" }).catch((e: Error) => ({ status: 0, text: e.message }));
      await exited;
      assert.equal(server.signalCode, "SIGKILL", `the server died at the fault point (hibernate answered ${h.status})`);
      assert.equal(readFileSync(marker, "utf8").trim(), "snapshot-upload-mid", "the armed fault point was hit");
      // Half an upload: objects, but no manifest, so nothing that looks like a snapshot.
      const partial = nonEmpty().filter((snap) => !earlier.has(snap));
      assert.equal(partial.length, 1, "one half-uploaded snapshot");
      assert.equal(existsSync(join(partial[0]!, "store-manifest.json")), false);

      server = await spawnServer(PORT);
      const row = (await api("GET", `/v1/sandboxes/${id}`)).body;
      assert.ok(row.state === "running" || (row.state === "hibernated" && row.hibernate_mode === "cold"), `running or hibernated, never neither: ${row.state}`);
      const r = await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: `cat /workspace/k; kill -0 ${pid} && echo alive` });
      assert.equal(r.body.stdout, "kept\nalive\n", r.text);
      await waitFor("the half upload collected", async () => (existsSync(partial[0]!) && readdirSync(partial[0]!).length > 0 ? undefined : true), 10_000);
      // And the next cold hibernate goes through.
      assert.equal((await api("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "cold" })).body.hibernate_mode, "cold");
      assert.equal((await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "cat /workspace/k" })).body.stdout, "kept\n");
      await api("DELETE", `/v1/sandboxes/${id}`);
    } finally {
      if (server.exitCode === null && server.signalCode === null) await killHard(server);
      rmSync(markerDir, { recursive: true, force: true });
    }
  });
});
