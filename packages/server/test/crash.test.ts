// needs: many VMs
/**
 * Crash-proofness of the control plane, against `den serve` as its own process.
 *
 * On SQLite (the main pass) `den serve` runs its host agent in-process with a local store.
 * On Postgres (DEN_DATABASE_URL, the suite's Postgres pass) it runs as a fleet does: the
 * control plane alone, two `den host run` agents registered with it (own data dirs and
 * address pools), an s3rver bucket as the store. Every kill -9 then hits the control plane
 * while its hosts keep running; the fault points inside a host (snapshot, download, upload)
 * kill that host agent instead, and it is started again.
 *
 * Part 1: seeded random rounds. Each round starts one operation on a small pool of
 * acknowledged sandboxes, kills the server with SIGKILL after a random delay, restarts it
 * and checks that nothing was lost: every acknowledged sandbox is there with its files
 * and processes, an operation the client saw succeed took effect, one it did not see
 * took full effect or none, the VMs on the host are exactly those the API says hold one,
 * and the snapshot store holds exactly what the database references.
 *   DEN_CRASH_SEED=<n>    replay a run (the seed is in the test names and output)
 *   DEN_CRASH_ROUNDS=<n>  rounds (default 6; 2 single-node on real VMs; the acceptance run uses 30)
 *   DEN_CRASH_POINTS=all|<point,...>  the fault points of part 2 (default all; single-node
 *                         on real VMs, the four inside the host agent's code)
 *
 * Part 2: fault points. The server is armed with a point's name (DEN_FAULT_POINT_FILE) and
 * dies at that point of an operation (@den/store faultPoint); after a restart the same checks hold.
 * A point that is never reached is a failure.
 *
 * On the in-memory host (DEN_CRASH_HOST=memory, crash-memory.test runs it so): `den serve`
 * with DEN_HOST_TRANSPORT=memory in a data dir of its own, whose host keeps its VMs on disk
 * as QEMU processes outlive a kill -9 (MemoryHostAgent, memory-host.json): the same rounds and
 * points, the same checks, in seconds; the real run keeps fewer rounds for what only real
 * VMs can show (DEN_CRASH_ROUNDS).
 *
 * Runs on its own: npm run build && DEN_DATA_DIR=... node --test --test-concurrency=1 packages/server/dist/test/crash.test.js
 * (as a fleet: the same under scripts/with-postgres.sh, with a data dir of its own)
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import type { ChildProcess } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import pg from "pg";
import S3rver from "s3rver";
import { MemoryHostAgent } from "@den/host-agent";
import { findInstanceProcesses, mulberry32 } from "@den/runtime";
import { S3Store } from "@den/store";
import { client, dataDir, fleetEnv, freePorts, spawnHostAgent, spawnServer, stopProcess, waitFor } from "./helpers.js";

/** The control plane's crash points, in the order each operation reaches them. */
export const FAULT_POINTS = [
  "hibernate-cold-after-intent",
  "hibernate-cold-after-snapshot",
  "hibernate-cold-after-upload",
  "hibernate-cold-after-commit",
  "hibernate-cold-after-vm-removal",
  "wake-cold-after-intent",
  "wake-cold-after-download",
  "wake-cold-after-restore",
  "wake-cold-after-commit",
  "checkpoint-after-intent",
  "checkpoint-after-upload",
  "checkpoint-after-commit",
  "fork-after-intent",
  "fork-children-started",
  "fork-after-children",
  "fork-after-commit",
  "snapshot-upload-mid",
] as const;
type FaultPoint = (typeof FAULT_POINTS)[number];
/** Points inside the host agent's code: in a fleet they kill the host agent, not the control plane. */
const HOST_POINTS: ReadonlySet<FaultPoint> = new Set(["hibernate-cold-after-snapshot", "wake-cold-after-download", "snapshot-upload-mid", "fork-children-started"]);

/** CP_FLEET_PORT: the control plane's hosts' listener (mutual TLS), where the fleet's hosts register. */
const [PORT, CP_FLEET_PORT, ...FLEET_HOST_PORTS] = (await freePorts(4)) as [number, number, number, number];
const DB_URL = process.env.DEN_DATABASE_URL;
/** On the in-memory host (see the top): single-node, SQLite, a data dir of its own. */
const MEMORY = process.env.DEN_CRASH_HOST === "memory";
/** A fleet on Postgres (see the top), else single-node on SQLite. */
const FLEET = !MEMORY && !!DB_URL?.startsWith("postgres");
/** The server's data dir: the suite's, or the memory host's own (removed at the end). */
const DATA = MEMORY ? mkdtempSync(join(tmpdir(), "den-crash-memory-")) : dataDir();
const api = client(`http://127.0.0.1:${PORT}`);
const SEED = Number(process.env.DEN_CRASH_SEED ?? 1337) >>> 0;
/**
 * Single-node on real VMs runs 2 rounds and the points inside the host agent's code (where
 * real snapshot files and QEMUs are mid-way) by default: the memory host runs every round
 * and point in seconds (crash-memory.test), the Postgres pass every point on real VMs as a
 * fleet. DEN_CRASH_ROUNDS and DEN_CRASH_POINTS=all (or a comma list) choose otherwise.
 */
const SINGLE_REAL = !MEMORY && !FLEET;
const ROUNDS = Number(process.env.DEN_CRASH_ROUNDS ?? (SINGLE_REAL ? 2 : 6));
/** A memory host's operations take milliseconds: its kills come sooner. */
const MAX_KILL_DELAY_MS = MEMORY ? 400 : 3000;
/** Every sandbox this run makes carries this metadata (forks inherit it; restores get it). */
const RUN = `crash-${Date.now().toString(36)}`;
const TAG = { crash_run: RUN };
/** Environment of every server this file starts. */
// Webhooks may reach 127.0.0.2, where nothing listens: every delivery stays in the outbox, to be counted.
const BASE_ENV = { DEN_STORE_GC_GRACE_SECONDS: "0", DEN_STORE_GC_INTERVAL_SECONDS: "1", DEN_WEBHOOK_ALLOW_NETWORKS: "127.0.0.2/32" };
/** The memory host's server: its own data dir and store (never the suite's). */
// On SQLite (its file is read below): the Postgres pass crashes a fleet of real hosts.
const MEMORY_ENV = { DEN_HOST_TRANSPORT: "memory", DEN_DATA_DIR: DATA, DEN_STORE_DIR: join(DATA, "store"), DEN_DATABASE_URL: "" };
/** The webhook that hears every round's events (set up before the rounds). */
let hookId = "";
const SETTLE_MS = 60_000;
const GC_WAIT_MS = 20_000;
const VM_SETTLE_MS = 10_000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Resolves `false` after `ms`, or `true` as soon as `p` settles (the timer never holds the process). */
const within = (p: Promise<unknown>, ms: number): Promise<boolean> =>
  Promise.race([p.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), ms).unref())]);
