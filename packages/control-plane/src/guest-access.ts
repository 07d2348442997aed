import { DenError, type GuestCommand, type GuestExit, type HostGuest } from "@den/protocol";
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

/** What a call says of the command it runs (anything left out: the sandbox's defaults). */
export interface CommandCall {
  env?: Record<string, string> | undefined;
  cwd?: string | undefined;
  user?: string | undefined;
}

/**
 * How a command runs: its whole env, and its working directory and user when there are any
 * (none: the guest's, root and its home). A sandbox's defaults are one too: its own env (from
 * its create call), its template's working directory and user (an image's WORKDIR and USER).
 */
export interface CommandSetup {
  env: Record<string, string>;
  cwd?: string;
  user?: string;
}

/** The longest command kept in an `exec.started` event: a shell string's first characters, an argv's first arguments (each cut as well). */
const EVENT_CMD_CHARS = 200;
const EVENT_CMD_ARGS = 8;

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
    private readonly wake: (id: string, reason: Reason, timeoutSeconds?: number) => Promise<SandboxRow>,
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

  /** The call counts as activity on the sandbox (idle reaping); cheap to call often. */
  touch(id: string): Promise<void> {
    return this.activity.touch(id);
  }

  /**
   * E2B's pause, for the surfaces that follow it (envd, E2B's port traffic): a hibernated
   * sandbox made with auto_resume wakes for a call, its run timeout starting again, unless
   * the call is a probe (a health check is no traffic) or an operation on it is in flight;
   * any other hibernated sandbox stays paused (`sandbox_not_running`). One not hibernated is
   * returned as it is.
   */
  async autoResume(row: SandboxRow, opts: { probe?: boolean } = {}): Promise<SandboxRow> {
    if (row.state !== "hibernated") return row;
    if (row.auto_resume !== 1 || row.op_id || opts.probe) throw new DenError("sandbox_not_running", `sandbox ${row.id} is paused`);
    return this.wake(row.id, "user", row.run_timeout_seconds ?? undefined);
  }

  /**
   * A sandbox for E2B's envd: auto-resumed as autoResume says, then running with no destroy
   * or hibernate in flight, else `sandbox_not_running` (envd answers it unavailable).
   */
  async open(row: SandboxRow, opts: { probe?: boolean } = {}): Promise<SandboxRow> {
    row = await this.autoResume(row, opts);
    if (row.state !== "running" || (row.op_id && (row.op_kind === "destroy" || row.op_kind === "hibernate"))) {
      throw new DenError("sandbox_not_running", `sandbox ${row.id} is ${row.state === "hibernated" ? "paused" : row.state}`);
    }
    return row;
  }

  /** A sandbox's defaults for its commands (see CommandSetup). */
  commandDefaults(row: SandboxRow): CommandSetup {
    const d = row.defaults ? (JSON.parse(row.defaults) as { cwd?: string; user?: string }) : {};
    return { env: JSON.parse(row.env) as Record<string, string>, ...(d.cwd ? { cwd: d.cwd } : {}), ...(d.user ? { user: d.user } : {}) };
  }

  /**
   * How a command runs, for every surface that runs one (/v1 exec and processes, envd's
   * process Start): the sandbox's env under the call's, the call's working directory else
   * the template's, the call's user. (Which user a call names when it names none is the
   * surface's: /v1 runs as root, envd as the template's user: `commandDefaults(row).user`.)
   */
  command(row: SandboxRow, call: CommandCall): CommandSetup {
    const d = this.commandDefaults(row);
    const cwd = call.cwd ?? d.cwd;
    return { env: { ...d.env, ...(call.env ?? {}) }, ...(cwd ? { cwd } : {}), ...(call.user ? { user: call.user } : {}) };
  }

  /** A command started in a sandbox: its `exec.started` event (the command cut short), with `more` (how it runs: streamed, background, the surface). */
  async execStarted(id: string, cmd: GuestCommand | undefined, more: Record<string, unknown> = {}): Promise<void> {
    const shown = cmd === undefined ? {} : { cmd: typeof cmd === "string" ? cmd.slice(0, EVENT_CMD_CHARS) : cmd.slice(0, EVENT_CMD_ARGS).map((a) => a.slice(0, EVENT_CMD_CHARS)) };
    await this.ctx.ops.event(id, "exec.started", null, { ...shown, ...more });
  }

  /** A command in a sandbox ended: its `exec.ended` event (exit code, signal, whether its timeout killed it), with `more`. */
  async execEnded(id: string, exit: Pick<GuestExit, "exitCode" | "signal" | "timedOut">, more: Record<string, unknown> = {}): Promise<void> {
    await this.ctx.ops.event(id, "exec.ended", null, { exit_code: exit.exitCode, signal: exit.signal, timed_out: exit.timedOut, ...more });
  }
}
