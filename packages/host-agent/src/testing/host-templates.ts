/**
 * The in-memory host's template verbs: the list, retirement, and builds (setup commands
 * run in a sandbox of their own, made from a template or a checkpoint, one build per name
 * at a time; a recipe built before is made current again). Versions, variants and gc are
 * memory-templates.ts's; publishing and fetching, host-store.ts's.
 */
import { DenError, host } from "@den/protocol";
import { newId } from "@den/runtime";
import { runSetup } from "../setup-steps.js";
import type { Lifecycle } from "./host-lifecycle.js";
import type { HostState } from "./host-state.js";
import type { StoreTransfers } from "./host-store.js";
import { checkTemplateName, refKey, versionOf, wireTemplate, type MemoryTemplate } from "./memory-templates.js";

export class TemplateOps {
  /** Builds in flight, by name (a restart forgets them). */
  private builds = new Map<string, Promise<unknown>>();

  constructor(private readonly state: HostState, private readonly lifecycle: Lifecycle, private readonly stored: StoreTransfers) {}

  list(): host.HostTemplate[] {
    return this.state.tpl.list();
  }

  /** The name (and its size variants) no longer resolves; versions nothing uses go. */
  delete(name: string): void {
    const { tpl } = this.state;
    const names = new Set(tpl.list().map((t) => t.name).filter((n) => n === name || n.startsWith(`${name}.`)));
    this.state.change(() => {
      for (const n of names) tpl.retire(n);
      this.state.gc();
    });
  }

  async build(spec: host.TemplateBuildSpec, log: (line: string) => void = () => undefined): Promise<host.BuiltTemplate> {
    // One build per name at a time: a second waits and then finds the first one's version.
    const prev = this.builds.get(spec.name) ?? Promise.resolve();
    const next = prev.catch(() => undefined).then(() => this.buildNow(spec, log));
    this.builds.set(spec.name, next);
    const t = await next.finally(() => {
      if (this.builds.get(spec.name) === next) this.builds.delete(spec.name);
    });
    return { ...wireTemplate(t.template, this.state.tpl.current(t.template.name) === t.template.version), reused: t.reused };
  }

  /** A new process forgets the builds the last one was running. */
  forget(): void {
    this.builds = new Map();
  }

  /** Runs the setup commands in a sandbox of its own (from a template or a checkpoint) and keeps what they left. */
  private async buildNow(spec: host.TemplateBuildSpec, log: (line: string) => void): Promise<{ template: MemoryTemplate; reused: boolean }> {
    const { tpl } = this.state;
    // Pulling and unpacking an image needs a real host's disk tools (its tests run on one).
    if (spec.fromImage || spec.fromArchive || spec.steps?.length) throw new DenError("invalid_argument", "the in-memory host does not build templates from images or build steps");
    let source: Record<string, string>;
    if (spec.fromCheckpoint) source = { checkpoint: spec.fromCheckpoint.id };
    else source = { template: refKey(tpl.resolve(spec.fromTemplate ?? "base")) };
    const recipe = { source, setup: spec.setup };
    const ref = { name: spec.name, version: versionOf(recipe) };
    // Templates are immutable: a version built before is made current again and used as is.
    if (tpl.has(ref)) {
      this.state.change(() => tpl.setCurrent(ref));
      return { template: tpl.resolve(refKey(ref)), reused: true };
    }
    // Named as a real host names its build VMs (a control plane's reconcile leaves them alone).
    const id = newId(host.BUILD_VM_PREFIX);
    if (spec.fromCheckpoint) await this.stored.restoreStored(id, spec.fromCheckpoint);
    else this.lifecycle.create({ id, template: source.template! });
    const s = this.state.get(id);
    try {
      await runSetup(spec, (cmd, opts) => {
        log(`setup: ${cmd.slice(0, 200)}`);
        return s.guest.exec(cmd, opts);
      });
      checkTemplateName(ref.name);
      const template: MemoryTemplate = { ...ref, ...s.shape, createdAt: new Date(this.state.clock.now()).toISOString(), guest: s.guest.image(), baseTemplate: s.template };
      this.state.change(() => tpl.install(template, true));
      return { template, reused: false };
    } finally {
      this.lifecycle.destroy(id);
    }
  }
}
