import type { z } from "zod";
import { DenError, host, type HostAgent, type HostCreateSpec, type HostGuest, type HostInventory, type HostSandboxInfo, type StoredRef, type TemplateBuildSpec, type TransferEvent, type VolumeImage, type api } from "@den/protocol";
import { HostHttp } from "./fetch.js";
import { HttpGuest } from "./guest-client.js";

type Routes = host.ControlRoutes;
type BodyOf<K extends keyof Routes> = Routes[K] extends { body: infer B extends z.ZodType } ? z.input<B> : undefined;
type ResponseOf<K extends keyof Routes> = z.infer<Routes[K]["response"]>;

const SECOND = 1000;
const MINUTE = 60 * SECOND;
/**
 * How long each call may take. Small calls answer at once; a create may bake a size
 * variant first (a boot); transfers move a VM's memory and disk through the store, and a
 * template build runs setup commands, so those get long deadlines rather than none.
 */
const TIMEOUTS: Record<keyof Routes, number> = {
  info: 30 * SECOND, inventory: 30 * SECOND, volumeImages: 30 * SECOND, capacity: 30 * SECOND, cpuSeconds: 30 * SECOND, networkRefusals: 30 * SECOND,
  templates: 30 * SECOND, checkCreate: 30 * SECOND, checkCapacity: 30 * SECOND, resume: MINUTE, setNetwork: MINUTE,
  destroy: 2 * MINUTE, dropLocalSnapshot: MINUTE, unpin: MINUTE, collectLocal: 5 * MINUTE, deleteTemplate: 5 * MINUTE,
  create: 15 * MINUTE, hibernateWarm: 10 * MINUTE, wakeWarm: 10 * MINUTE, hibernateDisk: 10 * MINUTE, wakeDisk: 10 * MINUTE,
  upload: 60 * MINUTE, restore: 60 * MINUTE, checkpoint: 60 * MINUTE, fork: 60 * MINUTE, buildTemplate: 3 * 60 * MINUTE,
  publishTemplate: 60 * MINUTE, fetchTemplate: 60 * MINUTE, buildLog: 30 * SECOND, cancelBuild: 30 * SECOND,
  // A volume's image is made on a sparse file (seconds); a grow boots a helper VM.
  createVolume: 5 * MINUTE, deleteVolume: 2 * MINUTE, dropVolumeImage: 2 * MINUTE, growVolume: 15 * MINUTE,
  // A volume moving between hosts goes through the store whole (up to its size).
  parkVolume: 60 * MINUTE, fetchVolume: 60 * MINUTE,
  // What the host is still doing for an operation: as long as the longest of them.
  settled: 3 * 60 * MINUTE,
};

/** Reconnect delays of the event stream, and how long it may be silent (the host pings every 10 s). */
const RECONNECT_MS = [500, 1000, 2000, 5000];
const EVENTS_SILENT_MS = 35 * SECOND;

/**
 * A host agent over HTTP (`/host/v1`): every control call of `HostAgent` as its route, with
 * a deadline fitting the call, answers checked against the protocol's schemas and errors
 * turned back into the host's DenErrors; `guest(id)` is an HttpGuest; transfer progress
 * comes from the host's event stream (kept open, reconnecting) into `onTransfer`.
 */
export class HttpHostAgent implements HostAgent {
  onTransfer: ((t: TransferEvent) => void) | undefined;
  private closed = false;
  private events: AbortController | undefined;

  private constructor(private readonly http: HostHttp, readonly instance: string) {}

  get address(): string {
    return this.http.base;
  }

  /** Asks the host who it is (its instance id, its protocol version), then follows its events. */
  static async connect(url: string, secret: string): Promise<HttpHostAgent> {
    const http = new HostHttp(url.replace(/\/+$/, ""), secret);
    const info = await http.json("GET", host.control.info.path, host.HostInfo, { timeoutMs: TIMEOUTS.info });
    if (info.protocol !== host.PROTOCOL_VERSION) throw new DenError("agent_protocol_error", `the host agent at ${url} speaks protocol ${info.protocol}, this control plane ${host.PROTOCOL_VERSION}`);
    const agent = new HttpHostAgent(http, info.instance);
    void agent.follow();
    return agent;
  }

