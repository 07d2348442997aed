import { mkdir, rename, rm } from "node:fs/promises";
import { dirname, join } from "node:path";
import { DenError } from "@den/protocol";
import type { AgentClient } from "./agent-client.js";
import { runTool } from "./util.js";
import { rawToQcow2 } from "./image-tools.js";

/**
 * Volumes in a VM. microvm has no hotplug and a restore loads the device set its template
 * was baked with, so every VM has VOLUME_SLOTS virtio-blk disks (serial `den-vol-<slot>`)
 * from its first boot: a slot holds a volume's image, or nothing (reads as zeros, writes
 * go nowhere). Every slot is SLOT_BYTES long whatever it holds, so a guest that probed a
 * slot empty sees the same device when a volume is put there; the volume's ext4 fills
 * only its own size of it. The guest agent mounts (`vol.mount`) and releases
 * (`vol.release`) them.
 */
export const VOLUME_SLOTS = 8;
/** The virtual size of every slot (a volume image's too: the unused part costs nothing in qcow2). */
export const SLOT_BYTES = 2 ** 40;
/** At most this many volumes in one sandbox: a restore may need as many slots again for the mounts its snapshot had. */
export const MAX_VOLUMES_PER_SANDBOX = VOLUME_SLOTS / 2;

/** A volume to put in a sandbox: its image on this host, and where the guest mounts it. */
export interface VolumeRequest {
  /** The volume's id (what the control plane knows it by). */
  volume: string;
  image: string;
  path: string;
  readOnly: boolean;
}

/** A volume in a slot of a VM. */
export interface VolumeAttachment extends VolumeRequest {
  slot: number;
}

/**
 * A mount a snapshot's guest had when its state was saved: a volume it still held (not
 * released: a checkpoint's, or one a process kept files open on at a hibernation), which
 * only a wake of the same sandbox puts back in the same slot; or `stale`, a mount whose
 * media was already gone (its slot must stay empty).
 */
export interface SnapshotVolume {
  volume: string;
  slot: number;
  path: string;
  readOnly: boolean;
  stale?: boolean;
}

/**
 * Makes an empty volume image: an ext4 filesystem of `sizeMb` at the start of a qcow2
 * disk of SLOT_BYTES. The filesystem is made here, on a fresh sparse file no guest has
 * touched (a guest-written image is never parsed on the host).
 */
export async function createVolumeImage(image: string, sizeMb: number): Promise<void> {
  if (!Number.isInteger(sizeMb) || sizeMb < 16 || sizeMb * 1024 * 1024 > SLOT_BYTES) {
    throw new DenError("invalid_argument", `a volume's size must be a whole number of MiB in 16..${SLOT_BYTES / 1024 / 1024}`);
  }
  await mkdir(dirname(image), { recursive: true });
  const raw = `${image}.raw.tmp`;
  const tmp = `${image}.tmp`;
  try {
    await runTool("truncate", ["-s", String(SLOT_BYTES), raw]);
    // Inode tables and journal stay unwritten (they read as zeros): the image stays small.
    await runTool("mkfs.ext4", ["-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", "-L", "den-volume", raw, `${sizeMb}M`]);
    await rawToQcow2(raw, tmp);
    await rename(tmp, image);
  } finally {
    await rm(raw, { force: true });
    await rm(tmp, { force: true });
  }
}

/**
 * The slots of a VM about to start from a snapshot whose guest had `mounted` in its slots.
 * A wake of the same sandbox gets each held volume back in its slot (still mounted); any
 * other mount of the snapshot is stale (its media is not put back: the volume is not part
 * of a snapshot) and its slot stays empty. The requested volumes go into free slots.
 */
export function planSlots(mounted: SnapshotVolume[], requested: VolumeRequest[], sameSandbox: boolean): { attach: VolumeAttachment[]; mount: VolumeAttachment[]; stale: SnapshotVolume[] } {
  if (requested.length > MAX_VOLUMES_PER_SANDBOX) throw new DenError("invalid_argument", `a sandbox has at most ${MAX_VOLUMES_PER_SANDBOX} volumes`);
  const attach: VolumeAttachment[] = [];
  const stale: SnapshotVolume[] = [];
  const pending = [...requested];
  for (const m of mounted) {
    const i = sameSandbox && !m.stale ? pending.findIndex((r) => r.volume === m.volume && r.path === m.path && r.readOnly === m.readOnly) : -1;
    if (i >= 0) attach.push({ ...pending.splice(i, 1)[0]!, slot: m.slot });
    else stale.push({ ...m, stale: true });
  }
  const used = new Set(mounted.map((m) => m.slot));
  const mount: VolumeAttachment[] = [];
  for (const r of pending) {
    let slot = 0;
    while (used.has(slot)) slot++;
    if (slot >= VOLUME_SLOTS) throw new DenError("invalid_argument", `no free volume slot: the snapshot's guest still has ${stale.length} stale mounts`);
    used.add(slot);
    mount.push({ ...r, slot });
  }
  return { attach: [...attach, ...mount], mount, stale };
}

/** A volume's image inside a data dir. */
export function volumeImagePath(volumesDir: string, volume: string): string {
  return join(volumesDir, volume, "volume.qcow2");
}

/** Mounts volumes just put in their slots. */
export async function mountVolumes(agent: AgentClient, volumes: VolumeAttachment[]): Promise<void> {
  if (!volumes.length) return;
  agent.requireFeature("volumes", "volumes");
  for (const v of volumes) await agent.request("vol.mount", { slot: v.slot, path: v.path, read_only: v.readOnly });
}

/** Unmounts what it can (flushed first); returns those released. A volume a process holds files on stays mounted. */
export async function releaseVolumes(agent: AgentClient, volumes: VolumeAttachment[]): Promise<VolumeAttachment[]> {
  const released: VolumeAttachment[] = [];
  for (const v of volumes) if ((await agent.request("vol.release", { path: v.path })).released) released.push(v);
  return released;
}

/** Lets go of a snapshot's mounts whose media was not put back; returns those whose slots are still held. */
export async function detachStale(agent: AgentClient, stale: SnapshotVolume[]): Promise<SnapshotVolume[]> {
  const kept: SnapshotVolume[] = [];
  for (const s of stale) if (!(await agent.request("vol.detach", { slot: s.slot, path: s.path })).free) kept.push({ ...s, stale: true });
  return kept;
}

/** What a snapshot records of a guest's mounts: its volumes still mounted, and the stale ones. */
export function snapshotVolumes(mounted: VolumeAttachment[], stale: SnapshotVolume[]): SnapshotVolume[] {
  return [...mounted.map((v) => ({ volume: v.volume, slot: v.slot, path: v.path, readOnly: v.readOnly })), ...stale.map((s) => ({ ...s, stale: true }))];
}
