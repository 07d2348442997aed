import { DenError, api, e2bApi, parseInput } from "@den/protocol";
import type { ControlPlane } from "@den/control-plane";
import type { Terms } from "@den/control-plane";
import { volumeMounts } from "@den/control-plane";
import type { CheckpointRow, Principal, SandboxRow } from "@den/control-plane";
import { denStates } from "./mapping.js";
import type { E2bTemplateCatalog } from "./templates/catalog.js";
import { denPolicy, denPolicyUpdate } from "./network.js";
import { denMounts } from "./volumes.js";

/** E2B's default sandbox timeout, in seconds. */
export const DEFAULT_TIMEOUT_SECONDS = 300;

/** A page token: the last row of a page (its created_at and id) and the list's order, opaque to the client. */
const encodeToken = (r: SandboxRow, order: "asc" | "desc") => Buffer.from(JSON.stringify(order === "asc" ? [r.created_at, r.id, "asc"] : [r.created_at, r.id])).toString("base64url");
function decodeToken(t: string, order: "asc" | "desc"): { createdAt: number; id: string } {
  try {
    const [createdAt, id, dir] = JSON.parse(Buffer.from(t, "base64url").toString("utf8")) as [unknown, unknown, unknown];
    if (typeof createdAt === "number" && typeof id === "string" && api.SandboxId.safeParse(id).success) {
      if ((dir ?? "desc") !== order) throw new DenError("invalid_argument", `nextToken belongs to a list in the other order (order=${dir === "asc" ? "asc" : "desc"})`);
      return { createdAt, id };
    }
  } catch (e) {
    if (e instanceof DenError) throw e;
  }
  throw new DenError("invalid_argument", "nextToken is not a token this server gave out");
}

/**
 * The E2B API's operations, onto the control plane's services (nothing here holds state):
 * E2B's timeout is a deadline that counts only while the sandbox runs (`deadline_mode:
 * running`), its pause is a warm hibernate that goes cold on Den's schedule, its snapshot a
 * checkpoint. Sandboxes made here are exempt from the idle reaper (E2B code reads a
 * sandbox that went to sleep on its own as dead).
 */
export class E2bService {
  /** `catalog`: what a template name means here (a tag, a snapshot's name; templates/catalog.ts). */
  constructor(private readonly cp: ControlPlane, private readonly catalog?: E2bTemplateCatalog) {}

  async create(p: Principal, b: e2bApi.NewSandbox): Promise<{ row: SandboxRow; templateId: string }> {
    const timeout = Math.max(1, b.timeout ?? DEFAULT_TIMEOUT_SECONDS);
    const pause = b.autoPause === true;
    if (b.autoResume?.enabled && !pause) throw new DenError("invalid_argument", "autoResume needs autoPause (lifecycle.onTimeout: pause)");
    // Traffic cannot wait out a boot: a disk-only pause is resumed by connect, as E2B has it.
    if (b.autoResume?.enabled && b.autoPauseMemory === false) throw new DenError("invalid_argument", "autoResume cannot be combined with autoPauseMemory: false (a disk-only pause is resumed with connect)");
    // autoPauseMemory: false: the timeout's pause keeps the disk only (a disk hibernate; the resume boots).
    const onDeadline = !pause ? "destroy" : b.autoPauseMemory === false ? "hibernate_disk" : "hibernate";
    const terms: Terms = {
      deadline_mode: "running", on_deadline: onDeadline, run_timeout_seconds: timeout,
      auto_resume: b.autoResume?.enabled ? 1 : 0, surface: "e2b", public_ports: b.network?.allowPublicTraffic === false ? 0 : 1,
    };
    const volumes = denMounts(b.volumeMounts);
    const common = {
      persistent: true, ttl_seconds: timeout,
      ...(b.metadata ? { metadata: b.metadata } : {}),
      network: denPolicy(b.allow_internet_access, b.network),
      ...(volumes ? { volumes } : {}),
    };
    // `name:tag` is the version of the build with that tag; a checkpoint's id or name is a restore.
    const template = this.catalog ? await this.catalog.sandboxTemplate(p, b.templateID) : b.templateID;
    const checkpoint = await this.snapshotNamed(p, template);
    if (checkpoint) {
      if (b.envVars && Object.keys(b.envVars).length) throw new DenError("invalid_argument", "envVars: a sandbox made from a snapshot keeps the environment of the one it was taken from");
      const req = parseInput(api.RestoreCheckpointRequest, common, "request");
      return { row: await this.cp.restoreCheckpoint(p, checkpoint.id, req, terms), templateId: b.templateID };
    }
    const req = parseInput(api.CreateSandboxRequest, { ...common, template, ...(b.envVars ? { env: b.envVars } : {}) }, "request");
    return { row: await this.cp.create(p, req, terms), templateId: b.templateID };
  }

