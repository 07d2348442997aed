import { existsSync, readdirSync } from "node:fs";
import { readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import type { DataDirLayout } from "./data-dir.js";
import { hostCgroups } from "./jail/host.js";
import type { NetworkManager } from "./network/manager.js";
import { findInstanceProcesses, killAndWait } from "./qemu.js";
import type { SandboxRegistry } from "./registry.js";
import { Sandbox } from "./sandbox.js";
import { writeRecord, type SandboxContext, type SandboxRecord } from "./sandbox-record.js";
import { DELETED_MARKER } from "./snapshot-catalog.js";
import { privateDir } from "./util.js";
import { Vm } from "./vm.js";

/** What an open needs to take over a data dir a previous runtime left. */
export interface AdoptionScope {
  layout: DataDirLayout;
  sandboxes: SandboxRegistry;
  networks: NetworkManager;
  context: SandboxContext;
  gc(): Promise<void>;
}

/**
 * Finds sandboxes again after a restart: adopts those whose QEMU still runs, keeps disk
 * hibernations, and removes what is left of the others; kills this instance's QEMUs that
 * have no sandbox (the last run's pool among them) and sweeps half-written snapshots and
 * orphaned RAM files.
 */
export async function adoptDataDir({ layout, sandboxes, networks, context, gc }: AdoptionScope): Promise<void> {
  const live = findInstanceProcesses(layout.instance, { pooled: true });
  // Network routers of the last run go first: each VM's NIC takes one router at a time,
  // and the adopted ones get new routers below.
  const routers = [...live].filter(([tag]) => tag.startsWith("net-"));
  for (const [tag] of routers) live.delete(tag);
  await Promise.all(routers.map(([, pid]) => killAndWait(pid)));
  for (const id of readdirSync(layout.sandboxes)) {
    const dir = layout.sandbox(id);
    const pid = live.get(id);
    live.delete(id);
    let record: SandboxRecord | undefined;
    try {
      record = JSON.parse(await readFile(join(dir, "sandbox.json"), "utf8")) as SandboxRecord;
    } catch {
      record = undefined;
    }
    if (record && pid && (record.state === "running" || record.state === "paused")) {
      try {
        const vm = await Vm.attach(dir, pid);
        const status = await vm.status();
        record.state = status === "running" ? "running" : "paused";
        await writeRecord(dir, record);
        const sbx = new Sandbox(dir, record, vm, context);
        sandboxes.add(sbx);
        // Its router died with the old runtime (or was killed below as a stray): a new one.
        await networks.readopt(sbx).catch(() => networks.release(id, dir));
        continue;
      } catch {
        // unreachable QEMU: treat as dead below
      }
    }
    if (record?.state === "stopped") {
      // A disk hibernation: its disk is whole (flushed before the record said so); a QEMU
      // still there is one that was quitting, or booting for a wake that never finished.
      if (pid) await killAndWait(pid);
      await networks.release(id, dir);
      sandboxes.add(new Sandbox(dir, record, undefined, context));
      continue;
    }
    if (pid) await killAndWait(pid);
    await networks.release(id, dir);
    await rm(dir, { recursive: true, force: true });
  }
  // What is left: QEMUs without a sandbox (the last run's pool among them).
  await Promise.all([...live.values()].map((pid) => killAndWait(pid)));
  await rm(layout.pool, { recursive: true, force: true });
  // Their cgroups (and those of VMs killed before): a cgroup still holding a process stays.
  hostCgroups()?.removeEmpty(layout.instance);
  const snaps = layout.snapshots;
  for (const id of readdirSync(snaps)) {
    if (!existsSync(join(snaps, id, "manifest.json"))) await rm(join(snaps, id), { recursive: true, force: true });
  }
  // RAM files of forks: running children keep their mappings; the files outlive no snapshot.
  const ramDir = layout.ramDir;
  if (existsSync(ramDir)) {
    privateDir(ramDir);
    for (const f of readdirSync(ramDir)) {
      const id = f.replace(/\.ram$/, "");
      if (!existsSync(join(snaps, id, "manifest.json")) || existsSync(join(snaps, id, DELETED_MARKER))) await rm(join(ramDir, f), { force: true });
    }
  }
  await gc();
}
