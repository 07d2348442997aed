/**
 * A template build on this host from an image or a template plus steps (RUN, COPY, ENV,
 * WORKDIR, USER: a Dockerfile's, or E2B's Template builder's), then a start command that is
 * running, and ready, when the template is baked. Each RUN and COPY runs in a VM of its own
 * made from the step before, confined like any sandbox, and its result is a cached step
 * template (build-cache.ts): editing the last step rebuilds only from there.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { join, posix } from "node:path";
import { DenError, type api, type host } from "@den/protocol";
import type { ObjectStore } from "@den/store";
import { bakeFromSandbox, reuseTemplate, startService, type Runtime, type Sandbox, type TemplateInfo, type TemplateRunConfig } from "@den/runtime";
import { cacheKey, stepRef, stepTemplate, touchStep, type BuildState, type Log } from "./build-cache.js";
import { copyFromContext } from "./context-copy.js";
import { ImageBases, shellQuote } from "./image-base.js";

type Spec = host.TemplateBuildSpec;
type Step = host.BuildStep;

/** A build's ready command passes within this (its `readyTimeoutSeconds` aside). */
const DEFAULT_READY_TIMEOUT_S = 120;
/** Output of a failed step kept in its error. */
const OUTPUT_TAIL = 4096;

/** How the builder gets a VM: the host agent's create (admission, the build's network), by template. */
export type MakeVm = (template: string, network: api.NetworkPolicy | undefined) => Promise<Sandbox>;

export class TemplateBuilder {
  private readonly images: ImageBases;

  constructor(private readonly rt: Runtime, private readonly store: ObjectStore, private readonly makeVm: MakeVm) {
    this.images = new ImageBases(rt, store);
  }

  async build(spec: Spec, log: Log = () => undefined, signal?: AbortSignal): Promise<TemplateInfo & { reused: boolean }> {
    const deadline = spec.ttlSeconds ? Date.now() + spec.ttlSeconds * 1000 : Infinity;
    let state: BuildState & { imageStart?: string[] };
    if (spec.fromImage || spec.fromArchive) state = await this.images.base(spec, log, signal);
    else {
      const tpl = await this.rt.templates.resolve(spec.fromTemplate ?? "base");
      const run = tpl.manifest.run ?? { env: {}, workdir: null, user: null, startCmd: null, readyCmd: null };
      state = { tpl, key: cacheKey("template", tpl.name, tpl.version, spec.force ? Date.now() : null), run: { ...run, startCmd: null, readyCmd: null }, source: `template ${tpl.name}@${tpl.version}` };
    }
    // Setup commands (the /v1 field) are RUN steps after the build's own steps.
    const steps: Step[] = [...(spec.steps ?? []), ...spec.setup.map((cmd): Step => ({ type: "RUN", cmd }))];
    for (const [i, step] of steps.entries()) {
      if (signal?.aborted) throw new DenError("aborted", "the build was cancelled");
      if (Date.now() > deadline) throw new DenError("setup_failed", `the template build passed its TTL (${spec.ttlSeconds} s) before step ${i + 1}`);
      state = { ...state, ...(await this.step(state, step, `step ${i + 1}/${steps.length}`, spec, deadline, log, signal)) };
    }
    const start = spec.startArgv ? { argv: spec.startArgv, text: spec.startArgv.map(shellQuote).join(" ") }
      : spec.startCmd ? { cmd: spec.startCmd, text: spec.startCmd }
      : state.imageStart ? { argv: state.imageStart, text: state.imageStart.map(shellQuote).join(" ") } : undefined;
    const run: TemplateRunConfig = { ...state.run, startCmd: start?.text ?? null, readyCmd: spec.readyCmd ?? null };
    const key = cacheKey("final", state.key, run, spec.readyTimeoutSeconds ?? null);
    const target = { name: spec.name, version: key.slice(0, 12) };
    const existing = spec.force ? undefined : await reuseTemplate(this.rt, target);
    if (existing) {
      log(`template ${target.name}@${target.version}: built before from the same content`);
      return existing;
    }
    return this.bakeStarted(state, target, run, start, spec, log, signal);
  }

