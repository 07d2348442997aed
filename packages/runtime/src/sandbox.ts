import { readFileSync } from "node:fs";
import { rm } from "node:fs/promises";
import { hasExited } from "./qemu.js";
import type { Duplex } from "node:stream";
import { DenError, type GuestMetrics, type NetSetup, type ListeningPort } from "@den/protocol";
import type { AgentClient } from "./agent-client.js";
import { bootedFromDisk, stopKeepingDisk } from "./disk-hibernation.js";
import { ExecProcess, execBody, runToCompletion, startExec, type Command, type ExecOptions, type ExecResult } from "./exec.js";
import { GuestFiles } from "./files.js";
import { guestProcesses } from "./guest-processes.js";
import { CpuMeter, readMetrics } from "./metrics.js";
import { SandboxCore } from "./sandbox-core.js";
import { growDisk, growVolume } from "./sandbox-growth.js";
import type { SandboxContext, SandboxRecord, SandboxState } from "./sandbox-record.js";
import { SandboxSnapshots, type SnapshotOptions, type SnapshotResult } from "./sandbox-snapshot.js";
import { flushVolumes, settleVolumes } from "./sandbox-volumes.js";
import { listPorts, openTunnel, type TunnelOptions } from "./tunnel.js";
import type { Vm } from "./vm.js";
import type { VolumeAttachment } from "./volumes.js";

export { writeRecord, type SandboxContext, type SandboxRecord, type SandboxState } from "./sandbox-record.js";
export type { SnapshotOptions, SnapshotResult } from "./sandbox-snapshot.js";

/** USER_HZ: Linux reports process times in 1/100 s on every architecture Den runs on. */
const CLOCK_TICKS = 100;

/**
 * The controller of one sandbox VM. Lifecycle operations (pause, resume, snapshot,
 * destroy) run one at a time through a queue; exec and file calls run concurrently with
 * each other and wait while a snapshot holds the agent channel. A face: its state is a
 * SandboxCore, and its jobs are modules of their own (snapshots, volumes, growth, disk
 * hibernation, the agent link).
 */
export class Sandbox {
  private readonly core: SandboxCore;
  private readonly snapshots: SandboxSnapshots;
  /** Agent connections dropped because the guest broke the protocol (a hostile or broken guest). */
  agentProtocolErrors = 0;
  lastAgentError: string | undefined;
  readonly files: GuestFiles;
  /** The previous CPU reading: each metrics() is the busy share since then. */
  private readonly cpu = new CpuMeter();

  constructor(
    readonly dir: string,
    record: SandboxRecord,
    vm: Vm | undefined,
    ctx: SandboxContext,
  ) {
    this.core = new SandboxCore(dir, record, vm, ctx, (message) => {
      this.agentProtocolErrors++;
      this.lastAgentError = message;
    });
    this.snapshots = new SandboxSnapshots(this.core);
    this.files = new GuestFiles(() => this.agent());
  }

  get id(): string {
    return this.core.id;
  }

  get state(): SandboxState {
    return this.core.record.state;
  }

  get info(): Readonly<SandboxRecord> {
    return this.core.record;
  }

  get pid(): number | undefined {
    return this.core.vm?.pid;
  }