const T0 = Date.now();
const log = (msg: string) => console.log(`[crash +${((Date.now() - T0) / 1000).toFixed(1)}s] ${msg}`);

// ---------------------------------------------------------------------------------------
// A small deterministic PRNG (mulberry32), one stream per round so a round replays alone.

const roundRng = (round: number) => mulberry32(SEED ^ Math.imul(round + 1, 0x9e3779b1));
const pick = <T>(rng: () => number, xs: readonly T[]): T => xs[Math.floor(rng() * xs.length)]!;

// ---------------------------------------------------------------------------------------
// The server process.

let server: ChildProcess | undefined;
let serverLog = "";

async function start(env: Record<string, string> = {}): Promise<ChildProcess> {
  if (server) await stopClean(); // one at a time (a failed test may have left one up)
  serverLog = "";
  const child = await spawnServer(PORT, { ...BASE_ENV, ...(FLEET ? fleet.cpEnv() : {}), ...(MEMORY ? MEMORY_ENV : {}), ...env });
  child.stderr!.on("data", (d: Buffer) => (serverLog = (serverLog + d.toString()).slice(-4000)));
  child.once("exit", () => {
    if (server === child) server = undefined;
  });
  server = child;
  return child;
}

const exited = (c: ChildProcess) => c.exitCode !== null || c.signalCode !== null;

/** kill -9, and wait until it is gone. */
async function killHard(child: ChildProcess | undefined = server): Promise<void> {
  if (!child) return;
  if (!exited(child)) {
    const gone = new Promise((r) => child.once("exit", r));
    child.kill("SIGKILL");
    await gone;
  }
  if (server === child) server = undefined;
}

/** SIGTERM (a clean stop: it cold-hibernates what runs), bounded; SIGKILL past the bound. */
async function stopClean(child: ChildProcess | undefined = server, timeoutMs = 90_000): Promise<number | null> {
  if (!child) return null;
  if (!exited(child)) {
    const t = Date.now();
    const gone = new Promise((r) => child.once("exit", r));
    child.kill("SIGTERM");
    if (!(await within(gone, timeoutMs))) await killHard(child);
    log(`server stopped (SIGTERM) in ${Date.now() - t} ms`);
  }
  if (server === child) server = undefined;
  return child.exitCode;
}

// ---------------------------------------------------------------------------------------
// The fleet (Postgres only): an s3rver bucket and two registered host agents, which outlive
// every control-plane restart.

const fleet = {
  root: "",
  s3: undefined as S3rver | undefined,
  storeEnv: {} as Record<string, string>,
  /** The control plane's mutual TLS with the hosts: the test CA (DEN_CA_DIR) and its hosts' port. */
  tlsEnv: {} as Record<string, string>,
  hosts: [] as Array<{ port: number; dir: string; proc?: ChildProcess; log: string }>,
  db: undefined as pg.Pool | undefined,
  cpEnv(): Record<string, string> {
    return { ...this.storeEnv, DEN_DATA_DIR: join(this.root, "cp"), DEN_HOST_AGENT_URL: "registered", ...this.tlsEnv };
  },
  hostEnv(i: number, env: Record<string, string> = {}): Record<string, string> {
    return {
      ...this.storeEnv, DEN_DATA_DIR: this.hosts[i]!.dir, DEN_NET_POOL: `100.${104 + i}.0.0/16`,
      DEN_CONTROL_PLANE_URL: `https://127.0.0.1:${CP_FLEET_PORT}`, DEN_HOST_HEARTBEAT_MS: "500", ...env,
    };
  },
  async startHost(i: number, env: Record<string, string> = {}): Promise<ChildProcess> {
    const h = this.hosts[i]!;
    if (h.proc && !exited(h.proc)) await stopProcess(h.proc, "SIGKILL");
    const t = Date.now();
    const child = await spawnHostAgent(h.port, this.hostEnv(i, env));
    log(`host agent :${h.port} answers in ${Date.now() - t} ms`);
    h.log = "";
    child.stderr!.on("data", (d: Buffer) => (h.log = (h.log + d.toString()).slice(-2000)));
    h.proc = child;
    return child;
  },
  async setUp(): Promise<void> {
    this.root = mkdtempSync(join(tmpdir(), "den-crash-fleet-"));
    this.tlsEnv = await fleetEnv(CP_FLEET_PORT);
    const s3dir = join(this.root, "s3");
    mkdirSync(s3dir);
    this.s3 = new S3rver({ port: 0, address: "127.0.0.1", silent: true, directory: s3dir, configureBuckets: [{ name: "crash" }] });
    const { port } = await this.s3.run();
    this.storeEnv = { DEN_STORE: "s3", DEN_S3_BUCKET: "crash", DEN_S3_ENDPOINT: `http://127.0.0.1:${port}`, AWS_ACCESS_KEY_ID: "S3RVER", AWS_SECRET_ACCESS_KEY: "S3RVER" };
    for (const [i, p] of FLEET_HOST_PORTS.entries()) {
      const dir = join(this.root, `host${i}`);
      cpSync(join(dataDir(), "templates", "base"), join(dir, "templates", "base"), { recursive: true });
      this.hosts.push({ port: p, dir, log: "" });
    }
    this.db = new pg.Pool({ connectionString: DB_URL, max: 2 });
  },
  async tearDown(): Promise<void> {
    for (const h of this.hosts) await stopProcess(h.proc, "SIGKILL");
    for (const id of instances()) for (const pid of findInstanceProcesses(id, { pooled: true }).values()) process.kill(pid, "SIGKILL");
    await this.db?.end();
    await this.s3?.close();
    if (this.root) rmSync(this.root, { recursive: true, force: true });
  },
};

/** The instance ids whose QEMUs belong to this run: the data dir's, or each fleet host's. */
function instances(): string[] {
  const dirs = FLEET ? fleet.hosts.map((h) => h.dir) : [DATA];
  return dirs.filter((d) => existsSync(join(d, "instance-id"))).map((d) => readFileSync(join(d, "instance-id"), "utf8").trim());
}

/** Sandbox id -> pid of every QEMU of this run's instances (`pooled`: with those no sandbox has claimed, by their own tags). */
function runningVms(opts: { pooled?: boolean } = {}): Map<string, number> {
  const out = new Map<string, number>();
  // The memory host's VMs are in its state file (a VM is one that runs or is paused).
  if (MEMORY) {
    for (const vm of MemoryHostAgent.readState(DATA)?.vms ?? []) if (vm.state === "running" || vm.state === "paused") out.set(vm.id, 0);
    return out;
  }
  for (const id of instances()) for (const [sandbox, pid] of findInstanceProcesses(id, opts)) out.set(sandbox, pid);
  return out;
}

// ---------------------------------------------------------------------------------------
// API calls.

type Outcome =
  | { kind: "ok"; status: number; body: any }
  | { kind: "failed"; status: number; body: any; text: string }
  | { kind: "dropped"; error: string };

