/**
 * Containment: one hostile sandbox runs, in turn, each workload a runaway or malicious
 * agent would (a fork bomb, a memory hog at its limit, a disk fill to its quota, a CPU
 * loop on every vCPU, a console flood, 1 MiB frames on the agent channel) while a
 * neighbour sandbox's execs and the API are probed. Used by the containment test (which
 * asserts) and the containment benchmark (which prints the table); both run a real
 * `den serve` of their own.
 */
import type { ChildProcess } from "node:child_process";
import { readFileSync, statfsSync } from "node:fs";
import { totalmem } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { availableMemoryMb as memAvailableMb } from "@den/host-agent";
import { client, rssMb, spawnDen, type Reply } from "./den-process.js";
import { pct } from "./table.js";

const HERE = dirname(fileURLToPath(import.meta.url));
/** A stand-in agent that floods the channel (the server tests' fixture). */
const FAKE_AGENT = join(HERE, "..", "..", "..", "server", "test", "fixtures", "fake-agent.py");
/** The guest deadline of the server under test: the flood's unanswered call fails after it. */
const DEADLINE_S = 8;

export interface Workload {
  name: string;
  /** The hostile guest's command, run as one exec killed (with all it started) at the window's end. */
  cmd?: string;
  /** Runs to its own end (the disk fill) rather than for the window. */
  untilDone?: boolean;
  /** The agent-channel flood: the agent itself is replaced, so the hostile sandbox answers nothing after. */
  agentFlood?: boolean;
  /** Run in the hostile sandbox once the window is over (and checked: it proves the VM is not paused). */
  after?: string;
}

/** Writes until the guest's disk is full (every byte real: `detect-zeroes` would skip zeros). */
const FILL = "yes 0123456789abcdef0123456789abcdef0123456789abcdef";

export const WORKLOADS: Workload[] = [
  { name: "fork bomb", cmd: "f() { f | f & }; f; sleep 3600" },
  { name: "memory hog at its limit", cmd: "while :; do python3 -c 'x = b\"\\1\" * (600 * 1024**2)' 2>/dev/null; done" },
  { name: "disk fill to its quota", cmd: `${FILL} > /root/fill 2>/dev/null; sync; df -m / | tail -1`, untilDone: true, after: "rm -f /root/fill /root/pad && fstrim / 2>/dev/null; echo alive" },
  { name: "CPU loop on every vCPU", cmd: "for i in $(seq $(nproc)); do (while :; do :; done) & done; wait" },
  { name: "console flood", cmd: "while :; do cat /etc/services > /dev/console; done" },
  { name: "1 MiB frames on the agent channel", agentFlood: true },
];

/**
 * The same, with the disk fill's first part reserved with `fallocate` (no data written) so
 * only its last 512 MiB are real writes: the guest's disk still ends full, in a tenth of the
 * time (the test's version; the benchmark writes every byte).
 */
export const QUICK_WORKLOADS: Workload[] = WORKLOADS.map((w) => w.untilDone
  ? { ...w, cmd: `fallocate -l $(( $(df -B1 --output=avail / | tail -1) - 512 * 1024 * 1024 )) /root/pad && ${w.cmd}` }
  : w);

export interface Sample {
  workload: string;
  execMs: number[];
  apiMs: number[];
  /** Every way the window broke containment (empty when it held). */
  failures: string[];
  /** The lowest MemAvailable and free data-dir disk seen, in MiB; Den's RSS growth over the window. */
  minMemMb: number;
  minDiskMb: number;
  rssGrowthMb: number;
}

export interface Options {
  port: number;
  dataDir: string;
  /** How long each workload runs while it is probed. */
  windowMs: number;
  log?: (s: string) => void;
}

const diskFreeMb = (dir: string) => {
  const st = statfsSync(dir);
  return (st.bavail * st.bsize) / 1024 / 1024;
};

/**
 * Runs the idle window, then every workload in turn, on a `den serve` of its own (port
 * `port`, data dir `dataDir`); returns one sample per window. Containment failures are in
 * each sample's `failures`, never thrown: the caller decides (the test asserts, the
 * benchmark prints).
 */
