/**
 * `npm run bench:density [-- --sandboxes N --dirty M --dirty-mib X]`: how many idle sandboxes
 * one host holds, and what happens when many of them then use their memory. A `den serve`
 * of its own with a memory overcommit (DEN_MEMORY_OVERCOMMIT, 4 here), a disk overcommit
 * (DEN_DISK_OVERCOMMIT, 8 here: idle sandboxes write little of their disks) and vCPUs enough for
 * every one: N 512 MiB sandboxes are created, each answers an exec, half are warm-hibernated;
 * the API's p99 is measured idle and then with all of them; then M of the running ones each
 * fill X MiB of their memory at once. Den's memory-pressure policy must hibernate (never
 * the OOM killer, never a lost sandbox), and every sandbox must answer an exec afterwards.
 * Not part of the suite (it takes minutes and most of the host's memory).
 */
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { availableMemoryMb as memAvailableMb } from "@den/host-agent";
import { client, spawnDen } from "./den-process.js";
import { fillScript } from "./server-bench.js";
import { fmt, pct } from "./table.js";

const { values: flags } = parseArgs({
  options: {
    sandboxes: { type: "string", default: "100" },
    dirty: { type: "string", default: "40" },
    "dirty-mib": { type: "string", default: "400" },
    overcommit: { type: "string", default: "4" },
    // 100 sandboxes of the base template's 4 GiB disk promise 400 GiB: more than these hosts' free disk at the default 4.
    "disk-overcommit": { type: "string", default: "8" },
    port: { type: "string", default: "19263" },
  },
});
const N = Number(flags.sandboxes);
const DIRTY = Math.min(Number(flags.dirty), Math.floor(N / 2));
const DIRTY_MIB = Number(flags["dirty-mib"]);
const dataDir = process.env.DEN_DATA_DIR;
if (!dataDir) throw new Error("DEN_DATA_DIR is not set");
const log = (s: string) => process.stderr.write(`${s}\n`);

/** Complete local snapshots in the data dir (a warm hibernation's is written behind its answer, manifest last). */
const localSnapshots = () => {
  const dir = join(dataDir, "snapshots");
  return existsSync(dir) ? readdirSync(dir).filter((s) => existsSync(join(dir, s, "manifest.json"))).length : 0;
};

/** Host OOM kills so far (the kernel's count). */
const oomKills = () => Number(/^oom_kill (\d+)/m.exec(spawnSync("cat", ["/proc/vmstat"], { encoding: "utf8" }).stdout)?.[1] ?? 0);

