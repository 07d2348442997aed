// needs: many VMs, Postgres, s3rver
/**
 * Host agents that register themselves (`den host run --control-plane URL`) with a control
 * plane that is given none (`--host-agent registered`): each holds a lease its heartbeats
 * renew. Cold sandboxes wake on whichever host is up; a host stopped cleanly drains first
 * (a host killed, declared lost after its lease and grace: fleet.test). A host that cannot renew its lease pauses
 * its VMs, and runs them again once the control plane answers. Host B starts with no
 * template: it pulls A's base from the shared store on its first sandbox.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import type { ChildProcess } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { join } from "node:path";
import { findInstanceProcesses } from "@den/runtime";
import { ADMIN_KEY, client, dataDir, fleetEnv, hostGet, sandboxCalls, runCli, spawnHostAgent, spawnServer, stopProcess as stop, waitFor } from "../helpers.js";

const PORT_A = 19391;
const PORT_B = 19392;
const CP_PORT = 19393;
/** The control plane's hosts' listener (mutual TLS): where the hosts register, the same across its restarts. */
const CP_FLEET_PORT = 19394;
const CP_URL = `http://127.0.0.1:${CP_PORT}`;

interface Host { id: string; url: string; status: string; state: string; managed: string; lost_at: string | null; kind: { accelerator: string } | null; sandboxes: number }

