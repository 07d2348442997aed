import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { after, before } from "node:test";
import { randomBytes } from "node:crypto";
import { createServer, type Server } from "node:net";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { HostHttp, MemoryHostAgent } from "@den/host-agent";
import { type Ca, type MachineTls, initCa, issueMachine, writeIdentityFiles } from "@den/pki";
import { findInstanceProcesses, newId } from "@den/runtime";
import { loadConfig, openStore, startServer, type Clock, type RunningServer } from "../src/index.js";

export const ADMIN_KEY = "den_test_admin_key_0123456789";

/** The suite's data dir (scripts/test.sh sets it and builds the base template there). */
export function dataDir(): string {
  const d = process.env.DEN_DATA_DIR;
  if (!d) throw new Error("DEN_DATA_DIR is not set: run the suite with `npm test`");
  return d;
}

/**
 * A port free now on 127.0.0.1, for a test whose server restarts on the same port (a kill -9
 * round's): a fixed one collided when two checkouts ran the suite at once.
 */
export async function freePort(): Promise<number> {
  return (await freePorts(1))[0]!;
}

/**
 * `n` distinct ports free now (held together while they are picked), below the kernel's
 * ephemeral range: a port the kernel handed out and took back can next be the local end of an
 * outgoing connection (a Postgres pool's), and a server restarting on it then fails with
 * EADDRINUSE for as long as that connection lives.
 */
export async function freePorts(n: number): Promise<number[]> {
  const top = Math.min(ephemeralLow(), 32768);
  const held: Server[] = [];
  try {
    for (let tries = 0; held.length < n; tries++) {
      if (tries > 500) throw new Error(`no ${n} free ports below ${top}`);
      const port = top > 11000 ? 10000 + Math.floor(Math.random() * (top - 10000)) : 0;
      const s = createServer();
      const ok = await new Promise<boolean>((resolve) => {
        s.once("error", () => resolve(false));
        s.listen(port, "127.0.0.1", () => resolve(true));
      });
      if (ok) held.push(s);
    }
    return held.map((s) => (s.address() as { port: number }).port);
  } finally {
    await Promise.all(held.map((s) => new Promise((r) => s.close(r))));
  }
}

function ephemeralLow(): number {
  try {
    return Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]) || 32768;
  } catch {
    return 32768;
  }
}

/** An in-process server on a free port, with fast reapers. */
export async function testServer(env: Record<string, string> = {}): Promise<RunningServer> {
  // DEN_HOST_TRANSPORT=loopback runs the same tests with every host call over HTTP.
  // DEN_DATABASE_URL (scripts/with-postgres.sh) runs them on Postgres.
  const transport = process.env.DEN_HOST_TRANSPORT ? { DEN_HOST_TRANSPORT: process.env.DEN_HOST_TRANSPORT } : {};
  if (process.env.DEN_DATABASE_URL) Object.assign(transport, { DEN_DATABASE_URL: process.env.DEN_DATABASE_URL });
  const config = loadConfig({ port: "0", dataDir: dataDir() }, { DEN_API_KEY: ADMIN_KEY, DEN_REAPER_INTERVAL_MS: "500", DEN_STORE_GC_GRACE_SECONDS: "0", DEN_ENVD_PORT: "0", DEN_BUILD_EGRESS: "none", ...transport, ...env });
  return startServer(config);
}

/** A server on the in-memory host, the host itself, and a client. */
export interface MemoryServer {
  server: RunningServer;
  host: MemoryHostAgent;
  api: ReturnType<typeof client>;
  /** Its data dir (a temp dir of its own). */
  dataDir: string;
  /** A clean stop and a new start on the same database, data dir and host (as `den serve` restarted). */
  restart(env?: Record<string, string>): Promise<void>;
  /** Stops the server, closes the host, removes the data dir (and the Postgres database). */
  close(): Promise<void>;
}

/** A Postgres database of its own for one memory server (the suite's Postgres pass), dropped at close. */
export async function ownDatabase(): Promise<{ url: string; drop: () => Promise<void> } | undefined> {
  const base = process.env.DEN_DATABASE_URL;
  if (!base?.startsWith("postgres")) return undefined;
  const name = `den_mem_${randomBytes(6).toString("hex")}`;
  const admin = new pg.Client({ connectionString: base });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  const url = new URL(base);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async drop() {
      const c = new pg.Client({ connectionString: base });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).finally(() => c.end());
    },
  };
}

/**
 * An in-process server on the in-memory host (no VM, no QEMU: MemoryHostAgent), for the
 * tests of what is not the VM: a data dir of its own, and on Postgres (DEN_DATABASE_URL) a
 * database of its own, so these files can run side by side. `clock` drives the control
 * plane and the host alike (ManualClock from @den/host-agent).
 */