const port = Number(flags.port);
const den = await spawnDen(port, dataDir, {
  DEN_MEMORY_OVERCOMMIT: flags.overcommit!, DEN_DISK_OVERCOMMIT: flags["disk-overcommit"]!, DEN_CAPACITY_VCPUS: String(N * 2), DEN_MAX_SANDBOXES_PER_OWNER: String(N + 10),
  DEN_REAPER_INTERVAL_MS: "1000",
});
const api = client(`http://127.0.0.1:${port}`);
const ids: string[] = [];
const lines: string[] = [];
const apiP99 = async (n = 200) => {
  const ms: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await api("GET", "/v1/sandboxes?limit=10");
    ms.push(performance.now() - t0);
  }
  return pct(ms, 99);
};
/** Runs `f` over `xs`, `k` at a time. */
const pool = async <T>(xs: T[], k: number, f: (x: T) => Promise<void>) => {
  let next = 0;
  await Promise.all(Array.from({ length: k }, async () => {
    while (next < xs.length) await f(xs[next++]!);
  }));
};
try {
  const oom0 = oomKills();
  // A first pass, not counted, so the idle figure is not that of a server whose code is still cold.
  await apiP99(50);
  const idle = await apiP99();
  const mem0 = memAvailableMb();
  let refused = "";
  for (let i = 0; i < N && !refused; i++) {
    const r = await api("POST", "/v1/sandboxes", { persistent: true, memory_mb: 512 });
    if (r.status === 201) ids.push(r.body.id);
    else refused = `${r.status} ${r.body?.error?.message ?? r.text}`;
    if ((i + 1) % 20 === 0) log(`density: ${ids.length} created, ${memAvailableMb().toFixed(0)} MiB available`);
  }
  lines.push(`admitted: ${ids.length} of ${N} 512 MiB sandboxes${refused ? ` (then: ${refused})` : ""}; host MemAvailable ${mem0.toFixed(0)} -> ${memAvailableMb().toFixed(0)} MiB`);
  let answered = 0;
  await pool(ids, 4, async (id) => {
    if ((await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "echo ok" })).body?.stdout === "ok\n") answered++;
  });
  lines.push(`each answers an exec: ${answered} of ${ids.length}`);
  const warm = ids.slice(0, Math.floor(ids.length / 2));
  const snapshotsBefore = localSnapshots();
  await pool(warm, 4, async (id) => void (await api("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "warm" })));
  // A warm hibernation answers once its VM is paused; its local snapshot is written behind the
  // answer. The goal is about a host of idle sandboxes: measured once those writes are done.
  const settleStart = performance.now();
  while (localSnapshots() < snapshotsBefore + warm.length && performance.now() - settleStart < 600_000) await new Promise((r) => setTimeout(r, 500));
  lines.push(`warm hibernations' local snapshots written ${fmt(performance.now() - settleStart)} after the last answer (${localSnapshots() - snapshotsBefore} of ${warm.length})`);
  const loaded = await apiP99();
  lines.push(`API p99 (GET /v1/sandboxes): ${fmt(idle)} idle, ${fmt(loaded)} with ${ids.length - warm.length} running and ${warm.length} warm (${(loaded / idle).toFixed(2)}x; goal <= 2x)`);
  lines.push(`host MemAvailable with them: ${memAvailableMb().toFixed(0)} MiB`);

  // Then many use their memory at once: a process in each writes DIRTY_MIB and holds it.
  const dirty = ids.slice(ids.length - DIRTY);
  const t0 = performance.now();
  await pool(dirty, 4, async (id) => {
    const cmd = `nohup python3 -c '${fillScript(DIRTY_MIB, "/root/held")}' >/dev/null 2>&1 & ` +
      `while [ ! -e /root/held ]; do sleep 0.2; done; echo held`;
    const r = await api("POST", `/v1/sandboxes/${id}/exec`, { cmd, timeout_seconds: 600 });
    if (r.body?.stdout !== "held\n") log(`density: ${id} did not fill its memory: ${r.status} ${r.text.slice(0, 200)}`);
  });
  lines.push(`${DIRTY} sandboxes wrote ${DIRTY_MIB} MiB each in ${fmt(performance.now() - t0)}; host MemAvailable ${memAvailableMb().toFixed(0)} MiB`);
  await new Promise((r) => setTimeout(r, 5000)); // the reaper's passes catch up
  const rows = (await api("GET", `/v1/sandboxes?limit=${Math.min(200, N + 10)}`)).body.sandboxes as Array<{ id: string; state: string; state_reason: string; hibernate_mode?: string }>;
  const byPressure = rows.filter((s) => s.state_reason === "memory_pressure").length;
  const lost = rows.filter((s) => s.state === "lost" || s.state === "error").length;
  lines.push(`cold-hibernated by the memory-pressure policy: ${byPressure}; lost or in error: ${lost}; host OOM kills during the run: ${oomKills() - oom0}`);
  answered = 0;
  await pool(ids, 2, async (id) => {
    const r = await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "echo ok" });
    if (r.body?.stdout === "ok\n") answered++;
    else log(`density: ${id} did not answer: ${r.status} ${r.text.slice(0, 200)}`);
  });
  lines.push(`each answers an exec afterwards: ${answered} of ${ids.length}; host OOM kills in all: ${oomKills() - oom0}`);
} finally {
  await pool(ids, 8, async (id) => void (await api("DELETE", `/v1/sandboxes/${id}`).catch(() => undefined)));
  den.kill("SIGTERM");
  await new Promise((r) => den.once("exit", r));
}
console.log([`density run: ${N} sandboxes, memory overcommit ${flags.overcommit}, disk overcommit ${flags["disk-overcommit"]}`, ...lines].join("\n"));