/** One call whose result is recorded as the client saw it: success, an HTTP error, or a dropped connection. */
async function attempt(method: string, path: string, body?: unknown): Promise<Outcome> {
  try {
    const r = await api(method, path, body);
    return r.status >= 200 && r.status < 300 ? { kind: "ok", status: r.status, body: r.body } : { kind: "failed", status: r.status, body: r.body, text: r.text.slice(0, 300) };
  } catch (e) {
    return { kind: "dropped", error: String((e as Error).cause ?? (e as Error).message) };
  }
}

const describeOutcome = (o: Outcome) => (o.kind === "ok" ? `ok ${o.status}` : o.kind === "failed" ? `HTTP ${o.status} ${o.text}` : `dropped (${o.error})`);

/** A call of the harness itself (the server is up): retried over a connection a restart broke. */
async function call(method: string, path: string, body?: unknown): Promise<{ status: number; body: any; text: string }> {
  for (let i = 0; ; i++) {
    try {
      return await api(method, path, body);
    } catch (e) {
      if (i >= 4) throw e;
      await sleep(500);
    }
  }
}

async function callOk(method: string, path: string, body?: unknown): Promise<any> {
  const r = await call(method, path, body);
  assert.ok(r.status >= 200 && r.status < 300, `${method} ${path}: ${r.status} ${r.text.slice(0, 500)}`);
  return r.body;
}

