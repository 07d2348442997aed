/**
 * Templates from OCI images, on this host: pull (layers cached by digest), check and unpack
 * the layers, make Den's root disk of them (Den's agent as init, the `user` account), boot it
 * once and bake it; with a start command, run it in a sandbox of that bake, wait for the
 * ready command, and bake the running sandbox instead, so a create restores a started server.
 */
import { createHash, randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { DenError, type host } from "@den/protocol";
import { runSetup } from "./setup-steps.js";
import {
  BlobCache, RegistryClient, agentSourceKey, buildAgent, defaultRegistry, diskSizeFor, imageCacheBytes, makeRootDisk, parseImageRef, prepareRootfs, unpackImage,
  type ResolvedImage, type RunConfig,
} from "@den/images";
import { bakeFromDisk, bakeFromSandbox, cacheDir, deviceSetId, reuseTemplate, type Runtime, type Sandbox, type TemplateInfo, type TemplateRunConfig } from "@den/runtime";

type Spec = host.TemplateBuildSpec;
type Log = (line: string) => void;

const DEFAULT_READY_TIMEOUT_S = 120;
/** Without a ready command, the start command gets this long before the bake. */
const START_GRACE_MS = 2000;
const READY_POLL_MS = 500;
const WORK_PREFIX = "image-build-";

/** Quotes one argument for a POSIX shell. */
function shellQuote(a: string): string {
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

/** What a template from this image runs at start: the build's own command, or the image's ENTRYPOINT + CMD (argv, no shell needed). */
function startCommand(spec: Spec, run: RunConfig): { argv?: string[]; cmd?: string; text: string } | undefined {
  if (spec.startCmd) return { cmd: spec.startCmd, text: spec.startCmd };
  const argv = [...(run.entrypoint ?? []), ...(run.cmd ?? [])];
  return argv.length ? { argv, text: argv.map(shellQuote).join(" ") } : undefined;
}

/** The guest user an image's `USER` names (`name`, `uid`, `name:group`): the account part. */
function imageUser(run: RunConfig): string | null {
  const u = run.user.split(":")[0]!.trim();
  return u && u !== "root" && u !== "0" ? u : null;
}

export class ImageBuilder {
  private readonly blobs: BlobCache;
  private readonly registry: RegistryClient;
  private readonly workRoot: string;

  constructor(private readonly rt: Runtime, env: NodeJS.ProcessEnv = process.env) {
    this.blobs = new BlobCache(join(rt.dataDir, "image-cache"), { maxBytes: imageCacheBytes(env) });
    this.registry = RegistryClient.fromEnv(env);
    this.workRoot = rt.dataDir;
  }

  /** Removes the work dirs of builds a crash interrupted (each is named by its pid). */
  async sweep(): Promise<void> {
    for (const d of await readdir(this.workRoot)) {
      if (!d.startsWith(WORK_PREFIX)) continue;
      const pid = Number(d.split("-").pop());
      if (pid === process.pid) continue;
      await rm(join(this.workRoot, d), { recursive: true, force: true });
    }
  }

  /** The template version an image build makes: its content, its start, its shape, and what boots it. */
  private version(spec: Spec, image: ResolvedImage, base: TemplateInfo): string {
    const h = this.rt.host;
    return createHash("sha256").update(JSON.stringify({
      kind: "image", manifest: image.manifestDigest, start: spec.startCmd ?? null, ready: spec.readyCmd ?? null,
      shape: [spec.vcpus ?? null, spec.memoryMb ?? null, spec.diskMb ?? null], kernel: `${base.name}@${base.version}`, agent: agentSourceKey(),
      host: [h.qemuVersion, h.accelerator, h.cpuModel, deviceSetId()], force: spec.force ? randomBytes(8).toString("hex") : null,
    })).digest("hex").slice(0, 12);
  }

  async build(spec: Spec, log: Log = () => undefined, signal?: AbortSignal): Promise<TemplateInfo & { reused: boolean }> {
    const from = spec.fromImage!;
    const ref = parseImageRef(from.ref, { defaultRegistry: defaultRegistry() });
    log(`resolving ${from.ref}`);
    const image = await this.registry.resolve(ref, { auth: from.auth, signal });
    const base = await this.rt.templates.resolve("base");
    const target = { name: spec.name, version: this.version(spec, image, base) };
    const existing = await reuseTemplate(this.rt, target);
    if (existing) {
      log(`template ${target.name}@${target.version}: already built from ${image.source}`);
      return existing;
    }
    const work = join(this.workRoot, `${WORK_PREFIX}${target.version}-${randomBytes(4).toString("hex")}-${process.pid}`);
    await mkdir(work, { recursive: true });
    try {
      for (const d of [image.config, ...image.layers]) {
        if (this.blobs.has(d.digest)) log(`${d.digest.slice(0, 19)}: cached`);
        else {
          log(`${d.digest.slice(0, 19)}: pulling ${(d.size / 1024 ** 2).toFixed(1)} MB`);
          await this.registry.fetchBlob(ref, d, this.blobs, { auth: from.auth, signal });
        }
      }
      const { rootfs, unpackedBytes } = await unpackImage(image, this.blobs, work, { signal, log });
      const { hasShell } = await prepareRootfs(rootfs, await buildAgent({ cacheDir: cacheDir(), log }));
      const diskMb = diskSizeFor(unpackedBytes, spec.diskMb);
      log(`making the root disk (${diskMb} MiB)`);
      const disk = join(work, "disk.qcow2");
      await makeRootDisk(rootfs, diskMb, disk);
      await rm(rootfs, { recursive: true, force: true });
      await this.blobs.collect().catch(() => undefined);
      const start = startCommand(spec, image.run);
      if (start?.cmd && !hasShell) throw new DenError("invalid_argument", `the image has no shell (/bin/sh), so a start_cmd string cannot run in it; use an image ENTRYPOINT/CMD (an argv) instead`);
      const run: TemplateRunConfig = { env: envOf(image.run), workdir: image.run.workingDir || null, user: imageUser(image.run), startCmd: start?.text ?? null, readyCmd: spec.readyCmd ?? null };
      const meta = { source: `image ${image.source}`, run };
      const recipe = { name: target.name, vcpus: spec.vcpus ?? 1, memoryMb: spec.memoryMb ?? 512, diskMb, kind: "image", image: image.source, startCmd: run.startCmd, readyCmd: run.readyCmd };
      if (!start && !spec.setup.length) return await bakeFromDisk(this.rt, target, recipe, disk, base, meta, log);
      // The booted image as a template of its own (`<name>.boot`), then the started one from it.
      const boot = { name: `${target.name}.boot`, version: target.version };
      const booted = (await reuseTemplate(this.rt, boot)) ?? (await bakeFromDisk(this.rt, boot, { ...recipe, name: boot.name }, disk, base, meta, log));
      try {
        return await this.bakeStarted(booted, target, recipe, run, start, spec, log);
      } finally {
        await this.rt.templates.retire(boot.name);
        await this.rt.gc();
      }
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  }

  /** Starts the start command in a sandbox of `booted`, waits until ready, and bakes that sandbox as `target`. */
  private async bakeStarted(
    booted: TemplateInfo, target: { name: string; version: string }, recipe: Record<string, unknown>, run: TemplateRunConfig,
    start: { argv?: string[]; cmd?: string; text: string } | undefined, spec: Spec, log: Log,
  ): Promise<TemplateInfo & { reused: boolean }> {
    const sbx: Sandbox = await this.rt.create({ template: `${booted.name}@${booted.version}` });
    try {
      // Setup commands run as root in the image's environment, before the start command.
      await runSetup(spec, async (cmd, o) => {
        log(`setup: ${cmd.slice(0, 200)}`);
        return sbx.exec(cmd, { ...o, env: run.env, ...(run.workdir ? { cwd: run.workdir } : {}) });
      });
      if (start) {
        const opts = { env: run.env, ...(run.workdir ? { cwd: run.workdir } : {}), ...(run.user ? { user: run.user } : {}) };
        log(`starting: ${start.text}`);
        const { proc } = await sbx.spawn(start.argv ?? start.cmd!, opts);
        await this.waitReady(sbx, proc, run, spec, log);
      }
      log(`snapshotting the started sandbox`);
      return await bakeFromSandbox(this.rt, sbx.id, target, recipe, log, { meta: { source: booted.manifest.source, run }, standalone: true });
    } finally {
      await sbx.destroy();
    }
  }

  private async waitReady(sbx: Sandbox, proc: number, run: TemplateRunConfig, spec: Spec, log: Log): Promise<void> {
    const ready = spec.readyCmd;
    if (!ready) {
      await new Promise((r) => setTimeout(r, START_GRACE_MS));
      return;
    }
    const timeoutS = spec.readyTimeoutSeconds ?? DEFAULT_READY_TIMEOUT_S;
    const deadline = Date.now() + timeoutS * 1000;
    log(`waiting for: ${ready}`);
    for (;;) {
      const r = await sbx.exec(ready, { env: run.env, timeoutMs: Math.max(1000, Math.min(30_000, deadline - Date.now())) });
      if (r.exitCode === 0) return;
      if (Date.now() > deadline) {
        const out = await sbx.processes.read(proc, "stderr").then((x) => Buffer.from(x.data, "base64").toString("utf8").slice(-2000)).catch(() => "");
        throw new DenError("setup_failed", `the ready command did not pass within ${timeoutS} s: ${ready.slice(0, 200)}`, { stderr: out, ready_stderr: r.stderr.subarray(-2000).toString("utf8") });
      }
      await new Promise((res) => setTimeout(res, READY_POLL_MS));
    }
  }
}

/** The work dirs an image build leaves are under the data dir; exposed for leak checks in tests. */
export function imageBuildLeftovers(dataDir: string): Promise<string[]> {
  return existsSync(dataDir) ? readdir(dataDir).then((ds) => ds.filter((d) => d.startsWith(WORK_PREFIX))) : Promise.resolve([]);
}
