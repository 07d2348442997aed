/**
 * A snapshot manifest's every field checked before anything uses one: a manifest may come
 * from the store (a wake on another host, a template pulled), and its template's name and
 * version, its file names and volumes make paths and QEMU's command line here.
 */
import { DenError } from "@den/protocol";
import type { SnapshotManifest } from "./snapshot.js";
import { isTemplateRef } from "./template-names.js";

/** A file of a snapshot: one path component, no leading dot (`..`, `../x` and `.hidden` are not names). */
const FILE_NAME = /^[a-z0-9][a-z0-9._-]{0,63}$/;
/** A snapshot's or sandbox's id, a template version's `name@version`. */
const ID = /^[A-Za-z0-9][A-Za-z0-9_.@-]{0,199}$/;
const SHA256 = /^[0-9a-f]{64}$/;
const MAX_FILES = 16;
/** 1 PiB: a size past it is no file's. */
const MAX_SIZE = 2 ** 50;

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const isInt = (v: unknown, min: number, max: number): v is number => typeof v === "number" && Number.isSafeInteger(v) && v >= min && v <= max;
const isText = (v: unknown, max: number): v is string => typeof v === "string" && v.length <= max;
const optional = (v: unknown, ok: (v: unknown) => boolean) => v === undefined || ok(v);

/**
 * `v` (a parsed manifest.json) as a SnapshotManifest, or `snapshot_corrupt` naming the first
 * field that is not what it should be (`snapshot_incompatible` for another format, as before).
 * `where`: what the error calls it.
 */
export function checkManifest(v: unknown, where: string): SnapshotManifest {
  const bad = (what: string) => new DenError("snapshot_corrupt", `snapshot manifest in ${where}: ${what}`);
  if (!isRecord(v)) throw bad("not an object");
  if (v.format !== 1) throw new DenError("snapshot_incompatible", `snapshot format ${JSON.stringify(v.format)} is not supported (this host reads format 1)`);
  if (v.kind !== "template" && v.kind !== "sandbox") throw bad("its kind is neither template nor sandbox");
  if (!isText(v.id, 200) || !ID.test(v.id)) throw bad("its id is not one");
  if (!isText(v.createdAt, 64)) throw bad("no time it was made");
  if (!isTemplateRef(v.template)) throw bad(`its template ${String(JSON.stringify(v.template)).slice(0, 200)} is not a template's name and version`);
  if (v.memory !== "file" && v.memory !== "stream") throw bad("its memory is neither file nor stream");
  if (!optional(v.changedPagesOnly, (b) => typeof b === "boolean")) throw bad("changedPagesOnly is not a boolean");
  if (!optional(v.pages, (p) => isRecord(p) && isInt(p.total, 0, MAX_SIZE) && isInt(p.kept, 0, MAX_SIZE))) throw bad("its page counts are not counts");
  const h = v.host;
  if (!isRecord(h) || !["qemuVersion", "accelerator", "cpuModel", "machine", "deviceSet"].every((k) => isText(h[k], 128)) || typeof h.tscKhz !== "number" || !Number.isFinite(h.tscKhz) || h.tscKhz < 0) throw bad("its host section is incomplete");
  const vm = v.vm;
  if (!isRecord(vm) || !isInt(vm.vcpus, 1, 1024) || !isInt(vm.memoryMb, 1, 1 << 24) || !isInt(vm.diskMb, 1, 1 << 30)) throw bad("its VM's shape is not one (vcpus, memoryMb, diskMb)");
  if (typeof v.pauseMs !== "number" || !Number.isFinite(v.pauseMs) || v.pauseMs < 0) throw bad("its pause is not a duration");
  if (!optional(v.sourceSandbox, (s) => isText(s, 200) && ID.test(s as string))) throw bad("its source sandbox is not an id");
  if (!optional(v.baseTemplate, isTemplateRef)) throw bad("its base template is not a template's name and version");
  if (!optional(v.diskDepth, (d) => isInt(d, 0, 1024))) throw bad("its disk depth is not a count");
  if (!optional(v.source, (s) => isText(s, 4096))) throw bad("its source is not text");
  if (!optional(v.run, checkRun)) throw bad("its run defaults are not text");
  if (!optional(v.volumes, (vs) => Array.isArray(vs) && vs.length <= 64 && vs.every(checkVolume))) throw bad("its volumes are not volume mounts");
  if (!isRecord(v.files)) throw bad("it lists no files");
  const names = Object.keys(v.files);
  if (names.length > MAX_FILES) throw bad(`it lists ${names.length} files`);
  for (const name of names) {
    const f = v.files[name];
    if (!FILE_NAME.test(name) || name === "manifest.json") throw bad(`it lists an invalid file name ${JSON.stringify(name.slice(0, 100))}`);
    if (!isRecord(f) || !isInt(f.size, 0, MAX_SIZE) || typeof f.sha256 !== "string" || (f.sha256 !== "" && !SHA256.test(f.sha256))) throw bad(`its file ${name} has no size and sha256`);
  }
  return v as unknown as SnapshotManifest;
}

function checkRun(r: unknown): boolean {
  if (!isRecord(r) || !isRecord(r.env) || !Object.values(r.env).every((x) => typeof x === "string")) return false;
  return ["workdir", "user", "startCmd", "readyCmd"].every((k) => r[k] === null || r[k] === undefined || typeof r[k] === "string");
}

function checkVolume(x: unknown): boolean {
  return isRecord(x) && isText(x.volume, 128) && ID.test(x.volume as string) && isInt(x.slot, 0, 64) && isText(x.path, 4096) && typeof x.readOnly === "boolean" && optional(x.stale, (b) => typeof b === "boolean");
}
