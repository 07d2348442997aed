/** One control call of `/host/v1` by its route's name: its path filled, its deadline, its answer checked. */
import type { z } from "zod";
import { DenError, host } from "@den/protocol";
import type { HostHttp } from "./fetch.js";

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
export const TIMEOUTS: Record<keyof Routes, number> = {
  info: 30 * SECOND, inventory: 30 * SECOND, volumeImages: 30 * SECOND, networkRefusals: 30 * SECOND, capacity: 30 * SECOND, cpuSeconds: 30 * SECOND,
  templates: 30 * SECOND, checkCreate: 30 * SECOND, checkShape: 30 * SECOND, resume: MINUTE, setNetwork: MINUTE,
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

/** Calls route `name` with its path's `params` and its body; the answer as its schema reads it. */
export type ControlCall = <K extends keyof Routes>(name: K, params: Record<string, string>, body?: BodyOf<K>) => Promise<ResponseOf<K>>;

export function controlCall(http: HostHttp): ControlCall {
  return (name, params, body) => {
    const r: host.ControlRoutes[typeof name] = host.control[name];
    const path = r.path.replace(/:(\w+)/g, (_m, p: string) => {
      const v = params[p];
      if (v === undefined) throw new DenError("internal", `host call ${String(name)}: no ${p}`);
      // Checked here too: URL resolution would quietly turn ".." into another route.
      if (!host.HostId.safeParse(v).success) throw new DenError("invalid_argument", `host call ${String(name)}: ${p} ${JSON.stringify(v.slice(0, 200))} is not an id`);
      return encodeURIComponent(v);
    });
    return http.json(r.method, path, r.response, { ...(body !== undefined ? { json: body } : {}), timeoutMs: TIMEOUTS[name] }) as Promise<ResponseOf<typeof name>>;
  };
}
