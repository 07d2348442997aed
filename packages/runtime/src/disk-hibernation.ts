import { rm } from "node:fs/promises";
import { join } from "node:path";
import { DenError } from "@den/protocol";
import { runToCompletion } from "./exec.js";
import type { SandboxCore } from "./sandbox-core.js";
import { RAM_FILE } from "./sandbox-record.js";
import type { Vm } from "./vm.js";
import { mountVolumes, releaseVolumes } from "./volumes.js";

/** How long the guest may take to flush its filesystems before a disk hibernation gives up. */
const SYNC_TIMEOUT_MS = 60_000;

/**
 * Shuts the VM down keeping its disk overlay (a disk hibernation): the guest flushes its
 * filesystems, the vCPUs stop, and only then QEMU quits. Its memory is gone; a paused VM
 * runs again just long enough to flush. `Runtime.bootFromDisk` boots it again.
 */
export function stopKeepingDisk(core: SandboxCore): Promise<void> {
  return core.lifecycle.run(async () => {
    core.assertUsable();
    if (core.record.state === "stopped") return;
    const vm = core.requireVm();
    const wasPaused = core.record.state === "paused";
    if (wasPaused) {
      await vm.cont();
      await core.setState("running");
      (await core.link.current())?.unhold();
    }
    try {
      // Volumes unmounted cleanly (a reader of a read-only one cannot replay a journal).
      await releaseVolumes(await core.agent(), core.record.volumes ?? []);
      // A guest flush reaches QEMU's qcow2 caches too: after it the overlay holds every write.
      const r = await runToCompletion(await core.agent(), ["/bin/sync"], { timeoutMs: SYNC_TIMEOUT_MS });
      if (r.exitCode !== 0 || r.timedOut) throw new DenError("io_error", `sandbox ${core.id}: the guest could not flush its disk (${r.timedOut ? "timed out" : `exit ${r.exitCode}`})`);
      await vm.stop();
    } catch (e) {
      // Nothing changed: it stays as it was (a pause again for one that was paused).
      if (wasPaused) await vm.stop().then(() => core.setState("paused"), () => undefined);
      throw e;
    }
    // Its disk is whole now: a crash from here on finds a stopped sandbox.
    await toStopped(core, vm, (v) => v.quit());
  });
}

/**
 * Takes a VM just booted from the sandbox's own disk (by the runtime) and waits for its
 * agent; the sandbox runs again with a fresh memory. A failure kills that VM and leaves
 * the sandbox stopped, disk untouched.
 */
export function bootedFromDisk(core: SandboxCore, vm: Vm, timeoutMs: number): Promise<void> {
  return core.lifecycle.run(async () => {
    core.assertUsable();
    if (core.record.state !== "stopped") throw new DenError("invalid_state", `sandbox ${core.id} is ${core.record.state}, not shut down`);
    core.vm = vm;
    try {
      const agent = await core.connectAgent(undefined, timeoutMs, true);
      // A new kernel: nothing is mounted, nothing stale.
      await mountVolumes(agent, core.record.volumes ?? []);
      const { staleVolumes: _, ...rest } = core.record;
      // Its RAM is now a file in its directory, as a cold boot's: its snapshots carry it.
      core.record = { ...rest, ramFile: true };
      await core.setState("running");
    } catch (e) {
      await toStopped(core, vm, (v) => v.kill());
      throw e;
    }
  });
}

/**
 * Records it stopped first (a crash then never finds a running record without a VM),
 * then lets its VM go with `end`, and its RAM (a boot makes a new one).
 */
async function toStopped(core: SandboxCore, vm: Vm, end: (vm: Vm) => Promise<void>): Promise<void> {
  await core.setState("stopped");
  await core.link.close();
  core.link.forget();
  core.vm = undefined;
  await end(vm);
  await rm(join(core.dir, RAM_FILE), { force: true });
}
