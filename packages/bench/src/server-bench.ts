/**
 * The scale-to-zero rows, measured through a real `den serve` (in this process) as an
 * API user sees them: warm and cold hibernate/wake against a local-directory store and
 * against S3 (s3rver), durable checkpoints and their restore, and creates from a custom
 * template beside creates from `base`.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import S3rver from "s3rver";
import { loadConfig, startServer } from "@den/server";
import { Sandbox as DenSandbox } from "@den/sdk";
import { Sandbox as E2bSandbox } from "e2b";
import { findInstanceProcesses, type SnapshotManifest } from "@den/runtime";
import { privateMemoryMb, processCpuSeconds } from "@den/host-agent";
import { downloadSnapshot, readStoredManifest, snapshotKey, type ObjectStore } from "@den/store";
import { benchImages } from "./image-bench.js";
import { benchCode } from "./code-bench.js";
import { rawDestroy, rawRestore, type RawTemplate } from "./raw-qemu.js";
import { fmt, pct, row, rows, time } from "./table.js";

/** A Python program that holds exactly `mib` MiB of random memory, then touches `flag`. */
export function fillScript(mib: number, flag: string): string {
  return `import os, time\nb = bytearray(${mib} << 20)\nfor i in range(0, len(b), 1 << 20): b[i:i + (1 << 20)] = os.urandom(1 << 20)\nopen("${flag}", "w").close()\ntime.sleep(10**6)`;
}

/** Creates at once in the burst row. */
const BURST = 10;

/** What the benchmark's sandbox dirties: a process holding this much random memory. */
const DIRTIED_MIB = 50;

/** Den's own CPU seconds so far (this process, the store codec's processes, the native helpers; not the VMs'). */
const denCpuSeconds = processCpuSeconds;

/** A sandbox's QEMU's private memory in MiB: anonymous + shmem PSS, what the kernel cannot reclaim (the measure admission uses). */
function privateMib(dataDir: string, id: string): number {
  const pid = findInstanceProcesses(readFileSync(join(dataDir, "instance-id"), "utf8").trim()).get(id);
  return (pid && privateMemoryMb(pid)) ?? NaN;
}

const KEY = "den_bench_admin_key_0123456789";

type Api = (method: string, path: string, body?: unknown) => Promise<any>;