  /** One step from `state`: ENV, WORKDIR and USER change what later steps run with; RUN and COPY run in a VM. */
  private async step(state: BuildState, step: Step, label: string, spec: Spec, deadline: number, log: Log, signal?: AbortSignal): Promise<Partial<BuildState>> {
    const run = state.run;
    switch (step.type) {
      case "ENV":
        log(`${label} ENV ${Object.keys(step.env).join(" ")}`);
        return { run: { ...run, env: { ...run.env, ...step.env } }, key: cacheKey(state.key, step) };
      case "WORKDIR": {
        const workdir = posix.resolve(run.workdir ?? "/", step.path);
        log(`${label} WORKDIR ${workdir}`);
        return { run: { ...run, workdir }, key: cacheKey(state.key, step) };
      }
      case "USER":
        log(`${label} USER ${step.user}`);
        return { run: { ...run, user: step.user === "root" || step.user === "0" ? null : step.user }, key: cacheKey(state.key, step) };
    }
    const what = step.type === "RUN" ? `RUN ${(step.cmd ?? step.argv!.map(shellQuote).join(" ")).slice(0, 200)}` : `COPY ${step.src.join(" ")} ${step.dest}`;
    // What the step depends on: where it starts, the step (a COPY's files by their digest), and the env, directory and user it runs with.
    const { force: _force, ...content } = step;
    const key = cacheKey(state.key, content, run.env, run.workdir, run.user);
    const cached = await stepTemplate(this.rt, key);
    if (cached && !step.force && !spec.force) {
      log(`${label} ${what}: cached`);
      await touchStep(this.rt, cached);
      return { tpl: cached, key };
    }
    log(`${label} ${what}`);
    const t0 = Date.now();
    const sbx = await this.makeVm(`${state.tpl.name}@${state.tpl.version}`, spec.network);
    try {
      if (run.workdir) await sbx.files.mkdir(run.workdir, { parents: true });
      if (step.type === "RUN") await this.runStep(sbx, step, run, label, deadline, log, signal);
      else {
        const scratch = await mkdtemp(join(this.rt.dataDir, "build-context-"));
        try {
          const n = await copyFromContext(this.store, step, sbx.files, run.workdir ?? "/", scratch, log, { signal });
          log(`${label}: ${n} file(s) and dir(s) copied`);
        } finally {
          await rm(scratch, { recursive: true, force: true });
        }
      }
      const tpl = await bakeFromSandbox(this.rt, sbx.id, stepRef(key), { kind: "step", step: what }, () => undefined, { meta: { source: state.source, run } });
      log(`${label}: done in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
      return { tpl, key };
    } finally {
      await sbx.destroy();
    }
  }

  /** A RUN: its output goes to the build's log as it comes; a failure carries the output's tail. */
  private async runStep(sbx: Sandbox, step: Extract<Step, { type: "RUN" }>, run: TemplateRunConfig, label: string, deadline: number, log: Log, signal?: AbortSignal): Promise<void> {
    const user = step.user ?? run.user ?? undefined;
    const timeoutMs = Math.max(1000, Math.min(deadline - Date.now(), 24 * 3600_000));
    const proc = await sbx.execStream(step.cmd ?? step.argv!, {
      env: { ...run.env, ...step.env }, ...(run.workdir ? { cwd: run.workdir } : {}), ...(user ? { user } : {}), timeoutMs,
    });
    const abort = () => void proc.kill().catch(() => undefined);
    signal?.addEventListener("abort", abort, { once: true });
    const tails = { stdout: "", stderr: "" };
    const partial = { stdout: "", stderr: "" };
    try {
      for await (const chunk of proc) {
        const text = partial[chunk.stream] + chunk.data.toString("utf8");
        tails[chunk.stream] = (tails[chunk.stream] + chunk.data.toString("utf8")).slice(-OUTPUT_TAIL);
        const lines = text.split("\n");
        partial[chunk.stream] = lines.pop()!.slice(-OUTPUT_TAIL);
        for (const l of lines) log(`${label} | ${l}`);
      }
    } finally {
      signal?.removeEventListener("abort", abort);
    }
    for (const s of ["stdout", "stderr"] as const) if (partial[s]) log(`${label} | ${partial[s]}`);
    if (signal?.aborted) throw new DenError("aborted", "the build was cancelled");
    const exit = await proc.wait();
    if (exit.exitCode !== 0 || exit.timedOut) {
      const why = exit.timedOut ? "passed the build's TTL" : exit.exitCode === null ? `died of signal ${exit.signal}` : `exited with ${exit.exitCode}`;
      throw new DenError("setup_failed", `${label} ${why}: ${(step.cmd ?? step.argv!.join(" ")).slice(0, 200)}`, { step: label, exit_code: exit.exitCode, stdout: tails.stdout, stderr: tails.stderr });
    }
  }

  /** Starts the start command in a VM of the last step, waits until ready, and bakes that VM as `target` (standalone). */
  private async bakeStarted(
    state: BuildState, target: { name: string; version: string }, run: TemplateRunConfig,
    start: { argv?: string[]; cmd?: string; text: string } | undefined, spec: Spec, log: Log, signal?: AbortSignal,
  ): Promise<TemplateInfo & { reused: boolean }> {
    // (No network: the template's sandboxes get theirs at create; a start command that needs one at build time waits for it.)
    const sbx = await this.makeVm(`${state.tpl.name}@${state.tpl.version}`, undefined);
    try {
      if (run.workdir) await sbx.files.mkdir(run.workdir, { parents: true });
      if (start) {
        await startService(await sbx.agent(), { run, command: start.argv ?? start.cmd!, readyTimeoutSeconds: spec.readyTimeoutSeconds ?? DEFAULT_READY_TIMEOUT_S }, log);
      }
      // (The last point a cancel stops it: past it the version is installed.)
      if (signal?.aborted) throw new DenError("aborted", "the build was cancelled");
      log(`snapshotting`);
      const recipe = { kind: "build", source: state.source, startCmd: run.startCmd, readyCmd: run.readyCmd };
      return await bakeFromSandbox(this.rt, sbx.id, target, recipe, log, { meta: { source: state.source, run }, standalone: true });
    } finally {
      await sbx.destroy();
    }
  }
}
