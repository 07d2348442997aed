/** The host contract's sub-services over HTTP: each call its route (control-call.ts). */
import type { api, host } from "@den/protocol";
import type { ControlCall } from "./control-call.js";

export class HttpVms implements host.HostVms {
  constructor(private readonly call: ControlCall) {}

  create(op: string, spec: host.HostCreateSpec): Promise<host.HostSandboxInfo> {
    return this.call("create", {}, { op, spec });
  }

  restore(op: string, id: string, snapshot: host.StoredRef, network?: api.NetworkPolicy, volumes?: host.VolumeSpec[]): Promise<host.HostSandboxInfo> {
    return this.call("restore", { id }, { op, snapshot, ...(network ? { network } : {}), ...(volumes?.length ? { volumes } : {}) });
  }

  async checkCreate(spec: Omit<host.HostCreateSpec, "id">): Promise<void> {
    await this.call("checkCreate", {}, { spec });
  }

  async checkShape(shape: host.Shape): Promise<void> {
    await this.call("checkShape", {}, { shape });
  }

  async destroy(id: string): Promise<void> {
    await this.call("destroy", { id });
  }

  async hibernateWarm(op: string, id: string, snapshotId: string): Promise<void> {
    await this.call("hibernateWarm", { id }, { op, snapshotId });
  }

  upload(op: string, id: string, to: host.StoredRef, fromWarm?: string): Promise<{ storedBytes: number; heldVolumes?: string[]; digests?: host.StoredDigests }> {
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

  checkpoint(op: string, id: string, to: host.StoredRef): Promise<{ pauseMs: number; storedBytes: number; digests?: host.StoredDigests }> {
    return this.call("checkpoint", { id }, { op, to });
  }

  async fork(op: string, id: string, children: string[], network?: api.NetworkPolicy, volumes?: host.VolumeSpec[]): Promise<host.HostSandboxInfo[]> {
    return (await this.call("fork", { id }, { op, children, ...(network ? { network } : {}), ...(volumes?.length ? { volumes } : {}) })).children;
  }

  async resume(id: string): Promise<void> {
    await this.call("resume", { id });
  }

  async setNetwork(id: string, policy: api.NetworkPolicy): Promise<void> {
    await this.call("setNetwork", { id }, { policy });
  }

  async networkRefusals(id: string): Promise<host.Refusals | undefined> {
    return (await this.call("networkRefusals", { id })).refused ?? undefined;
  }
}

export class HttpVolumes implements host.HostVolumes {
  constructor(private readonly call: ControlCall) {}

  async create(op: string, id: string, sizeMb: number): Promise<void> {
    await this.call("createVolume", {}, { op, id, sizeMb });
  }

  async delete(id: string): Promise<void> {
    await this.call("deleteVolume", { id });
  }

  async grow(op: string, id: string, sizeMb: number, helper: string): Promise<void> {
    await this.call("growVolume", { id }, { op, sizeMb, helper });
  }

  park(op: string, id: string, to: host.StoredRef): Promise<{ storedBytes: number; digests?: host.StoredDigests }> {
    return this.call("parkVolume", { id }, { op, to });
  }

  async fetch(op: string, id: string, from: host.StoredRef): Promise<void> {
    await this.call("fetchVolume", { id }, { op, from });
  }

  async images(): Promise<host.VolumeImage[]> {
    return (await this.call("volumeImages", {})).images;
  }

  async dropImage(id: string, inode: number): Promise<boolean> {
    return (await this.call("dropVolumeImage", { id }, { inode })).dropped;
  }
}

export class HttpTemplates implements host.HostTemplates {
  constructor(private readonly call: ControlCall) {}

  async list(): Promise<host.HostTemplate[]> {
    return (await this.call("templates", {})).templates;
  }

  async delete(name: string): Promise<void> {
    await this.call("deleteTemplate", { name });
  }

  publish(op: string, name: string, version: string, key: string): Promise<{ storedBytes: number; digests?: host.StoredDigests }> {
    return this.call("publishTemplate", { name, version }, { op, key });
  }

  async fetch(op: string, name: string, version: string, key: string, current: boolean, digests?: host.StoredDigests): Promise<void> {
    await this.call("fetchTemplate", { name, version }, { op, key, current, ...(digests ? { digests } : {}) });
  }

  build(op: string, spec: host.TemplateBuildSpec): Promise<host.BuiltTemplate> {
    return this.call("buildTemplate", {}, { op, spec });
  }

  buildLog(op: string, from: number): Promise<host.BuildLogPage> {
    return this.call("buildLog", { op }, { from });
  }

  async cancelBuild(op: string): Promise<void> {
    await this.call("cancelBuild", { op });
  }
}

export class HttpSnapshots implements host.HostSnapshots {
  constructor(private readonly call: ControlCall) {}

  async dropLocal(snapshotId: string): Promise<void> {
    await this.call("dropLocalSnapshot", { snapshotId });
  }

  async unpin(snapshotId: string): Promise<void> {
    await this.call("unpin", { snapshotId });
  }

  async collect(snapshots: string[], pins: host.TemplatePin[]): Promise<void> {
    await this.call("collectLocal", {}, { snapshots, pins });
  }
}
