import { join } from "node:path";
import type { HostProfile } from "./host.js";
import { VM_FILES, bootCommandLine, type VmSpec } from "./qemu.js";
import type { VolumeAttachment } from "./volumes.js";

/** The MAC of every guest NIC; a fork gets its own network identity when networking is on. */
export const GUEST_MAC = "52:54:00:de:4e:01";
/** A cold boot under TCG on a loaded host can take a while; a restore never should. */
export const BOOT_TIMEOUT_MS = 120_000;

/** A VM that restores a saved state over `memoryFile` (copy-on-write), its disk the overlay in `dir`. */
export function restoreSpec(instance: string, dir: string, tag: string, shape: { vcpus: number; memoryMb: number; memoryFile: string; backing: readonly string[] }, state: { incomingState: string }, volumes?: VolumeAttachment[]): VmSpec {
  return {
    dir, vcpus: shape.vcpus, memoryMb: shape.memoryMb, memoryFile: shape.memoryFile, shareMemory: false,
    disk: join(dir, VM_FILES.disk), backing: shape.backing, incoming: true, ...state, ...(volumes?.length ? { volumes } : {}),
    macAddress: GUEST_MAC, tag: { instance, sandbox: tag },
  };
}

export interface BootSpecOptions {
  dir: string;
  id: string;
  kernel: string;
  initrd: string;
  disk: string;
  /** The images under `disk`, top first (VmSpec.backing). */
  backing: readonly string[];
  memoryFile: string;
  vcpus: number;
  memoryMb: number;
  volumes?: VolumeAttachment[];
}

/** A VM that cold-boots a kernel over `disk`, its RAM the shared file `memoryFile`. */
export function bootSpec(instance: string, host: HostProfile, opts: BootSpecOptions): VmSpec {
  return {
    ...(opts.volumes?.length ? { volumes: opts.volumes } : {}),
    dir: opts.dir, vcpus: opts.vcpus, memoryMb: opts.memoryMb, memoryFile: opts.memoryFile, shareMemory: true,
    disk: opts.disk, backing: opts.backing, boot: { kernel: opts.kernel, initrd: opts.initrd, append: bootCommandLine(host) },
    incoming: false, macAddress: GUEST_MAC, tag: { instance, sandbox: opts.id },
  };
}
