/**
 * Template builds on this machine: a build slot, one build per name at a time, its log;
 * an image or steps go to the template builder, setup commands run in a building sandbox.
 */
import { createHash } from "node:crypto";
import { DenError, type host } from "@den/protocol";
import { bakeFromSandbox, newId, reuseTemplate, type Runtime, type TemplateInfo } from "@den/runtime";
import type { ObjectStore } from "@den/store";
import { BUILD_VM_PREFIX } from "../build/build-cache.js";
import { BuildLogs } from "../build/build-logs.js";
import { Slots, buildsPerHost } from "../build/build-slots.js";
import { TemplateBuilder } from "../build/template-builder.js";
import { runSetup } from "../setup-steps.js";
import { wireTemplate } from "./template-cache.js";
import type { Transfers } from "./transfers.js";
import type { LocalVms } from "./vms.js";

export class Builds {
  /** The build running for each template name (a second one of a name waits for it). */
  private readonly byName = new Map<string, Promise<unknown>>();
  private readonly logs = new BuildLogs();
  private readonly slots = new Slots(buildsPerHost());
  private readonly builder: TemplateBuilder;

  constructor(private readonly rt: Runtime, store: ObjectStore, private readonly vms: LocalVms, private readonly transfers: Transfers) {
    // A build's VMs are made as any create's (admission, the build's network), by template.
    this.builder = new TemplateBuilder(rt, store, async (template, network) => {
      const id = newId(BUILD_VM_PREFIX);
      await vms.createVm({ id, template, ...(network ? { network } : {}) }, false);
      return rt.get(id);
    });
  }

  /** Build `op` (its journal entry is the caller's): logged from start to end. */
  async build(op: string, spec: host.TemplateBuildSpec): Promise<host.BuiltTemplate> {
    const { log, signal } = this.logs.start(op);
    try {
      // At most DEN_MAX_BUILDS_PER_HOST at once; one build per name at a time (a second waits, then finds the first one's version).
      const release = await this.slots.take(() => log(`waiting for a build slot (${this.slots.max} build(s) at once on this host)`), signal);
      try {
        const prev = this.byName.get(spec.name) ?? Promise.resolve();
        const next = prev.catch(() => undefined).then(() => this.run(spec, log, signal));
        this.byName.set(spec.name, next);
        const t = await next.finally(() => {
          if (this.byName.get(spec.name) === next) this.byName.delete(spec.name);
        });
        log(`template ${t.name}@${t.version}${t.reused ? " (built before)" : ""}`);
        return { ...wireTemplate(t), reused: t.reused };
      } finally {
        release();
      }
    } catch (e) {
      log(`build failed: ${(e as Error).message}`, "error");
      throw e;
    } finally {
      this.logs.end(op);
    }
  }

  log(op: string, from: number): host.BuildLogPage {
    return this.logs.page(op, from);
  }

  cancel(op: string): void {
    this.logs.cancel(op);
  }

  private async run(spec: host.TemplateBuildSpec, log: (l: string) => void, signal: AbortSignal): Promise<TemplateInfo & { reused: boolean }> {
    // From an image, or with steps: the builder (cached steps, a start command).
    if (spec.fromImage || spec.fromArchive || spec.steps?.length) return this.builder.build(spec, log, signal);
    let source: Record<string, string>;
    if (spec.fromCheckpoint) source = { checkpoint: spec.fromCheckpoint.id };
    else {
      const t = await this.rt.templates.resolve(spec.fromTemplate ?? "base");
      source = { template: `${t.name}@${t.version}` };
    }
    const recipe = { source, setup: spec.setup };
    const ref = { name: spec.name, version: createHash("sha256").update(JSON.stringify(recipe)).digest("hex").slice(0, 12) };
    // Checked before a building sandbox is made for nothing.
    const existing = await reuseTemplate(this.rt, ref);
    if (existing) return existing;
    // The building sandbox is on this host only: a crash mid-build leaves a VM no database
    // row knows, which the next start destroys.
    const id = newId(BUILD_VM_PREFIX);
    if (spec.fromCheckpoint) await this.transfers.restoreStored(id, spec.fromCheckpoint);
    else await this.vms.create(newId("op"), { id, template: source.template! });
    const sbx = this.rt.get(id);
    // A cancel stops the command running now with its VM.
    const stop = () => void sbx.destroy().catch(() => undefined);
    signal.addEventListener("abort", stop, { once: true });
    const cancelled = () => new DenError("aborted", "the build was cancelled");
    try {
      await runSetup(spec, async (cmd, opts) => {
        if (signal.aborted) throw cancelled();
        log(`setup: ${cmd.slice(0, 200)}`);
        return sbx.exec(cmd, opts).catch((e: unknown) => {
          throw signal.aborted ? cancelled() : e;
        });
      });
      if (signal.aborted) throw cancelled();
      return await bakeFromSandbox(this.rt, id, ref, recipe, log);
    } finally {
      signal.removeEventListener("abort", stop);
      await sbx.destroy();
    }
  }
}
