// needs: memory host
/**
 * Placement over two host agents, on the in-memory host: one control plane and two
 * MemoryHostAgents behind their own /host/v1 servers (`DEN_HOST_AGENT_URL=A,B`, one snapshot
 * store). New sandboxes are spread over both; every call on a sandbox reaches the host it is
 * on, and what derives from it (fork, warm and cold wake, a restore of its checkpoint) stays
 * there. A host agent that goes away takes only its own sandboxes out of reach, and loses
 * none of them: they are neither marked lost nor touched, and work again once it is back.
 * (A control plane and a real host agent as two processes: split.test; registered hosts on
 * real VMs: fleet/.)
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { MemoryHostAgent, startHostServer, type RunningHostServer } from "@den/host-agent";
import { LocalDirStore } from "@den/store";
import { loadConfig, startServer, type RunningServer } from "../src/index.js";
import { issueMachine } from "@den/pki";
import { ADMIN_KEY, client, fleetEnv, freePort, sandboxCalls, testCa, waitFor } from "./helpers.js";

/** A host's /host/v1 over mutual TLS, its certificate from the test CA naming its instance. */
const serve = async (h: MemoryHostAgent, port = 0) => startHostServer(h, { tls: await issueMachine((await testCa()).ca, { kind: "host", id: h.instance }, { ttlHours: 1 }), port, host: "127.0.0.1" });
const portOf = (s: RunningHostServer) => Number(new URL(s.url).port);

