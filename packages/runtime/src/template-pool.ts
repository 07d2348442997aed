import { join } from "node:path";
import type { HostProfile } from "./host.js";
import { hostCgroups } from "./jail/host.js";
import type { OverlayMaker } from "./overlay.js";
import { warmPooledVm } from "./pool-warmup.js";
import type { PoolShape, PoolSpawner, VmPool } from "./pool.js";
import { POOL_TAG_PREFIX, VM_FILES, checkSocketPaths, findInstanceProcesses, isAlive, killAndWait } from "./qemu.js";
import { checkCompatible, type SnapshotManifest } from "./snapshot.js";
import { TEMPLATE_FILES, type TemplateStore } from "./templates.js";
import { newId } from "./util.js";
import { Vm } from "./vm.js";
import { restoreSpec } from "./vm-specs.js";

/** The pool shape of creates from the template version in `dir`. */
export function poolShape(dir: string, m: SnapshotManifest, backing: string[]): PoolShape {
  return {
    source: dir, memoryFile: join(dir, TEMPLATE_FILES.memory), stateFile: join(dir, TEMPLATE_FILES.state),
    backing, vcpus: m.vm.vcpus, memoryMb: m.vm.memoryMb,
  };
}

/** Starts keeping QEMUs ready for creates from `template`; a template not here, or not for this host, is skipped. */
export async function prewarm(pool: VmPool, templates: TemplateStore, host: HostProfile, template: string): Promise<void> {
  const tpl = await templates.resolve(template).catch(() => undefined);
  if (!tpl) return;
  try {
    checkCompatible(tpl.manifest, host);
  } catch {
    return;
  }
  pool.want(poolShape(tpl.dir, tpl.manifest, templates.diskChain(tpl)));
  pool.refill();
}

/**
 * The pool's spawner: a pooled QEMU is what a create's restore would launch, but not yet
 * any sandbox's, its template's state loaded and its guest run once (warmPooledVm), paused.
 * `sandboxDir`: a sandbox's directory, which a pooled VM's is renamed to.
 */
export function pooledVmSpawner(instance: string, host: HostProfile, overlays: OverlayMaker, sandboxDir: (id: string) => string): PoolSpawner {
  return async (shape, dir, id, closed) => {
    // It will be renamed to a sandbox's directory: that one's sockets must fit too.
    checkSocketPaths(sandboxDir(newId("sbx")));
    await overlays.create(shape.backing, join(dir, VM_FILES.disk));
    // A close kills the pool's QEMUs it finds: one launched after it must not warm up first.
    const stopIfClosed = async (vm?: Vm) => {
      if (!closed()) return;
      await vm?.kill();
      throw new Error("the pool is closed");
    };
    await stopIfClosed();
    // QEMU 7.2 now and then crashes as a restored VM's guest starts (see Launcher.restoreFrom):
    // a QEMU that died in its warm-up is started again (twice at most; a template that fails
    // so every time is left to the pool's backoff).
    for (let attempt = 1; ; attempt++) {
      const vm = await Vm.launch(restoreSpec(instance, dir, id, shape, { incomingState: shape.stateFile }), host, { console: false });
      await stopIfClosed(vm);
      try {
        await warmPooledVm(vm, dir, shape.stateFile);
        return vm;
      } catch (e) {
        const crashed = vm.qmp.closed || !isAlive(vm.pid);
        await vm.kill();
        if (attempt >= 3 || !crashed || closed()) throw e;
        process.emitWarning(`VM pool: a QEMU died in its warm-up (${(e as Error).message.slice(0, 200)}); starting another`, "DenPoolWarning");
      }
    }
  };
}

/**
 * Closes the pool: the waiting VMs, and one still starting (the pool's spawn is not
 * awaited). Resolves (never rejects) once every one of them is gone and the instance's
 * empty cgroups with them.
 */
export function closePool(pool: VmPool, instance: string): Promise<void> {
  // Nothing of the pool outlives this, its cgroups neither (a data dir never opened again, a
  // test's, would never sweep them). Each is waited for until it is gone: a killed QEMU, a
  // zombie already, no longer shows its tag, but it holds its cgroup until its exit is done
  // (the cgroups' removal failed now and then when it only waited for the ones it could still find).
  const killed = new Set(pool.close());
  for (const [tag, pid] of findInstanceProcesses(instance, { pooled: true })) {
    if (tag.startsWith(POOL_TAG_PREFIX)) killed.add(pid);
  }
  const reaped = [...killed].map((pid) => killAndWait(pid));
  return Promise.all([pool.settled(), ...reaped]).then(() => undefined, () => undefined).finally(() => {
    // (Detached sandboxes, still running, keep theirs and the instance's.)
    hostCgroups()?.removeEmpty(instance);
  });
}