  /** A snapshot (checkpoint) by id, or by the name it was given; undefined if `ref` names neither. */
  private async snapshotNamed(p: Principal, ref: string): Promise<CheckpointRow | undefined> {
    if (api.CheckpointId.safeParse(ref).success) return this.cp.checkpoints.owned(p, ref);
    return (await this.cp.listCheckpoints(p)).filter((c) => c.name === ref).at(-1);
  }

  /**
   * Running: the deadline moves out to `timeout` (never in). Paused: it wakes with a new
   * deadline; `memory: false` (onResume "reboot") boots it from its disk, its memory given up.
   */
  async connect(p: Principal, id: string, b: { timeout?: number | undefined; memory?: boolean | undefined }): Promise<{ row: SandboxRow; resumed: boolean }> {
    const row = await this.live(p, id);
    if (row.state === "hibernated") {
      const timeout = b.timeout ?? row.run_timeout_seconds ?? DEFAULT_TIMEOUT_SECONDS;
      return { row: await (b.memory === false ? this.cp.wakeByBoot(row.id, "user", timeout) : this.cp.wake(row.id, "user", timeout)), resumed: true };
    }
    if (row.state !== "running" && row.state !== "creating") throw new DenError("sandbox_not_found", `sandbox ${id} is ${row.state}`);
    const done = b.timeout !== undefined ? await this.cp.setTimeout(row.id, Math.max(1, b.timeout), { extendOnly: true }) : row;
    return { row: done, resumed: false };
  }

  /** The caller's sandbox as E2B knows it: destroyed, lost or failed ones do not exist. */
  async live(p: Principal, id: string): Promise<SandboxRow> {
    const row = await this.cp.owned(p, id);
    if (row.state === "destroyed" || row.state === "error") throw new DenError("sandbox_not_found", `sandbox ${JSON.stringify(id)} does not exist`);
    return row;
  }

  /** The volumes a sandbox mounts, as E2B lists them (name and path). */
  async volumeMounts(id: string): Promise<e2bApi.SandboxVolumeMount[]> {
    return (await volumeMounts(this.cp.store).mountsOf(id)).map((m) => ({ name: m.name, path: m.path }));
  }

  /** E2B's list: by start time (Den's created_at), newest first unless `order` is `asc`; paged. */
  async list(p: Principal, q: { states?: e2bApi.SandboxState[]; metadata: Record<string, string>; template?: string; startedAfter?: string; limit?: number; nextToken?: string; order?: "asc" | "desc" }): Promise<{ rows: SandboxRow[]; next: string | null }> {
    const order = q.order ?? "desc";
    const limit = Math.min(q.limit ?? e2bApi.PAGE_MAX, e2bApi.PAGE_MAX);
    let since: number | undefined;
    if (q.startedAfter !== undefined) {
      since = Date.parse(q.startedAfter);
      if (!Number.isFinite(since)) throw new DenError("invalid_argument", `startedAfter: not a timestamp: ${JSON.stringify(q.startedAfter.slice(0, 64))}`);
    }
    const rows = await this.cp.store.sandboxes.listNewest(p.owner, {
      states: denStates(q.states), metadata: q.metadata, limit: limit + 1, order,
      ...(q.template ? { template: q.template } : {}), ...(since !== undefined ? { since } : {}),
      ...(q.nextToken ? { cursor: decodeToken(q.nextToken, order) } : {}),
    });
    const page = rows.slice(0, limit);
    return { rows: page, next: rows.length > limit ? encodeToken(page[page.length - 1]!, order) : null };
  }

