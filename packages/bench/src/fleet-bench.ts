/**
 * `node packages/bench/dist/src/fleet-bench.js [--quick] [--runs N] [--json FILE]`, with
 * DEN_DATABASE_URL set (scripts/with-postgres.sh): the costs of running as a fleet.
 *
 * - create -> first exec through a control-plane replica on Postgres with three registered
 *   host agents (each a `den host run` of its own), beside the same through single-node
 *   `den serve` (SQLite, the host agent in process);
 * - cold wake -> first exec on the sandbox's own host, beside the same on another host (its
 *   host drained first, so the wake must place it elsewhere), both from one S3 store (s3rver).
 *
 * There is no raw-QEMU floor for these: the floor of a cold wake is the cold-wake row of
 * `npm run bench`, and of a create its create row.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { cpSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import S3rver from "s3rver";
import { defaultDataDir, findInstanceProcesses } from "@den/runtime";
import { loadConfig, startServer, type RunningServer } from "@den/server";
import { fmt, pct } from "./table.js";

const { values: flags } = parseArgs({ options: { quick: { type: "boolean", default: false }, runs: { type: "string" }, json: { type: "string" } } });
const RUNS = Number(flags.runs ?? (flags.quick ? 3 : 20));
const KEY = "den_bench_fleet_key_0123456789";
const CLI = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "cli", "dist", "src", "bin.js");
const BASE_PORT = 19421;

type Api = (method: string, path: string, body?: unknown) => Promise<any>;
const client = (base: string): Api => async (method, path, body) => {
  const res = await fetch(base + path, { method, headers: { authorization: `Bearer ${KEY}`, ...(body !== undefined ? { "content-type": "application/json" } : {}) }, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : undefined;
};
const time = async (fn: () => Promise<unknown>) => {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
};
const log = (s: string) => process.stderr.write(`[fleet-bench] ${s}\n`);

async function waitUntil(what: string, fn: () => Promise<boolean>, ms = 60_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await fn().catch(() => false))) {
    if (Date.now() > end) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** RUNS creates, each timed to its first exec, then destroyed. */
async function createRuns(api: Api, into: { ms: number[] }): Promise<void> {
  for (let i = 0; i < RUNS; i++) {
    let id = "";
    into.ms.push(await time(async () => {
      id = (await api("POST", "/v1/sandboxes", {})).id;
      await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "true" });
    }));
    await api("DELETE", `/v1/sandboxes/${id}`);
  }
}

