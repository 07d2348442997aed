// needs: one VM
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, readFileSync, readdirSync, readlinkSync } from "node:fs";
import { join } from "node:path";
import type { Runtime, Sandbox } from "../src/index.js";
import { hostCgroups } from "../src/jail/host.js";
import { findInstanceProcesses, isAlive, processTags } from "../src/qemu.js";
import { poolSize } from "../src/pool.js";
import { testRuntime, untilPooled } from "./helpers.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(what: string, ok: () => boolean, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** This instance's pooled QEMUs that no sandbox has claimed. */
const waiting = (instance: string) => [...findInstanceProcesses(instance, { pooled: true })].filter(([tag]) => tag.startsWith("vm_"));

describe("the VM pool (real QEMUs)", () => {
  let rt: Runtime | undefined;
  let kept: Sandbox | undefined;
  after(async () => {
    await kept?.destroy().catch(() => undefined);
    rt?.close();
  });

  test("creates take pre-spawned QEMUs, which become the sandbox's in every respect; the pool refills", async () => {
    rt = await testRuntime();
    const size = poolSize();
    assert.ok(size >= 1, "the pool is on by default");
    await rt.prewarm();
    await untilPooled(rt, size);
    assert.equal(waiting(rt.instance).length, size, "each waiting VM is a live QEMU");
    assert.equal([...findInstanceProcesses(rt.instance).keys()].filter((t) => t.startsWith("vm_")).length, 0, "not listed as sandboxes");

    const sbx = await rt.create({ template: "base" });
    kept = sbx;
    const tag = processTags(sbx.pid!)!;
    assert.match(tag.vm, /^vm_/, "it was a pooled QEMU");
    assert.equal(tag.sandbox, sbx.id, "its directory (renamed) names the sandbox");
    assert.equal(findInstanceProcesses(rt.instance).get(sbx.id), sbx.pid);
    assert.equal(readlinkSync(`/proc/${sbx.pid}/root`), join(sbx.dir, "jail"), "its chroot moved with the directory");
    assert.equal(Number(readFileSync(join(sbx.dir, "qemu.pid"), "utf8").trim()), sbx.pid);
    assert.equal((await sbx.exec("echo pooled; uname -r > /dev/console")).stdout.toString(), "pooled\n");
    await until("the console line in the sandbox's log", () => readFileSync(join(sbx.dir, "console.log"), "latin1").length > 0, 10_000);
    // Its state moves through the jail's sockets, which moved too.
    const snap = await rt.snapshot(sbx.id);
    const copy = await rt.restore(snap.id);
    assert.equal((await copy.exec("echo copy")).stdout.toString(), "copy\n");
    await copy.destroy();
    await rt.deleteSnapshot(snap.id);

    await untilPooled(rt, size);
    // More creates at once than the pool holds: the rest start their own QEMUs.
    const burst = await Promise.all(Array.from({ length: size + 1 }, () => rt!.create({ template: "base" })));
    const pooled = burst.filter((s) => processTags(s.pid!)!.vm.startsWith("vm_")).length;
    assert.ok(pooled >= 1 && pooled <= size + 1, `${pooled} of the burst were pooled`);
    for (const s of burst) assert.equal((await s.exec(["echo", s.id])).stdout.toString(), `${s.id}\n`);
    await Promise.all(burst.map((s) => s.destroy()));
    for (const s of burst) assert.equal(existsSync(s.dir), false);
  });

  test("a clean close kills the waiting QEMUs and their cgroups, and keeps the sandboxes; the next open adopts them", async () => {
    const instance = rt!.instance;
    const pids = waiting(instance).map(([, pid]) => pid);
    const tags = waiting(instance).map(([tag]) => tag);
    assert.ok(pids.length > 0);
    rt!.close();
    rt = undefined;
    await until("the waiting QEMUs to die", () => pids.every((p) => !isAlive(p)), 10_000);
    assert.equal(isAlive(kept!.pid!), true, "the sandbox's VM runs on");
    const cg = hostCgroups();
    if (cg) {
      // Without waiting for an open (a data dir never opened again, as a test's, would keep them for good).
      await until("the pool's cgroups to go", () => !cg.list(instance).some((t) => tags.includes(t)), 10_000);
      assert.ok(cg.list(instance).includes(processTags(kept!.pid!)!.vm), "the running sandbox's stays");
    }

    rt = await testRuntime();
    assert.equal(waiting(instance).length, 0);
    assert.equal(existsSync(join(rt.dataDir, "pool")), false);
    const again = rt.get(kept!.id);
    assert.equal((await again.exec("echo adopted")).stdout.toString(), "adopted\n");
    if (cg) {
      const live = new Set([...findInstanceProcesses(instance, { pooled: true }).values()].map((p) => processTags(p)!.vm));
      const stale = cg.list(instance).filter((t) => t.startsWith("vm_") && !live.has(t));
      assert.deepEqual(stale, [], "no cgroup of a dead pooled QEMU is left");
    }
    const vmTag = processTags(again.pid!)!.vm;
    await again.destroy();
    kept = undefined;
    if (cg) assert.equal(cg.list(instance).includes(vmTag), false, "the claimed VM's cgroup goes with it");
  });

  test("a kill -9 of the process holding the pool leaves nothing the next open does not clean up", async () => {
    rt ??= await testRuntime(); // (the test before may have failed with it closed)
    const dataDir = rt.dataDir;
    const instance = rt!.instance;
    const before = readdirSync(join(dataDir, "sandboxes")).sort();
    rt!.close();
    rt = undefined;
    const child = spawn(process.execPath, ["--input-type=module", "-e", `
      import { Runtime } from "@den/runtime";
      const rt = await Runtime.open({ dataDir: ${JSON.stringify(dataDir)} });
      await rt.prewarm();
      while (rt.pooledVms < 1) await new Promise((r) => setTimeout(r, 20));
      console.log("ready");
      setInterval(() => undefined, 1000);`], { stdio: ["ignore", "pipe", "inherit"] });
    await new Promise<void>((resolve, reject) => {
      child.stdout.on("data", (d: Buffer) => d.toString().includes("ready") && resolve());
      child.on("exit", (c) => reject(new Error(`the child exited (${c})`)));
    });
    child.kill("SIGKILL");
    await new Promise((r) => child.once("exit", r));
    assert.ok(waiting(instance).length >= 1, "its pooled QEMUs outlived it");

    rt = await testRuntime();
    assert.equal(waiting(instance).length, 0, "the next open killed them");
    assert.equal(existsSync(join(dataDir, "pool")), false);
    assert.deepEqual(readdirSync(join(dataDir, "sandboxes")).sort(), before, "no sandbox appeared or went");
  });

  test("a close while a pooled QEMU is being started: no retry, no warning, and an open of the same dir right after finds nothing of it", async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error) => w.name === "DenPoolWarning" && warnings.push(w.message);
    process.on("warning", onWarning);
    try {
      // At several moments of the spawn: its overlay, its QEMU's start, its warm-up.
      for (const delayMs of [0, 30, 120, 300]) {
        rt?.close();
        rt = await testRuntime();
        const instance = rt.instance;
        await rt.prewarm();
        await sleep(delayMs);
        rt.close();
        rt = await testRuntime();
        assert.equal(waiting(instance).length, 0, `after ${delayMs} ms: no pooled QEMU outlived the close`);
        assert.equal(existsSync(join(rt.dataDir, "pool")), false, `after ${delayMs} ms: nothing was written to the pool after the open`);
      }
      await sleep(200);
      assert.deepEqual(warnings, [], "a spawn killed by a close is no failure");
    } finally {
      process.off("warning", onWarning);
    }
  });

  test("closes in a row, each of a full pool: every pooled QEMU's cgroup goes once the QEMU is gone", { skip: !hostCgroups() && "no cgroups here" }, async () => {
    const cg = hostCgroups()!;
    // A killed QEMU is still in its cgroup while it exits: a close that removed the cgroups
    // without waiting for that (it saw only the QEMUs it could still find) left some for good.
    for (let round = 1; round <= 5; round++) {
      rt?.close();
      rt = await testRuntime();
      const instance = rt.instance;
      await rt.prewarm();
      await untilPooled(rt, poolSize());
      const tags = waiting(instance).map(([tag]) => tag);
      rt.close();
      rt = undefined;
      await until(`round ${round}: the pool's cgroups to go`, () => !cg.list(instance).some((t) => tags.includes(t)), 10_000);
    }
  });
});
