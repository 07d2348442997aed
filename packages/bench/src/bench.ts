/**
 * `npm run bench [-- --quick] [--runs N] [--json FILE]`: p50/p99 of the runtime's core
 * operations against real microVMs, each beside the same operation done with raw QEMU
 * over QMP (no Den code) where one exists, so the driver's overhead reads as a ratio.
 */
import { randomBytes } from "node:crypto";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Runtime, type Sandbox } from "@den/runtime";
import { rawDestroy, rawPauseResume, rawRestore, rawSnapshot, type RawTemplate } from "./raw-qemu.js";
import { benchServer } from "./server-bench.js";
import { fmt, pct, row, rows, time } from "./table.js";

const { values: flags } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    runs: { type: "string" },
    template: { type: "string", default: "base" },
    json: { type: "string" },
    "data-dir": { type: "string" },
  },
});
const RUNS = Number(flags.runs ?? (flags.quick ? 3 : 20));
const COLD_RUNS = flags.quick ? 2 : Math.max(RUNS, 20);

async function main(): Promise<void> {
  const rt = await Runtime.open(flags["data-dir"] ? { dataDir: flags["data-dir"] } : {});
  const tpl = await rt.templates.resolve(flags.template!);
  const scratch = join(rt.dataDir, "bench");
  rmSync(scratch, { recursive: true, force: true });
  mkdirSync(scratch, { recursive: true });
  const raw: RawTemplate = { dir: tpl.dir, memoryMb: tpl.manifest.vm.memoryMb, vcpus: tpl.manifest.vm.vcpus, cpu: rt.host.cpuModel, accel: rt.host.accelerator };
  const log = (s: string) => process.stderr.write(`${s}\n`);
  log(`bench: template ${tpl.name}@${tpl.version}, ${RUNS} runs (${COLD_RUNS} cold boots), accelerator ${rt.host.accelerator}`);

  try {
    const cold = row("cold boot -> first exec");
    for (let i = 0; i < COLD_RUNS; i++) {
      const t0 = performance.now();
      const s = await rt.boot({ template: flags.template });
      await s.exec(["true"]);
      cold.den.push(performance.now() - t0);
      await s.destroy();
    }
    log(`  cold boot p50 ${fmt(pct(cold.den, 50))}`);

    // As on a host agent that has run a while: its pool holds QEMUs started for the template.
    await rt.prewarm(flags.template);
    for (const deadline = Date.now() + 30_000; rt.pooledVms === 0 && Date.now() < deadline;) await new Promise((r) => setTimeout(r, 20));
    const ready = row("create from template -> agent ready");
    const create = row("create from template -> first exec");
    for (let i = 0; i < RUNS; i++) {
      const t0 = performance.now();
      const s = await rt.create({ template: flags.template });
      ready.den.push(performance.now() - t0);
      await s.exec(["true"]);
      create.den.push(performance.now() - t0);
      await s.destroy();
      const r0 = performance.now();
      const vm = await rawRestore(raw, join(scratch, "raw"), join(tpl.dir, "state.bin"), join(tpl.dir, "disk.qcow2"));
      ready.raw.push(performance.now() - r0);
      await rawDestroy(vm);
    }
    log(`  create p50 ${fmt(pct(create.den, 50))}`);

    const sbx = await rt.create({ template: flags.template });
    const rtt = row("exec round trip (true)");
    await sbx.exec(["true"]);
    for (let i = 0; i < Math.max(RUNS, 20); i++) rtt.den.push(await time(() => sbx.exec(["true"])));

    const io = row("10 MB file write + read");
    const data = randomBytes(10 * 1024 * 1024);
    for (let i = 0; i < RUNS; i++) {
      io.den.push(await time(async () => {
        await sbx.files.write("/tmp/bench.bin", data);
        const back = await sbx.files.read("/tmp/bench.bin");
        if (!back.equals(data)) throw new Error("10 MB round trip mismatch");
      }));
    }

    const pr = row("pause + resume");
    for (let i = 0; i < RUNS; i++) pr.den.push(await time(async () => {
      await sbx.pause();
      await sbx.resume();
    }));

    const snap = row("snapshot (running sandbox)");
    const rest = row("restore snapshot -> agent ready");
    const rawVm = await rawRestore(raw, join(scratch, "rawsnap"), join(tpl.dir, "state.bin"), join(tpl.dir, "disk.qcow2"));
    for (let i = 0; i < RUNS; i++) {
      let id = "";
      snap.den.push(await time(async () => (id = (await rt.snapshot(sbx.id)).id)));
      let r: Sandbox | undefined;
      rest.den.push(await time(async () => (r = await rt.restore(id))));
      await r!.destroy();
      await rt.deleteSnapshot(id);
      const state = join(scratch, `raw-state-${i}`);
      snap.raw.push(await time(() => rawSnapshot(rawVm, state)));
      pr.raw.push(await time(() => rawPauseResume(rawVm)));
      const t0 = performance.now();
      const rv = await rawRestore(raw, join(scratch, "rawrestore"), state, `${state}.qcow2`);
      rest.raw.push(performance.now() - t0);
      await rawDestroy(rv);
      rmSync(state, { force: true });
      rmSync(`${state}.qcow2`, { force: true });
    }

    for (const n of [1, 4]) {
      const f = row(`fork x${n} -> children ready`);
      for (let i = 0; i < RUNS; i++) {
        let kids: Sandbox[] = [];
        f.den.push(await time(async () => (kids = await rt.fork(sbx.id, n))));
        await Promise.all(kids.map((k) => k.destroy()));
        const state = join(scratch, `raw-fork-${i}`);
        const t0 = performance.now();
        await rawSnapshot(rawVm, state);
        const vms = await Promise.all(Array.from({ length: n }, (_, j) => rawRestore(raw, join(scratch, `rawfork${j}`), state, `${state}.qcow2`)));
        f.raw.push(performance.now() - t0);
        await Promise.all(vms.map(rawDestroy));
        rmSync(state, { force: true });
        rmSync(`${state}.qcow2`, { force: true });
      }
    }
    await rawDestroy(rawVm);
    await sbx.destroy();
  } finally {
    await rt.destroyAll();
    rt.close();
    rmSync(scratch, { recursive: true, force: true });
  }
  // Hibernate, wake, checkpoints and custom templates go through the API, as users see them.
  const notes = await benchServer({ dataDir: rt.dataDir, runs: RUNS, full: !flags.quick, log, raw });
  report(notes);
}