async function main(): Promise<void> {
  const dbUrl = process.env.DEN_DATABASE_URL;
  if (!dbUrl?.startsWith("postgres")) throw new Error("the fleet benchmark needs DEN_DATABASE_URL=postgres://... (scripts/with-postgres.sh)");
  const suiteDir = process.env.DEN_DATA_DIR ?? defaultDataDir();
  const root = mkdtempSync(join(tmpdir(), "den-fleet-bench-"));
  const s3 = new S3rver({ port: 0, address: "127.0.0.1", silent: true, directory: join(root, "s3"), configureBuckets: [{ name: "den" }] });
  const { port: s3port } = await s3.run();
  const storeEnv = { DEN_STORE: "s3", DEN_S3_BUCKET: "den", DEN_S3_ENDPOINT: `http://127.0.0.1:${s3port}`, AWS_ACCESS_KEY_ID: "S3RVER", AWS_SECRET_ACCESS_KEY: "S3RVER" };
  const rows: Array<{ op: string; ms: number[] }> = [];
  const row = (op: string) => {
    const r = { op, ms: [] as number[] };
    rows.push(r);
    return r;
  };
  const hosts: ChildProcess[] = [];
  let fleet: RunningServer | undefined;
  let single: RunningServer | undefined;
  let hostIds: string[] = [];
  try {
    // Single node first: SQLite, the host agent in this process.
    cpSync(join(suiteDir, "templates", "base"), join(root, "single", "templates", "base"), { recursive: true });
    single = await startServer(loadConfig({ port: "0", dataDir: join(root, "single") }, { DEN_API_KEY: KEY, DEN_ENVD_PORT: "off", ...storeEnv }));
    await createRuns(client(single.url), row("create -> first exec (single node, SQLite)"));
    await single.close();
    single = undefined;

    // The fleet: one replica on Postgres, three registered host agents with their own data dirs and
    // pools, each joined as an operator would: `den ca init`, a join token, `den host run --join`.
    const cpPort = BASE_PORT + 3;
    const caDir = join(root, "ca");
    const init = spawnSync(process.execPath, [CLI, "ca", "init", "--dir", caDir], { encoding: "utf8" });
    if (init.status !== 0) throw new Error(`den ca init: ${init.stderr}`);
    fleet = await startServer(loadConfig({ port: String(cpPort), dataDir: join(root, "cp"), fleetPort: String(BASE_PORT + 4) }, {
      DEN_API_KEY: KEY, DEN_ENVD_PORT: "off", DEN_DATABASE_URL: dbUrl, DEN_HOST_AGENT_URL: "registered", DEN_CA_DIR: caDir, ...storeEnv,
    }));
    const api = client(fleet.url);
    for (const [i, pool] of ["100.96.0.0/16", "100.97.0.0/16", "100.98.0.0/16"].entries()) {
      const dir = join(root, `host${i}`);
      cpSync(join(suiteDir, "templates", "base"), join(dir, "templates", "base"), { recursive: true });
      const { token } = await api("POST", "/v1/hosts/tokens", {});
      hosts.push(spawn(process.execPath, [CLI, "host", "run", "--port", String(BASE_PORT + i), "--join", token], {
        env: { ...process.env, ...storeEnv, DEN_DATA_DIR: dir, DEN_NET_POOL: pool, DEN_CONTROL_PLANE_URL: fleet.fleetUrl!, DEN_LOG_LEVEL: "warn" },
        stdio: ["ignore", "ignore", "inherit"],
      }));
    }
    await waitUntil("three hosts up", async () => (await api("GET", "/v1/hosts")).hosts.filter((h: { status: string }) => h.status === "up").length === 3);
    const ids = ((await api("GET", "/v1/hosts")).hosts as Array<{ id: string }>).map((h) => h.id);
    hostIds = ids;
    const hostOf = (id: string) => ids.find((h) => findInstanceProcesses(h).has(id));

    await createRuns(api, row("create -> first exec (a replica on Postgres, 3 registered hosts)"));

    const same = row("cold wake -> first exec, on its own host");
    const other = row("cold wake -> first exec, on another host");
    const sbx = (await api("POST", "/v1/sandboxes", { persistent: true })).id as string;
    await api("POST", `/v1/sandboxes/${sbx}/exec`, { cmd: "head -c 64m /dev/urandom > /root/blob && echo ok" });
    for (let i = 0; i < RUNS; i++) {
      await api("POST", `/v1/sandboxes/${sbx}/hibernate`, { mode: "cold" });
      same.ms.push(await time(() => api("POST", `/v1/sandboxes/${sbx}/exec`, { cmd: "true" })));
    }
    for (let i = 0; i < RUNS; i++) {
      const from = hostOf(sbx)!;
      await api("POST", `/v1/sandboxes/${sbx}/hibernate`, { mode: "cold" });
      // Its host drained: the wake is placed on another one (the drain returns at once: nothing is left on it).
      await api("POST", `/v1/hosts/${from}/drain`, {});
      other.ms.push(await time(() => api("POST", `/v1/sandboxes/${sbx}/exec`, { cmd: "true" })));
      if (hostOf(sbx) === from) throw new Error("the wake stayed on the drained host");
      await api("POST", `/v1/hosts/${from}/undrain`, {});
    }
    await api("DELETE", `/v1/sandboxes/${sbx}`);
    for (const h of ids) await api("DELETE", `/v1/hosts/${h}`).catch(() => undefined);
  } finally {
    await single?.close();
    await fleet?.close();
    for (const h of hosts) h.kill("SIGKILL");
    for (const h of hostIds) for (const pid of findInstanceProcesses(h, { pooled: true }).values()) process.kill(pid, "SIGKILL");
    await s3.close();
    rmSync(root, { recursive: true, force: true });
  }
  const header = ["operation", "runs", "p50", "p99"];
  const lines = rows.map((r) => [r.op, String(r.ms.length), fmt(pct(r.ms, 50)), fmt(pct(r.ms, 99))]);
  const w = header.map((_, i) => Math.max(...[header, ...lines].map((l) => l[i]!.length)));
  for (const l of [header, ...lines]) process.stdout.write(l.map((c, i) => (i === 0 ? c.padEnd(w[i]!) : c.padStart(w[i]!))).join("  ") + "\n");
  process.stdout.write("\nA cold wake's snapshot (the sandbox wrote 64 MiB of random data first) comes from the same S3 store either way; another host also has to fetch it with no local copy of anything but the template.\n");
  if (flags.json) writeFileSync(flags.json, JSON.stringify({ date: new Date().toISOString(), runs: RUNS, rows: rows.map((r) => ({ op: r.op, runs: r.ms.length, p50_ms: pct(r.ms, 50), p99_ms: pct(r.ms, 99) })) }, null, 2) + "\n");
  log("done");
}

await main();