  /** false: there was no such sandbox (the client's `kill` answers false). */
  async kill(p: Principal, id: string): Promise<boolean> {
    const row = await this.live(p, id).catch((e: unknown) => {
      if (e instanceof DenError && e.code === "sandbox_not_found") return undefined;
      throw e;
    });
    if (!row) return false;
    await this.cp.destroy(row.id, "user");
    return true;
  }

  /** A warm hibernate, or (`memory: false`) a disk one; already paused is a conflict (the client's `pause` answers false). */
  async pause(p: Principal, id: string, memory: boolean | undefined): Promise<void> {
    const row = await this.live(p, id);
    if (row.state === "hibernated") throw new DenError("invalid_state", `sandbox ${id} is already paused`);
    await this.cp.hibernate(row.id, "user", memory === false ? "disk" : "warm");
  }

  async setTimeout(p: Principal, id: string, seconds: number): Promise<void> {
    const row = await this.live(p, id);
    await this.cp.setTimeout(row.id, Math.max(1, seconds));
  }

  async setNetwork(p: Principal, id: string, b: e2bApi.NetworkUpdate): Promise<void> {
    const row = await this.live(p, id);
    await this.cp.network.set(p, row.id, denPolicyUpdate(b));
  }

  async fork(p: Principal, id: string, b: e2bApi.ForkRequest): Promise<SandboxRow[]> {
    const row = await this.live(p, id);
    return this.cp.fork(p, row.id, b.count ?? 1, b.timeout !== undefined ? Math.max(1, b.timeout) : undefined);
  }

  async snapshot(p: Principal, id: string, name: string | undefined): Promise<CheckpointRow> {
    const row = await this.live(p, id);
    // E2B's snapshots and templates share names: one name, one thing to create a sandbox from.
    if (name && (await this.catalog?.taken(name))) throw new DenError("already_exists", `${name} is the name of a template`);
    return this.cp.checkpoint(p, row.id, name);
  }

  async listSnapshots(p: Principal, q: { sandboxId?: string; name?: string; limit?: number; nextToken?: string }): Promise<{ rows: CheckpointRow[]; next: string | null }> {
    const all = (await this.cp.listCheckpoints(p, q.sandboxId)).filter((c) => q.name === undefined || c.name === q.name || c.id === q.name).reverse();
    const limit = Math.min(q.limit ?? e2bApi.PAGE_MAX, e2bApi.PAGE_MAX);
    const start = q.nextToken ? all.findIndex((c) => c.id === q.nextToken) + 1 : 0;
    if (q.nextToken && start === 0) throw new DenError("invalid_argument", "nextToken is not a token this server gave out");
    const page = all.slice(start, start + limit);
    return { rows: page, next: start + limit < all.length ? page[page.length - 1]!.id : null };
  }

  /** `DELETE /templates/{id}`: a snapshot (by id) or one of the caller's templates; false if neither exists. */
  async deleteSnapshotOrTemplate(p: Principal, id: string): Promise<boolean> {
    if (api.CheckpointId.safeParse(id).success) {
      const found = await this.cp.checkpoints.owned(p, id).catch(() => undefined);
      if (!found) return false;
      await this.cp.checkpoints.delete(p, id);
      return true;
    }
    try {
      await this.cp.templates.delete(p, id);
      return true;
    } catch (e) {
      if (e instanceof DenError && e.code === "template_not_found") return false;
      throw e;
    }
  }
}
