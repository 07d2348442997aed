import { join, resolve } from "node:path";
import type { AgentClient } from "./agent-client.js";
import { adoptDataDir } from "./adoption.js";
import { captureSandbox } from "./capture.js";
import { DataDirLayout, closeOf, defaultDataDir, finishingClose, lockDataDir, prepareDataDir, unlockDataDir } from "./data-dir.js";
import { Forker, type ForkOptions } from "./fork.js";
import { hostProfile, type HostProfile } from "./host.js";
import { Launcher, type CreateOptions } from "./launcher.js";
import { NetworkManager, parseHostsMap } from "./network/manager.js";
import type { EgressPolicy } from "./network/sandbox-network.js";
import { OverlayMaker } from "./overlay.js";
import { VmPool, type PooledVm } from "./pool.js";
import { SandboxRegistry } from "./registry.js";
import type { Sandbox } from "./sandbox.js";
import type { SandboxContext } from "./sandbox-record.js";
import { SnapshotCatalog, type SnapshotInfo, type TakeSnapshotOptions } from "./snapshot-catalog.js";
import type { SnapshotManifest, TemplateRef } from "./snapshot.js";
import type { StateFeed } from "./state-file.js";
import { closePool, pooledVmSpawner, prewarm } from "./template-pool.js";
import { TEMPLATE_FILES, TemplateStore } from "./templates.js";
import type { Vm } from "./vm.js";

export { defaultDataDir, type CreateOptions, type ForkOptions, type SnapshotInfo };

export interface RuntimeOptions {
  /** Where templates, sandboxes and snapshots live (default: $DEN_DATA_DIR or /var/lib/den). */
  dataDir?: string;
}

/**
 * The host-side driver: runs each sandbox as one QEMU microVM, restores sandboxes from
 * template snapshots, and owns every file and process it creates under its data dir.
 * A facade: each job is a module of its own (the sandbox map and adoption, the launcher,
 * forks, the snapshot catalog, the pool; see the package's README).
 *
 * @example
 * ```ts
 * const rt = await Runtime.open({ dataDir: "/var/lib/den" });
 * const sbx = await rt.create({ template: "base" });
 * const r = await sbx.exec("echo hello");
 * await sbx.destroy();
 * ```
 */
export class Runtime {
  readonly templates: TemplateStore;
  /** Sandboxes' networks (egress policy, namespaces, routers). */
  readonly networks: NetworkManager;
  private readonly layout: DataDirLayout;
  private readonly sandboxes: SandboxRegistry;
  /** QEMUs spawned ahead of the creates that will take them. */
  private readonly pool: VmPool;
  private readonly snapshots: SnapshotCatalog;
  private readonly launcher: Launcher;
  private readonly forker: Forker;
  private readonly context: SandboxContext;

  private constructor(
    readonly dataDir: string,
    readonly instance: string,
    readonly host: HostProfile,
  ) {
    const layout = (this.layout = new DataDirLayout(dataDir, instance));
    this.templates = new TemplateStore(join(dataDir, "templates"));
    // A new sandbox's disk overlay, without a qemu-img spawn each time.
    const overlays = new OverlayMaker(layout.overlays);
    this.pool = new VmPool(layout.pool, pooledVmSpawner(instance, host, overlays, (id) => layout.sandbox(id)));
    this.networks = new NetworkManager(instance, process.env.DEN_NET_POOL ?? "100.96.0.0/16", parseHostsMap(process.env.DEN_NET_HOSTS), process.env.DEN_NET_MASQUERADE !== "0");
    this.sandboxes = new SandboxRegistry(layout);
    this.snapshots = new SnapshotCatalog(layout, host, this.templates, this.sandboxes, this.pool);
    const scope = { layout, host, templates: this.templates, overlays, pool: this.pool, sandboxes: this.sandboxes, snapshots: this.snapshots, networks: this.networks };
    this.context = sandboxContext({ host, layout: this.layout, templates: this.templates, networks: this.networks, sandboxes: this.sandboxes, gc: () => this.gc() });
    this.launcher = new Launcher({ ...scope, context: this.context });
    this.forker = new Forker({ ...scope, launcher: this.launcher });
  }

  /** Opens a data dir: adopts sandboxes whose QEMU still runs, cleans up what's left of others. */
  static async open(opts: RuntimeOptions = {}): Promise<Runtime> {
    const dataDir = resolve(opts.dataDir ?? defaultDataDir());
    // A runtime of this process closed on the same data dir may still be ending a pool spawn.
    await closeOf(dataDir);
    const instance = await prepareDataDir(dataDir);
    lockDataDir(dataDir);
    try {
      const rt = new Runtime(dataDir, instance, await hostProfile());
      await adoptDataDir({ layout: rt.layout, sandboxes: rt.sandboxes, networks: rt.networks, context: rt.context, gc: () => rt.gc() });
      return rt;
    } catch (e) {
      unlockDataDir(dataDir);
      throw e;
    }
  }

