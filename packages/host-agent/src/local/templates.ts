/**
 * `HostTemplates` on this machine: template builds (one module) over the template cache
 * (another); once per operation id.
 */
import type { host } from "@den/protocol";
import type { OpJournal } from "../op-journal.js";
import type { Builds } from "./builds.js";
import type { TemplateCache } from "./template-cache.js";

export class LocalTemplates implements host.HostTemplates {
  constructor(private readonly journal: OpJournal, private readonly cache: TemplateCache, private readonly builds: Builds) {}

  list(): Promise<host.HostTemplate[]> {
    return this.cache.list();
  }

  delete(name: string): Promise<void> {
    return this.cache.delete(name);
  }

  build(op: string, spec: host.TemplateBuildSpec): Promise<host.BuiltTemplate> {
    return this.journal.once(op, () => this.builds.build(op, spec));
  }

  async buildLog(op: string, from: number): Promise<host.BuildLogPage> {
    return this.builds.log(op, from);
  }

  async cancelBuild(op: string): Promise<void> {
    this.builds.cancel(op);
  }

  publish(op: string, name: string, version: string, key: string): Promise<{ storedBytes: number; digests: host.StoredDigests }> {
    return this.journal.once(op, () => this.cache.publish(name, version, key));
  }

  fetch(op: string, name: string, version: string, key: string, current: boolean, digests?: host.StoredDigests): Promise<void> {
    return this.journal.once(op, () => this.cache.fetch(name, version, key, current, digests));
  }
}
