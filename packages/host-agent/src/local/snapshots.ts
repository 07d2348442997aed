/** `HostSnapshots` on this machine: local (warm) snapshots and the template pins stored snapshots hold. */
import type { host } from "@den/protocol";
import type { Runtime } from "@den/runtime";

export class LocalSnapshots implements host.HostSnapshots {
  constructor(private readonly rt: Runtime) {}

  async dropLocal(snapshotId: string): Promise<void> {
    if (this.rt.hasSnapshot(snapshotId)) await this.rt.deleteSnapshot(snapshotId);
  }

  async unpin(snapshotId: string): Promise<void> {
    await this.rt.unpinTemplate(snapshotId);
  }

  async collect(keepSnapshots: string[], keepPins: host.TemplatePin[]): Promise<void> {
    const snapshots = new Set(keepSnapshots);
    const pins = new Map(keepPins.map((p) => (typeof p === "string" ? [p, undefined] : [p.id, p.template])));
    for (const s of await this.rt.listSnapshots()) if (!snapshots.has(s.id)) await this.rt.deleteSnapshot(s.id);
    // The database is the record: a pin this host lost (or never had) is written again.
    const held = new Set(this.rt.pinHolders());
    for (const [holder, template] of pins) if (template && !held.has(holder)) await this.rt.pinTemplate(holder, template);
    for (const holder of held) if (!pins.has(holder)) await this.rt.unpinTemplate(holder);
  }
}
