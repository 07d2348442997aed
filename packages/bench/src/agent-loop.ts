/**
 * `npm run bench:agent [-- --quick] [--turns N] [--seed S] [--gap-min s] [--gap-max s] [--json FILE] [--svg FILE]`
 *
 * A scripted agent — N turns of real work in the guest separated by "thinking" gaps — run
 * four ways at once against one in-process `den serve`: always-on, hibernate (warm) between
 * turns, hibernate (cold) between turns, and a fresh sandbox per call that must redo its
 * setup. Each way's QEMU processes are sampled from /proc for CPU and memory; Den's own
 * metering (GET /v1/usage, grouped by the `way` metadata) is printed beside them.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { Sandbox, Usage } from "@den/sdk";
import { findInstanceProcesses, mulberry32 } from "@den/runtime";
import { loadConfig, startServer } from "@den/server";
import { chartSvg } from "./chart.js";
import { pct } from "./table.js";

const { values: flags } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    turns: { type: "string" },
    seed: { type: "string", default: "42" },
    "gap-min": { type: "string" },
    "gap-max": { type: "string" },
    json: { type: "string" },
    svg: { type: "string" },
  },
});
const TURNS = Number(flags.turns ?? (flags.quick ? 4 : 20));
const GAP_MIN = Number(flags["gap-min"] ?? (flags.quick ? 1 : 3));
const GAP_MAX = Number(flags["gap-max"] ?? (flags.quick ? 2 : 10));
const KEY = "den_bench_agent_key_0123456789";

/** The project an agent works on: a tree of modules, a git repo, compiled Python. Fresh-per-call pays for it every turn. */
const SETUP = "mkdir -p /workspace/proj && cd /workspace/proj && git init -q && for i in $(seq 40); do printf 'def f%s(x):\\n    return x * %s\\n' $i $i > mod$i.py; done && python3 -m compileall -q . && echo 0 > state.txt";
/** One turn's work: check the state left by the previous turn, write a file, compute over the tree, read the result. */
const turnWork = (n: number) =>
  `cd /workspace/proj && prev=$(cat state.txt) && echo "turn ${n}" > turn-${n}.txt && ` +
  `python3 -c "import glob, importlib, sys; sys.path.insert(0, '.'); print(sum(importlib.import_module(m[:-3]).__dict__['f' + m[3:-3]](${n}) for m in sorted(glob.glob('mod*.py'))))" > result.txt && ` +
  `echo ${n} > state.txt && echo "$prev $(cat result.txt) $(ls turn-*.txt | wc -l)"`;
/** sum(i * n for i in 1..40) */
const expected = (n: number) => (40 * 41 / 2) * n;

type Way = "always-on" | "hibernate-warm" | "hibernate-cold" | "fresh-per-call";
const WAYS: Way[] = ["always-on", "hibernate-warm", "hibernate-cold", "fresh-per-call"];

interface WayResult {
  way: Way;
  wallSeconds: number;
  /** Latency each turn paid before its work could run: wake, or create + setup. */
  addedMs: number[];
  turnMs: number[];
  checksPassed: number;
  checksFailed: string[];
  storedBytesPeak: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function runWay(way: Way, gaps: number[], opts: { apiUrl: string; apiKey: string }, own: (id: string) => void): Promise<WayResult> {
  const r: WayResult = { way, wallSeconds: 0, addedMs: [], turnMs: [], checksPassed: 0, checksFailed: [], storedBytesPeak: 0 };
  const t0 = performance.now();
  const meta = { metadata: { way }, persistent: true, ...opts };
  let sbx: Sandbox | undefined;
  if (way !== "fresh-per-call") {
    sbx = await Sandbox.create(meta);
    own(sbx.id);
    await sbx.exec(SETUP, { timeoutSeconds: 300 });
  }
  for (let n = 1; n <= TURNS; n++) {
    const turn0 = performance.now();
    let box = sbx;
    if (way === "fresh-per-call") {
      // Nothing persists: a new sandbox, and the setup again.
      box = await Sandbox.create(meta);
      own(box.id);
      await box.exec(SETUP, { timeoutSeconds: 300 });
      r.addedMs.push(performance.now() - turn0);
    } else if (way.startsWith("hibernate")) {
      await box!.wake();
      r.addedMs.push(performance.now() - turn0);
    } else {
      r.addedMs.push(0);
    }
    const out = (await box!.exec(turnWork(n), { timeoutSeconds: 300 })).stdout.trim();
    // Persistent ways must see the previous turn's state and every earlier turn's file.
    const want = way === "fresh-per-call" ? `0 ${expected(n)} 1` : `${n - 1} ${expected(n)} ${n}`;
    if (out === want) r.checksPassed++;
    else r.checksFailed.push(`turn ${n}: got "${out}", expected "${want}"`);
    r.turnMs.push(performance.now() - turn0);
    if (way === "fresh-per-call") await box!.destroy();
    else if (way.startsWith("hibernate")) {
      const info = await box!.hibernate({ mode: way === "hibernate-cold" ? "cold" : "warm" });
      r.storedBytesPeak = Math.max(r.storedBytesPeak, info.storedBytes ?? 0);
    }
    if (n < TURNS) await sleep(gaps[n - 1]! * 1000);
  }
  await sbx?.destroy();
  r.wallSeconds = (performance.now() - t0) / 1000;
  return r;
}

/** Per way: QEMU CPU-seconds and memory (PSS) over time, from /proc, every half second. */
class Sampler {
  readonly owner = new Map<string, Way>();
  readonly series = new Map<Way, Array<{ t: number; cpu: number; pssMb: number }>>(WAYS.map((w) => [w, []]));
  readonly cpuSeconds = new Map<Way, number>(WAYS.map((w) => [w, 0]));
  readonly ramGibSeconds = new Map<Way, number>(WAYS.map((w) => [w, 0]));
  private last = new Map<number, number>();
  private timer: NodeJS.Timeout | undefined;
  private t0 = performance.now();
  private prevAt = performance.now();

