// needs: many VMs
/**
 * The control plane and the host agent as two processes: `den host run` (the VMs, on the
 * suite's data dir, where the base template is) and `den serve --host-agent` (its SQLite
 * in a data dir of its own; the snapshot store a directory both open). Sandboxes in every
 * state survive a kill -9 of the host agent alone (the restarted one adopts its VMs) and of
 * the control plane alone; afterwards the host's QEMUs are exactly the sandboxes holding a VM.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import type { ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { join } from "node:path";
import { findInstanceProcesses } from "@den/runtime";
import { client, exited, fleetEnv, freePort, spawnHostAgent, spawnServer, stopProcess as stop, waitFor } from "./helpers.js";

const HOST_PORT = 19371;
const CP_PORT = 19372;

describe("control plane and host agent as separate processes", () => {
  let cpDir: string;
  let env: Record<string, string>;
  let hostProc: ChildProcess | undefined;
  let cpProc: ChildProcess | undefined;
  const api = client(`http://127.0.0.1:${CP_PORT}`);

  const startHost = () => spawnHostAgent(HOST_PORT, env);

  // A host listed by URL, over mutual TLS: the control plane issues its own certificate from the test CA.
  let cpTls: Record<string, string>;
  const startCp = () => spawnServer(CP_PORT, { ...env, ...cpTls, DEN_DATA_DIR: cpDir, DEN_HOST_AGENT_URL: `https://127.0.0.1:${HOST_PORT}` });

  const exec = async (id: string, cmd: string) => {
    const r = await api("POST", `/v1/sandboxes/${id}/exec`, { cmd });
    assert.equal(r.status, 200, r.text);
    return r.body.stdout as string;
  };

  before(async () => {
    cpDir = await mkdtemp("/tmp/den-split-cp-");
    // One store both sides open: hosts write to it, the control plane's garbage collector deletes.
    env = { DEN_STORE_DIR: join(cpDir, "store"), DEN_LOG_LEVEL: "warn" };
    cpTls = await fleetEnv(await freePort());
    hostProc = await startHost();
    cpProc = await startCp();
  });

  after(async () => {
    if (cpProc && !exited(cpProc)) {
      for (const s of (await api("GET", "/v1/sandboxes?limit=200")).body?.sandboxes ?? []) await api("DELETE", `/v1/sandboxes/${s.id}`);
      for (const c of (await api("GET", "/v1/checkpoints")).body?.checkpoints ?? []) await api("DELETE", `/v1/checkpoints/${c.id}`);
    }
    await stop(cpProc, "SIGTERM");
    await stop(hostProc, "SIGTERM");
    await rm(cpDir, { recursive: true, force: true });
  });

  test("sandboxes in every state survive a kill -9 of the host agent, then of the control plane", async () => {
    const hosts = (await api("GET", "/v1/hosts")).body.hosts;
    assert.deepEqual(hosts.map((h: { url: string }) => h.url), [`https://127.0.0.1:${HOST_PORT}`]);
    const instance = hosts[0].id as string;

    const create = async () => {
      const r = await api("POST", "/v1/sandboxes", { persistent: true });
      assert.equal(r.status, 201, r.text);
      return r.body.id as string;
    };
    const running = await create();
    const pid = (await exec(running, "echo kept > /workspace/f; nohup sleep 100000 >/dev/null 2>&1 & echo $!")).trim();
    const warm = await create();
    await exec(warm, "echo warm > /workspace/f");
    assert.equal((await api("POST", `/v1/sandboxes/${warm}/hibernate`, {})).body.hibernate_mode, "warm");
    const cold = await create();
    await exec(cold, "echo cold > /workspace/f");
    const h = await api("POST", `/v1/sandboxes/${cold}/hibernate`, { mode: "cold" });
    assert.equal(h.status, 200, h.text);
    assert.equal(h.body.hibernate_mode, "cold");
    const cp = await api("POST", `/v1/sandboxes/${running}/checkpoints`, { name: "split" });
    assert.equal(cp.status, 201, cp.text);

    const checkAll = async (when: string, woken = false) => {
      assert.equal(await exec(running, `cat /workspace/f; kill -0 ${pid} && echo alive`), "kept\nalive\n", `${when}: the running sandbox kept its file and process`);
      const states = new Map(((await api("GET", "/v1/sandboxes?limit=200")).body.sandboxes as Array<{ id: string; state: string; hibernate_mode: string | null }>).map((s) => [s.id, s]));
      if (!woken) {
        assert.equal(states.get(warm)?.state, "hibernated", when);
        assert.equal(states.get(cold)?.hibernate_mode, "cold", when);
      }
      // The QEMUs of the host's instance are exactly the sandboxes that hold a VM.
      const want = [...states.values()].filter((s) => s.state === "running" || (s.state === "hibernated" && s.hibernate_mode === "warm")).map((s) => s.id).sort();
      assert.deepEqual([...findInstanceProcesses(instance).keys()].sort(), want, `${when}: QEMUs of instance ${instance}`);
    };
    await checkAll("before any kill");

    // The host agent alone dies: its VMs run on, and the restarted one adopts them.
    await stop(hostProc, "SIGKILL");
    const during = await api("POST", `/v1/sandboxes/${running}/exec`, { cmd: "true" });
    assert.equal(during.status, 503, `with no host agent: ${during.text}`);
    assert.equal(during.body.error.code, "agent_unavailable");
    hostProc = await startHost();
    await checkAll("after the host agent's kill -9");

    // The control plane alone dies: the host keeps everything; the restarted one finds it all.
    await stop(cpProc, "SIGKILL");
    assert.equal(await exec(running, "true").catch(() => "down"), "down");
    cpProc = await startCp();
    await checkAll("after the control plane's kill -9");

    // Every one of them is usable: warm and cold wake (from the host's snapshot, from the store), a restore of the checkpoint.
    assert.equal(await exec(warm, "cat /workspace/f"), "warm\n");
    assert.equal(await exec(cold, "cat /workspace/f"), "cold\n");
    // The host agent's CPU for the cold hibernate and wake (snapshot, compression, transfer)
    // reaches the bill across the wire: this control plane spent next to none of it.
    const usage = await api("GET", "/v1/usage?group_by=sandbox");
    const billed = (usage.body.groups as Array<{ key: string; den_cpu_seconds: number }>).find((g) => g.key === cold);
    assert.ok(billed && billed.den_cpu_seconds > 0.05, `Den's CPU for ${cold}: ${JSON.stringify(billed)}`);
    const restored = await api("POST", `/v1/checkpoints/${cp.body.id}/restore`, {});
    assert.equal(restored.status, 201, restored.text);
    assert.equal(await exec(restored.body.id, `cat /workspace/f; kill -0 ${pid} && echo alive`), "kept\nalive\n");
    await checkAll("after waking and restoring", true);
  });

  test("a clean stop of the host agent, its sandboxes gone, leaves none of its cgroups (its pool's QEMUs waited for)", async () => {
    const instance = (await api("GET", "/v1/hosts")).body.hosts[0].id as string;
    for (const s of (await api("GET", "/v1/sandboxes?limit=200")).body.sandboxes) await api("DELETE", `/v1/sandboxes/${s.id}`);
    // Its pool's QEMUs are waiting (the default template's): their cgroups are the instance's.
    await waitFor("a pooled QEMU of the host", async () => ([...findInstanceProcesses(instance, { pooled: true }).keys()].length ? true : undefined), 60_000);
    assert.ok(cgroupDirs(instance).length > 0, "the instance has cgroups while it runs");
    await stop(hostProc, "SIGTERM");
    assert.deepEqual(cgroupDirs(instance), [], "the instance's cgroups once the host agent has exited");
    assert.equal(findInstanceProcesses(instance, { pooled: true }).size, 0, "no QEMU of the instance is left");
  });
});

/** The instance's cgroup directories, v1 (one per controller) or v2. */
function cgroupDirs(instance: string): string[] {
  return ["/sys/fs/cgroup/den", ...["cpu", "memory", "pids"].map((c) => `/sys/fs/cgroup/${c}/den`)].map((d) => join(d, instance)).filter((d) => existsSync(d));
}