  private async call<K extends keyof Routes>(name: K, params: Record<string, string>, body?: BodyOf<K>): Promise<ResponseOf<K>> {
    const r: host.ControlRoutes[K] = host.control[name];
    const path = r.path.replace(/:(\w+)/g, (_m, p: string) => {
      const v = params[p];
      if (v === undefined) throw new DenError("internal", `host call ${String(name)}: no ${p}`);
      // Checked here too: URL resolution would quietly turn ".." into another route.
      if (!host.HostId.safeParse(v).success) throw new DenError("invalid_argument", `host call ${String(name)}: ${p} ${JSON.stringify(v.slice(0, 200))} is not an id`);
      return encodeURIComponent(v);
    });
    return this.http.json(r.method, path, r.response, { ...(body !== undefined ? { json: body } : {}), timeoutMs: TIMEOUTS[name] }) as Promise<ResponseOf<K>>;
  }

  create(op: string, spec: HostCreateSpec): Promise<HostSandboxInfo> {
    return this.call("create", {}, { op, spec });
  }

  restore(op: string, id: string, snapshot: StoredRef, network?: api.NetworkPolicy, volumes?: host.VolumeSpec[]): Promise<HostSandboxInfo> {
    return this.call("restore", { id }, { op, snapshot, ...(network ? { network } : {}), ...(volumes?.length ? { volumes } : {}) });
  }

  async checkCreate(spec: Omit<HostCreateSpec, "id">): Promise<void> {
    await this.call("checkCreate", {}, { spec });
  }

  async checkCapacity(shape: host.Shape): Promise<void> {
    await this.call("checkCapacity", {}, { shape });
  }

  capacity(): Promise<host.CapacityReport> {
    return this.call("capacity", {});
  }

  async destroy(id: string): Promise<void> {
    await this.call("destroy", { id });
  }

  async hibernateWarm(op: string, id: string, snapshotId: string): Promise<void> {
    await this.call("hibernateWarm", { id }, { op, snapshotId });
  }

  upload(op: string, id: string, to: StoredRef, fromWarm?: string): Promise<{ storedBytes: number; heldVolumes?: string[] }> {
    return this.call("upload", { id }, { op, to, ...(fromWarm ? { fromWarm } : {}) });
  }

  async wakeWarm(op: string, id: string, snapshotId: string | null): Promise<void> {
    await this.call("wakeWarm", { id }, { op, snapshotId });
  }

  async hibernateDisk(op: string, id: string): Promise<void> {
    await this.call("hibernateDisk", { id }, { op });
  }

  async wakeDisk(op: string, id: string): Promise<void> {
    await this.call("wakeDisk", { id }, { op });
  }

  checkpoint(op: string, id: string, to: StoredRef): Promise<{ pauseMs: number; storedBytes: number }> {
    return this.call("checkpoint", { id }, { op, to });
  }

  async fork(op: string, id: string, children: string[], network?: api.NetworkPolicy, volumes?: host.VolumeSpec[]): Promise<HostSandboxInfo[]> {
    return (await this.call("fork", { id }, { op, children, ...(network ? { network } : {}), ...(volumes?.length ? { volumes } : {}) })).children;
  }

  async createVolume(op: string, id: string, sizeMb: number): Promise<void> {
    await this.call("createVolume", {}, { op, id, sizeMb });
  }

  async deleteVolume(id: string): Promise<void> {
    await this.call("deleteVolume", { id });
  }

  async growVolume(op: string, id: string, sizeMb: number, helper: string): Promise<void> {
    await this.call("growVolume", { id }, { op, sizeMb, helper });
  }

  parkVolume(op: string, id: string, to: StoredRef): Promise<{ storedBytes: number }> {
    return this.call("parkVolume", { id }, { op, to });
  }

  async fetchVolume(op: string, id: string, from: StoredRef): Promise<void> {
    await this.call("fetchVolume", { id }, { op, from });
  }

  async volumeImages(): Promise<VolumeImage[]> {
    return (await this.call("volumeImages", {})).images;
  }