  /** Host CPU seconds the VM's QEMU process has used (guest work plus emulation). */
  cpuSeconds(): number | undefined {
    const pid = this.core.vm?.pid;
    if (!pid) return undefined;
    try {
      const fields = readFileSync(`/proc/${pid}/stat`, "latin1").replace(/^.*\) /, "").split(" ");
      // utime and stime are fields 14 and 15 of /proc/pid/stat; 12 and 13 after "pid (comm) ".
      return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
    } catch {
      return undefined;
    }
  }

  /** Whether the VM's QEMU process still runs (a zombie's has exited). */
  vmAlive(): boolean {
    const pid = this.core.vm?.pid;
    return pid !== undefined && !hasExited(pid);
  }

  /** The agent connection, (re)established on demand. */
  agent(): Promise<AgentClient> {
    return this.core.agent();
  }

  /**
   * Opens the agent connection of a new VM; `afterConnect` (resuming a restore) runs once the
   * socket is up. `restored`: a VM that just started from a snapshot or booted gets its clock,
   * entropy and limits, sent right behind the hello.
   */
  connectAgent(afterConnect?: () => Promise<void>, timeoutMs?: number, restored = false): Promise<AgentClient> {
    return this.core.connectAgent(afterConnect, timeoutMs, restored);
  }

  /**
   * Configures the guest's NIC through its agent (no program run in the guest); false if the
   * agent predates `net.setup` (a template baked by an older Den), and the caller runs `ip`.
   */
  async setupNetwork(cfg: NetSetup): Promise<boolean> {
    try {
      await (await this.agent()).request("net.setup", cfg);
      return true;
    } catch (e) {
      if (e instanceof DenError && e.code === "unknown_op") return false;
      throw e;
    }
  }

  /** Runs a command to completion and returns its output and exit status. */
  async exec(command: Command, opts: ExecOptions = {}): Promise<ExecResult> {
    execBody(command, opts, "stream");
    return runToCompletion(await this.agent(), command, opts);
  }

  /** Starts a command whose output streams back (async-iterate it), with stdin and PTY control. */
  async execStream(command: Command, opts: ExecOptions = {}): Promise<ExecProcess> {
    execBody(command, opts, "stream");
    return ExecProcess.start(await this.agent(), command, opts);
  }

  /** Starts a background process; its output is kept in ring buffers in the guest. */
  async spawn(command: Command, opts: ExecOptions & { bufferBytes?: number } = {}): Promise<{ proc: number; pid: number }> {
    const body = execBody(command, opts, "buffer");
    if (opts.bufferBytes) body.buffer_bytes = opts.bufferBytes;
    if (opts.interactive) body.stdin = true;
    const res = await startExec(await this.agent(), body);
    return { proc: Number(res.proc), pid: Number(res.pid) };
  }

  readonly processes = guestProcesses(() => this.agent());

  /**
   * Opens a TCP connection to `port` on the guest's loopback, carried by the agent: it
   * reaches servers inside the sandbox even when the sandbox has no network.
   */
  async tunnel(port: number, opts: TunnelOptions = {}): Promise<Duplex> {
    return openTunnel(await this.agent(), port, opts);
  }

  /** CPU (busy since the previous call, or since boot), memory and disk, as the guest sees them. */
  async metrics(): Promise<GuestMetrics> {
    return readMetrics(await this.agent(), this.cpu);
  }

  /** The TCP ports listening inside the guest, with the process holding each when known. */
  async listeningPorts(): Promise<ListeningPort[]> {
    return listPorts(await this.agent());
  }

  /** Freezes the VM in place (vCPUs stopped, memory kept). */
  pause(): Promise<void> {
    const core = this.core;
    return core.lifecycle.run(async () => {
      core.assertUsable();
      if (core.record.state === "paused") return;
      // No frame may be half-read by the guest while it is frozen: a snapshot of the
      // paused VM would restore with it. A wedged agent must not block the pause, though.
      const agent = await core.link.current();
      if (agent && !agent.closed) {
        await agent.quiesce(5_000).catch(() => undefined);
      }
      await core.requireVm().stop();
      await core.setState("paused");
    });
  }

  resume(): Promise<void> {
    const core = this.core;
    return core.lifecycle.run(async () => {
      core.assertUsable();
      if (core.record.state === "running") return;
      const vm = core.requireVm();
      // The clock goes out with the cont, not after it: the guest reads it as soon as it
      // runs, so a wake costs one round trip to the guest instead of two.
      const agent = await core.link.current();
      agent?.unhold();
      const clock = agent && !agent.closed ? core.syncRequests(agent, false) : undefined;
      clock?.catch(() => undefined);
      await vm.cont();
      await core.setState("running");
      try {
        await (clock ?? core.syncClock());
      } catch (e) {
        // A guest that does not take its clock (a wedged agent) stays paused: the wake
        // failed, and the record must not say otherwise.
        await vm.stop();
        await core.setState("paused");
        throw e;
      }
    });
  }

  /** Writes a snapshot of the running VM into `dir`; see `SandboxSnapshots.take`. */
  snapshot(dir: string, opts: SnapshotOptions & { releaseVolumes?: boolean } = { id: "" }): Promise<SnapshotResult> {
    return this.snapshots.take(dir, opts);
  }

  /**
   * Stops a snapshot in progress (it fails, leaving nothing; the VM stays as it was): a
   * wake or destroy need not wait for a warm hibernation's local snapshot.
   */
  cancelSnapshot(): Promise<void> {
    return this.snapshots.cancel();
  }

  /**
   * After a start: lets go of a snapshot's stale mounts (their media was not put back), and
   * mounts `mount`, the volumes just put in their slots.
   */
  settleVolumes(mount: VolumeAttachment[]): Promise<void> {
    return settleVolumes(this.core, mount);
  }

  /**
   * Shuts the VM down keeping its disk overlay (a disk hibernation): the guest flushes its
   * filesystems, the vCPUs stop, and only then QEMU quits. Its memory is gone; a paused VM
   * runs again just long enough to flush. `Runtime.bootFromDisk` boots it again.
   */
  stopKeepingDisk(): Promise<void> {
    return stopKeepingDisk(this.core);
  }

  /**
   * Takes a VM just booted from this sandbox's own disk (by the runtime) and waits for its
   * agent; the sandbox runs again with a fresh memory. A failure kills that VM and leaves
   * the sandbox stopped, disk untouched.
   */
  bootedFromDisk(vm: Vm, timeoutMs: number): Promise<void> {
    return bootedFromDisk(this.core, vm, timeoutMs);
  }

  /** Stops the VM and removes everything it owned on the host. Idempotent. */
  async destroy(): Promise<void> {
    const core = this.core;
    await flushVolumes(core);
    // A lifecycle step waiting on a wedged guest fails now instead of at its deadline.
    void core.link.close();
    return core.lifecycle.run(async () => {
      if (core.record.state === "destroyed") return;
      await core.link.close();
      await core.vm?.kill();
      core.record = { ...core.record, state: "destroyed" };
      await rm(this.dir, { recursive: true, force: true });
      await core.ctx.onDestroyed(this.id);
    });
  }

  /** Drops host connections without stopping the VM (runtime shutdown). */
  detach(): void {
    void this.core.link.close();
    this.core.vm?.detach();
  }

  /**
   * Grows the virtual disk to `diskMb` and the guest's root filesystem with it (online
   * ext4 resize). The guest learns the new size from virtio's config-change interrupt.
   */
  growDisk(diskMb: number): Promise<void> {
    return growDisk(this.core, diskMb);
  }

  /** Grows a volume this VM mounts read-write to `sizeMb` (online, in the guest). */
  growVolume(volume: string, sizeMb: number): Promise<void> {
    return growVolume(this.core, volume, sizeMb);
  }

  async setState(state: SandboxState): Promise<void> {
    await this.core.setState(state);
  }
}
