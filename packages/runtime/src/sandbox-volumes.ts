import type { SandboxCore } from "./sandbox-core.js";
import { detachStale, mountVolumes, releaseVolumes, type VolumeAttachment } from "./volumes.js";

/** How long a destroy waits for the guest to flush its read-write volumes. */
const VOLUME_FLUSH_MS = 30_000;

/**
 * After a start: lets go of a snapshot's stale mounts (their media was not put back), and
 * mounts `mount`, the volumes just put in their slots.
 */
export async function settleVolumes(core: SandboxCore, mount: VolumeAttachment[]): Promise<void> {
  const stale = core.record.staleVolumes ?? [];
  if (!mount.length && !stale.length) return;
  const agent = await core.agent();
  const kept = await detachStale(agent, stale);
  await mountVolumes(agent, mount);
  const { staleVolumes: _, ...rest } = core.record;
  await core.save({ ...rest, ...(kept.length ? { staleVolumes: kept } : {}) });
}

/**
 * Before a destroy: what the guest wrote to its read-write volumes reaches their images
 * (they outlive it), within VOLUME_FLUSH_MS; a guest that does not answer loses what it
 * had not flushed, as a machine losing power would.
 */
export async function flushVolumes(core: SandboxCore): Promise<void> {
  const rw = (core.record.volumes ?? []).filter((v) => !v.readOnly);
  const vm = core.vm;
  if (!rw.length || !vm || (core.record.state !== "running" && core.record.state !== "paused")) return;
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<void>((resolve) => (timer = setTimeout(resolve, VOLUME_FLUSH_MS)));
  const flush = core.lifecycle.run(() => core.whileRunning(vm, (agent) => releaseVolumes(agent, rw))).catch(() => undefined);
  await Promise.race([flush, deadline]);
  clearTimeout(timer);
}