function report(notes: string[]): void {
  const header = ["operation", "runs", "den p50", "den p95", "den p99", "raw p50", "raw p99", "den/raw"];
  const lines = rows.map((r) => {
    const d50 = pct(r.den, 50);
    const r50 = pct(r.raw, 50);
    return [r.op, String(r.den.length), fmt(d50), fmt(pct(r.den, 95)), fmt(pct(r.den, 99)), fmt(r50), fmt(pct(r.raw, 99)), r.raw.length ? `${(d50 / r50).toFixed(2)}x` : "n/a"];
  });
  const all = [header, ...lines];
  const w = header.map((_, i) => Math.max(...all.map((l) => l[i]!.length)));
  for (const l of all) process.stdout.write(l.map((c, i) => (i === 0 ? c.padEnd(w[i]!) : c.padStart(w[i]!))).join("  ") + "\n");
  const cold = pct(rows.find((r) => r.op.startsWith("cold"))!.den, 50);
  const create = pct(rows.find((r) => r.op === "create from template -> first exec")!.den, 50);
  process.stdout.write("\nraw = the same QEMU operation from a bare QMP script: restore = spawn + migrate-incoming + cont (running, no agent);\n" +
    "Den's 'agent ready' adds the agent connection, clock set and RNG reseed; a create takes a QEMU its pool started\n" +
    "beforehand, its template's state loaded and its guest run once (DEN_VM_POOL per template; the raw row starts its own),\n" +
    "restores, wakes and forks start theirs (a new QEMU's first guest calls pay for TCG's first translations).\n");
  process.stdout.write(`create-from-template vs cold boot, to first exec (p50): ${(cold / create).toFixed(1)}x faster\n`);
  // Waking from zero should cost about what a fresh create does (both through the API).
  const p50 = (op: string) => pct(rows.find((r) => r.op === op)?.den ?? [], 50);
  const wake = p50("cold wake -> first exec (local store)");
  const fresh = p50("create from base -> first exec (API)");
  process.stdout.write(`cold wake -> first exec vs create -> first exec, through the API (p50): ${fmt(wake)} vs ${fmt(fresh)} (${(wake / fresh).toFixed(2)}x)\n`);
  // The same create without the pool: a QEMU of its own and its first translations, as a wake pays.
  const unpooled = p50("create from base -> first exec (API), no VM pool");
  process.stdout.write(`cold wake -> first exec vs a create that starts its own QEMU (no VM pool), through the API (p50): ${fmt(wake)} vs ${fmt(unpooled)} (${(wake / unpooled).toFixed(2)}x)\n`);
  for (const n of notes) process.stdout.write(`${n}\n`);
  if (flags.json) {
    const out = rows.map((r) => ({ op: r.op, runs: r.den.length, den_ms: { p50: pct(r.den, 50), p95: pct(r.den, 95), p99: pct(r.den, 99) }, raw_ms: r.raw.length ? { p50: pct(r.raw, 50), p99: pct(r.raw, 99) } : null }));
    writeFileSync(flags.json, JSON.stringify({ date: new Date().toISOString(), runs: RUNS, rows: out, notes }, null, 2) + "\n");
  }
}

await main();