function client(base: string): Api {
  return async (method, path, body) => {
    const res = await fetch(base + path, {
      method,
      headers: { authorization: `Bearer ${KEY}`, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
    return text ? JSON.parse(text) : undefined;
  };
}

/** A recipe for the custom-template rows: a project tree, a git repo, compiled Python. */
const RECIPE = [
  "mkdir -p /workspace/app && cd /workspace/app && printf 'def f():\\n    return 1\\n' > lib.py && git init -q",
  "cd /workspace/app && python3 -m compileall -q .",
];

/**
 * Cold hibernate and wake of a sandbox of `memoryMb` holding `dirtyMib` of random memory:
 * the wake should depend on the bytes changed, not the RAM size (the full run compares 2 GiB
 * with 512 MiB at 400 MiB dirtied).
 */
async function coldBySize(api: Api, made: string[], memoryMb: number, dirtyMib: number, runs: number): Promise<void> {
  const s = await api("POST", "/v1/sandboxes", { persistent: true, memory_mb: memoryMb });
  made.push(s.id);
  await api("POST", `/v1/sandboxes/${s.id}/exec`, { cmd: `nohup python3 -c '${fillScript(dirtyMib, "/tmp/held")}' >/dev/null 2>&1 & while [ ! -e /tmp/held ]; do sleep 0.2; done`, timeout_seconds: 600 });
  const h = row(`cold hibernate (${memoryMb} MiB guest, ${dirtyMib} MiB dirtied)`);
  const w = row(`cold wake -> first exec (${memoryMb} MiB guest, ${dirtyMib} MiB dirtied)`);
  for (let i = 0; i < runs; i++) {
    h.den.push(await time(() => api("POST", `/v1/sandboxes/${s.id}/hibernate`, { mode: "cold" })));
    w.den.push(await time(() => api("POST", `/v1/sandboxes/${s.id}/exec`, { cmd: "true" })));
  }
  await api("DELETE", `/v1/sandboxes/${s.id}`);
}

export async function benchServer(opts: { dataDir: string; runs: number; full?: boolean; log: (s: string) => void; raw?: RawTemplate }): Promise<string[]> {
  const notes: string[] = [];
  for (const kind of ["local", "s3"] as const) {
    let s3: S3rver | undefined;
    let s3dir = "";
    let env: Record<string, string> = {};
    if (kind === "s3") {
      s3dir = mkdtempSync(join(tmpdir(), "den-bench-s3-"));
      s3 = new S3rver({ port: 0, address: "127.0.0.1", silent: true, directory: s3dir, configureBuckets: [{ name: "den" }] });
      const { port } = await s3.run();
      env = { DEN_STORE: "s3", DEN_S3_BUCKET: "den", DEN_S3_ENDPOINT: `http://127.0.0.1:${port}`, AWS_ACCESS_KEY_ID: "S3RVER", AWS_SECRET_ACCESS_KEY: "S3RVER" };
    }
    const server = await startServer(loadConfig({ port: "0", host: "127.0.0.1", dataDir: opts.dataDir }, { DEN_API_KEY: KEY, DEN_ENVD_PORT: "0", ...env }));
    const api = client(server.url);
    const made: string[] = [];
    const create = async (body: Record<string, unknown>) => {
      const s = await api("POST", "/v1/sandboxes", body);
      made.push(s.id);
      return s;
    };
    try {
      const sbx = await create({ persistent: true });
      const exec = (id: string, cmd: string) => api("POST", `/v1/sandboxes/${id}/exec`, { cmd });
      // Some state worth keeping: a process holding DIRTIED_MIB of random memory, and a file.
      // (Filled a MiB at a time: one os.urandom of it all would leave a freed copy's pages dirty too.)
      await exec(sbx.id, `nohup python3 -c '${fillScript(DIRTIED_MIB, "/tmp/held")}' >/dev/null 2>&1 & echo x > /workspace/f; while [ ! -e /tmp/held ]; do sleep 0.1; done`);
      if (kind === "local") {
        // The floor of a wake -> first exec row: the same exec, through the same API, of a running sandbox.
        const rtt = row("exec round trip (API)");
        await exec(sbx.id, "true");
        for (let i = 0; i < Math.max(opts.runs, 10); i++) rtt.den.push(await time(() => exec(sbx.id, "true")));
        const h = row("warm hibernate");
        const w = row("warm wake -> first exec");
        const running: number[] = [];
        const paused: number[] = [];
        // As many runs as the round trip it is set beside: three samples of a ~100 ms row on a
        // busy 2-core host say more about the host than about the wake.
        for (let i = 0; i < Math.max(opts.runs, 10); i++) {
          running.push(privateMib(opts.dataDir, sbx.id));
          h.den.push(await time(() => api("POST", `/v1/sandboxes/${sbx.id}/hibernate`, { mode: "warm" })));
          paused.push(privateMib(opts.dataDir, sbx.id));
          w.den.push(await time(() => exec(sbx.id, "true")));
        }
        notes.push(`warm wake -> first exec vs an exec of a running sandbox, both through the API (p50): ${fmt(pct(w.den, 50))} vs ${fmt(pct(rtt.den, 50))} (+${fmt(pct(w.den, 50) - pct(rtt.den, 50))})`);
        notes.push(`private memory of a warm-hibernated VM vs running (p50): ${pct(paused, 50).toFixed(0)} MiB vs ${pct(running, 50).toFixed(0)} MiB (${(pct(paused, 50) / pct(running, 50)).toFixed(2)}x)`);
      }
      const h = row(`cold hibernate (${kind} store)`);
      const w = row(`cold wake -> first exec (${kind} store)`);
      const stored: number[] = [];
      const cpu: number[] = [];
      const cpuHibernate: number[] = [];
      const parts: Array<{ changed: number; state: number; disk: number }> = [];
      const privateBefore: number[] = [];
      const privateAfter: number[] = [];
      for (let i = 0; i < opts.runs; i++) {
        let r: any;
        privateBefore.push(privateMib(opts.dataDir, sbx.id));
        const c0 = denCpuSeconds();
        h.den.push(await time(async () => (r = await api("POST", `/v1/sandboxes/${sbx.id}/hibernate`, { mode: "cold" }))));
        const c1 = denCpuSeconds();
        stored.push(r.stored_bytes);
        // What the guest had changed (the filter's kept pages) and what each part stored, from the stored manifest.
        const made = await storedParts(server, sbx.id);
        if (made) parts.push(made);
        const snap = (await server.cp.store.sandboxes.get(sbx.id))?.hibernate_snapshot;
        w.den.push(await time(() => exec(sbx.id, "true")));
        cpu.push(denCpuSeconds() - c0);
        cpuHibernate.push(c1 - c0);
        // The floor: a bare QEMU restoring the same stored state and disk (still in the store for the
        // collector's grace; decompressed to files first, not timed), after Den's CPU is counted.
        if (kind === "local" && opts.raw && snap) w.raw.push(await rawColdWake(server, snap, opts.raw, opts.dataDir));
        privateAfter.push(privateMib(opts.dataDir, sbx.id));
      }
      const mib = (b: number) => `${(b / 1024 / 1024).toFixed(1)} MiB`;
      notes.push(`bytes stored per cold-hibernated sandbox (${kind} store, p50): ${mib(pct(stored, 50))} for ${sbx.memory_mb} MiB of RAM with ${DIRTIED_MIB} MiB dirtied (${(pct(stored, 50) / (DIRTIED_MIB << 20)).toFixed(2)}x the dirtied bytes)`);
      if (parts.length) {
        const p50 = (f: (p: (typeof parts)[number]) => number) => pct(parts.map(f), 50);
        notes.push(`of which (${kind} store, p50): state ${mib(p50((p) => p.state))} for ${mib(p50((p) => p.changed))} of pages the guest changed (${(p50((p) => p.state / p.changed)).toFixed(2)}x), disk delta ${mib(p50((p) => p.disk))}`);
      }
      if (w.raw.length) notes.push(`cold wake -> first exec (${kind} store) vs a bare QEMU restoring the same stored state and disk from files (p50): ${fmt(pct(w.den, 50))} vs ${fmt(pct(w.raw, 50))}; Den adds the store's read and checks, the jail, the agent and one exec through the API (the "exec round trip (API)" row)`);
      notes.push(`Den CPU per cold cycle, hibernate + wake (${kind} store, p50): ${pct(cpu, 50).toFixed(2)} s (hibernate ${pct(cpuHibernate, 50).toFixed(2)} s)${kind === "s3" ? "; s3rver runs in this process, so its CPU is in it" : ""}`);
      notes.push(`private memory of the woken sandbox vs before it hibernated (${kind} store, p50): ${pct(privateAfter, 50).toFixed(0)} MiB vs ${pct(privateBefore, 50).toFixed(0)} MiB (${(pct(privateAfter, 50) / pct(privateBefore, 50)).toFixed(2)}x)`);
      opts.log(`  cold hibernate (${kind}) p50 ${fmt(pct(h.den, 50))}, wake ${fmt(pct(w.den, 50))}`);

      if (kind === "local") {
        const c = row("checkpoint (running sandbox, to the store)");
        const pause = row("  of which the VM was paused");
        const r = row("restore checkpoint -> first exec");
        for (let i = 0; i < opts.runs; i++) {
          let cp: any;
          c.den.push(await time(async () => (cp = await api("POST", `/v1/sandboxes/${sbx.id}/checkpoints`, {}))));
          pause.den.push(cp.pause_ms);
          let restored: any;
          r.den.push(await time(async () => {
            restored = await api("POST", `/v1/checkpoints/${cp.id}/restore`, {});
            made.push(restored.id);
            await exec(restored.id, "true");
          }));
          await api("DELETE", `/v1/sandboxes/${restored.id}`);
          await api("DELETE", `/v1/checkpoints/${cp.id}`);
        }

        const build = row("custom template build (2 setup commands)");
        // Built afresh each run: an earlier run's version would be reused, not built.
        await api("DELETE", "/v1/templates/bench-project").catch(() => undefined);
        build.den.push(await time(() => api("POST", "/v1/templates", { name: "bench-project", setup: RECIPE })));
        const fromBase = row("create from base -> first exec (API)");
        const fromCustom = row("create from custom template -> first exec (API)");
        for (let i = 0; i < opts.runs; i++) {
          for (const [t, r2] of [["base", fromBase], ["bench-project", fromCustom]] as const) {
            let id = "";
            r2.den.push(await time(async () => {
              id = (await create({ template: t })).id;
              await exec(id, "true");
            }));
            await api("DELETE", `/v1/sandboxes/${id}`);
          }
        }
        notes.push(`create from a custom template vs from base, to first exec (p50): ${fmt(pct(fromCustom.den, 50))} vs ${fmt(pct(fromBase.den, 50))}`);
        await api("DELETE", "/v1/templates/bench-project");
        notes.push(...(await benchImages(api, opts.dataDir, opts.runs, !!opts.full, made)));
        notes.push(...(await benchCode(api, server.url, KEY, opts.runs, existsSync(join(opts.dataDir, "templates", "code-interpreter-v1")), made)));
        notes.push(...(await benchClients(server, opts.runs, made)));
        if (opts.full) {
          for (const mb of [512, 2048]) await coldBySize(api, made, mb, 400, Math.min(opts.runs, 10));
          const w512 = pct(rows.find((r) => r.op === "cold wake -> first exec (512 MiB guest, 400 MiB dirtied)")!.den, 50);
          const w2048 = pct(rows.find((r) => r.op === "cold wake -> first exec (2048 MiB guest, 400 MiB dirtied)")!.den, 50);
          notes.push(`cold wake of a 2 GiB guest vs a 512 MiB one, 400 MiB dirtied each (p50): ${fmt(w2048)} vs ${fmt(w512)} (${(w2048 / w512).toFixed(2)}x)`);
        }
      }
    } finally {
      for (const id of made) await api("DELETE", `/v1/sandboxes/${id}`).catch(() => undefined);
      await server.close();
      await s3?.close();
      if (s3dir) rmSync(s3dir, { recursive: true, force: true });
    }
  }
  await freshCreates(opts.dataDir, opts.runs);
  return notes;
}

/**
 * Creates through the API of a server with no VM pool (DEN_VM_POOL=0): each starts its own
 * QEMU and pays its first TCG translations, as a cold wake does. Beside the pooled create,
 * it says how much of the gap between a wake and a create is the pool's warm-up.
 */
async function freshCreates(dataDir: string, runs: number): Promise<void> {
  const pool = process.env.DEN_VM_POOL;
  process.env.DEN_VM_POOL = "0";
  let server: Awaited<ReturnType<typeof startServer>>;
  try {
    server = await startServer(loadConfig({ port: "0", host: "127.0.0.1", dataDir }, { DEN_API_KEY: KEY, DEN_ENVD_PORT: "0" }));
  } finally {
    if (pool === undefined) delete process.env.DEN_VM_POOL;
    else process.env.DEN_VM_POOL = pool;
  }
  const api = client(server.url);
  const r = row("create from base -> first exec (API), no VM pool");
  try {
    for (let i = 0; i < runs; i++) {
      let id = "";
      r.den.push(await time(async () => {
        id = (await api("POST", "/v1/sandboxes", {})).id;
        await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "true" });
      }));
      await api("DELETE", `/v1/sandboxes/${id}`);
    }
  } finally {
    await server.close();
  }
}

/**
 * A bare QEMU's restore (spawn + migrate-incoming from a file + cont, raw-qemu.ts) of stored
 * snapshot `snap` (a cold sandbox's) over its template's RAM, with its stored disk: the floor under
 * Den's cold wake, which adds the store's read and checks, the jail and the agent.
 */
async function rawColdWake(server: Awaited<ReturnType<typeof startServer>>, snap: string, raw: RawTemplate, dataDir: string): Promise<number> {
  const store = (server.cp.hosts.first as unknown as { store?: ObjectStore }).store;
  if (!store) return NaN;
  const m = await readStoredManifest(store, snapshotKey(snap, server.cp.deployment));
  const dir = mkdtempSync(join(dataDir, "bench-raw-wake-"));
  try {
    await downloadSnapshot(store, snapshotKey(snap, server.cp.deployment), join(dir, "snap"), undefined, m);
    const t0 = performance.now();
    const vm = await rawRestore(raw, join(dir, "vm"), join(dir, "snap", "state.bin"), join(dir, "snap", "disk.qcow2"));
    const ms = performance.now() - t0;
    await rawDestroy(vm);
    return ms;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A cold sandbox's stored snapshot in parts: its state object, its disk object, and the RAM its guest had changed. */
async function storedParts(server: Awaited<ReturnType<typeof startServer>>, id: string): Promise<{ changed: number; state: number; disk: number } | undefined> {
  const snap = (await server.cp.store.sandboxes.get(id))?.hibernate_snapshot;
  const store = (server.cp.hosts.first as unknown as { store?: ObjectStore }).store;
  if (!snap || !store) return undefined;
  const m = await readStoredManifest(store, snapshotKey(snap, server.cp.deployment));
  const pages = (m.snapshot as SnapshotManifest).pages;
  if (!pages) return undefined;
  return { changed: pages.kept * 4096, state: m.files["state.bin"]?.size ?? 0, disk: m.files["disk.qcow2"]?.size ?? 0 };
}

/**
 * The public cross-provider benchmarks' shape, API call to first command: `Sandbox.create()`
 * then one command, through the `e2b` client (E2B API + envd) beside Den's own SDK, on the
 * same server, both with open egress (E2B's default). The floor is "create from template ->
 * agent ready" (raw QEMU) above; the network's setup comes on top of it.
 */
async function benchClients(server: Awaited<ReturnType<typeof startServer>>, runs: number, made: string[]): Promise<string[]> {
  const envd = server.envdUrl;
  if (!envd) return ["e2b client rows skipped: no envd listener"];
  const viaE2b = row("Sandbox.create -> first command (e2b client)");
  const viaDen = row("Sandbox.create -> first command (Den SDK)");
  const e2bOpts = { apiUrl: server.url, apiKey: KEY, sandboxUrl: envd };
  for (let i = 0; i < runs; i++) {
    let id = "";
    viaE2b.den.push(await time(async () => {
      const s = await E2bSandbox.create("base", e2bOpts);
      id = s.sandboxId;
      made.push(id);
      const r = await s.commands.run("true");
      if (r.exitCode !== 0) throw new Error(`e2b commands.run: exit ${r.exitCode}`);
    }));
    await E2bSandbox.kill(id, e2bOpts);
    viaDen.den.push(await time(async () => {
      // E2B's default network is open egress: the Den twin gets the same (a network costs its setup).
      const s = await DenSandbox.create({ template: "base", network: { egress: "open" }, apiUrl: server.url, apiKey: KEY });
      id = s.id;
      made.push(id);
      await s.exec("true");
    }));
    await server.cp.destroy(id, "user");
  }
  // A burst, as an agent framework fanning out does it: BURST creates at once, each timed to its first command.
  const burst = row(`Sandbox.create -> first command, ${BURST} at once (Den SDK, each)`);
  for (let i = 0; i < Math.max(1, Math.floor(runs / 3)); i++) {
    const ids: string[] = [];
    await Promise.all(Array.from({ length: BURST }, async () => {
      burst.den.push(await time(async () => {
        const s = await DenSandbox.create({ template: "base", apiUrl: server.url, apiKey: KEY });
        ids.push(s.id);
        made.push(s.id);
        await s.exec("true");
      }));
    }));
    for (const id of ids) await server.cp.destroy(id, "user");
  }
  return [`create -> first command, e2b client vs Den SDK (p50 / p99): ${fmt(pct(viaE2b.den, 50))} / ${fmt(pct(viaE2b.den, 99))} vs ${fmt(pct(viaDen.den, 50))} / ${fmt(pct(viaDen.den, 99))}`];
}