  /** Where forks keep their shared RAM files: tmpfs when the host has one. */
  get ramDir(): string {
    return this.layout.ramDir;
  }

  // ---- the sandboxes held (registry.ts) ----

  has(id: string): boolean {
    return this.sandboxes.has(id);
  }

  get(id: string): Sandbox {
    return this.sandboxes.get(id);
  }

  list(): Sandbox[] {
    return this.sandboxes.list();
  }

  /** Destroys every sandbox of this runtime. */
  async destroyAll(): Promise<void> {
    await this.sandboxes.destroyAll();
  }

  /** Disconnects from every VM; the VMs keep running and are adopted by the next `open`. */
  /** Lets go of the data dir at once; resolves (never rejects) once the pool's QEMUs and the empty cgroups are gone (a process about to exit waits for it). */
  close(): Promise<void> {
    const pool = closePool(this.pool, this.instance);
    finishingClose(this.dataDir, pool);
    this.sandboxes.detachAll();
    this.networks.detach();
    unlockDataDir(this.dataDir);
    return pool;
  }

  // ---- starting VMs (launcher.ts, fork.ts, capture.ts) ----

  /** Creates a sandbox by restoring the template's snapshot: no boot. */
  create(opts: CreateOptions = {}): Promise<Sandbox> {
    return this.launcher.create(opts);
  }

  /**
   * Restores a new sandbox from a snapshot (by id). `feedState`: its saved state is not in
   * the snapshot's directory but written by the feed as the VM loads it (a cold wake
   * decompressing from the store); the VM runs only once the feed has checked all of it.
   * `adoptDisk`: the snapshot is deleted right after this (a download's, owned by the caller):
   * its disk becomes the sandbox's own instead of the backing of a new overlay, so the chain
   * stays one level above the template's disk with no overlay made now or rebased later.
   */
  restore(snapshotId: string, opts: CreateOptions & { adoptDisk?: boolean } = {}, feedState?: StateFeed, prelaunched?: PooledVm): Promise<Sandbox> {
    return this.launcher.restore(snapshotId, opts, feedState, prelaunched);
  }

  /**
   * Cold-boots a sandbox from a template's kernel and disk instead of restoring its
   * snapshot: slower, but any vCPU count and memory size. Its RAM lives in a file in the
   * sandbox directory, so its snapshots carry their memory as a file.
   */
  boot(opts: CreateOptions & { vcpus?: number; memoryMb?: number } = {}): Promise<Sandbox> {
    return this.launcher.boot(opts);
  }

  /**
   * Shuts a sandbox's VM down keeping its disk (see `Sandbox.stopKeepingDisk`); its network
   * goes with the VM and comes back with the policy it is given after its boot.
   */
  stopKeepingDisk(id: string): Promise<void> {
    return this.launcher.stopKeepingDisk(id);
  }

  /**
   * Boots a shut-down sandbox again from its own disk overlay with its template's kernel
   * and initrd: same id, record and shape, a fresh memory (a RAM file in its directory, as
   * `boot()` makes). Idempotent: a running sandbox is left as it is.
   */
  bootFromDisk(id: string): Promise<Sandbox> {
    return this.launcher.bootFromDisk(id);
  }

  /**
   * Boots a bare VM from a kernel and disk (no snapshot) and waits for its agent. Used to
   * bake templates. Its RAM lives in `memoryFile` (shared), which becomes the template's memory.
   * `backing`: the images under `disk`, top first (what each header must name; VmSpec.backing).
   */
  bootVm(opts: { dir: string; kernel: string; initrd: string; disk: string; backing: readonly string[]; memoryFile: string; vcpus: number; memoryMb: number; id?: string }): Promise<{ vm: Vm; agent: AgentClient }> {
    return this.launcher.bootVm(opts);
  }

  /** Forks a running sandbox into `count` new, independent sandboxes (copy-on-write disks). */
  /** `volumes`: what each child mounts (the parent's mounts are stale in them and let go of). */
  /** `reached`: told the points a fork passes (the host agent's crash tests kill it at one). */
  fork(sandboxId: string, count = 1, opts: ForkOptions = {}): Promise<Sandbox[]> {
    return this.forker.fork(sandboxId, count, opts);
  }

