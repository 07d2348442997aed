/**
 * The build cache of this host: each step of a build (an image unpacked and booted, a RUN, a
 * COPY) leaves a template `step.<key>` whose key hashes what it started from and the step
 * itself, so a build that repeats a prefix of steps starts from the last one it shares.
 * Step templates are internal: hidden from the host's template list, retired when unused
 * for DEN_BUILD_CACHE_DAYS (default 7), and removed by the runtime's gc once nothing uses them.
 */
import { createHash } from "node:crypto";
import { readdir, rm, stat, utimes } from "node:fs/promises";
import { join } from "node:path";
import { host } from "@den/protocol";
import { BlobCache, imageCacheBytes } from "@den/images";
import type { Runtime, TemplateInfo, TemplateRunConfig } from "@den/runtime";

export type Log = (line: string) => void;

/** Work dirs of image builds under the data dir (named by their pid: a dead one's are swept). */
export const WORK_PREFIX = "image-build-";
/** A build's VMs are this host's alone (no database row names them): their ids say so, and a restart removes them. */
export const BUILD_VM_PREFIX = host.BUILD_VM_PREFIX;
const STEP_PREFIX = "step.";

/** Where a build is after its steps so far. */
export interface BuildState {
  /** The template holding the result so far. */
  tpl: TemplateInfo;
  /** Its cache key: the hash of everything that made it. */
  key: string;
  /** Env, working directory and user the next steps (and the template's sandboxes) run with. */
  run: TemplateRunConfig;
  /** `image registry/repo@sha256:...` or `template name@version`. */
  source: string;
}

export function cacheKey(...parts: unknown[]): string {
  return createHash("sha256").update(JSON.stringify(parts)).digest("hex");
}

/** Whether a template name is an internal step of the build cache (not shown, not the user's). */
export function isStepTemplate(name: string): boolean {
  return name.startsWith(STEP_PREFIX);
}

/** The step template of `key`, if this host has it. */
export async function stepTemplate(rt: Runtime, key: string): Promise<TemplateInfo | undefined> {
  const ref = { name: `${STEP_PREFIX}${key.slice(0, 12)}`, version: key.slice(0, 12) };
  return rt.templates.has(ref) ? rt.templates.resolve(`${ref.name}@${ref.version}`) : undefined;
}

export function stepRef(key: string): { name: string; version: string } {
  return { name: `${STEP_PREFIX}${key.slice(0, 12)}`, version: key.slice(0, 12) };
}

/** Marks a step template used now (its dir's mtime: the cache's clock). */
export async function touchStep(rt: Runtime, tpl: TemplateInfo): Promise<void> {
  const now = new Date();
  await utimes(rt.templates.dir(tpl), now, now).catch(() => undefined);
}

function cacheDays(env: NodeJS.ProcessEnv): number {
  const d = Number(env.DEN_BUILD_CACHE_DAYS ?? 7);
  return Number.isFinite(d) && d >= 0 ? d : 7;
}

/**
 * Removes what builds a crash interrupted (work dirs of dead processes) and retires step
 * templates unused for longer than the cache keeps them.
 */
export async function sweepBuilds(rt: Runtime, env: NodeJS.ProcessEnv = process.env): Promise<void> {
  // No build outlives its host agent: the VMs of those a crash cut short go first.
  for (const sbx of rt.list()) if (sbx.id.startsWith(`${BUILD_VM_PREFIX}_`)) await sbx.destroy().catch(() => undefined);
  for (const d of await readdir(rt.dataDir)) {
    if (!d.startsWith(WORK_PREFIX)) continue;
    const pid = Number(d.split("-").pop());
    if (pid !== process.pid) await rm(join(rt.dataDir, d), { recursive: true, force: true });
  }
  const maxAgeMs = cacheDays(env) * 86_400_000;
  for (const t of await rt.templates.list()) {
    if (!isStepTemplate(t.name) || !t.current) continue;
    const st = await stat(t.dir).catch(() => undefined);
    if (st && Date.now() - st.mtimeMs > maxAgeMs) {
      await rt.templates.retire(t.name);
    }
  }
  // Template versions a crash left half-installed (`.build-*` of dead processes) go with the gc.
  await rt.gc();
  // Blobs half-fetched by a dead process, and the cache over its size.
  await imageCache(rt, env).collect();
}

/** This host's image layer cache (shared by every pull), bounded by DEN_IMAGE_CACHE_MB. */
export function imageCache(rt: Runtime, env: NodeJS.ProcessEnv = process.env): BlobCache {
  return new BlobCache(join(rt.dataDir, "image-cache"), { maxBytes: imageCacheBytes(env) });
}