export async function memoryServer(env: Record<string, string> = {}, opts: { clock?: Clock } = {}): Promise<MemoryServer> {
  const dir = mkdtempSync(join(tmpdir(), "den-mem-"));
  const db = await ownDatabase();
  const configOf = (more: Record<string, string>) => loadConfig({ port: "0", dataDir: dir }, {
    DEN_API_KEY: ADMIN_KEY, DEN_REAPER_INTERVAL_MS: "100", DEN_STORE_GC_GRACE_SECONDS: "0", DEN_ENVD_PORT: "0", DEN_HOST_TRANSPORT: "memory",
    ...(db ? { DEN_DATABASE_URL: db.url } : {}), ...env, ...more,
  });
  const config = configOf({});
  const host = await MemoryHostAgent.open({ store: openStore(config), capacity: config.capacity, ...(opts.clock ? { clock: opts.clock } : {}) });
  const start = (c: ReturnType<typeof configOf>) => startServer(c, { host, ...(opts.clock ? { clock: opts.clock } : {}) });
  const m: MemoryServer = {
    server: await start(config),
    host,
    api: undefined as unknown as ReturnType<typeof client>,
    dataDir: dir,
    async restart(more = {}) {
      await m.server.close();
      m.server = await start(configOf(more));
      m.api = client(m.server.url);
    },
    async close() {
      await m.server.close();
      host.close();
      await db?.drop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  m.api = client(m.server.url);
  return m;
}

/** For a describe block: a memory server before its tests, closed after them (read its fields inside tests). */
export function memoryFixture(env: Record<string, string> = {}, opts: { clock?: Clock } = {}): MemoryServer {
  let m: MemoryServer | undefined;
  before(async () => void (m = await memoryServer(env, opts)));
  after(async () => await m?.close());
  const up = () => {
    if (!m) throw new Error("the memory server is not up yet (read it inside a test)");
    return m;
  };
  return {
    get server() { return up().server; },
    get host() { return up().host; },
    get api() { return up().api; },
    get dataDir() { return up().dataDir; },
    restart: (more) => up().restart(more),
    close: () => up().close(),
  };
}

/** Create (persistent) and exec through a client, failing the test on anything but success. */
export function sandboxCalls(api: ReturnType<typeof client>) {
  return {
    async exec(id: string, cmd: string): Promise<string> {
      const r = await api("POST", `/v1/sandboxes/${id}/exec`, { cmd });
      if (r.status !== 200) throw new Error(`exec ${cmd}: ${r.status} ${r.text}`);
      return r.body.stdout as string;
    },
    async create(body: Record<string, unknown> = {}): Promise<string> {
      const r = await api("POST", "/v1/sandboxes", { persistent: true, ...body });
      if (r.status !== 201) throw new Error(`create: ${r.status} ${r.text}`);
      return r.body.id as string;
    },
  };
}

/** A small JSON client for the API (the SDK has its own tests). */
export function client(base: string, key = ADMIN_KEY) {
  return async function call(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: any; text: string; headers: Record<string, string> }> {
    const init: RequestInit = { method, headers: { authorization: `Bearer ${key}`, ...headers } };
    if (body !== undefined) {
      init.body = typeof body === "string" || body instanceof Uint8Array ? (body as string) : JSON.stringify(body);
      if (!headers["content-type"]) (init.headers as Record<string, string>)["content-type"] = "application/json";
    }
    const res = await fetch(base + path, init);
    const text = await res.text();
    let parsed: unknown = undefined;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    return { status: res.status, body: parsed, text, headers: Object.fromEntries(res.headers) };
  };
}

/** The built `den` binary. */
export const CLI = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "cli", "dist", "src", "bin.js");

/** Runs `den ARGS` to its end against a server (env DEN_API_URL, DEN_API_KEY), with `input` on its stdin. */
export function runCli(args: string[], env: Record<string, string>, input = ""): Promise<{ code: number; out: string; err: string }> {
  return new Promise((resolve) => {
    const c = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, ...env } });
    let out = "";
    let err = "";
    c.stdout!.on("data", (d: Buffer) => (out += d));
    c.stderr!.on("data", (d: Buffer) => (err += d));
    c.on("close", (code) => resolve({ code: code ?? -1, out, err }));
    c.stdin!.end(input);
  });
}

/**
 * `den ARGS` against the server at `url()`: `run` as it ends, `ok` failing the test on a
 * non-zero exit, `json` with --json, parsed.
 */
export function cliCalls(url: () => string) {
  const run = (args: string[], opts: { input?: string; key?: string } = {}) => runCli(args, { DEN_API_URL: url(), DEN_API_KEY: opts.key ?? ADMIN_KEY }, opts.input);
  const ok = async (args: string[], opts: { input?: string } = {}) => {
    const r = await run(args, opts);
    if (r.code !== 0) throw new Error(`den ${args.join(" ")} exited ${r.code}: ${r.err}`);
    return r;
  };
  const json = async (args: string[]) => JSON.parse((await ok([...args, "--json"])).out);
  return { run, ok, json };
}

