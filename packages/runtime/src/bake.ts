import { createHash } from "node:crypto";
import { chmod, copyFile, link, readFile, readdir, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { ImageArtifacts, Recipe } from "@den/images";
import { deviceSetId } from "./qemu.js";
import type { Runtime } from "./runtime.js";
import { digestFiles, hostSection, writeManifest, type SnapshotManifest, type TemplateRef, type TemplateRunConfig } from "./snapshot.js";
import { TEMPLATE_FILES, checkTemplateName, type TemplateInfo } from "./templates.js";
import { startService, type ServiceStart } from "./bake-service.js";
import { createOverlay } from "./image-tools.js";

/** A template's disk may overlay its source's, up to this many levels; deeper ones are flattened. */
const MAX_DISK_DEPTH = 3;

/** Read-only files shared between template versions: a hard link costs no space. */
async function linkOrCopy(from: string, to: string): Promise<void> {
  try {
    await link(from, to);
  } catch {
    await copyFile(from, to);
  }
}

/** Templates are immutable: a version built before is made current again and used as is. */
export async function reuseTemplate(rt: Runtime, ref: TemplateRef): Promise<(TemplateInfo & { reused: true }) | undefined> {
  if (!rt.templates.has(ref)) return undefined;
  await rt.templates.setCurrent(ref);
  return { ...(await rt.templates.resolve(`${ref.name}@${ref.version}`)), reused: true };
}

/** A template's version: the hash of its recipe, its image, and the host shape its snapshot needs. */
export function templateVersion(recipe: Recipe, image: ImageArtifacts, rt: Runtime): string {
  const h = rt.host;
  return createHash("sha256")
    .update(JSON.stringify(recipe))
    .update(image.key)
    .update([h.qemuVersion, h.accelerator, h.cpuModel, deviceSetId()].join("\0"))
    .digest("hex")
    .slice(0, 12);
}

/**
 * Bakes a template version: boots the image once, waits for the guest agent, and
 * snapshots the VM (RAM file + device state + disk). A version that already exists is
 * reused as is; templates are immutable.
 */
export async function bakeTemplate(rt: Runtime, recipe: Recipe, image: ImageArtifacts, log: (l: string) => void = () => undefined): Promise<TemplateInfo & { reused: boolean }> {
  checkTemplateName(recipe.name);
  const ref = { name: recipe.name, version: templateVersion(recipe, image, rt) };
  const existing = await reuseTemplate(rt, ref);
  if (existing) {
    log(`template ${ref.name}@${ref.version}: already built`);
    return existing;
  }
  const run = recipeRun(recipe);
  const meta = { source: `recipe ${recipe.name}`, ...(run ? { run } : {}) };
  return bakeInto(rt, ref, recipe, { kernel: image.kernel, initrd: image.initrd, disk: image.disk }, `booting ${image.kernelVersion}`, log, undefined, meta, false, serviceOf(run, recipe));
}

/** A recipe's service as a template's run settings (what the manifest records). */
function recipeRun(recipe: Recipe): TemplateRunConfig | undefined {
  const r = recipe.run;
  if (!r) return undefined;
  return { env: r.env ?? {}, workdir: r.workdir ?? null, user: r.user ?? null, startCmd: r.startCmd, readyCmd: r.readyCmd };
}

/** The service a bake starts, if the template has one: its start command, within the recipe's ready timeout. */
function serviceOf(run: TemplateRunConfig | undefined, recipe: Pick<Recipe, "run">): ServiceStart | undefined {
  if (!run?.startCmd) return undefined;
  const t = recipe.run?.readyTimeoutSeconds;
  return { run, ...(t ? { readyTimeoutSeconds: t } : {}) };
}

/**
 * A template of another size (vCPUs, memory): a template snapshot fixes both, so each
 * shape gets its own snapshot, baked from the base version's kernel and disk on first
 * use and kept as template `<name>.<vcpus>c<memory>m` with the base's version.
 */
export async function bakeVariant(rt: Runtime, base: TemplateInfo, vcpus: number, memoryMb: number, log: (l: string) => void = () => undefined): Promise<TemplateInfo> {
  const ref = { name: `${base.name}.${vcpus}c${memoryMb}m`, version: base.version };
  checkTemplateName(ref.name);
  if (rt.templates.has(ref)) return rt.templates.resolve(`${ref.name}@${ref.version}`);
  const recipe = { ...(JSON.parse(await readFile(join(base.dir, TEMPLATE_FILES.recipe), "utf8")) as TemplateRecipe), name: ref.name, vcpus, memoryMb };
  const files = { kernel: join(base.dir, TEMPLATE_FILES.kernel), initrd: join(base.dir, TEMPLATE_FILES.initrd), disk: join(base.dir, TEMPLATE_FILES.disk) };
  // A base that runs a service (a recipe's, an image's start command) has it running in its variants too.
  const run = base.manifest.run;
  return bakeInto(rt, ref, recipe, files, `variant of ${base.name}@${base.version}`, log, base, { source: base.manifest.source, run }, false, serviceOf(run, recipe));
}

/** What a template records of how it was made (recipe.json): a recipe, or what an image build used. */
export type TemplateRecipe = Pick<Recipe, "name" | "vcpus" | "memoryMb" | "diskMb" | "run">;

/** What a template's manifest says of where it came from and how its sandboxes run. */
export type TemplateMeta = Pick<SnapshotManifest, "source" | "run">;

/**
 * Bakes a template version from a root disk made elsewhere (an image's), booted with the
 * kernel and initramfs of `kernelFrom` (Den's, never the image's). The disk is moved in.
 */
export async function bakeFromDisk(
  rt: Runtime, ref: TemplateRef, recipe: TemplateRecipe, disk: string, kernelFrom: TemplateInfo, meta: TemplateMeta, log: (l: string) => void = () => undefined,
): Promise<TemplateInfo & { reused: boolean }> {
  checkTemplateName(ref.name);
  const files = { kernel: join(kernelFrom.dir, TEMPLATE_FILES.kernel), initrd: join(kernelFrom.dir, TEMPLATE_FILES.initrd), disk };
  return bakeInto(rt, ref, recipe, files, `booting the image's disk`, log, undefined, meta, true);
}

/** Boots kernel + disk once with its RAM in a file, waits for the agent, snapshots, installs. */
async function bakeInto(
  rt: Runtime, ref: TemplateRef, recipe: TemplateRecipe, from: { kernel: string; initrd: string; disk: string },
  what: string, log: (l: string) => void, overlayOn?: TemplateInfo, meta: TemplateMeta = {}, moveDisk = false, start?: ServiceStart,
): Promise<TemplateInfo & { reused: boolean }> {
  const dir = await rt.templates.buildDir(ref);
  try {
    await linkOrCopy(from.kernel, join(dir, TEMPLATE_FILES.kernel));
    await linkOrCopy(from.initrd, join(dir, TEMPLATE_FILES.initrd));
    // A variant's disk overlays its base template's (which it then keeps alive); an image's is copied.
    const depth = overlayOn ? (overlayOn.manifest.diskDepth ?? 0) + 1 : 0;
    const backing = overlayOn && depth <= MAX_DISK_DEPTH ? rt.templates.diskChain(overlayOn) : [];
    if (backing.length) {
      await createOverlay(backing, join(dir, TEMPLATE_FILES.disk));
    } else if (moveDisk) {
      await rename(from.disk, join(dir, TEMPLATE_FILES.disk));
    } else {
      await copyFile(from.disk, join(dir, TEMPLATE_FILES.disk));
    }
    const disk = overlayOn && depth <= MAX_DISK_DEPTH ? { baseTemplate: { name: overlayOn.name, version: overlayOn.version }, diskDepth: depth } : { diskDepth: 0 };
    await chmod(join(dir, TEMPLATE_FILES.disk), 0o644);
    await writeFile(join(dir, TEMPLATE_FILES.recipe), JSON.stringify(recipe, null, 2) + "\n");
    const t0 = Date.now();
    log(`template ${ref.name}@${ref.version}: ${what}...`);
    const { vm, agent } = await rt.bootVm({
      dir, kernel: join(dir, TEMPLATE_FILES.kernel), initrd: join(dir, TEMPLATE_FILES.initrd), disk: join(dir, TEMPLATE_FILES.disk), backing,
      memoryFile: join(dir, TEMPLATE_FILES.memory), vcpus: recipe.vcpus, memoryMb: recipe.memoryMb,
    });
    let pauseMs = 0;
    try {
      log(`template ${ref.name}@${ref.version}: agent ${agent.hello.agent} up after ${((Date.now() - t0) / 1000).toFixed(1)} s`);
      if (start) await startService(agent, start, (l) => log(`template ${ref.name}@${ref.version}: ${l}`));
      log(`template ${ref.name}@${ref.version}: snapshotting`);
      await agent.quiesce();
      const p0 = performance.now();
      await vm.stop();
      await vm.saveState(join(dir, TEMPLATE_FILES.state));
      pauseMs = performance.now() - p0;
    } finally {
      agent.close();
      await vm.kill();
    }
    return await installTemplate(rt, dir, ref, { vcpus: recipe.vcpus, memoryMb: recipe.memoryMb, diskMb: recipe.diskMb }, pauseMs, log, { ...disk, ...meta });
  } catch (e) {
    await rm(dir, { recursive: true, force: true });
    throw e;
  }
}

/** Seals a build dir holding a template's files (read-only, manifest last) and makes it the current version. */
async function installTemplate(
  rt: Runtime, dir: string, ref: TemplateRef, vm: SnapshotManifest["vm"], pauseMs: number, log: (l: string) => void,
  disk: Pick<SnapshotManifest, "baseTemplate" | "diskDepth"> & TemplateMeta = {},
): Promise<TemplateInfo & { reused: boolean }> {
  const keep = new Set<string>(Object.values(TEMPLATE_FILES));
  for (const f of await readdir(dir)) if (!keep.has(f as never)) await rm(join(dir, f), { recursive: true, force: true });
  const files = [TEMPLATE_FILES.state, TEMPLATE_FILES.memory, TEMPLATE_FILES.disk, TEMPLATE_FILES.kernel, TEMPLATE_FILES.initrd];
  for (const f of files) await chmod(join(dir, f), 0o444);
  await writeManifest(dir, {
    format: 1, kind: "template", id: `${ref.name}@${ref.version}`, createdAt: new Date().toISOString(), template: ref,
    memory: "file", host: hostSection(rt.host), vm, pauseMs: Math.round(pauseMs), ...disk, files: await digestFiles(dir, files),
  });
  await rt.templates.install(ref, dir);
  log(`template ${ref.name}@${ref.version}: ready`);
  await rt.gc();
  return { ...(await rt.templates.resolve(`${ref.name}@${ref.version}`)), reused: false };
}

/**
 * A template from a running sandbox's exact state (what its setup commands left in
 * memory and on disk): creates from it restore that state, as fast as from any template.
 * `recipe` records how it was made; the same `ref` twice is built once.
 */
export async function bakeFromSandbox(
  rt: Runtime, sandboxId: string, ref: TemplateRef, recipe: Record<string, unknown>, log: (l: string) => void = () => undefined,
  opts: { meta?: TemplateMeta; standalone?: boolean } = {},
): Promise<TemplateInfo & { reused: boolean }> {
  checkTemplateName(ref.name);
  const existing = await reuseTemplate(rt, ref);
  if (existing) return existing;
  const source = rt.get(sandboxId).info.template;
  const from = await rt.templates.resolve(`${source.name}@${source.version}`);
  const dir = await rt.templates.buildDir(ref);
  try {
    log(`template ${ref.name}@${ref.version}: capturing sandbox ${sandboxId}`);
    const depth = (from.manifest.diskDepth ?? 0) + 1;
    // (A standalone disk needs no other template: what is published alone, or outlives its source.)
    const flattenDisk = depth > MAX_DISK_DEPTH || opts.standalone === true;
    const captured = await rt.captureSandbox(sandboxId, dir, { flattenDisk });
    for (const f of [TEMPLATE_FILES.kernel, TEMPLATE_FILES.initrd]) await linkOrCopy(join(from.dir, f), join(dir, f));
    await writeFile(join(dir, TEMPLATE_FILES.recipe), JSON.stringify({ ...recipe, name: ref.name, ...captured.vm, from: source }, null, 2) + "\n");
    const disk = flattenDisk ? { diskDepth: 0 } : { baseTemplate: { name: from.name, version: from.version }, diskDepth: depth };
    const meta = opts.meta ?? { source: `template ${from.name}@${from.version}`, run: from.manifest.run };
    return await installTemplate(rt, dir, ref, captured.vm, captured.pauseMs, log, { ...disk, ...meta });
  } catch (e) {
    await rm(dir, { recursive: true, force: true });
    throw e;
  }
}