  constructor(private readonly instance: string) {}

  start(): void {
    this.timer = setInterval(() => this.sample(), 500);
  }

  stop(): void {
    clearInterval(this.timer);
    this.sample();
  }

  private sample(): void {
    const now = performance.now();
    const dt = (now - this.prevAt) / 1000;
    this.prevAt = now;
    const cpu = new Map<Way, number>(WAYS.map((w) => [w, 0]));
    const mem = new Map<Way, number>(WAYS.map((w) => [w, 0]));
    for (const [id, pid] of findInstanceProcesses(this.instance)) {
      const way = this.owner.get(id);
      if (!way) continue;
      const stat = readProc(`/proc/${pid}/stat`);
      // Memory that cannot be given back: anonymous and shmem pages, PSS (shared ones split
      // between the VMs that share them). Clean file pages (the template's RAM file, mapped
      // read-only, and what a snapshot's read faulted in) are cache the kernel reclaims.
      const status = readProc(`/proc/${pid}/smaps_rollup`);
      if (!stat || !status) continue;
      const f = stat.replace(/^.*\) /, "").split(" ");
      const total = (Number(f[11]) + Number(f[12])) / 100;
      const prev = this.last.get(pid) ?? 0;
      this.last.set(pid, total);
      cpu.set(way, cpu.get(way)! + (total - prev));
      const kb = (k: string) => Number(new RegExp(`\\n${k}:\\s*(\\d+)`).exec(status)?.[1] ?? 0);
      mem.set(way, mem.get(way)! + (kb("Pss_Anon") + kb("Pss_Shmem")) / 1024);
    }
    for (const w of WAYS) {
      this.cpuSeconds.set(w, this.cpuSeconds.get(w)! + cpu.get(w)!);
      this.ramGibSeconds.set(w, this.ramGibSeconds.get(w)! + (mem.get(w)! / 1024) * dt);
      this.series.get(w)!.push({ t: (now - this.t0) / 1000, cpu: dt > 0 ? cpu.get(w)! / dt : 0, pssMb: mem.get(w)! });
    }
  }
}

function readProc(path: string): string | undefined {
  try {
    return readFileSync(path, "latin1");
  } catch {
    return undefined;
  }
}

