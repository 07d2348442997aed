/**
 * What the in-memory host moves to and from the object store, in the real host's layout
 * (memory-image.ts): a sandbox's stored snapshot up (pinning its template version here) and
 * down (verified, then made a sandbox), templates published and fetched; and what it keeps
 * for them locally: warm snapshots and template pins, as the control plane says.
 */
import { DenError, type host } from "@den/protocol";
import { manifestBytes, readStoredManifest, storedDigests, type TransferProgress } from "@den/store";
import type { Admission } from "../admission.js";
import { throttled } from "../transfer-progress.js";
import type { Faults } from "./faults.js";
import type { Sandboxes } from "./host-sandboxes.js";
import type { HostState } from "./host-state.js";
import { checkMemoryManifest, checkSandboxImage, getStored, putStored, type SandboxImage } from "./memory-image.js";
import { refKey, type MemoryTemplate } from "./memory-templates.js";

export class StoreTransfers {
  constructor(
    private readonly state: HostState,
    private readonly faults: Faults,
    private readonly admission: Admission,
    private readonly sandboxes: Sandboxes,
    /** Who hears of transfers (the host's `onTransfer`, read at each report). */
    private readonly listener: () => ((t: host.TransferEvent) => void) | undefined,
  ) {}

  private progress(sandbox: string, snapshot: string, direction: host.TransferEvent["direction"]): (p: TransferProgress) => void {
    return throttled((p) => this.listener()?.({
      sandbox, snapshot, direction, file: p.key.slice(p.key.lastIndexOf("/") + 1), bytes: p.bytes, total: p.total ?? null,
      done: p.total !== undefined && p.bytes >= p.total,
    }));
  }

  /** Uploads a sandbox image to the store, pinning its template here first (a failed upload leaves no pin). */
  async toStore(image: SandboxImage, sandbox: string, to: host.StoredRef): Promise<{ storedBytes: number; digests: host.StoredDigests }> {
    this.state.change(() => this.state.pin(to.id, image.template));
    try {
      const stored = await putStored(this.state.store, to.key, image, this.state.manifest({ id: sandbox, template: image.template, shape: image.shape }, to.id, image.mounts), {
        tmp: this.state.tmp, onProgress: this.progress(sandbox, to.id, "upload"), midway: () => this.faults.at("snapshot-upload-mid"),
      });
      return { storedBytes: manifestBytes(stored), digests: storedDigests(stored) };
    } catch (e) {
      this.state.change(() => this.state.pins.delete(to.id));
      throw e;
    }
  }

  /**
   * Downloads a stored snapshot, verifies it, and makes it sandbox `id`: as the real host, its
   * manifest checked against `ref.digests` before it is parsed (without: its fields only), the
   * fields this host uses checked before it uses them.
   */
  async restoreStored(id: string, ref: host.StoredRef, volumes: host.VolumeSpec[] = []): Promise<host.HostSandboxInfo> {
    const stored = await readStoredManifest(this.state.store, ref.key, ref.digests);
    const { vm } = checkMemoryManifest(stored.snapshot, ref.id);
    // Room first: a wake that cannot fit fails before it downloads anything.
    const release = this.admission.reserve(id, vm);
    try {
      const image = checkSandboxImage(await getStored(this.state.store, ref.key, { tmp: this.state.tmp, onProgress: this.progress(id, ref.id, "download"), manifest: stored }), ref.id);
      this.faults.at("wake-cold-after-download");
      if (!this.state.tpl.has(image.template)) throw new DenError("template_not_found", `snapshot needs template ${refKey(image.template)}, which is not on this host`);
      return this.state.info(this.sandboxes.make(id, image.template, image.shape, image.guest, volumes));
    } finally {
      release();
    }
  }

  /** (A copy already at `key` is replaced, as the real host does: the digests are of what this host put.) */
  async publishTemplate(name: string, version: string, key: string): Promise<{ storedBytes: number; digests: host.StoredDigests }> {
    const { store } = this.state;
    const t = this.state.tpl.resolve(`${name}@${version}`);
    const manifest = { format: 1, kind: "template", id: refKey(t), createdAt: t.createdAt, template: { name, version }, vm: { vcpus: t.vcpus, memoryMb: t.memoryMb, diskMb: t.diskMb } };
    const stored = await putStored(store, key, { format: "den-memory-template/1", template: t }, manifest, { tmp: this.state.tmp, midway: () => this.faults.at("snapshot-upload-mid") });
    return { storedBytes: manifestBytes(stored), digests: storedDigests(stored) };
  }

  async fetchTemplate(name: string, version: string, key: string, current: boolean, digests?: host.StoredDigests): Promise<void> {
    const { tpl } = this.state;
    const ref = { name, version };
    if (tpl.has(ref)) {
      if (current && tpl.current(name) !== version) this.state.change(() => tpl.setCurrent(ref));
      return;
    }
    const stored = await readStoredManifest(this.state.store, key, digests);
    const m = checkMemoryManifest(stored.snapshot, `${name}@${version}`);
    if (m.kind !== "template" || m.template.name !== name || m.template.version !== version) {
      throw new DenError("snapshot_corrupt", `stored template ${name}@${version}: its manifest is of ${m.kind} ${m.template.name}@${m.template.version}`);
    }
    const got = (await getStored(this.state.store, key, { tmp: this.state.tmp, manifest: stored })) as { format?: string; template?: MemoryTemplate };
    if (got.format !== "den-memory-template/1" || !got.template) throw new DenError("snapshot_corrupt", `stored template ${name}@${version} is not an in-memory host's`);
    this.state.change(() => tpl.install({ ...got.template!, name, version }, current));
  }

  // ---- local snapshots and pins ----

  dropLocalSnapshot(snapshotId: string): void {
    this.state.change(() => {
      if (this.state.warm.delete(snapshotId)) this.state.gc();
    });
  }

  unpin(snapshotId: string): void {
    this.state.change(() => {
      if (this.state.pins.delete(snapshotId)) this.state.gc();
    });
  }

  /** Keeps the local snapshots and pins the control plane's records name, and only those. */
  collectLocal(snapshots: string[], pins: host.TemplatePin[]): void {
    const { warm } = this.state;
    this.state.change(() => {
      const keep = new Set(snapshots);
      for (const id of [...warm.keys()]) if (!keep.has(id)) warm.delete(id);
      // The database is the record: a pin this host lost (or never had) is written again.
      const wanted = new Map(pins.map((p) => (typeof p === "string" ? [p, undefined] : [p.id, p.template])));
      for (const [holder, template] of wanted) if (template && !this.state.pins.has(holder)) this.state.pin(holder, template);
      for (const holder of [...this.state.pins.keys()]) if (!wanted.has(holder)) this.state.pins.delete(holder);
      this.state.gc();
    });
  }
}
