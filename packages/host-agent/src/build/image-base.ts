/**
 * An OCI image as a template this host can create VMs from: pulled (layers cached by digest),
 * checked and unpacked, made into Den's root disk (Den's agent as init, the `user` account),
 * booted once and baked. The result is a step template (see build-cache.ts), so builds from
 * the same image share it.
 */
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { join } from "node:path";
import type { host } from "@den/protocol";
import {
  RegistryClient, agentSourceKey, deploymentAuth, type BlobCache, hostPlatform, importArchive, imageLimits, maxUnpackedBytes, buildAgent, defaultRegistry, diskSizeFor, makeRootDisk, parseImageRef, prepareRootfs, unpackImage,
  type ResolvedImage, type RunConfig,
} from "@den/images";
import { bakeFromDisk, cacheDir, deviceSetId, type Runtime, type TemplateRunConfig } from "@den/runtime";
import type { ObjectStore } from "@den/store";
import { fetchVerified } from "./context-copy.js";
import { WORK_PREFIX, cacheKey, imageCache, stepTemplate, touchStep, type BuildState, type Log } from "./build-cache.js";

/** Quotes one argument for a POSIX shell. */
export function shellQuote(a: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(a) ? a : `'${a.replaceAll("'", `'\\''`)}'`;
}

/** An image's ENV entries as a map (later entries win, as in the image). */
function envOf(run: RunConfig): Record<string, string> {
  const env: Record<string, string> = {};
  for (const e of run.env) {
    const i = e.indexOf("=");
    if (i > 0) env[e.slice(0, i)] = e.slice(i + 1);
  }
  return env;
}

/** The guest user an image's `USER` names (`name`, `uid`, `name:group`): the account part; null for root. */
function imageUser(run: RunConfig): string | null {
  const u = run.user.split(":")[0]!.trim();
  return u && u !== "root" && u !== "0" ? u : null;
}

/** The image's ENTRYPOINT + CMD as an argv (none: undefined). */
export function imageStart(run: RunConfig): string[] | undefined {
  const argv = [...(run.entrypoint ?? []), ...(run.cmd ?? [])];
  return argv.length ? argv : undefined;
}

/** The largest image archive a build takes (DEN_MAX_CONTEXT_MB bounds the upload before it gets here). */
const MAX_ARCHIVE_BYTES = 64 * 1024 ** 3;

type Auth = NonNullable<NonNullable<host.TemplateBuildSpec["fromImage"]>["auth"]>;

export class ImageBases {
  private readonly blobs: BlobCache;

  private readonly env: NodeJS.ProcessEnv;

  constructor(private readonly rt: Runtime, private readonly store: ObjectStore, env: NodeJS.ProcessEnv = process.env) {
    this.blobs = imageCache(rt, env);
    this.env = env;
  }

  /**
   * The image `spec.fromImage` names, as a step template of the build's shape: found if an
   * earlier build made it from the same manifest, else pulled, unpacked and baked.
   */
  async base(spec: host.TemplateBuildSpec, log: Log, signal?: AbortSignal): Promise<BuildState & { imageStart?: string[] }> {
    const from = spec.fromImage;
    const ref = from ? parseImageRef(from.ref, { defaultRegistry: defaultRegistry() }) : undefined;
    let image: ResolvedImage;
    // A build's own credentials, else the deployment's for that registry (DEN_REGISTRY_AUTH_FILE).
    const auth = from ? from.auth ?? (await deploymentAuth(ref!.registry, this.env)) : undefined;
    if (from && ref) {
      log(`resolving ${from.ref}`);
      image = await this.registry().resolve(ref, { ...(auth ? { auth } : {}), signal });
    } else image = await this.importArchive(spec.fromArchive!, log, signal);
    const h = this.rt.host;
    const base = await this.rt.templates.resolve("base");
    // What the booted image depends on: its manifest, its shape, and what boots it (Den's kernel and agent, this host's QEMU).
    const key = cacheKey("image", {
      manifest: image.manifestDigest, shape: [spec.vcpus ?? 1, spec.memoryMb ?? 512, spec.diskMb ?? null],
      kernel: `${base.name}@${base.version}`, agent: agentSourceKey(), host: [h.qemuVersion, h.accelerator, h.cpuModel, deviceSetId()],
    });
    const run: TemplateRunConfig = { env: envOf(image.run), workdir: image.run.workingDir || null, user: imageUser(image.run), startCmd: null, readyCmd: null };
    const state = { key, run, source: ref ? `image ${image.source}` : image.source, imageStart: imageStart(image.run) };
    const cached = await stepTemplate(this.rt, key);
    if (cached && !spec.force) {
      log(`${image.source}: unpacked and booted before (cached)`);
      await touchStep(this.rt, cached);
      return { ...state, tpl: cached };
    }
    const work = join(this.rt.dataDir, `${WORK_PREFIX}${key.slice(0, 12)}-${randomBytes(4).toString("hex")}-${process.pid}`);
    await mkdir(work, { recursive: true });
    try {
      // (An archive's blobs are in the cache already: its import put them there.)
      if (ref) await this.fetch(ref, image, auth, log, signal);
      const { rootfs, unpackedBytes } = await unpackImage(image, this.blobs, work, { signal, log, limits: { maxUnpackedBytes: maxUnpackedBytes() } });
      await prepareRootfs(rootfs, await buildAgent({ cacheDir: cacheDir(), log }));
      const diskMb = diskSizeFor(unpackedBytes, spec.diskMb);
      log(`making the root disk (${diskMb} MiB)`);
      const disk = join(work, "disk.qcow2");
      await makeRootDisk(rootfs, diskMb, disk);
      await rm(rootfs, { recursive: true, force: true });
      await this.blobs.collect().catch(() => undefined);
      const ref12 = { name: `step.${key.slice(0, 12)}`, version: key.slice(0, 12) };
      const recipe = { name: ref12.name, vcpus: spec.vcpus ?? 1, memoryMb: spec.memoryMb ?? 512, diskMb, kind: "image", image: image.source };
      const tpl = await bakeFromDisk(this.rt, ref12, recipe, disk, base, { source: state.source, run }, log);
      return { ...state, tpl };
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  }

  /** A registry client with the settings as they are now (DEN_INSECURE_REGISTRIES, DEN_REGISTRY_CA_FILE, ...: read at each build). */
  private registry(): RegistryClient {
    return RegistryClient.fromEnv(this.env);
  }

  /** An uploaded image archive: fetched from the store (its digest checked), its blobs put in the cache, its image read. */
  private async importArchive(archive: NonNullable<host.TemplateBuildSpec["fromArchive"]>, log: Log, signal?: AbortSignal): Promise<ResolvedImage> {
    const scratch = await mkdtemp(join(this.rt.dataDir, `${WORK_PREFIX}archive-${process.pid}-`));
    try {
      const file = join(scratch, "archive.tar");
      log(`fetching the image archive sha256:${archive.sha256.slice(0, 12)}`);
      await fetchVerified(this.store, archive.key, archive.sha256, file, MAX_ARCHIVE_BYTES, signal);
      const { maxLayers, maxManifestBytes, maxConfigBytes } = imageLimits();
      const image = await importArchive(file, this.blobs, {
        platform: { os: "linux", architecture: hostPlatform().architecture }, scratchDir: scratch, limits: { maxLayers, maxManifestBytes, maxConfigBytes }, ...(signal ? { signal } : {}),
      });
      log(`archive: ${image.layers.length} layer(s), manifest ${image.manifestDigest.slice(0, 19)}`);
      return { ...image, source: `archive sha256:${archive.sha256}` };
    } finally {
      await rm(scratch, { recursive: true, force: true });
    }
  }

  private async fetch(ref: ReturnType<typeof parseImageRef>, image: ResolvedImage, auth: Auth | undefined, log: Log, signal?: AbortSignal): Promise<void> {
    for (const d of [image.config, ...image.layers]) {
      if (this.blobs.has(d.digest)) {
        log(`${d.digest.slice(0, 19)}: cached`);
        continue;
      }
      log(`${d.digest.slice(0, 19)}: pulling ${(d.size / 1024 ** 2).toFixed(1)} MB`);
      await this.registry().fetchBlob(ref, d, this.blobs, { ...(auth ? { auth } : {}), signal });
    }
  }
}