describe("host agents that register themselves and hold leases", () => {
  let cpDir: string;
  let dirB: string;
  let env: Record<string, string>;
  let hostA: ChildProcess | undefined;
  let hostB: ChildProcess | undefined;
  let cpProc: ChildProcess | undefined;
  const api = client(CP_URL);

  const hostEnv = { DEN_CONTROL_PLANE_URL: `https://127.0.0.1:${CP_FLEET_PORT}`, DEN_HOST_HEARTBEAT_MS: "300" };
  const startA = () => spawnHostAgent(PORT_A, { ...env, ...hostEnv });
  const startB = () => spawnHostAgent(PORT_B, { ...env, ...hostEnv, DEN_DATA_DIR: dirB, DEN_NET_POOL: "100.97.0.0/16" });
  const startCp = async (extra: Record<string, string> = {}) => spawnServer(CP_PORT, { ...env, ...(await fleetEnv(CP_FLEET_PORT)), DEN_DATA_DIR: cpDir, DEN_HOST_AGENT_URL: "registered", DEN_HOST_LEASE_SECONDS: "2", DEN_HOST_LOST_GRACE_SECONDS: "2", ...extra });
  const hosts = async () => (await api("GET", "/v1/hosts")).body.hosts as Host[];
  /** The files of every stored version of template `name`. */
  const storedFiles = (name: string) => {
    const root = join(cpDir, "store");
    const out: string[] = [];
    for (const dep of existsSync(root) ? readdirSync(root) : []) {
      const dir = join(root, dep, "templates", name);
      for (const v of existsSync(dir) ? readdirSync(dir) : []) for (const f of readdirSync(join(dir, v))) out.push(`${v}/${f}`);
    }
    return out;
  };
  /** Whether a complete copy of a version of template `name` is in the store (its manifest is written last). */
  const published = (name: string) => {
    const root = join(cpDir, "store");
    for (const dep of existsSync(root) ? readdirSync(root) : []) {
      const dir = join(root, dep, "templates", name);
      if (existsSync(dir) && readdirSync(dir).some((v) => existsSync(join(dir, v, "store-manifest.json")))) return true;
    }
    return false;
  };
  const onHost = (instance: string) => [...findInstanceProcesses(instance).keys()].sort();
  const { exec, create } = sandboxCalls(api);
  const state = async (id: string) => (await api("GET", `/v1/sandboxes/${id}`)).body as { state: string; state_reason: string; hibernate_mode: string | null };
  /** A host agent's own view (its inventory), asked directly over mutual TLS, as a control plane. */
  const inventory = (port: number) => hostGet<{ vms: Array<{ id: string; state: string }> }>(port, port === PORT_A ? a : b, "/host/v1/inventory");

  let a = "";
  let b = "";

  before(async () => {
    cpDir = await mkdtemp("/tmp/den-reg-cp-");
    // B has no template at all: it pulls what it needs from the store, where A's are published.
    dirB = await mkdtemp("/tmp/den-reg-b-");
    env = { DEN_STORE_DIR: join(cpDir, "store") };
    cpProc = await startCp();
    [hostA, hostB] = await Promise.all([startA(), startB()]);
    const listed = await waitFor("both hosts registered", async () => {
      const l = await hosts();
      return l.length === 2 && l.every((h) => h.status === "up") ? l : undefined;
    }, 20_000);
    a = listed.find((h) => h.url === `https://127.0.0.1:${PORT_A}`)!.id;
    b = listed.find((h) => h.url === `https://127.0.0.1:${PORT_B}`)!.id;
    await waitFor("A's base template is in the store", async () => (published("base") ? true : undefined), 120_000, 500);
  });

  after(async () => {
    if (cpProc) {
      for (const s of (await api("GET", "/v1/sandboxes?limit=200")).body?.sandboxes ?? []) await api("DELETE", `/v1/sandboxes/${s.id}`);
      for (const c of (await api("GET", "/v1/checkpoints")).body?.checkpoints ?? []) await api("DELETE", `/v1/checkpoints/${c.id}`);
      for (const v of (await api("GET", "/v1/volumes")).body?.volumes ?? []) await api("DELETE", `/v1/volumes/${v.name}`);
    }
    // The suite's database outlives this file: its hosts leave the list.
    for (const h of [a, b]) if (cpProc && h) await api("DELETE", `/v1/hosts/${h}`);
    await stop(cpProc, "SIGTERM");
    await Promise.all([stop(hostA, "SIGKILL"), stop(hostB, "SIGKILL")]);
    // Pooled QEMUs too: B's data dir goes below, so no later start of B would kill them.
    for (const h of [a, b]) for (const pid of findInstanceProcesses(h, { pooled: true }).values()) process.kill(pid, "SIGKILL");
    await rm(cpDir, { recursive: true, force: true });
    await rm(dirB, { recursive: true, force: true });
  });

  test("they are listed with their lease and kind; cold sandboxes of a host stopped for good wake on the other one", async () => {
    const listed = await hosts();
    for (const h of listed) {
      assert.equal(h.managed, "lease");
      assert.equal(h.state, "up");
      assert.ok(h.kind && ["tcg", "kvm"].includes(h.kind.accelerator), JSON.stringify(h));
    }
    const ids = [await create(), await create(), await create(), await create()];
    const atA = ids.filter((id) => onHost(a).includes(id));
    assert.equal(atA.length, 2, `two of four on A: ${JSON.stringify({ a: onHost(a), b: onHost(b) })}`);
    // B built nothing: the version it runs was pulled from the store, whole.
    assert.ok(existsSync(join(dirB, "templates", "base", "current")), "B pulled base and made it current");
    for (const id of ids) await exec(id, `echo canary-${id} > /root/canary && (setsid sleep 100000 > /dev/null 2>&1 &) && echo ok`);
    for (const id of ids) assert.equal((await api("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "cold" })).status, 200);
    assert.deepEqual(onHost(a), []);

    // A clean stop drains (nothing left to drain: all are cold) and exits.
    await stop(hostA, "SIGTERM");
    hostA = undefined;
    await waitFor("A's lease runs out", async () => ((await hosts()).find((h) => h.id === a)?.status === "unreachable" ? true : undefined), 10_000);
    // Past A's lease and grace too: cold sandboxes of a host that is gone are not lost (nothing of them was there).
    await waitFor("A's loss is recorded", async () => ((await hosts()).find((h) => h.id === a)?.lost_at ? true : undefined), 15_000);
    for (const id of ids) assert.deepEqual([(await state(id)).state, (await state(id)).hibernate_mode], ["hibernated", "cold"], id);
    for (const id of ids) {
      assert.equal(await exec(id, `cat /root/canary; pgrep -x sleep > /dev/null && echo sleeping`), `canary-${id}\nsleeping\n`);
      assert.ok(onHost(b).includes(id), `${id} woke on B`);
      assert.equal((await state(id)).state, "running");
    }
    for (const id of ids) assert.equal((await api("DELETE", `/v1/sandboxes/${id}`)).status, 200);
  });

  // (A killed host's sandboxes lost after lease + grace, recovered elsewhere, its stale VMs
  // destroyed once it is back: fleet.test, on three hosts and two replicas.)
  test("a host that cannot renew its lease pauses its VMs; they run again when the control plane answers", async () => {
    hostA = await startA();
    await waitFor("A is up again", async () => ((await hosts()).find((h) => h.id === a)?.status === "up" ? true : undefined), 20_000);
    const id = await create();
    const port = onHost(a).includes(id) ? PORT_A : PORT_B;
    await exec(id, "echo before > /root/f");
    cpProc!.kill("SIGKILL");
    await new Promise((r) => cpProc!.once("exit", r));
    cpProc = undefined;
    await waitFor("the VM is paused by its host", async () => ((await inventory(port)).vms.find((v) => v.id === id)?.state === "paused" ? true : undefined), 15_000);
    cpProc = await startCp();
    await waitFor("the VM runs again", async () => ((await inventory(port)).vms.find((v) => v.id === id)?.state === "running" ? true : undefined), 30_000);
    assert.equal(await exec(id, "cat /root/f"), "before\n");
    assert.equal((await state(id)).state, "running");
  });

  test("den hosts: ls, drain (its sandboxes go cold and wake on the other host, its volumes are parked in the store and follow them), rm only once it holds nothing", async () => {
    const cli = (args: string[]) => runCli(args, { DEN_API_URL: CP_URL, DEN_API_KEY: ADMIN_KEY });
    // The control plane was restarted by the test before: both hosts have renewed their leases with it first.
    await waitFor("both hosts up", async () => ((await hosts()).filter((h) => h.status === "up").length === 2 ? true : undefined), 20_000);
    const ls = await cli(["hosts", "ls", "--json"]);
    assert.equal(ls.code, 0, ls.err);
    assert.deepEqual((JSON.parse(ls.out) as Array<{ id: string; status: string }>).map((h) => [h.id, h.status]).sort(), [[a, "up"], [b, "up"]].sort());
    // A volume lives on one host's disk: the sandbox mounting it is placed there.
    assert.equal((await api("POST", "/v1/volumes", { name: "drained-vol", size_mb: 128 })).status, 201);
    const id = await create({ volumes: [{ name: "drained-vol", path: "/data" }] });
    const from = onHost(a).includes(id) ? a : b;
    const other = from === a ? b : a;
    const volumeId = (await api("GET", "/v1/volumes/drained-vol")).body.id as string;
    const imageOn = (host: string) => existsSync(join(host === b ? dirB : dataDir(), "volumes", volumeId, "volume.qcow2"));
    assert.ok(imageOn(from) && !imageOn(other), "the volume's image is on the sandbox's host only");
    await exec(id, "echo drained > /root/d");
    const sum = await exec(id, "head -c 20000000 /dev/urandom > /data/blob && sync && sha256sum /data/blob | cut -c1-64");
    const refused = await cli(["hosts", "rm", from]);
    assert.notEqual(refused.code, 0);
    assert.match(refused.err, /drain it first/);
    const drained = await cli(["hosts", "drain", from, "--wait"]);
    assert.equal(drained.code, 0, drained.err);
    assert.deepEqual([(await state(id)).state, (await state(id)).hibernate_mode], ["hibernated", "cold"]);
    // Drained is the volume too: parked in the store, its image gone from the host.
    assert.ok(!imageOn(from) && !imageOn(other), "the volume's image left the drained host (parked in the store)");
    // Written while parked (through the volume API): it is fetched to a host that takes sandboxes, the other one.
    const put = await api("PUT", "/v1/volumes/drained-vol/files?path=/later", "written while parked", { "content-type": "application/octet-stream" });
    assert.equal(put.status, 200, put.text);
    assert.ok(imageOn(other), "the volume's image is on the other host now");
    assert.equal(await exec(id, "cat /root/d /data/later; echo; sha256sum /data/blob | cut -c1-64"), `drained\nwritten while parked\n${sum}`);
    assert.ok(onHost(other).includes(id), "it woke on the other host: a draining host takes no sandbox");
    assert.deepEqual((await api("GET", "/v1/volumes/drained-vol")).body.mounts.map((m: { sandbox_id: string; held: boolean }) => [m.sandbox_id, m.held]), [[id, true]]);
    assert.equal((await hosts()).find((h) => h.id === from)?.state, "draining");
  });

  test("a template deleted through the API leaves the shared store once nothing needs it (while its hosts have it, it stays)", async () => {
    // The store's collector every second, with no grace.
    await stop(cpProc, "SIGTERM");
    cpProc = await startCp({ DEN_STORE_GC_GRACE_SECONDS: "0", DEN_STORE_GC_INTERVAL_SECONDS: "1" });
    await waitFor("a host up", async () => ((await hosts()).some((h) => h.status === "up" && h.state !== "draining") ? true : undefined), 20_000);
    const t = await api("POST", "/v1/templates", { name: "gc-probe", setup: ["echo probe > /root/probe"] });
    assert.equal(t.status, 201, t.text);
    await waitFor("its version is in the store", async () => (published("gc-probe") ? true : undefined), 120_000, 500);
    // Several collector passes later it is still there: the host that built it has it.
    await new Promise((r) => setTimeout(r, 4_000));
    assert.ok(published("gc-probe"), `kept while a host has it: ${JSON.stringify(storedFiles("gc-probe"))}`);
    assert.equal((await api("DELETE", "/v1/templates/gc-probe")).status, 204);
    await waitFor("its stored copy is gone, every file of it", async () => (storedFiles("gc-probe").length === 0 ? true : undefined), 30_000, 500);
    // base, which the sandboxes here were made from, stays.
    assert.ok(published("base"));
  });
});