async function main(): Promise<void> {
  const rand = mulberry32(Number(flags.seed));
  const gaps = Array.from({ length: TURNS - 1 }, () => GAP_MIN + rand() * (GAP_MAX - GAP_MIN));
  const config = loadConfig({ port: "0", host: "127.0.0.1" }, { ...process.env, DEN_API_KEY: KEY, DEN_METER_INTERVAL_SECONDS: "5", DEN_LOG_LEVEL: "warn", DEN_ENVD_PORT: "0" });
  const server = await startServer(config);
  const opts = { apiUrl: server.url, apiKey: KEY };
  const sampler = new Sampler(server.cp.hosts.first!.instance);
  const log = (s: string) => process.stderr.write(`${s}\n`);
  log(`bench:agent: ${TURNS} turns, think gaps ${GAP_MIN}-${GAP_MAX} s (seed ${flags.seed}), ${WAYS.length} ways at once`);
  const started = new Date();
  sampler.start();
  let results: WayResult[];
  try {
    results = await Promise.all(WAYS.map((w) => runWay(w, gaps, opts, (id) => sampler.owner.set(id, w))));
  } finally {
    sampler.stop();
  }
  const usage = await Usage.get({ ...opts, groupBy: "metadata.way", from: started });
  await server.close();

  const mib = (b: number) => `${(b / 1024 / 1024).toFixed(1)} MiB`;
  const header = ["way", "wall", "QEMU CPU-s", "RAM GiB-s", "stored (peak)", "added/turn p50", "p99", "state checks", "Den: running s", "hibernated s", "Den CPU-s"];
  const rows = results.map((r) => {
    const u = usage.groups.find((g) => g.key === r.way);
    return [
      r.way, `${r.wallSeconds.toFixed(0)} s`, sampler.cpuSeconds.get(r.way)!.toFixed(1), sampler.ramGibSeconds.get(r.way)!.toFixed(1), mib(r.storedBytesPeak),
      `${pct(r.addedMs, 50).toFixed(0)} ms`, `${pct(r.addedMs, 99).toFixed(0)} ms`,
      r.way === "fresh-per-call" ? `${r.checksPassed}/${TURNS} (state lost each turn, as expected)` : `${r.checksPassed}/${TURNS}`,
      (u?.runningSeconds ?? 0).toFixed(0), ((u?.warmHibernatedSeconds ?? 0) + (u?.coldHibernatedSeconds ?? 0)).toFixed(0), (u?.denCpuSeconds ?? 0).toFixed(1),
    ];
  });
  const all = [header, ...rows];
  const w = header.map((_, i) => Math.max(...all.map((l) => l[i]!.length)));
  for (const l of all) process.stdout.write(l.map((c, i) => (i === 0 ? c.padEnd(w[i]!) : c.padStart(w[i]!))).join("  ") + "\n");
  const fresh = results.find((r) => r.way === "fresh-per-call")!;
  process.stdout.write(`\nfresh-per-call re-pays create + setup every turn: p50 ${pct(fresh.addedMs, 50).toFixed(0)} ms, p99 ${pct(fresh.addedMs, 99).toFixed(0)} ms (its state checks see no earlier turn: nothing persists)\n`);
  for (const r of results.filter((x) => x.way.startsWith("hibernate"))) {
    const ratio = sampler.ramGibSeconds.get(r.way)! / Math.max(1e-9, sampler.ramGibSeconds.get("always-on")!);
    process.stdout.write(`${r.way}: ${(ratio * 100).toFixed(0)}% of always-on's RAM GiB-seconds, wake adds p50 ${pct(r.addedMs, 50).toFixed(0)} ms per turn\n`);
  }
  const report = {
    date: started.toISOString(), turns: TURNS, seed: Number(flags.seed), gaps_s: gaps,
    ways: results.map((r) => ({
      way: r.way, wall_s: r.wallSeconds, qemu_cpu_s: sampler.cpuSeconds.get(r.way), ram_gib_s: sampler.ramGibSeconds.get(r.way), stored_bytes_peak: r.storedBytesPeak,
      added_ms: { p50: pct(r.addedMs, 50), p99: pct(r.addedMs, 99) }, turn_ms: { p50: pct(r.turnMs, 50), p99: pct(r.turnMs, 99) },
      checks_passed: r.checksPassed, checks_failed: r.checksFailed, den_usage: usage.groups.find((g) => g.key === r.way) ?? null,
      series: sampler.series.get(r.way),
    })),
  };
  if (flags.json) writeFileSync(flags.json, JSON.stringify(report, null, 2) + "\n");
  const svgPath = flags.svg ?? (flags.quick ? undefined : "bench-agent.svg");
  if (svgPath) {
    writeFileSync(svgPath, chartSvg(WAYS.map((w2) => ({ name: w2, points: sampler.series.get(w2)! }))));
    process.stdout.write(`chart: ${svgPath}\n`);
  }
  // The persistent ways must have seen their own state every turn.
  const broken = results.filter((r) => r.way !== "fresh-per-call" && r.checksFailed.length);
  if (broken.length) {
    for (const r of broken) process.stderr.write(`${r.way}: ${r.checksFailed.join("; ")}\n`);
    process.exitCode = 1;
  }
}

await main();