describe("a control plane with two host agents", () => {
  const dir = mkdtempSync(join(tmpdir(), "den-placement-"));
  const store = new LocalDirStore(join(dir, "store"));
  let hostA: MemoryHostAgent;
  let hostB: MemoryHostAgent;
  let servedA: RunningHostServer | undefined;
  let servedB: RunningHostServer | undefined;
  let portA = 0;
  let portB = 0;
  let server: RunningServer;
  let api: ReturnType<typeof client>;
  const hostOf = (instance: string) => (instance === hostA.instance ? hostA : hostB);
  const { exec, create } = sandboxCalls((...args) => api(...args));

  before(async () => {
    [hostA, hostB] = await Promise.all([MemoryHostAgent.open({ store }), MemoryHostAgent.open({ store })]);
    servedA = await serve(hostA);
    servedB = await serve(hostB);
    [portA, portB] = [portOf(servedA), portOf(servedB)];
    server = await startServer(loadConfig({ port: "0", dataDir: dir }, {
      DEN_API_KEY: ADMIN_KEY, DEN_REAPER_INTERVAL_MS: "100", DEN_ENVD_PORT: "0", DEN_STORE_DIR: join(dir, "store"), ...(await fleetEnv(await freePort())),
      DEN_HOST_AGENT_URL: `https://127.0.0.1:${portA},https://127.0.0.1:${portB}`,
      // The suite's Postgres pass: the shared database (no other file there uses it).
      ...(process.env.DEN_DATABASE_URL ? { DEN_DATABASE_URL: process.env.DEN_DATABASE_URL } : {}),
    }));
    api = client(server.url);
  });

  after(async () => {
    await server?.close();
    await servedA?.close();
    await servedB?.close();
    hostA?.close();
    hostB?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test("sandboxes spread over both, stay on their host, and outlive the death of the other one", async () => {
    const listed = (await api("GET", "/v1/hosts")).body.hosts as Array<{ id: string; url: string; status: string; sandboxes: number }>;
    assert.deepEqual(listed.map((h) => [h.url, h.status]), [[`https://127.0.0.1:${portA}`, "up"], [`https://127.0.0.1:${portB}`, "up"]]);
    const [a, b] = listed.map((h) => h.id) as [string, string];
    assert.notEqual(a, b);
    const onHost = (instance: string) => hostOf(instance).sandboxes().filter((v) => v.state === "running" || v.state === "paused").map((v) => v.id).sort();

    // Placement: the freer host each time, so four sandboxes land two and two.
    const ids = [await create(), await create(), await create(), await create()];
    const atA = ids.filter((id) => onHost(a).includes(id));
    const atB = ids.filter((id) => onHost(b).includes(id));
    assert.equal(atA.length, 2, `two on A: ${JSON.stringify({ atA, atB })}`);
    assert.equal(atB.length, 2, `two on B: ${JSON.stringify({ atA, atB })}`);
    const counts = new Map(((await api("GET", "/v1/hosts")).body.hosts as typeof listed).map((h) => [h.id, h.sandboxes]));
    assert.deepEqual([counts.get(a), counts.get(b)], [2, 2]);

    // The data plane reaches the right host: each sandbox sees its own file.
    for (const id of ids) await exec(id, `echo ${id} > /workspace/who`);
    for (const id of ids) assert.equal(await exec(id, "cat /workspace/who"), `${id}\n`);

    // What derives from a sandbox on B stays on B.
    const [b1, b2] = atB as [string, string];
    const pid = (await exec(b1, "nohup sleep 100000 >/dev/null 2>&1 & echo $!")).trim();
    const fork = await api("POST", `/v1/sandboxes/${b1}/fork`, { count: 1 });
    assert.equal(fork.status, 201, fork.text);
    const child = fork.body.sandboxes[0].id as string;
    assert.ok(onHost(b).includes(child), "the fork child is on its parent's host");
    assert.equal(await exec(child, "cat /workspace/who"), `${b1}\n`);
    assert.equal((await api("POST", `/v1/sandboxes/${b2}/hibernate`, { mode: "warm" })).body.hibernate_mode, "warm");
    assert.equal(await exec(b2, "cat /workspace/who"), `${b2}\n`, "a warm wake on B");
    assert.ok(onHost(b).includes(b2));
    const cold = await api("POST", `/v1/sandboxes/${b2}/hibernate`, { mode: "cold" });
    assert.equal(cold.body.hibernate_mode, "cold", cold.text);
    assert.ok(!onHost(b).includes(b2), "cold: no VM left");
    assert.equal(await exec(b2, "cat /workspace/who"), `${b2}\n`, "a cold wake");
    assert.ok(onHost(b).includes(b2), "woken on B again");
    const ckpt = await api("POST", `/v1/sandboxes/${b1}/checkpoints`, {});
    assert.equal(ckpt.status, 201, ckpt.text);
    const restored = await api("POST", `/v1/checkpoints/${ckpt.body.id}/restore`, {});
    assert.equal(restored.status, 201, restored.text);
    assert.ok(onHost(b).includes(restored.body.id), "a restore of B's checkpoint is on B");
    assert.equal(await exec(restored.body.id, `cat /workspace/who; kill -0 ${pid} && echo alive`), `${b1}\nalive\n`);

    // B dies: A's sandboxes carry on; B's are out of reach (503), not lost.
    await servedB!.close();
    servedB = undefined;
    const down = ((await api("GET", "/v1/hosts")).body.hosts as typeof listed).find((h) => h.id === b)!;
    assert.equal(down.status, "unreachable");
    for (const id of atA) assert.equal(await exec(id, "cat /workspace/who"), `${id}\n`);
    const refused = await api("POST", `/v1/sandboxes/${b1}/exec`, { cmd: "true" });
    assert.equal(refused.status, 503, refused.text);
    assert.equal(refused.body.error.code, "agent_unavailable");
    const fresh = await create();
    assert.ok(onHost(a).includes(fresh), "a new sandbox goes to the host that answers");
    // Several reaper passes (every 100 ms here) go by: nothing of B's is judged while it is away.
    await new Promise((r) => setTimeout(r, 3000));
    const states = new Map(((await api("GET", "/v1/sandboxes?limit=200")).body.sandboxes as Array<{ id: string; state: string }>).map((s) => [s.id, s.state]));
    for (const id of [b1, b2, child, restored.body.id as string]) assert.equal(states.get(id), "running", `${id} while B is away`);

    // B is back (its VMs kept running): everything of it works, the process included.
    servedB = await serve(hostB, portB);
    await waitFor("B answers the control plane", async () =>
      ((await api("GET", "/v1/hosts")).body.hosts as typeof listed).every((h) => h.status === "up") ? true : undefined);
    assert.equal(await exec(b1, `cat /workspace/who; kill -0 ${pid} && echo alive`), `${b1}\nalive\n`);
    for (const id of [b2, child]) assert.ok((await exec(id, "cat /workspace/who")).length > 0);
    assert.deepEqual(onHost(b), [b1, b2, child, restored.body.id as string].sort(), "B's QEMUs are exactly its sandboxes");
  });
});