async function listSandboxes(): Promise<any[]> {
  const out: any[] = [];
  let cursor = "";
  for (;;) {
    const page = await callOk("GET", `/v1/sandboxes?limit=200${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
    out.push(...page.sandboxes);
    if (!page.next_cursor) return out;
    cursor = page.next_cursor;
  }
}

const tagged = (s: any) => s.metadata?.crash_run === RUN;
const inFlight = (s: any) => s.operation !== undefined && s.operation !== null;

async function listCheckpoints(): Promise<any[]> {
  return (await callOk("GET", "/v1/checkpoints")).checkpoints;
}

// ---------------------------------------------------------------------------------------
// Tracked sandboxes and checkpoints, and what the client may expect of them.

/** What a sandbox may be: running, hibernated warm or cold, or gone. */
type Expect = "running" | "warm" | "cold" | "destroyed";

interface Box {
  id: string;
  /** Its marker file (a fork's child keeps its parent's) and the contents it may have. */
  markerPath: string;
  marker: string[];
  /** The states it may be in (one when the client saw the last operation's result). */
  expect: Expect[];
  origin: string;
}

interface Cp {
  id: string;
  sandbox: string;
  markerPath: string;
  marker: string[];
  /** Whether it may exist (both when a delete's result was not seen). */
  exists: boolean[];
}

function stateOf(s: any): string {
  if (s.state === "hibernated") return s.hibernate_mode === "cold" ? "cold" : "warm";
  return s.state;
}

// (Plain enough for the memory host's shell too.)
const BG_CHECK = "kill -0 $(cat /root/bg.pid 2>/dev/null) 2>/dev/null && echo alive || echo dead";

/** Marker file with known contents plus a background process, in a running sandbox. */
async function setupMarker(id: string, markerPath = `/root/den-crash-${id}`): Promise<Box> {
  const content = `m-${id}-${Math.random().toString(36).slice(2, 10)}`;
  const cmd = `set -e; echo ${content} > ${markerPath}.tmp; mv ${markerPath}.tmp ${markerPath}; nohup sh -c 'while true; do sleep 1; done' >/dev/null 2>&1 & echo $! > /root/bg.pid; sync; cat ${markerPath}; ${BG_CHECK}`;
  const r = await callOk("POST", `/v1/sandboxes/${id}/exec`, { cmd });
  assert.equal(r.stdout, `${content}\nalive\n`, `marker setup in ${id}: ${JSON.stringify(r)}`);
  return { id, markerPath, marker: [content], expect: ["running"], origin: "create" };
}

/** A new acknowledged sandbox with its marker and background process. */
async function newBox(): Promise<Box> {
  const s = await callOk("POST", "/v1/sandboxes", { persistent: true, metadata: TAG });
  assert.equal(s.state, "running");
  return setupMarker(s.id);
}

/** Exec on the sandbox (it wakes if hibernated): its marker has one of the allowed contents, its process lives. */
async function execCheck(id: string, markerPath: string, allowed: string[]): Promise<{ problem?: string; marker?: string }> {
  const r = await call("POST", `/v1/sandboxes/${id}/exec`, { cmd: `cat ${markerPath} 2>&1; ${BG_CHECK}` });
  if (r.status !== 200) return { problem: `exec on ${id} failed: ${r.status} ${r.text.slice(0, 300)}` };
  const [marker, bg] = String(r.body.stdout).split("\n");
  if (!allowed.includes(marker!)) return { problem: `${id}: marker ${markerPath} reads ${JSON.stringify(marker)}, expected one of ${JSON.stringify(allowed)}` };
  if (bg !== "alive") return { problem: `${id}: its background process is gone (${JSON.stringify(r.body.stdout)})` };
  return { marker: marker! };
}

// ---------------------------------------------------------------------------------------
// Invariants. Each returns the problems it found (empty when all hold).

/** Waits (bounded) until no sandbox shows an operation in flight. */
async function settle(): Promise<string[]> {
  const deadline = Date.now() + SETTLE_MS;
  for (;;) {
    const busy = (await listSandboxes()).filter(inFlight);
    if (busy.length === 0) return [];
    if (Date.now() > deadline) return busy.map((s) => `${s.id}: operation ${JSON.stringify(s.operation)} still in flight ${SETTLE_MS / 1000} s after the restart`);
    await sleep(250);
  }
}

/** No sandbox of this run is lost, in error, or stuck in creating. */
async function noBrokenSandboxes(): Promise<string[]> {
  return (await listSandboxes()).filter((s) => tagged(s) && !["running", "hibernated"].includes(s.state)).map((s) => `${s.id} (${s.metadata?.forked_from ? `fork of ${s.metadata.forked_from}` : s.metadata?.restored_from ? `restored from ${s.metadata.restored_from}` : "created"}) is ${s.state}/${s.state_reason}`);
}

/** The QEMUs of this instance are exactly the sandboxes that hold a VM (running, or hibernated warm). */
async function vmsMatch(): Promise<string[]> {
  const deadline = Date.now() + VM_SETTLE_MS;
  for (;;) {
    const want = new Set((await listSandboxes()).filter((s) => s.state === "running" || (s.state === "hibernated" && s.hibernate_mode === "warm")).map((s) => s.id));
    const have = new Set(runningVms().keys());
    const missing = [...want].filter((id) => !have.has(id));
    const extra = [...have].filter((id) => !want.has(id));
    if (missing.length === 0 && extra.length === 0) return [];
    if (Date.now() > deadline) {
      return [
        ...missing.map((id) => `${id}: the API says it holds a VM, but no QEMU of this instance runs for it`),
        ...extra.map((id) => `${id}: a QEMU of this instance runs for it, but the API says it holds no VM`),
      ];
    }
    await sleep(250);
  }
}

function storeRoot(): string {
  return MEMORY ? join(DATA, "store") : process.env.DEN_STORE_DIR ?? join(DATA, "store");
}

/** Stored snapshots: of every key (or directory) path `.../snapshots/<id>/...` (any layout), by id. */
async function storedSnapshots(): Promise<Map<string, { complete: boolean; files: number }>> {
  const out = new Map<string, { complete: boolean; files: number }>();
  if (FLEET) {
    const e = fleet.storeEnv;
    const bucket = new S3Store({ bucket: e.DEN_S3_BUCKET!, prefix: "den/", endpoint: e.DEN_S3_ENDPOINT!, forcePathStyle: true, accessKeyId: "S3RVER", secretAccessKey: "S3RVER" });
    for (const o of await bucket.list("")) {
      const parts = o.key.split("/");
      const i = parts.indexOf("snapshots");
      if (i < 0 || i + 2 >= parts.length) continue;
      const s = out.get(parts[i + 1]!) ?? { complete: false, files: 0 };
      s.files++;
      if (parts.at(-1) === "store-manifest.json") s.complete = true;
      out.set(parts[i + 1]!, s);
    }
    return out;
  }
  const countFiles = (dir: string): number => {
    let n = 0;
    for (const e of readdirSync(dir, { withFileTypes: true })) n += e.isDirectory() ? countFiles(join(dir, e.name)) : 1;
    return n;
  };
  const walk = (dir: string, depth: number) => {
    if (depth > 6 || !existsSync(dir)) return;
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      if (!e.isDirectory()) continue;
      const p = join(dir, e.name);
      if (e.name === "snapshots") {
        for (const s of readdirSync(p, { withFileTypes: true })) {
          if (!s.isDirectory()) continue;
          const sd = join(p, s.name);
          out.set(s.name, { complete: existsSync(join(sd, "store-manifest.json")), files: countFiles(sd) });
        }
      } else walk(p, depth + 1);
    }
  };
  walk(storeRoot(), 0);
  return out;
}

/** What the database references: snapshots that must be in the store (cold sandboxes, checkpoints), and all it points at. */
async function dbReferences(): Promise<{ required: Map<string, string>; referenced: Set<string> }> {
  const SANDBOXES = "SELECT id, state, hibernate_mode, hibernate_snapshot FROM sandboxes WHERE state != 'destroyed' AND hibernate_snapshot IS NOT NULL";
  const CHECKPOINTS = "SELECT id, sandbox_id FROM checkpoints";
  let rows: { sandboxes: any[]; checkpoints: any[] };
  if (FLEET) {
    rows = { sandboxes: (await fleet.db!.query(SANDBOXES)).rows, checkpoints: (await fleet.db!.query(CHECKPOINTS)).rows };
  } else {
    const db = new Database(join(DATA, "den.db"), { readonly: true, fileMustExist: true });
    try {
      rows = { sandboxes: db.prepare(SANDBOXES).all(), checkpoints: db.prepare(CHECKPOINTS).all() };
    } finally {
      db.close();
    }
  }
  const required = new Map<string, string>();
  const referenced = new Set<string>();
  for (const r of rows.sandboxes) {
    referenced.add(r.hibernate_snapshot);
    if (r.state === "hibernated" && r.hibernate_mode === "cold") required.set(r.hibernate_snapshot, `cold sandbox ${r.id}`);
  }
  for (const r of rows.checkpoints) {
    referenced.add(r.id);
    required.set(r.id, `checkpoint of ${r.sandbox_id}`);
  }
  return { required, referenced };
}

/**
 * Unreferenced snapshots already in the store when this run began: another deployment's
 * sharing the data dir's store (a run of the suite on Postgres by hand), or an interrupted
 * run's. Not this run's to judge; whatever it strands itself is.
 */
const strayBefore = new Set<string>();

/** The store holds a complete copy of every referenced snapshot, and (after GC, bounded) nothing else. */
async function storeMatches(): Promise<string[]> {
  const problems: string[] = [];
  const { required } = await dbReferences();
  const stored = await storedSnapshots();
  for (const [id, what] of required) {
    if (!stored.get(id)?.complete) problems.push(`snapshot ${id} (${what}) is referenced but has no complete stored copy (store-manifest.json)`);
  }
  const deadline = Date.now() + GC_WAIT_MS;
  for (;;) {
    const { referenced } = await dbReferences();
    const strays = [...(await storedSnapshots())].filter(([id, s]) => s.files > 0 && !referenced.has(id) && !strayBefore.has(id));
    if (strays.length === 0) return problems;
    if (Date.now() > deadline) {
      return [...problems, ...strays.map(([id, s]) => `snapshot ${id} is in the store (${s.files} files${s.complete ? ", complete" : ", partial"}) but nothing references it, ${GC_WAIT_MS / 1000} s after the restart`)];
    }
    await sleep(500);
  }
}

const failIf = (problems: string[], what: string) => {
  if (problems.length) assert.fail(`${what}:\n  - ${problems.join("\n  - ")}\n(DEN_CRASH_SEED=${SEED}; server log tail: ${serverLog.slice(-600) || "empty"})`);
};

/** Destroys a sandbox and deletes checkpoints, ignoring what is already gone. */
async function destroyQuietly(ids: Iterable<string>): Promise<void> {
  for (const id of ids) {
    const r = await call("DELETE", `/v1/sandboxes/${id}`).catch(() => undefined);
    if (r?.status === 200) destroyed.add(id);
  }
}

/** Sandboxes this run saw destroyed: they stay destroyed (a recovery never brings one back). */
const destroyed = new Set<string>();

async function staysDestroyed(): Promise<string[]> {
  const problems: string[] = [];
  for (const id of destroyed) {
    const r = await call("GET", `/v1/sandboxes/${id}`);
    if (r.body?.state !== "destroyed") problems.push(`${id} was destroyed, now it is ${r.body?.state ?? `missing (${r.status})`}`);
  }
  return problems;
}

async function deleteCheckpointsQuietly(ids: Iterable<string>): Promise<void> {
  for (const id of ids) await call("DELETE", `/v1/checkpoints/${id}`).catch(() => undefined);
}

// ---------------------------------------------------------------------------------------

before(async () => {
  log(`seed ${SEED}, ${ROUNDS} rounds, run tag ${RUN} (replay: DEN_CRASH_SEED=${SEED} DEN_CRASH_ROUNDS=${ROUNDS})`);
  // The data dir is the tests' own: whatever an interrupted earlier run left would skew the VM and store checks.
  if (FLEET) await fleet.setUp();
  await start();
  if (FLEET) {
    await Promise.all(fleet.hosts.map((_, i) => fleet.startHost(i)));
    await hostsUp();
    log(`fleet: control plane on Postgres, hosts on ${FLEET_HOST_PORTS.join(", ")}, store ${fleet.storeEnv.DEN_S3_ENDPOINT}`);
  }
  const left = await listSandboxes();
  for (const s of left) await call("DELETE", `/v1/sandboxes/${s.id}`);
  await deleteCheckpointsQuietly((await listCheckpoints()).map((c) => c.id));
  if (left.length) log(`destroyed ${left.length} sandboxes left by earlier runs`);
  assert.equal(await stopClean(), 0);
  const { referenced } = await dbReferences();
  for (const [id, st] of await storedSnapshots()) if (st.files > 0 && !referenced.has(id)) strayBefore.add(id);
  if (strayBefore.size) log(`${strayBefore.size} unreferenced snapshots were in the store before this run (not checked): ${[...strayBefore].slice(0, 5).join(", ")}`);
  log("ready");
});

after(async () => {
  // Whatever a failed test left: its sandboxes and checkpoints go, and no server stays up.
  if (!server) await start().catch(() => undefined);
  if (server) {
    const mine = (await listSandboxes().catch(() => [])).filter(tagged).map((s) => s.id);
    await destroyQuietly(mine);
    const cps = (await listCheckpoints().catch(() => [])).filter((c) => mine.includes(c.sandbox_id) || knownIds.has(c.sandbox_id));
    await deleteCheckpointsQuietly(cps.map((c) => c.id));
    if (FLEET) {
      // The hosts go for good: their rows go too, so later files on the same database do not see them.
      const listed = ((await listHosts().catch(() => [])) as Array<{ id: string; url: string }>).filter((h) => FLEET_HOST_PORTS.some((p) => h.url.endsWith(`:${p}`)));
      for (const h of fleet.hosts) await stopProcess(h.proc, "SIGKILL");
      for (const h of listed) await call("DELETE", `/v1/hosts/${h.id}`).catch(() => undefined);
    }
    await stopClean();
  }
  if (FLEET) await fleet.tearDown();
  if (MEMORY) rmSync(DATA, { recursive: true, force: true });
  log("done");
});

const listHosts = async () => (await callOk("GET", "/v1/hosts")).hosts;

/** Waits until both fleet host agents are registered and up. */
async function hostsUp(): Promise<void> {
  await waitFor("both host agents registered and up", async () => {
    const mine = ((await listHosts()) as Array<{ url: string; status: string }>).filter((h) => FLEET_HOST_PORTS.some((p) => h.url.endsWith(`:${p}`)));
    return mine.length === 2 && mine.every((h) => h.status === "up") ? true : undefined;
  }, 60_000);
}

/** Every sandbox id this run has seen (a tagged sandbox outside it was made by a call whose result was lost). */
const knownIds = new Set<string>();

// ---------------------------------------------------------------------------------------
// Part 1: random kill -9 rounds.

type OpName = "create" | "exec" | "hibernate-warm" | "hibernate-cold" | "wake" | "checkpoint" | "fork" | "restore" | "destroy" | "delete-checkpoint";
const OP_WEIGHTS: Array<[OpName, number]> = [
  ["create", 1], ["exec", 1], ["hibernate-warm", 1], ["hibernate-cold", 2], ["wake", 2],
  ["checkpoint", 1], ["fork", 1], ["restore", 1], ["destroy", 1], ["delete-checkpoint", 1],
];

function pickOp(rng: () => number): OpName {
  const total = OP_WEIGHTS.reduce((n, [, w]) => n + w, 0);
  let x = rng() * total;
  for (const [op, w] of OP_WEIGHTS) if ((x -= w) < 0) return op;
  return "exec";
}

const POOL_MIN = 2;
const POOL_MAX = 3;
const CPS_MAX = 2;

interface World {
  pool: Box[];
  cps: Cp[];
  /** Last known marker of every sandbox (for children whose fork result the client did not see). */
  markers: Map<string, { markerPath: string; marker: string[] }>;
}

/** One round's plan: the op, what it acts on, and the kill delay; all from the round's own PRNG. */
interface Plan {
  op: OpName;
  delayMs: number;
  rng: () => number;
}

function plan(round: number): Plan {
  const rng = roundRng(round);
  const op = pickOp(rng);
  const delayMs = Math.floor(rng() * (MAX_KILL_DELAY_MS + 1));
  return { op, delayMs, rng };
}

function track(world: World, box: Box): void {
  knownIds.add(box.id);
  world.markers.set(box.id, { markerPath: box.markerPath, marker: box.marker });
  world.pool.push(box);
}

/** Prepares (acknowledged, nothing killed) and returns the raced call plus how to read its outcome. */
async function prepare(world: World, p: Plan): Promise<{ label: string; run: () => Promise<Outcome>; apply: (o: Outcome) => Box[] }> {
  const rng = p.rng;
  const target = pick(rng, world.pool);
  const needCp = async (): Promise<Cp> => {
    if (world.cps.length) return pick(rng, world.cps);
    const c = await callOk("POST", `/v1/sandboxes/${target.id}/checkpoints`, {});
    target.expect = ["running"];
    const cp: Cp = { id: c.id, sandbox: target.id, markerPath: target.markerPath, marker: [...target.marker], exists: [true] };
    world.cps.push(cp);
    return cp;
  };
  const either = (box: Box, before: Expect[], after: Expect, o: Outcome) => {
    box.expect = o.kind === "ok" ? [after] : [...new Set([...before, after])];
  };
  switch (p.op) {
    case "create":
      return {
        label: "create",
        run: () => attempt("POST", "/v1/sandboxes", { persistent: true, metadata: TAG }),
        apply: (o) => (o.kind === "ok" ? [{ id: o.body.id, markerPath: `/root/den-crash-${o.body.id}`, marker: [], expect: ["running"], origin: "create" }] : []),
      };
    case "exec": {
      const next = `${target.marker[0]!.split("~")[0]}~${Math.floor(rng() * 1e6)}`;
      return {
        label: `exec (rewrite marker) on ${target.id}`,
        run: () => attempt("POST", `/v1/sandboxes/${target.id}/exec`, { cmd: `echo ${next} > ${target.markerPath}.tmp && mv ${target.markerPath}.tmp ${target.markerPath} && sync` }),
        apply: (o) => {
          target.marker = o.kind === "ok" && o.body.exit_code === 0 ? [next] : [...target.marker, next];
          return [];
        },
      };
    }
    case "hibernate-warm":
      return {
        label: `hibernate warm ${target.id}`,
        run: () => attempt("POST", `/v1/sandboxes/${target.id}/hibernate`, { mode: "warm" }),
        apply: (o) => (either(target, ["running"], "warm", o), []),
      };
    case "hibernate-cold": {
      const fromWarm = rng() < 0.3;
      if (fromWarm) {
        await callOk("POST", `/v1/sandboxes/${target.id}/hibernate`, { mode: "warm" });
        target.expect = ["warm"];
      }
      const before = target.expect;
      return {
        label: `hibernate cold ${target.id}${fromWarm ? " (from warm)" : ""}`,
        run: () => attempt("POST", `/v1/sandboxes/${target.id}/hibernate`, { mode: "cold" }),
        apply: (o) => (either(target, before, "cold", o), []),
      };
    }
    case "wake": {
      const mode = rng() < 0.5 ? "warm" : "cold";
      await callOk("POST", `/v1/sandboxes/${target.id}/hibernate`, { mode });
      target.expect = [mode];
      return {
        label: `wake ${target.id} (${mode})`,
        run: () => attempt("POST", `/v1/sandboxes/${target.id}/wake`),
        apply: (o) => (either(target, [mode], "running", o), []),
      };
    }
    case "checkpoint":
      return {
        label: `checkpoint ${target.id}`,
        run: () => attempt("POST", `/v1/sandboxes/${target.id}/checkpoints`, {}),
        apply: (o) => {
          if (o.kind === "ok") world.cps.push({ id: o.body.id, sandbox: target.id, markerPath: target.markerPath, marker: [...target.marker], exists: [true] });
          return [];
        },
      };
    case "fork": {
      const count = rng() < 0.5 ? 1 : 2;
      const parentMarker = [...target.marker];
      return {
        label: `fork ${target.id} x${count}`,
        run: () => attempt("POST", `/v1/sandboxes/${target.id}/fork`, { count }),
        apply: (o) => {
          if (o.kind !== "ok") return [];
          return o.body.sandboxes.map((s: any) => ({ id: s.id, markerPath: target.markerPath, marker: parentMarker, expect: ["running"], origin: `fork of ${target.id}` }));
        },
      };
    }
    case "restore": {
      const cp = await needCp();
      return {
        label: `restore checkpoint ${cp.id} (of ${cp.sandbox})`,
        run: () => attempt("POST", `/v1/checkpoints/${cp.id}/restore`, { persistent: true, metadata: TAG }),
        apply: (o) => (o.kind === "ok" ? [{ id: o.body.id, markerPath: cp.markerPath, marker: cp.marker, expect: ["running"], origin: `restore of ${cp.id}` }] : []),
      };
    }
    case "destroy":
      return {
        label: `destroy ${target.id}`,
        run: () => attempt("DELETE", `/v1/sandboxes/${target.id}`),
        apply: (o) => (either(target, target.expect, "destroyed", o), []),
      };
    case "delete-checkpoint": {
      const cp = await needCp();
      return {
        label: `delete checkpoint ${cp.id}`,
        run: () => attempt("DELETE", `/v1/checkpoints/${cp.id}`),
        apply: (o) => {
          cp.exists = o.kind === "ok" ? [false] : [true, false];
          return [];
        },
      };
    }
  }
}

/**
 * After a restart: every invariant, for the pool and for whatever the lost calls made.
 * Repairs as it goes (a broken sandbox is destroyed and dropped) so the next round starts clean.
 */
/**
 * The outbox against the events log: each tracked sandbox's lifecycle events and its webhook
 * deliveries are the same sequence (the two commit together, whatever was killed when).
 */
async function webhooksMatch(): Promise<string[]> {
  if (!hookId) return [];
  const told = new Map<string, string[]>();
  for (let cursor: string | null = null, first = true; first || cursor; first = false) {
    const page: any = await callOk("GET", `/v1/webhooks/${hookId}/deliveries?limit=200${cursor ? `&cursor=${cursor}` : ""}`);
    for (const d of page.deliveries) if (d.sandbox_id) told.set(d.sandbox_id, [d.type, ...(told.get(d.sandbox_id) ?? [])]);
    cursor = page.next_cursor;
  }
  const kinds: Record<string, string> = { hibernated: "sandbox.hibernated", destroyed: "sandbox.destroyed", lost: "sandbox.lost", error: "sandbox.error", forked: "sandbox.forked", checkpoint: "checkpoint.created", "checkpoint.deleted": "checkpoint.deleted" };
  const problems: string[] = [];
  for (const id of knownIds) {
    const r = await call("GET", `/v1/sandboxes/${id}/events`);
    if (r.status !== 200) continue;
    const events = (r.body.events as Array<{ type: string }>).filter((e) => e.type === "running" || kinds[e.type]);
    const got = told.get(id) ?? [];
    const want = events.map((e) => (e.type === "running" ? "sandbox.created|sandbox.woken|sandbox.recovered" : kinds[e.type]!));
    const fits = got.length === want.length && got.every((t, i) => want[i]!.split("|").includes(t));
    if (!fits) problems.push(`${id}: the events log has ${events.map((e) => e.type).join(",") || "none"}, its webhook deliveries ${got.join(",") || "none"}`);
  }
  return problems;
}

async function checkWorld(world: World): Promise<string[]> {
  const problems: string[] = [];
  problems.push(...(await settle()));
  problems.push(...(await webhooksMatch()));
  problems.push(...(await noBrokenSandboxes()));
  problems.push(...(await staysDestroyed()));
  const listed = await listSandboxes();

  // Tracked sandboxes: in a state the client may expect (read before any exec wakes them).
  const alive: Box[] = [];
  for (const box of world.pool) {
    const r = await call("GET", `/v1/sandboxes/${box.id}`);
    const st = r.status === 200 ? stateOf(r.body) : `missing (${r.status})`;
    const ok = (box.expect as string[]).includes(st);
    // (lost, error and creating are already reported by noBrokenSandboxes)
    if (!ok && !["lost", "error", "creating"].includes(st)) problems.push(`${box.id} (${box.origin}) is ${st}${r.body?.state_reason ? `/${r.body.state_reason}` : ""}, expected ${box.expect.join(" or ")}`);
    if (st === "running" || st === "warm" || st === "cold") alive.push(box);
    else if (st === "destroyed") destroyed.add(box.id);
    else await destroyQuietly([box.id]);
  }

  // Children of calls whose result the client did not see: usable (or destroyed), never broken.
  const poolIds = new Set(world.pool.map((b) => b.id));
  for (const s of listed.filter((s) => tagged(s) && !poolIds.has(s.id) && !knownIds.has(s.id))) {
    knownIds.add(s.id);
    const from = s.metadata.forked_from ? world.markers.get(s.metadata.forked_from) : s.metadata.restored_from ? world.cps.find((c) => c.id === s.metadata.restored_from) : undefined;
    const origin = s.metadata.forked_from ? `unacknowledged fork of ${s.metadata.forked_from}` : s.metadata.restored_from ? `unacknowledged restore of ${s.metadata.restored_from}` : "unacknowledged create";
    log(`  found ${s.id} (${origin}), ${stateOf(s)}`);
    if (s.state !== "running" && s.state !== "hibernated") {
      await destroyQuietly([s.id]);
      continue; // reported by noBrokenSandboxes
    }
    alive.push({ id: s.id, markerPath: from?.markerPath ?? "", marker: from?.marker ?? [], expect: [stateOf(s) as Expect], origin });
  }

  // Host VMs and the store, before execs change what holds a VM.
  problems.push(...(await vmsMatch()));
  problems.push(...(await storeMatches()));

  // Checkpoints: present or gone as the client may expect; new ones (unseen results) are complete (storeMatches).
  const cpsListed = new Map((await listCheckpoints()).map((c) => [c.id, c]));
  for (const cp of [...world.cps]) {
    const present = cpsListed.has(cp.id);
    if (!cp.exists.includes(present)) problems.push(`checkpoint ${cp.id} ${present ? "exists" : "is gone"}, expected ${cp.exists.map((e) => (e ? "present" : "gone")).join(" or ")}`);
    if (!present) world.cps.splice(world.cps.indexOf(cp), 1);
    else cp.exists = [true];
  }
  for (const c of cpsListed.values()) {
    if (world.cps.some((cp) => cp.id === c.id) || !knownIds.has(c.sandbox_id)) continue;
    const m = world.markers.get(c.sandbox_id);
    log(`  found checkpoint ${c.id} of ${c.sandbox_id} (unacknowledged)`);
    if (m) world.cps.push({ id: c.id, sandbox: c.sandbox_id, markerPath: m.markerPath, marker: [...m.marker], exists: [true] });
    else await deleteCheckpointsQuietly([c.id]);
  }

  // Every live sandbox: an exec (which wakes it) shows its marker and its background process.
  const next: Box[] = [];
  for (const box of alive) {
    if (!box.markerPath || box.marker.length === 0) {
      // A sandbox whose creation we saw (or found) but never marked: usable means we can mark it now.
      try {
        const fresh = await setupMarker(box.id);
        next.push({ ...fresh, origin: box.origin });
      } catch (e) {
        problems.push(`${box.id} (${box.origin}) is not usable: ${(e as Error).message}`);
        await destroyQuietly([box.id]);
      }
      continue;
    }
    const seen = await execCheck(box.id, box.markerPath, box.marker);
    if (seen.problem) {
      problems.push(`${seen.problem} (${box.origin})`);
      await destroyQuietly([box.id]);
      continue;
    }
    next.push({ ...box, marker: [seen.marker!], expect: ["running"] });
  }

  // The pool for the next round: at most POOL_MAX, the rest destroyed (acknowledged).
  world.pool = [];
  for (const box of next) {
    if (world.pool.length < POOL_MAX) {
      world.pool.push(box);
      world.markers.set(box.id, { markerPath: box.markerPath, marker: box.marker });
    } else {
      await callOk("DELETE", `/v1/sandboxes/${box.id}`);
      destroyed.add(box.id);
    }
  }
  while (world.cps.length > CPS_MAX) await callOk("DELETE", `/v1/checkpoints/${world.cps.shift()!.id}`);
  return problems;
}

describe(`random kill -9 rounds (DEN_CRASH_SEED=${SEED}, DEN_CRASH_ROUNDS=${ROUNDS})`, () => {
  const world: World = { pool: [], cps: [], markers: new Map() };
  const failed: string[] = [];
  before(async () => {
    await start();
    hookId = (await callOk("POST", "/v1/webhooks", { url: "http://127.0.0.2:9/never-answers" })).id;
    for (let i = 0; i < POOL_MIN; i++) track(world, await newBox());
  });

  for (let round = 0; round < ROUNDS; round++) {
    const p = plan(round);
    test(`round ${round + 1}/${ROUNDS}: ${p.op}, kill -9 at ${p.delayMs} ms`, async () => {
      if (!server) await start();
      while (world.pool.length < POOL_MIN) track(world, await newBox());
      const op = await prepare(world, p);
      const t0 = Date.now();
      const pending = op.run();
      await sleep(p.delayMs);
      await killHard();
      const outcome = await pending;
      const seen = Date.now() - t0;
      log(`round ${round + 1}: ${op.label}; killed at ${p.delayMs} ms; client saw ${describeOutcome(outcome)}${outcome.kind === "dropped" ? "" : ` after ${seen} ms`}`);
      for (const b of op.apply(outcome)) track(world, b);
      await start();
      const problems = await checkWorld(world);
      if (problems.length) failed.push(`round ${round + 1} (${op.label}, kill at ${p.delayMs} ms, client saw ${outcome.kind}): ${problems.length} problem(s)`);
      failIf(problems, `round ${round + 1} (${op.label}, killed at ${p.delayMs} ms, client saw ${describeOutcome(outcome)})`);
    });
  }

  test("at the end: everything destroyed, a clean stop, no VM of this instance left", async () => {
    log(failed.length ? `seed ${SEED}: ${failed.length} of ${ROUNDS} rounds failed:\n  ${failed.join("\n  ")}` : `seed ${SEED}: all ${ROUNDS} rounds held`);
    if (!server) await start();
    const mine = (await listSandboxes()).filter(tagged).map((s) => s.id);
    await destroyQuietly([...mine, ...world.pool.map((b) => b.id)]);
    const cps = (await listCheckpoints()).filter((c) => knownIds.has(c.sandbox_id));
    await deleteCheckpointsQuietly(cps.map((c) => c.id));
    world.pool = [];
    world.cps = [];
    assert.deepEqual((await listCheckpoints()).filter((c) => knownIds.has(c.sandbox_id)), []);
    if (FLEET) {
      // The host agents own the VMs (their pools too): they stop cleanly (a drain with nothing
      // left to drain) while the control plane answers; the fault points start them again.
      for (const h of fleet.hosts) {
        const proc = h.proc;
        await stopProcess(proc, "SIGTERM");
        assert.equal(proc?.exitCode, 0, `the host agent on ${h.port} stops cleanly on SIGTERM; log: ${h.log.slice(-600)}`);
      }
    }
    assert.equal(await stopClean(), 0, "den serve stops cleanly on SIGTERM");
    const left = [...runningVms({ pooled: true }).keys()];
    assert.deepEqual(left, [], "no QEMU of this instance outlives the run (the pool's neither)");
  });
});

// ---------------------------------------------------------------------------------------
// Part 2: fault points.

type FaultOp = "hibernate-cold" | "wake-cold" | "checkpoint" | "fork";

function faultOp(point: FaultPoint): FaultOp {
  if (point.startsWith("hibernate-cold-") || point === "snapshot-upload-mid") return "hibernate-cold";
  if (point.startsWith("wake-cold-")) return "wake-cold";
  if (point.startsWith("checkpoint-")) return "checkpoint";
  return "fork";
}

describe("fault points: the server dies at each point, and the restart converges", () => {
  const markerDir = mkdtempSync(join(tmpdir(), "den-crash-fault-"));
  // The control plane names its armed point in a file it reads at each point: one process
  // serves every point until one kills it (a restart per point to arm it cost ~2 s each).
  const armFile = join(markerDir, "armed");
  const hit = join(markerDir, "hit");
  const faultEnv = { DEN_FAULT_POINT_FILE: armFile, DEN_FAULT_MARKER: hit };
  const arm = (point: FaultPoint | undefined) => (point ? writeFileSync(armFile, point) : rmSync(armFile, { force: true }));
  before(async () => {
    // (the random rounds end by stopping the fleet's host agents)
    if (FLEET && fleet.hosts.some((h) => !h.proc || exited(h.proc))) {
      if (!server) await start(faultEnv);
      for (const [i, h] of fleet.hosts.entries()) if (!h.proc || exited(h.proc)) await fleet.startHost(i);
      await hostsUp();
    }
  });
  after(async () => {
    arm(undefined);
    await stopClean();
    rmSync(markerDir, { recursive: true, force: true });
  });

  const chosen = process.env.DEN_CRASH_POINTS ?? (SINGLE_REAL ? [...HOST_POINTS].join(",") : "all");
  const points = chosen === "all" ? FAULT_POINTS : FAULT_POINTS.filter((p) => chosen.split(",").includes(p));
  for (const point of points) {
    test(point, async () => {
      const op = faultOp(point);
      rmSync(hit, { force: true });
      arm(undefined);
      const created: string[] = [];
      let box: Box | undefined;
      // In a fleet, a point in the host agent's code is armed in both host agents (the
      // control plane keeps running and must converge once the dead one is back).
      const onHost = FLEET && HOST_POINTS.has(point);
      const armedEnv = { DEN_FAULT_POINT: point, DEN_FAULT_MARKER: hit };
      try {
        if (op === "wake-cold") {
          // Cold-hibernated with the point not armed, then the armed server wakes it.
          if (!server) await start(faultEnv);
          box = await newBox();
          created.push(box.id);
          knownIds.add(box.id);
          const h = await callOk("POST", `/v1/sandboxes/${box.id}/hibernate`, { mode: "cold" });
          assert.equal(h.hibernate_mode, "cold");
        }
        const exit = (c: ChildProcess) => new Promise<ChildProcess>((r) => (exited(c) ? r(c) : c.once("exit", () => r(c))));
        let armed: ChildProcess;
        let gone: Promise<ChildProcess>;
        if (onHost) {
          if (!server) await start(faultEnv);
          const procs = await Promise.all(fleet.hosts.map((_, i) => fleet.startHost(i, armedEnv)));
          await hostsUp();
          gone = Promise.race(procs.map(exit));
          armed = procs[0]!;
        } else {
          armed = server ?? (await start(faultEnv));
          gone = exit(armed);
        }
        if (!box) {
          box = await newBox();
          created.push(box.id);
          knownIds.add(box.id);
        }
        const id = box.id;
        const path = { "hibernate-cold": `/v1/sandboxes/${id}/hibernate`, "wake-cold": `/v1/sandboxes/${id}/wake`, checkpoint: `/v1/sandboxes/${id}/checkpoints`, fork: `/v1/sandboxes/${id}/fork` }[op];
        const body = { "hibernate-cold": { mode: "cold" }, "wake-cold": undefined, checkpoint: {}, fork: { count: 1 } }[op];
        if (!onHost) arm(point);
        const outcome = attempt("POST", path, body).then((o) => {
          if (o.kind === "ok" && op === "fork") for (const s of o.body.sandboxes) created.push(s.id);
          return o;
        });
        if (!onHost) await outcome;
        // (a host agent dies mid-call: the control plane may answer only once it is back)
        const died = await within(gone.then((c) => (armed = c)), onHost ? 30_000 : 5000);
        arm(undefined); // before anything starts again: a recovery may pass the same point
        const who = onHost ? "host agent" : "server";
        const reached = existsSync(hit) ? readFileSync(hit, "utf8").trim() : "";
        log(`${point}: ${op} -> ${onHost ? "(pending)" : describeOutcome(await outcome)}; ${who} ${died ? `died (${armed.signalCode ?? armed.exitCode})` : "kept running"}; marker ${JSON.stringify(reached)}`);
        if (!died) {
          if (onHost) for (const i of fleet.hosts.keys()) await fleet.startHost(i);
          else await killHard(armed);
          assert.fail(`fault point ${point} was not reached: ${op} answered ${describeOutcome(await outcome)} and the ${who} kept running`);
        }
        assert.equal(reached, point, `the ${who} died (${armed.signalCode ?? armed.exitCode}) at the armed fault point; log: ${onHost ? fleet.hosts.map((h) => h.log).join("\n").slice(-600) : serverLog.slice(-600)}`);
        assert.equal(armed.signalCode, "SIGKILL");

        if (onHost) {
          // Both host agents again, unarmed; the control plane was never restarted.
          await Promise.all(fleet.hosts.map((_, i) => fleet.startHost(i)));
          await hostsUp();
          log(`${point}: host agents back; the ${op} answered ${describeOutcome(await outcome)}`);
        } else await start(faultEnv);
        const problems: string[] = [];
        problems.push(...(await settle()));
        problems.push(...(await noBrokenSandboxes()));
        const row = (await call("GET", `/v1/sandboxes/${id}`)).body;
        const allowed: Record<FaultOp, string[]> = { "hibernate-cold": ["running", "cold"], "wake-cold": ["cold", "running"], checkpoint: ["running"], fork: ["running"] };
        if (!allowed[op].includes(stateOf(row))) problems.push(`${id} is ${stateOf(row)}/${row.state_reason}, expected ${allowed[op].join(" or ")}`);
        if (inFlight(row)) problems.push(`${id} still shows operation ${JSON.stringify(row.operation)}`);
        const children = (await listSandboxes()).filter((s) => s.metadata?.forked_from === id);
        for (const c of children) created.push(c.id);
        problems.push(...(await vmsMatch()));
        problems.push(...(await storeMatches()));
        // The sandbox and any child: marker and background process intact (the exec wakes a cold one).
        if (["running", "warm", "cold"].includes(stateOf(row))) {
          const bad = (await execCheck(id, box.markerPath, box.marker)).problem;
          if (bad) problems.push(bad);
        }
        for (const c of children) {
          if (c.state !== "running" && c.state !== "hibernated") continue; // broken ones: noBrokenSandboxes
          const bad = (await execCheck(c.id, box.markerPath, box.marker)).problem;
          if (bad) problems.push(`fork child: ${bad}`);
        }
        // The wake dropped what the cold snapshot was: the store follows.
        problems.push(...(await storeMatches()));
        failIf(problems, `after a crash at ${point}`);
      } finally {
        arm(undefined);
        if (!server) await start(faultEnv);
        const cps = (await listCheckpoints()).filter((c) => created.includes(c.sandbox_id));
        await deleteCheckpointsQuietly(cps.map((c) => c.id));
        await destroyQuietly(created);
        // (the server stays up for the next point)
      }
    });
  }
});
