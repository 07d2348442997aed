import { DenError } from "@den/protocol";
import { runToCompletion } from "./exec.js";
import type { SandboxCore } from "./sandbox-core.js";
import { SLOT_BYTES } from "./volumes.js";

/**
 * Grows the virtual disk to `diskMb` and the guest's root filesystem with it (online
 * ext4 resize). The guest learns the new size from virtio's config-change interrupt.
 */
export function growDisk(core: SandboxCore, diskMb: number): Promise<void> {
  return core.lifecycle.run(async () => {
    const bytes = diskMb * 1024 * 1024;
    // (`root`: the throttle node over the disk, block-graph.ts; it passes the resize down.)
    await core.requireVm().qmp.execute("block_resize", { "node-name": "root", size: bytes });
    await core.save({ ...core.record, diskMb });
    const agent = await core.agent();
    const r = await runToCompletion(agent, ["/bin/sh", "-c",
      `i=0; while [ $(( $(cat /sys/block/vda/size) * 512 )) -lt ${bytes} ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; resize2fs /dev/vda 2>&1`,
    ], { timeoutMs: 120_000 });
    if (r.exitCode !== 0) throw new DenError("io_error", `growing the guest filesystem failed: ${r.stdout.toString().slice(-500)}`);
  });
}

/**
 * Grows a volume this VM mounts read-write to `sizeMb`: the guest resizes its ext4 online
 * (the image is a slot's full size already, so only the filesystem grows; nothing of a
 * guest-written image is parsed on the host).
 */
export function growVolume(core: SandboxCore, volume: string, sizeMb: number): Promise<void> {
  return core.lifecycle.run(async () => {
    core.assertUsable();
    const v = (core.record.volumes ?? []).find((x) => x.volume === volume);
    if (!v || v.readOnly) throw new DenError("invalid_state", `sandbox ${core.id} has no read-write mount of volume ${volume}`);
    if (!Number.isInteger(sizeMb) || sizeMb < 16 || sizeMb * 1024 * 1024 > SLOT_BYTES) throw new DenError("invalid_argument", `a volume's size must be a whole number of MiB in 16..${SLOT_BYTES / 1024 / 1024}`);
    const agent = await core.agent();
    agent.requireFeature("volumes", "volumes");
    await agent.request("vol.grow", { path: v.path, bytes: sizeMb * 1024 * 1024 });
  });
}