/** `den serve` as its own process, for the crash tests (kill -9, restart). */
export async function spawnServer(port: number, env: Record<string, string> = {}): Promise<ChildProcess> {
  const child = spawn(process.execPath, [CLI, "serve", "--port", String(port)], {
    env: { ...process.env, DEN_DATA_DIR: env.DEN_DATA_DIR ?? dataDir(), DEN_API_KEY: ADMIN_KEY, DEN_REAPER_INTERVAL_MS: "500", DEN_LOG_LEVEL: "warn", DEN_STORE_GC_GRACE_SECONDS: "0", DEN_ENVD_PORT: "0", ...env },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let err = "";
  child.stderr!.on("data", (d: Buffer) => (err = (err + d.toString()).slice(-4000)));
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`den serve exited: ${err}`);
    try {
      const r = await fetch(`http://127.0.0.1:${port}/healthz`);
      if (r.ok) return child;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`den serve did not come up: ${err}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

export async function waitFor<T>(what: string, fn: () => Promise<T | undefined>, timeoutMs = 30_000, everyMs = 200): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/**
 * For a describe block: an in-process server before its tests, and after them whatever
 * they left (sandboxes, checkpoints) removed and the server closed. Read `.server` and
 * `.api` inside tests.
 */
export function serverFixture(): { server: RunningServer; api: ReturnType<typeof client> } {
  const f = {} as { server: RunningServer; api: ReturnType<typeof client> };
  before(async () => {
    f.server = await testServer();
    f.api = client(f.server.url);
  });
  after(async () => {
    if (!f.server) return;
    for (const s of (await f.api("GET", "/v1/sandboxes?limit=200")).body?.sandboxes ?? []) await f.api("DELETE", `/v1/sandboxes/${s.id}`);
    for (const c of (await f.api("GET", "/v1/checkpoints")).body?.checkpoints ?? []) await f.api("DELETE", `/v1/checkpoints/${c.id}`);
    await f.server.close();
  });
  return f;
}

/** The pid of a sandbox's QEMU, found by its instance tag (the host agent may be another process). */
export function vmPid(server: RunningServer, id: string): number {
  const pid = findInstanceProcesses(server.cp.hosts.first!.instance).get(id);
  if (pid === undefined) throw new Error(`sandbox ${id} has no QEMU`);
  return pid;
}

/** Waits until a warm hibernation's local snapshot is written (it is written behind the hibernate's answer). */
export async function untilWarmSnapshot(server: RunningServer, id: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const snap = (await server.cp.store.sandboxes.get(id))?.hibernate_snapshot;
    if (snap && existsSync(join(dataDir(), "snapshots", snap, "manifest.json"))) return;
    if (Date.now() > deadline) throw new Error(`sandbox ${id}: no warm snapshot after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export const exited = (c: ChildProcess) => c.exitCode !== null || c.signalCode !== null;

/** Sends `signal` and waits for the process to be gone. */
export async function stopProcess(child: ChildProcess | undefined, signal: NodeJS.Signals): Promise<void> {
  if (!child || exited(child)) return;
  const gone = new Promise((r) => child.once("exit", r));
  child.kill(signal);
  await gone;
}

/**
 * The test process's deployment CA, made once in a temp dir (removed at exit): control planes
 * get its directory as DEN_CA_DIR (they issue their own certificates from it), hosts get
 * certificates from it (`hostTlsDir`), as `den ca issue` would make them.
 */
let fleetCa: Promise<{ dir: string; ca: Ca }> | undefined;
export function testCa(): Promise<{ dir: string; ca: Ca }> {
  fleetCa ??= (async () => {
    const root = mkdtempSync(join(tmpdir(), "den-test-ca-"));
    process.on("exit", () => rmSync(root, { recursive: true, force: true }));
    const dir = join(root, "ca");
    return { dir, ca: await initCa(dir, { commonName: "Den test CA" }) };
  })();
  return fleetCa;
}

/** A control plane's env for mutual TLS with its hosts: the test CA (DEN_CA_DIR) and its hosts' port (DEN_FLEET_PORT). */
export async function fleetEnv(fleetPort: number): Promise<Record<string, string>> {
  return { DEN_CA_DIR: (await testCa()).dir, DEN_FLEET_PORT: String(fleetPort) };
}

/**
 * The instance id of the host whose data dir is `dir`: the one kept there, or one minted now
 * and kept as the runtime would (a host's certificate names it, so it is known before its
 * first start, as `den ca issue --kind host --id` needs it).
 */
export function hostInstance(dir: string): string {
  const file = join(dir, "instance-id");
  const kept = existsSync(file) ? readFileSync(file, "utf8").trim() : "";
  if (kept) return kept;
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const id = newId("den");
  writeFileSync(file, id + "\n");
  return id;
}

/** A new tls dir holding host `instance`'s identity from the test CA (its DEN_TLS_DIR). */
export async function hostTlsDir(instance: string): Promise<string> {
  const { dir: caDir, ca } = await testCa();
  const out = mkdtempSync(join(dirname(caDir), `host-${instance}-`));
  const m = await issueMachine(ca, { kind: "host", id: instance }, { ttlHours: 24 });
  await writeIdentityFiles(out, { keyPem: m.key, certPem: m.cert, caPem: m.ca });
  return out;
}

/** The test's own control-plane certificate of the test CA: what it calls hosts' /host/v1 with. */
let testCp: Promise<MachineTls> | undefined;
export function testControlPlaneTls(): Promise<MachineTls> {
  testCp ??= testCa().then(({ ca }) => issueMachine(ca, { kind: "control-plane", id: "rep_test" }, { ttlHours: 24 }));
  return testCp;
}

/** GETs a host agent's route (/host/v1/...) over mutual TLS as a control plane, its certificate pinned to `instance`. */
export async function hostGet<T = unknown>(port: number, instance: string, path: string): Promise<T> {
  const http = new HostHttp(`https://127.0.0.1:${port}`, { tls: await testControlPlaneTls(), peer: { kind: "host", id: instance } });
  try {
    return (await (await http.request("GET", path, { timeoutMs: 10_000 })).json()) as T;
  } finally {
    http.close();
  }
}

/**
 * `den host run` on `port` with `env` (its data dir, the shared store, DEN_CONTROL_PLANE_URL
 * for a registered one), once it answers over mutual TLS: its identity from the test CA in a
 * tls dir of its own (DEN_TLS_DIR, unless `env` gives one). `instance`: the host's id.
 */
export async function spawnHostAgent(port: number, env: Record<string, string>): Promise<ChildProcess & { instance: string }> {
  const instance = hostInstance(env.DEN_DATA_DIR ?? dataDir());
  const tlsDir = env.DEN_TLS_DIR ?? (await hostTlsDir(instance));
  const child = spawn(process.execPath, [CLI, "host", "run", "--port", String(port)], {
    env: { ...process.env, DEN_DATA_DIR: dataDir(), DEN_LOG_LEVEL: "warn", ...env, DEN_TLS_DIR: tlsDir }, stdio: ["ignore", "ignore", "pipe"],
  });
  let err = "";
  child.stderr!.on("data", (d: Buffer) => {
    err = (err + d.toString()).slice(-4000);
    // DEN_TEST_HOST_LOGS=1: the host agents' logs on the test's stderr (for a failure no answer explains).
    if (process.env.DEN_TEST_HOST_LOGS) process.stderr.write(`[host :${port}] ${d}`);
  });
  await waitFor("den host run", async () => {
    if (exited(child)) throw new Error(`den host run exited: ${err}`);
    return (await hostGet(port, instance, "/host/v1/info").then(() => true, () => undefined));
  }, 60_000, 100);
  return Object.assign(child, { instance });
}

const warnings: string[] = [];
let listening = false;
/**
 * What this host says about a failure no API answer explains, for a test's failure message:
 * Den's own warnings (a fork that could not share its RAM says why), the kernel's last
 * words on killed processes (OOM, seccomp), and the room in /dev/shm and the data dir.
 */
export function hostDiagnostics(): string {
  if (!listening) {
    listening = true;
    process.on("warning", (w) => warnings.push(`${w.name}: ${w.message}`.slice(0, 2000)));
  }
  const run = (cmd: string, args: string[]) => {
    const r = spawnSync(cmd, args, { encoding: "utf8" });
    return r.status === 0 ? r.stdout : `(${cmd}: ${r.error?.message ?? r.stderr})`;
  };
  const kernel = run("dmesg", []).split("\n").filter((l) => /oom|killed process|memory cgroup|audit|segfault/i.test(l)).slice(-8).join("\n");
  return [`warnings: ${warnings.slice(-5).join(" | ") || "none"}`, `kernel: ${kernel || "nothing"}`, run("df", ["-m", "/dev/shm", dataDir()]).trim()].join("\n");
}

/**
 * Whether a browser console message is the dashboard's admin probe refused: each page load asks
 * GET /v1/hosts once to know whether to show Hosts, and Chromium logs an owner key's 403 as an error.
 */
export function adminProbeRefused(m: { text(): string; location(): { url: string } }): boolean {
  return /status of 403/.test(m.text()) && URL.canParse(m.location().url) && new URL(m.location().url).pathname === "/v1/hosts";
}
