// needs: many VMs
/**
 * One control plane, two host agents (`den serve --host-agent A --host-agent B`, each
 * `den host run` with a data dir and address pool of its own, one snapshot store). New
 * sandboxes are spread over both; every call on a sandbox reaches the host it is on, and
 * what derives from it (fork, warm and cold wake, a restore of its checkpoint) stays there.
 * A host that dies takes only its own sandboxes out of reach, and loses none of them: they
 * are neither marked lost nor touched, and work again once it is back.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import type { ChildProcess } from "node:child_process";
import { cp as copy, mkdtemp, rm } from "node:fs/promises";
import { join } from "node:path";
import { findInstanceProcesses } from "@den/runtime";
import { client, dataDir, sandboxCalls, spawnHostAgent, spawnServer, stopProcess as stop, waitFor } from "./helpers.js";

const PORT_A = 19381;
const PORT_B = 19382;
const CP_PORT = 19383;
const SECRET = "hosts-test-secret-0123456789";

describe("a control plane with two host agents", () => {
  let cpDir: string;
  let dirB: string;
  let env: Record<string, string>;
  let hostA: ChildProcess | undefined;
  let hostB: ChildProcess | undefined;
  let cpProc: ChildProcess | undefined;
  const api = client(`http://127.0.0.1:${CP_PORT}`);

  // A on the suite's data dir; B on a copy of its templates (versions are recipe hashes: the same build).
  const startA = () => spawnHostAgent(PORT_A, SECRET, env);
  const startB = () => spawnHostAgent(PORT_B, SECRET, { ...env, DEN_DATA_DIR: dirB, DEN_NET_POOL: "100.97.0.0/16" });

  const { exec, create } = sandboxCalls(api);

  before(async () => {
    cpDir = await mkdtemp("/tmp/den-hosts-cp-");
    dirB = await mkdtemp("/tmp/den-hosts-b-");
    await copy(join(dataDir(), "templates"), join(dirB, "templates"), { recursive: true });
    env = { DEN_STORE_DIR: join(cpDir, "store") };
    [hostA, hostB] = await Promise.all([startA(), startB()]);
    cpProc = await spawnServer(CP_PORT, {
      ...env, DEN_DATA_DIR: cpDir, DEN_HOST_SECRET: SECRET, DEN_HOST_AGENT_URL: `http://127.0.0.1:${PORT_A},http://127.0.0.1:${PORT_B}`,
    });
  });

  after(async () => {
    if (cpProc && hostA && hostB) {
      for (const s of (await api("GET", "/v1/sandboxes?limit=200")).body?.sandboxes ?? []) await api("DELETE", `/v1/sandboxes/${s.id}`);
      for (const c of (await api("GET", "/v1/checkpoints")).body?.checkpoints ?? []) await api("DELETE", `/v1/checkpoints/${c.id}`);
    }
    await stop(cpProc, "SIGTERM");
    await Promise.all([stop(hostA, "SIGTERM"), stop(hostB, "SIGTERM")]);
    await rm(cpDir, { recursive: true, force: true });
    await rm(dirB, { recursive: true, force: true });
  });

  test("sandboxes spread over both, stay on their host, and outlive the death of the other one", async () => {
    const listed = (await api("GET", "/v1/hosts")).body.hosts as Array<{ id: string; url: string; status: string; sandboxes: number }>;
    assert.deepEqual(listed.map((h) => [h.url, h.status]), [[`http://127.0.0.1:${PORT_A}`, "up"], [`http://127.0.0.1:${PORT_B}`, "up"]]);
    const [a, b] = listed.map((h) => h.id) as [string, string];
    assert.notEqual(a, b);
    const onHost = (instance: string) => [...findInstanceProcesses(instance).keys()].sort();

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
    // The host agent's CPU for the cold hibernate and wake (snapshot, compression, transfer)
    // reaches the bill across the wire: this control plane spent next to none of it.
    const usage = await api("GET", "/v1/usage?group_by=sandbox");
    const billed = (usage.body.groups as Array<{ key: string; den_cpu_seconds: number }>).find((g) => g.key === b2);
    assert.ok(billed && billed.den_cpu_seconds > 0.05, `Den's CPU for ${b2}: ${JSON.stringify(billed)}`);
    const ckpt = await api("POST", `/v1/sandboxes/${b1}/checkpoints`, {});
    assert.equal(ckpt.status, 201, ckpt.text);
    const restored = await api("POST", `/v1/checkpoints/${ckpt.body.id}/restore`, {});
    assert.equal(restored.status, 201, restored.text);
    assert.ok(onHost(b).includes(restored.body.id), "a restore of B's checkpoint is on B");
    assert.equal(await exec(restored.body.id, `cat /workspace/who; kill -0 ${pid} && echo alive`), `${b1}\nalive\n`);

    // B dies: A's sandboxes carry on; B's are out of reach (503), not lost.
    await stop(hostB, "SIGKILL");
    hostB = undefined;
    const down = ((await api("GET", "/v1/hosts")).body.hosts as typeof listed).find((h) => h.id === b)!;
    assert.equal(down.status, "unreachable");
    for (const id of atA) assert.equal(await exec(id, "cat /workspace/who"), `${id}\n`);
    const refused = await api("POST", `/v1/sandboxes/${b1}/exec`, { cmd: "true" });
    assert.equal(refused.status, 503, refused.text);
    assert.equal(refused.body.error.code, "agent_unavailable");
    const fresh = await create();
    assert.ok(onHost(a).includes(fresh), "a new sandbox goes to the host that answers");
    // Several reaper passes (every 500 ms here) go by: nothing of B's is judged while it is away.
    await new Promise((r) => setTimeout(r, 3000));
    const states = new Map(((await api("GET", "/v1/sandboxes?limit=200")).body.sandboxes as Array<{ id: string; state: string }>).map((s) => [s.id, s.state]));
    for (const id of [b1, b2, child, restored.body.id as string]) assert.equal(states.get(id), "running", `${id} while B is away`);

    // B is back (its VMs kept running): everything of it works, the process included.
    hostB = await startB();
    await waitFor("B answers the control plane", async () =>
      ((await api("GET", "/v1/hosts")).body.hosts as typeof listed).every((h) => h.status === "up") ? true : undefined);
    assert.equal(await exec(b1, `cat /workspace/who; kill -0 ${pid} && echo alive`), `${b1}\nalive\n`);
    for (const id of [b2, child]) assert.ok((await exec(id, "cat /workspace/who")).length > 0);
    assert.deepEqual(onHost(b), [b1, b2, child, restored.body.id as string].sort(), "B's QEMUs are exactly its sandboxes");
  });
});