export async function runContainment(opts: Options, workloads: Workload[] = WORKLOADS): Promise<Sample[]> {
  const log = opts.log ?? (() => undefined);
  const server = await spawnDen(opts.port, opts.dataDir, { DEN_GUEST_DEADLINE_SECONDS: String(DEADLINE_S) });
  const api = client(`http://127.0.0.1:${opts.port}`);
  const made: string[] = [];
  const create = async (body: Record<string, unknown>): Promise<string> => {
    const r = await api("POST", "/v1/sandboxes", { persistent: true, ...body });
    if (r.status !== 201) throw new Error(`create: ${r.status} ${r.text}`);
    made.push(r.body.id);
    return r.body.id as string;
  };
  const exec = (id: string, cmd: string, timeoutMs?: number) => api("POST", `/v1/sandboxes/${id}/exec`, { cmd, ...(timeoutMs ? { timeout_seconds: timeoutMs / 1000 } : {}) });
  try {
    const host = (await api("GET", "/v1/host")).body;
    const reserves = { memMb: totalmem() / 1024 / 1024 - host.capacity.memory_mb, diskMb: host.capacity.disk_reserve_mb as number };
    const neighbour = await create({});
    const hostile = await create({ vcpus: 2 });
    // First execs are slower (the agent's first connection, page faults in a fresh guest): not the idle baseline.
    for (let i = 0; i < 3; i++) await Promise.all([exec(neighbour, "true"), exec(hostile, "true")]);
    const samples: Sample[] = [];
    const windows: Array<Workload | undefined> = [undefined, ...workloads];
    for (const w of windows) {
      const name = w?.name ?? "idle";
      log(`containment: ${name}`);
      const failures: string[] = [];
      let running: Promise<Reply> | undefined;
      if (w?.agentFlood) await replaceAgent(api, exec, hostile);
      else if (w?.cmd) running = exec(hostile, w.cmd, w.untilDone ? 300_000 : opts.windowMs + 2_000);
      // The flood needs a host connection to flow into: a call the fake never answers opens one.
      if (w?.agentFlood) running = exec(hostile, "true");
      await new Promise((r) => setTimeout(r, 1_000));
      const probe = await probeWhile(api, neighbour, server.pid!, opts, reserves, w?.untilDone ? running : undefined);
      failures.push(...probe.failures);
      const end = running ? await running : undefined;
      // A workload that did not run proves nothing: a windowed one must have run until its timeout killed it.
      if (w?.cmd && end && (end.status !== 200 || (!w.untilDone && end.body.timed_out !== true))) failures.push(`the workload did not run its course: ${end.status} ${end.text.slice(0, 200)}`);
      if (w?.untilDone && end?.status === 200) log(`  disk after the fill: ${String(end.body.stdout).trim()}`);
      if (w?.agentFlood) {
        // Den drops a connection that floods it (502 agent_protocol_error), or the call misses its deadline (504).
        const ok = end && (end.status === 504 || (end.status === 502 && end.body?.error?.code === "agent_protocol_error"));
        if (!ok) failures.push(`the unanswered call on the flooding guest: ${end?.status} ${end?.text.slice(0, 200)} (want 502 or 504)`);
      } else if (w) {
        // Still running (not paused, not wedged): its own exec answers once the workload is gone.
        const after = await exec(hostile, w.after ?? "echo alive", 120_000);
        if (after.status !== 200 || after.body.stdout !== "alive\n") failures.push(`the hostile sandbox after its workload: ${after.status} ${after.text.slice(0, 200)}`);
      }
      const n = await exec(neighbour, "echo alive");
      if (n.status !== 200 || n.body.stdout !== "alive\n") failures.push(`the neighbour after the workload: ${n.status} ${n.text.slice(0, 200)}`);
      samples.push({ workload: name, ...probe, failures });
    }
    return samples;
  } finally {
    for (const id of made) await api("DELETE", `/v1/sandboxes/${id}`).catch(() => undefined);
    const gone = new Promise((r) => server.once("exit", r));
    server.kill("SIGTERM");
    await gone;
  }
}

/** Replaces the hostile guest's agent with the flooding fake (as the wedged-guest test does). */
async function replaceAgent(api: ReturnType<typeof client>, exec: (id: string, cmd: string) => Promise<Reply>, id: string): Promise<void> {
  const put = await api("PUT", `/v1/sandboxes/${id}/files?path=/root/fake-agent.py`, new Uint8Array(readFileSync(FAKE_AGENT)), { "content-type": "application/octet-stream" });
  if (put.status !== 200) throw new Error(`upload the fake agent: ${put.status} ${put.text}`);
  const r = await exec(id, "(setsid python3 /root/fake-agent.py - flood > /root/fake.log 2>&1 < /dev/null &); " +
    "for i in $(seq 200); do [ -e /run/fake-agent.started ] && break; sleep 0.05; done; " +
    "setsid sh -c 'sleep 0.5; kill -9 $(pgrep -xf den-agent)' > /dev/null 2>&1 < /dev/null & echo replaced");
  if (r.status !== 200 || r.body.stdout !== "replaced\n") throw new Error(`replace the agent: ${r.status} ${r.text}`);
  await new Promise((r) => setTimeout(r, 1_500));
}

