/**
 * `LocalHostAgent`: the host agent of this machine, in-process. A thin composition of one
 * module a job (src/local/): VMs, volumes, templates (cache and builds), local snapshots,
 * with the transfers, warm snapshots, volume images and op journal they share.
 */
import { readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import type { ObjectStore } from "@den/store";
import type { host } from "@den/protocol";
import { Runtime, hostProfile } from "@den/runtime";
import type { Admission, Capacity } from "./admission.js";
import { sweepBuilds } from "./build/build-cache.js";
import { OpJournal } from "./op-journal.js";
import { Builds } from "./local/builds.js";
import { runtimeAdmission } from "./local/runtime-admission.js";
import { LocalSnapshots } from "./local/snapshots.js";
import { TemplateCache } from "./local/template-cache.js";
import { LocalTemplates } from "./local/templates.js";
import { DOWNLOAD_PREFIX, Transfers } from "./local/transfers.js";
import { vmState } from "./local/vm-info.js";
import { LocalVms } from "./local/vms.js";
import { VolumeImages } from "./local/volume-images.js";
import { LocalVolumes } from "./local/volumes.js";
import { WarmSnapshots } from "./local/warm-snapshots.js";

export { wireTemplate } from "./local/template-cache.js";

/** An inventory with the host's kind, which this host always says (the registrar sends it). */
export type KindedInventory = host.HostInventory & { kind: host.HostKind };

/**
 * The host agent of this machine, in-process: one Runtime (QEMU per sandbox), its warm
 * snapshots, template cache, networks and admission control. Operations run once per id.
 */
export class LocalHostAgent implements host.HostAgent {
  readonly address = "local";
  onTransfer: ((t: host.TransferEvent) => void) | undefined;
  readonly vms: LocalVms;
  readonly volumes: LocalVolumes;
  readonly templates: LocalTemplates;
  readonly snapshots: LocalSnapshots;
  /** Every operation by id, whichever sub-service runs it: `settled` waits on any. */
  private readonly journal = new OpJournal();
  private readonly admission: Admission;

  private constructor(private readonly rt: Runtime, readonly store: ObjectStore, capacity: Capacity) {
    this.admission = runtimeAdmission(rt, capacity);
    const cache = new TemplateCache(rt, store);
    const images = new VolumeImages(rt);
    const warm = new WarmSnapshots(rt);
    const transfers = new Transfers(rt, store, this.admission, warm, () => this.onTransfer);
    this.vms = new LocalVms(rt, this.journal, this.admission, cache, images, warm, transfers);
    this.volumes = new LocalVolumes(rt, store, this.journal, images, this.vms);
    this.templates = new LocalTemplates(this.journal, cache, new Builds(rt, store, this.vms, transfers));
    this.snapshots = new LocalSnapshots(rt);
  }

  static async open(dataDir: string, store: ObjectStore, capacity: Capacity): Promise<LocalHostAgent> {
    const rt = await Runtime.open({ dataDir });
    // Downloads a crash interrupted: the store still has the snapshot.
    for (const d of await readdir(dataDir)) if (d.startsWith(DOWNLOAD_PREFIX)) await rm(join(dataDir, d), { recursive: true, force: true });
    // The default template's first create need not wait for a QEMU to start.
    await rt.prewarm();
    const agent = new LocalHostAgent(rt, store, capacity);
    await sweepBuilds(rt);
    return agent;
  }

  get instance(): string {
    return this.rt.instance;
  }

  async settled(op: string): Promise<void> {
    await this.journal.settled(op);
  }

  async inventory(): Promise<KindedInventory> {
    // Each VM with what it holds of the host's memory (so the control plane picks whom to evict by what that frees).
    const charges = this.admission.charges();
    return {
      instance: this.instance,
      vms: this.rt.list().map((s) => ({ id: s.id, state: vmState(s), cpuSeconds: s.cpuSeconds() ?? null, ...charges.get(s.id) })),
      snapshots: (await this.rt.listSnapshots()).map((s) => s.id),
      capacity: { capacity: this.admission.capacity, used: this.admission.used(), memory: this.admission.memoryState() },
      kind: await this.kind(),
    };
  }

  /** What a snapshot made here needs of the host it is restored on. */
  private async kind(): Promise<host.HostKind> {
    const p = await hostProfile();
    return { qemuVersion: p.qemuVersion, accelerator: p.accelerator, cpuModel: p.cpuModel, arch: process.arch };
  }

  /** The runtime's Sandbox is a HostGuest as it is: in-process, the data plane costs nothing. */
  guest(id: string): host.HostGuest {
    return this.rt.get(id);
  }

  close(): Promise<void> {
    return this.rt.close();
  }
}