  async dropVolumeImage(id: string, inode: number): Promise<boolean> {
    return (await this.call("dropVolumeImage", { id }, { inode })).dropped;
  }

  async dropLocalSnapshot(snapshotId: string): Promise<void> {
    await this.call("dropLocalSnapshot", { snapshotId });
  }

  async unpin(snapshotId: string): Promise<void> {
    await this.call("unpin", { snapshotId });
  }

  async collectLocal(snapshots: string[], pins: host.TemplatePin[]): Promise<void> {
    await this.call("collectLocal", {}, { snapshots, pins });
  }

  async settled(op: string): Promise<void> {
    await this.call("settled", { op });
  }

  inventory(): Promise<HostInventory> {
    return this.call("inventory", {});
  }

  async resume(id: string): Promise<void> {
    await this.call("resume", { id });
  }

  async cpuSeconds(id: string): Promise<number | undefined> {
    return (await this.call("cpuSeconds", { id })).cpuSeconds ?? undefined;
  }

  async setNetwork(id: string, policy: api.NetworkPolicy): Promise<void> {
    await this.call("setNetwork", { id }, { policy });
  }

  async networkRefusals(id: string): Promise<host.Refusals | undefined> {
    return (await this.call("networkRefusals", { id })).refused ?? undefined;
  }

  guest(id: string): HostGuest {
    return new HttpGuest(this.http, id);
  }

  async templates(): Promise<host.HostTemplate[]> {
    return (await this.call("templates", {})).templates;
  }

  async deleteTemplate(name: string): Promise<void> {
    await this.call("deleteTemplate", { name });
  }

  publishTemplate(op: string, name: string, version: string, key: string): Promise<{ storedBytes: number }> {
    return this.call("publishTemplate", { name, version }, { op, key });
  }

  async fetchTemplate(op: string, name: string, version: string, key: string, current: boolean): Promise<void> {
    await this.call("fetchTemplate", { name, version }, { op, key, current });
  }

  buildTemplate(op: string, spec: TemplateBuildSpec): Promise<host.BuiltTemplate> {
    return this.call("buildTemplate", {}, { op, spec });
  }

  buildLog(op: string, from: number): Promise<host.BuildLogPage> {
    return this.call("buildLog", { op }, { from });
  }

  async cancelBuild(op: string): Promise<void> {
    await this.call("cancelBuild", { op });
  }

  /** Follows `GET /host/v1/events` until closed, reconnecting after a drop (progress reports lost meanwhile are only progress). */
  private async follow(): Promise<void> {
    for (let attempt = 0; !this.closed; attempt++) {
      const ac = new AbortController();
      this.events = ac;
      let watchdog: NodeJS.Timeout | undefined;
      const alive = () => {
        clearTimeout(watchdog);
        watchdog = setTimeout(() => ac.abort(), EVENTS_SILENT_MS).unref();
      };
      try {
        alive();
        const res = await this.http.request("GET", "/host/v1/events", { signal: ac.signal });
        attempt = 0;
        let rest = "";
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
          alive();
          rest += Buffer.from(chunk).toString("utf8");
          // A line longer than any event is not one: drop it rather than grow.
          if (rest.length > 1024 * 1024) rest = "";
          let nl: number;
          while ((nl = rest.indexOf("\n")) >= 0) {
            const line = rest.slice(0, nl);
            rest = rest.slice(nl + 1);
            this.dispatch(line);
          }
        }
      } catch {
        // dropped, refused or aborted: try again below unless closed
      } finally {
        clearTimeout(watchdog);
      }
      if (this.closed) return;
      await new Promise((r) => setTimeout(r, RECONNECT_MS[Math.min(attempt, RECONNECT_MS.length - 1)]).unref());
    }
  }

  private dispatch(line: string): void {
    if (!line.trim()) return;
    try {
      const e = host.HostEvent.parse(JSON.parse(line));
      if (e.type === "transfer") this.onTransfer?.(e.transfer);
    } catch {
      // a line off the protocol: skip it
    }
  }

  close(): void {
    this.closed = true;
    this.events?.abort();
  }
}
