// needs: nothing
/**
 * A snapshot manifest's fields checked before use (manifest-check.ts): one may come from the
 * store (a wake on another host, a template pulled), and its template's name and version and
 * its file names make paths on this host. A template ref that is not one never makes a path.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DenError } from "@den/protocol";
import { checkManifest } from "../src/manifest-check.js";
import { readManifest } from "../src/snapshot.js";
import { TemplateStore } from "../src/templates.js";

const isCode = (code: string) => (e: unknown) => e instanceof DenError && e.code === code;

/** A sandbox snapshot's manifest as sandbox-snapshot.ts writes one. */
const good = () => ({
  format: 1, kind: "sandbox", id: "snap_abcdefghijklmnop", createdAt: "2026-01-01T00:00:00.000Z",
  template: { name: "base", version: "cbe6cfa7828a" }, memory: "stream", changedPagesOnly: true, pages: { total: 131072, kept: 1200 },
  host: { qemuVersion: "7.2.22", accelerator: "tcg", cpuModel: "max", machine: "microvm", deviceSet: "0a4e154212c058d4", tscKhz: 2596122 },
  vm: { vcpus: 1, memoryMb: 512, diskMb: 4096 }, pauseMs: 12.5, sourceSandbox: "sbx_abcdefghijklmnop",
  volumes: [{ volume: "vol_abcdefghijklmnop", slot: 0, path: "/data", readOnly: false }],
  files: { "state.bin": { size: 4096, sha256: "" }, "disk.qcow2": { size: 196608, sha256: "a".repeat(64) } },
});

test("a manifest as Den writes it passes; each field that is not what it should be is refused", () => {
  assert.deepEqual(checkManifest(good(), "here"), good());
  const template = { kind: "template", id: "base@cbe6cfa7828a", memory: "file", diskDepth: 1, baseTemplate: { name: "base", version: "0123456789ab" }, source: "recipe base", run: { env: { A: "b" }, workdir: null, user: "root", startCmd: null, readyCmd: null } };
  checkManifest({ ...good(), ...template }, "here");
  const bad: Array<[string, Record<string, unknown>]> = [
    ["a template named ../snapshots", { template: { name: "../snapshots", version: "cbe6cfa7828a" } }],
    ["a template named with a slash", { template: { name: "base/../../x", version: "cbe6cfa7828a" } }],
    ["a version that is not 12 hex digits", { template: { name: "base", version: "../x" } }],
    ["no template", { template: undefined }],
    ["a base template named ..", { baseTemplate: { name: "..", version: "cbe6cfa7828a" } }],
    ["a file named ../x", { files: { "../x": { size: 1, sha256: "" } } }],
    ["a hidden file", { files: { ".state.bin": { size: 1, sha256: "" } } }],
    ["a file named manifest.json", { files: { "manifest.json": { size: 1, sha256: "" } } }],
    ["a negative size", { files: { "state.bin": { size: -1, sha256: "" } } }],
    ["a fractional size", { files: { "state.bin": { size: 1.5, sha256: "" } } }],
    ["a size past any disk", { files: { "state.bin": { size: 2 ** 60, sha256: "" } } }],
    ["a sha256 that is not one", { files: { "state.bin": { size: 1, sha256: "../x" } } }],
    ["no vCPU", { vm: { vcpus: 0, memoryMb: 512, diskMb: 4096 } }],
    ["memory as a string", { vm: { vcpus: 1, memoryMb: "512", diskMb: 4096 } }],
    ["another kind", { kind: "volume" }],
    ["another memory", { memory: "elsewhere" }],
    ["an id with a slash", { id: "../snap" }],
    ["a source sandbox with a slash", { sourceSandbox: "../sbx" }],
    ["a volume with no path", { volumes: [{ volume: "vol_abcdefghijklmnop", slot: 0, readOnly: false }] }],
    ["a volume slot past any", { volumes: [{ volume: "vol_abcdefghijklmnop", slot: 1e6, path: "/d", readOnly: false }] }],
    ["no host section", { host: null }],
    ["a pause that is not a duration", { pauseMs: -1 }],
    ["page counts that are not counts", { pages: { total: -1, kept: 0 } }],
  ];
  for (const [why, change] of bad) assert.throws(() => checkManifest({ ...good(), ...change }, "here"), isCode("snapshot_corrupt"), why);
  assert.throws(() => checkManifest({ ...good(), format: 2 }, "here"), isCode("snapshot_incompatible"));
  assert.throws(() => checkManifest(null, "here"), isCode("snapshot_corrupt"));
});

test("readManifest refuses a manifest naming ../snapshots; the template store makes no path of it", async () => {
  const dir = mkdtempSync(join(tmpdir(), "den-manifest-"));
  try {
    writeFileSync(join(dir, "manifest.json"), JSON.stringify({ ...good(), template: { name: "../snapshots", version: "cbe6cfa7828a" } }));
    await assert.rejects(readManifest(dir), isCode("snapshot_corrupt"));
    writeFileSync(join(dir, "manifest.json"), JSON.stringify(good()));
    assert.equal((await readManifest(dir)).template.name, "base");
    const templates = new TemplateStore(join(dir, "templates"));
    const escape = { name: "../snapshots", version: "cbe6cfa7828a" };
    assert.throws(() => templates.dir(escape), isCode("invalid_argument"));
    assert.equal(templates.has(escape), false);
    await assert.rejects(templates.buildDir(escape), isCode("invalid_argument"));
    assert.equal(templates.dir({ name: "base", version: "cbe6cfa7828a" }), join(dir, "templates", "base", "cbe6cfa7828a"));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