/**
 * For the window (or until `until` settles): the neighbour's execs one after another, the
 * API's GET of it one after another, and the host's free memory and disk every 200 ms.
 */
async function probeWhile(api: ReturnType<typeof client>, neighbour: string, denPid: number, opts: Options, reserves: { memMb: number; diskMb: number }, until?: Promise<unknown>) {
  const failures: string[] = [];
  const execMs: number[] = [];
  const apiMs: number[] = [];
  let done = false;
  const stop = until ? until.then(() => undefined, () => undefined) : new Promise<void>((r) => setTimeout(r, opts.windowMs));
  void stop.then(() => (done = true));
  const rss0 = rssMb(denPid);
  let rssMax = rss0;
  let minMemMb = Infinity;
  let minDiskMb = Infinity;
  const fail = (what: string) => {
    if (failures.length < 10) failures.push(what);
  };
  const execs = (async () => {
    while (!done) {
      const t0 = performance.now();
      const r = await api("POST", `/v1/sandboxes/${neighbour}/exec`, { cmd: "echo ok" }).catch((e: Error) => ({ status: 0, text: e.message, body: undefined }));
      execMs.push(performance.now() - t0);
      if (r.status !== 200 || r.body?.stdout !== "ok\n") fail(`a neighbour exec: ${r.status} ${r.text.slice(0, 200)}`);
    }
  })();
  const gets = (async () => {
    while (!done) {
      const t0 = performance.now();
      const r = await api("GET", `/v1/sandboxes/${neighbour}`).catch((e: Error) => ({ status: 0, text: e.message, body: undefined }));
      apiMs.push(performance.now() - t0);
      if (r.status !== 200) fail(`the API: ${r.status} ${r.text.slice(0, 200)}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  const host = (async () => {
    while (!done) {
      minMemMb = Math.min(minMemMb, memAvailableMb());
      minDiskMb = Math.min(minDiskMb, diskFreeMb(opts.dataDir));
      rssMax = Math.max(rssMax, rssMb(denPid));
      await new Promise((r) => setTimeout(r, 200));
    }
  })();
  await Promise.all([execs, gets, host]);
  if (minMemMb < reserves.memMb) fail(`the host's free memory fell to ${minMemMb.toFixed(0)} MiB, below its ${reserves.memMb.toFixed(0)} MiB reserve`);
  if (minDiskMb < reserves.diskMb) fail(`the host's free disk fell to ${minDiskMb.toFixed(0)} MiB, below its ${reserves.diskMb} MiB reserve`);
  return { execMs, apiMs, failures, minMemMb, minDiskMb, rssGrowthMb: rssMax - rss0 };
}

/** The table: the neighbour's exec round trip and the API's p99 under each workload, beside idle. */
export function containmentTable(samples: Sample[]): string[] {
  const idle = samples.find((s) => s.workload === "idle");
  const f = (ms: number) => (Number.isNaN(ms) ? "-" : `${ms.toFixed(1)} ms`);
  const x = (v: number, base: number | undefined) => (base ? `${(v / base).toFixed(2)}x` : "-");
  const lines = [
    "| workload (hostile sandbox) | neighbour exec p50 | p99 | vs idle | API p99 | vs idle | Den RSS growth | contained |",
    "|---|---|---|---|---|---|---|---|",
  ];
  for (const s of samples) {
    const e99 = pct(s.execMs, 99);
    const a99 = pct(s.apiMs, 99);
    lines.push(`| ${s.workload} | ${f(pct(s.execMs, 50))} | ${f(e99)} | ${x(e99, idle && pct(idle.execMs, 99))} | ${f(a99)} | ${x(a99, idle && pct(idle.apiMs, 99))} | ${s.rssGrowthMb.toFixed(0)} MiB | ${s.failures.length ? "NO" : "yes"} |`);
  }
  return lines;
}
