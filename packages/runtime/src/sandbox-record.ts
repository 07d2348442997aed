import { rename, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { HostProfile } from "./host.js";
import type { TemplateRef } from "./snapshot.js";
import type { SnapshotVolume, VolumeAttachment } from "./volumes.js";

/** `stopped`: its VM is shut down and its disk overlay kept (a disk hibernation); it boots again from that disk. */
export type SandboxState = "starting" | "running" | "paused" | "stopped" | "destroyed";

/** A cold-booted sandbox's RAM file in its directory. */
export const RAM_FILE = "memory.bin";

/** What is persisted in `sandbox.json`, so a restarted runtime can find the sandbox again. */
export interface SandboxRecord {
  id: string;
  instance: string;
  state: SandboxState;
  createdAt: string;
  template: TemplateRef;
  /** The snapshot whose disk this sandbox's overlay sits on (absent: the template's disk). */
  backingSnapshot?: string;
  /** Cold-booted: guest RAM is `memory.bin` in the sandbox dir (shared), not a CoW map of the template's. */
  ramFile?: boolean;
  vcpus: number;
  memoryMb: number;
  diskMb: number;
  pidsMax: number;
  /** Volumes in this VM's slots (volumes.ts), mounted by its guest. */
  volumes?: VolumeAttachment[];
  /** Mounts its guest kept from a snapshot whose media was not put back: their slots stay empty. */
  staleVolumes?: SnapshotVolume[];
}

/** Hooks the runtime gives a sandbox: where things live, and what to do on destroy. */
export interface SandboxContext {
  host: HostProfile;
  /**
   * The disks a sandbox's overlay sits on, top first: its snapshot's (a fork child's, a
   * restore's), then its template's and those under it (TemplateStore.diskChain). What each
   * image's header must name (image-check.ts).
   */
  diskBacking(record: Pick<SandboxRecord, "template" | "backingSnapshot">): string[];
  /** The template's RAM file, which a sandbox's saved stream is restored over. */
  templateMemory(ref: TemplateRef): string;
  onDestroyed(id: string): Promise<void>;
}

export async function writeRecord(dir: string, record: SandboxRecord): Promise<void> {
  const tmp = join(dir, ".sandbox.json.tmp");
  await writeFile(tmp, JSON.stringify(record, null, 2) + "\n");
  await rename(tmp, join(dir, "sandbox.json"));
}
