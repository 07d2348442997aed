import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { readFile, rename, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { DenError } from "@den/protocol";
import type { HostProfile } from "./host.js";
import { checkManifest } from "./manifest-check.js";
import { deviceSetId } from "./qemu.js";
import type { SnapshotVolume } from "./volumes.js";

export const SNAPSHOT_FORMAT = 1;
export const MANIFEST = "manifest.json";

export interface FileDigest {
  size: number;
  /** Or UNHASHED. */
  sha256: string;
}

/**
 * The digest of a file whose bytes went straight into the object store as they were made (a
 * cold hibernate's state): the stored object's own sha256, checked on every read of it, is
 * their checksum, and the store's decompressor checks the bytes it makes.
 */
export const UNHASHED = "";

/** A template's defaults for its sandboxes' commands (the wire's host.TemplateRun). */
export interface TemplateRunConfig {
  env: Record<string, string>;
  workdir: string | null;
  user: string | null;
  startCmd: string | null;
  readyCmd: string | null;
}

export interface TemplateRef {
  name: string;
  version: string;
}

/**
 * A snapshot is a directory: this manifest (written last, so a half-written snapshot
 * never looks complete), `state.bin` (QEMU's migration stream), `disk.qcow2` (the
 * disk overlay over the template's disk) and, for templates, `memory.bin` (guest RAM).
 */
export interface SnapshotManifest {
  format: number;
  kind: "template" | "sandbox";
  id: string;
  createdAt: string;
  template: TemplateRef;
  /** "file": RAM is memory.bin. "stream": RAM is in state.bin, over the template's memory.bin. */
  memory: "file" | "stream";
  /** A stream that carries only the pages that differ from its template's RAM (older ones carry every page). */
  changedPagesOnly?: boolean;
  /** Such a stream's RAM pages: how many it had and how many it kept (what the guest changed). */
  pages?: { total: number; kept: number };
  host: {
    qemuVersion: string;
    accelerator: string;
    cpuModel: string;
    machine: string;
    deviceSet: string;
    tscKhz: number;
  };
  vm: { vcpus: number; memoryMb: number; diskMb: number };
  /** How long the VM was paused while its state was copied. */
  pauseMs: number;
  sourceSandbox?: string;
  /** Templates only: the template whose disk this one's disk overlays (kept while this one exists). */
  baseTemplate?: TemplateRef;
  /** Templates only: how many overlays deep its disk is (0: standalone). */
  diskDepth?: number;
  /** Templates only: what it was made from (`image registry/repo@sha256:...`, `template base@...`). */
  source?: string;
  /** Templates only: how its sandboxes run by default (an image's ENV, WORKDIR, USER, start command). */
  run?: TemplateRunConfig;
  /** Volume mounts its guest still had (volumes.ts): their slots are not free at a restore. */
  volumes?: SnapshotVolume[];
  files: Record<string, FileDigest>;
}

export function hostSection(host: HostProfile): SnapshotManifest["host"] {
  return {
    qemuVersion: host.qemuVersion,
    accelerator: host.accelerator,
    cpuModel: host.cpuModel,
    machine: host.machine,
    deviceSet: deviceSetId(),
    tscKhz: host.tscKhz,
  };
}

export async function sha256File(path: string): Promise<FileDigest> {
  const h = createHash("sha256");
  let size = 0;
  for await (const chunk of createReadStream(path, { highWaterMark: 1 << 20 })) {
    h.update(chunk as Buffer);
    size += (chunk as Buffer).length;
  }
  return { size, sha256: h.digest("hex") };
}

export async function digestFiles(dir: string, names: string[]): Promise<Record<string, FileDigest>> {
  const files: Record<string, FileDigest> = {};
  for (const n of names) files[n] = await sha256File(join(dir, n));
  return files;
}

/** Writes the manifest atomically: the snapshot exists from this moment on. */
export async function writeManifest(dir: string, m: SnapshotManifest): Promise<void> {
  const tmp = join(dir, `.${MANIFEST}.tmp`);
  await writeFile(tmp, JSON.stringify(m, null, 2) + "\n");
  await rename(tmp, join(dir, MANIFEST));
}

export async function readManifest(dir: string): Promise<SnapshotManifest> {
  let raw: string;
  try {
    raw = await readFile(join(dir, MANIFEST), "utf8");
  } catch {
    throw new DenError("snapshot_not_found", `no snapshot manifest in ${dir}`);
  }
  let m: unknown;
  try {
    m = JSON.parse(raw);
  } catch {
    throw new DenError("snapshot_corrupt", `snapshot manifest in ${dir} is not valid JSON`);
  }
  // Every field, before any is used: a downloaded one names paths (its template's, its files').
  return checkManifest(m, dir);
}

/** Checks every file's size and sha256 against the manifest. */
export async function verifySnapshot(dir: string, m: SnapshotManifest): Promise<void> {
  for (const [name, want] of Object.entries(m.files)) {
    if (name.includes("/") || name.startsWith(".")) throw new DenError("snapshot_corrupt", `snapshot lists an invalid file name ${JSON.stringify(name)}`);
    const path = join(dir, name);
    const st = await stat(path).catch(() => undefined);
    if (!st) throw new DenError("snapshot_corrupt", `snapshot file ${name} is missing`);
    if (st.size !== want.size) throw new DenError("snapshot_corrupt", `snapshot file ${name} is ${st.size} bytes, manifest says ${want.size}`);
    if (want.sha256 === UNHASHED) continue;
    const got = await sha256File(path);
    if (got.sha256 !== want.sha256) throw new DenError("snapshot_corrupt", `snapshot file ${name} fails its sha256 check`);
  }
}

/**
 * Whether a migration stream QEMU `from` wrote loads into QEMU `to`: the same release (a
 * stable update, x.y.z to x.y.z+1, fixes bugs and keeps the stream), or a pair measured. Debian 12's 7.2 (Den's QEMU before 10.0) into 10.0: a sandbox with a running
 * process and files, snapshotted on 7.2.22 and restored on 10.0.2, came back with both (by
 * hand, 2026-12-07), so what a host hibernated before its upgrade still wakes after it.
 */
export function loadsInto(from: string, to: string): boolean {
  const release = (v: string) => v.split(".").slice(0, 2).join(".");
  if (release(from) === release(to)) return true;
  return release(from) === "7.2" && release(to) === "10.0";
}

/** Refuses a snapshot this host's QEMU cannot load; the snapshot is left untouched. */
export function checkCompatible(m: SnapshotManifest, host: HostProfile): void {
  const here = hostSection(host);
  const problems: string[] = [];
  if (m.host.accelerator !== here.accelerator) problems.push(`accelerator ${m.host.accelerator} != ${here.accelerator}`);
  if (m.host.cpuModel !== here.cpuModel) problems.push(`CPU model ${m.host.cpuModel} != ${here.cpuModel}`);
  if (m.host.machine !== here.machine) problems.push(`machine ${m.host.machine} != ${here.machine}`);
  if (m.host.deviceSet !== here.deviceSet) problems.push(`device set ${m.host.deviceSet} != ${here.deviceSet}`);
  if (!loadsInto(m.host.qemuVersion, here.qemuVersion)) problems.push(`QEMU ${m.host.qemuVersion} != ${here.qemuVersion}`);
  if (Math.abs(m.host.tscKhz - here.tscKhz) > here.tscKhz * 0.005) problems.push(`TSC ${m.host.tscKhz} kHz != ${here.tscKhz} kHz`);
  if (problems.length) throw new DenError("snapshot_incompatible", `snapshot ${m.id} cannot be restored on this host: ${problems.join("; ")}`, { problems });
}