  /**
   * Captures a running sandbox into `dir` as a template's files: RAM as a file
   * (memory.bin), device state (state.bin), and its disk flattened into one standalone
   * image (disk.qcow2). The sandbox pauses only for its snapshot and keeps running.
   */
  captureSandbox(sandboxId: string, dir: string, opts: { flattenDisk: boolean }): Promise<{ template: TemplateRef; vm: SnapshotManifest["vm"]; pauseMs: number }> {
    return captureSandbox({ instance: this.instance, host: this.host, templates: this.templates, snapshots: this.snapshots }, sandboxId, dir, opts);
  }

  // ---- the pool (pool.ts, template-pool.ts) ----

  /** Starts keeping QEMUs ready for creates from `template` (the host agent does for `base` at start). */
  prewarm(template = "base"): Promise<void> {
    return prewarm(this.pool, this.templates, this.host, template);
  }

  /** How many pooled QEMUs wait for a create. */
  get pooledVms(): number {
    return this.pool.ready;
  }

  // ---- snapshots and template pins (snapshot-catalog.ts) ----

  /**
   * Takes a snapshot of a sandbox into the snapshot store. The sandbox keeps running,
   * or with `keepRunning: false` stays paused (a warm hibernate).
   */
  snapshot(sandboxId: string, opts: TakeSnapshotOptions = {}): Promise<SnapshotInfo> {
    return this.snapshots.take(sandboxId, opts);
  }

  /** Whether a complete (not deleted) local snapshot with this id exists. */
  hasSnapshot(id: string): boolean {
    return this.snapshots.has(id);
  }

  getSnapshot(id: string): Promise<SnapshotInfo> {
    return this.snapshots.get(id);
  }

  listSnapshots(): Promise<SnapshotInfo[]> {
    return this.snapshots.list();
  }

  /** Deletes a snapshot. Its disk stays while sandboxes restored from it still use it. */
  deleteSnapshot(id: string): Promise<void> {
    return this.snapshots.delete(id);
  }

  /**
   * Imports a snapshot directory from elsewhere (another host, a download): verifies
   * every checksum and the host's compatibility before anything is copied in. `owned`:
   * the files were just checked against their checksums by the caller (a download from
   * the store), and the directory is the caller's to give away, so they are moved in, not
   * copied and hashed again.
   */
  importSnapshot(srcDir: string, opts: { owned?: boolean; absent?: string[] } = {}): Promise<SnapshotInfo> {
    return this.snapshots.import(srcDir, opts);
  }

  /** Verifies a stored snapshot's checksums (after a download, before a wake). */
  verifySnapshot(id: string): Promise<void> {
    return this.snapshots.verify(id);
  }

  /**
   * Keeps a template version alive for something this host cannot see (a snapshot in
   * the store of a cold-hibernated sandbox): `holder` names it, `unpinTemplate` lets go.
   */
  pinTemplate(holder: string, ref: TemplateRef): Promise<void> {
    return this.snapshots.pinTemplate(holder, ref);
  }

  /** Who holds template pins (see `pinTemplate`). */
  pinHolders(): string[] {
    return this.snapshots.pinHolders();
  }

  unpinTemplate(holder: string): Promise<void> {
    return this.snapshots.unpinTemplate(holder);
  }

  /** Removes deleted snapshots and old template versions that nothing references. */
  gc(): Promise<void> {
    return this.snapshots.gc();
  }

  // ---- network ----

  /**
   * Sets a running sandbox's egress policy: `none` (the default: its NIC leads nowhere),
   * `allowlist` or `open`. Takes effect at once; see `network/` for how it is enforced.
   */
  async setNetwork(sandboxId: string, policy: EgressPolicy): Promise<void> {
    await this.networks.set(this.get(sandboxId), policy);
  }

  /** Refused attempts since the sandbox's network came up, or undefined if it has none. */
  async networkRefusals(sandboxId: string): Promise<{ private: number; policy: number; limit: number; dns: number } | undefined> {
    return this.networks.get(sandboxId)?.refused();
  }
}

/** Hooks a sandbox gets: where its template's files are, and the runtime's bookkeeping once it is destroyed. */
function sandboxContext(rt: { host: HostProfile; layout: DataDirLayout; templates: TemplateStore; networks: NetworkManager; sandboxes: SandboxRegistry; gc(): Promise<void> }): SandboxContext {
  return {
    host: rt.host,
    diskBacking: (record) => {
      const chain = rt.templates.diskChain(record.template);
      return record.backingSnapshot ? [join(rt.layout.snapshot(record.backingSnapshot), TEMPLATE_FILES.disk), ...chain] : chain;
    },
    templateMemory: (ref: TemplateRef) => join(rt.templates.dir(ref), TEMPLATE_FILES.memory),
    onDestroyed: async (id: string) => {
      rt.sandboxes.remove(id);
      await rt.networks.release(id);
      await rt.gc();
    },
  };
}
