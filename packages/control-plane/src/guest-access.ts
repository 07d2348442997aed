import { DenError, type HostGuest } from "@den/protocol";
import type { Principal, SandboxRow } from "./db/store.js";
import type { Activity } from "./activity.js";
import type { Ctx } from "./context.js";
import type { Reason } from "./operations.js";
import type { OwnerSlots } from "./owner-slots.js";
import type { Serializer } from "./serializer.js";

/** Per-owner bounds on what guest calls hold open (see OwnerSlots). */
export interface GuestSlots {
  bufferedExecs: OwnerSlots;
  streams: OwnerSlots;
  follows: OwnerSlots;
}

/**
 * The way to a sandbox's guest, for every surface that runs commands or moves files in one
 * (/v1 exec, files and PTY, E2B's envd, the port proxy, the code interpreter): the wake
 * policy (a hibernated sandbox is woken first, after any operation on it in flight here),
 * activity, exec events, and the owners' bounds on what they hold open.
 */
export class GuestAccess {
  private readonly unresponsiveAt = new Map<string, number>();

  constructor(
    private readonly ctx: Ctx,
    private readonly queue: Serializer,
    private readonly activity: Activity,
    private readonly wake: (id: string, reason: Reason) => Promise<SandboxRow>,
    private readonly owned: (p: Principal, id: string) => Promise<SandboxRow>,
    readonly slots: GuestSlots,
  ) {}

  /**
   * The guest of a sandbox for exec, file and process calls: a hibernated sandbox is
   * woken first (the call just takes longer); the call counts as activity.
   */
  async reach(id: string): Promise<HostGuest> {
    await this.queue.idle(id);
    let row = (await this.ctx.store.sandboxes.get(id))!;
    if (row.state === "hibernated") row = await this.wake(id, "user");
    if (row.state === "destroyed") throw new DenError("sandbox_destroyed", `sandbox ${id} has been destroyed`);
    if (row.state !== "running") throw new DenError("sandbox_not_running", `sandbox ${id} is ${row.state}`);
    await this.activity.touch(id);
    return this.ctx.hosts.of(row).guest(id);
  }

  /** The caller's sandbox and its guest (woken, touched). */
  async reachOwned(p: Principal, id: string): Promise<{ row: SandboxRow; guest: HostGuest }> {
    const row = await this.owned(p, id);
    return { row, guest: await this.reach(row.id) };
  }

  /** The guest of a sandbox as it is, not woken nor touched (reads of its state: metrics, listening ports). */
  peek(row: SandboxRow): HostGuest {
    return this.ctx.hosts.of(row).guest(row.id);
  }

  /** A call on a sandbox's guest missed its deadline: its events say so (at most one such event a second). */
  async unresponsive(id: string, message: string): Promise<void> {
    const now = this.ctx.clock.now();
    if (now - (this.unresponsiveAt.get(id) ?? 0) < 1000 || !(await this.ctx.store.sandboxes.get(id))) return;
    this.unresponsiveAt.set(id, now);
    if (this.unresponsiveAt.size > 10_000) this.unresponsiveAt.delete(this.unresponsiveAt.keys().next().value!);
    await this.ctx.ops.event(id, "guest.unresponsive", null, { message });
  }

  async recordExec(id: string, type: "exec.started" | "exec.ended", data: Record<string, unknown>): Promise<void> {
    await this.ctx.ops.event(id, type, null, data);
  }
}
