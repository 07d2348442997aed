import { randomBytes } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { copyFile, mkdir, readFile, rename, rm, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Duplex } from "node:stream";
import { DenError, type GuestMetrics, type NetSetup, type ListeningPort, type ProcInfo, type ProcReadReply, type ProcWaitReply } from "@den/protocol";
import { AgentClient } from "./agent-client.js";
import { ExecProcess, execBody, runToCompletion, startExec, type Command, type ExecOptions, type ExecResult } from "./exec.js";
import { GuestFiles } from "./files.js";
import { CpuMeter, readMetrics } from "./metrics.js";
import { VM_FILES } from "./qemu.js";
import { digestFiles, hostSection, writeManifest, type FileDigest, type SnapshotManifest, type TemplateRef } from "./snapshot.js";
import { listPorts, openTunnel, type TunnelOptions } from "./tunnel.js";
import { SerialQueue, runTool } from "./util.js";
import type { StateSink, Vm } from "./vm.js";
import { changedPages, copyChangedPages } from "./pagemap.js";
import type { PageFilterStats } from "./migration-stream.js";
import type { HostProfile } from "./host.js";
import { SLOT_BYTES, detachStale, mountVolumes, releaseVolumes, snapshotVolumes, type SnapshotVolume, type VolumeAttachment } from "./volumes.js";

/** `stopped`: its VM is shut down and its disk overlay kept (a disk hibernation); it boots again from that disk. */
export type SandboxState = "starting" | "running" | "paused" | "stopped" | "destroyed";

/** USER_HZ: Linux reports process times in 1/100 s on every architecture Den runs on. */
const CLOCK_TICKS = 100;
/** How long the guest may take to flush its filesystems before a disk hibernation gives up. */
const SYNC_TIMEOUT_MS = 60_000;
/** How long a destroy waits for the guest to flush its read-write volumes. */
const VOLUME_FLUSH_MS = 30_000;
/** A cold-booted sandbox's RAM file in its directory. */
const RAM_FILE = "memory.bin";

/** What is persisted in `sandbox.json`, so a restarted runtime can find the sandbox again. */
export interface SandboxRecord {
  id: string;
  instance: string;
  state: SandboxState;
  createdAt: string;
  template: TemplateRef;
  /** The snapshot whose disk this sandbox's overlay sits on (absent: the template's disk). */
  backingSnapshot?: string;
  /** Cold-booted: guest RAM is `memory.bin` in the sandbox dir (shared), not a CoW map of the template's. */
  ramFile?: boolean;
  vcpus: number;
  memoryMb: number;
  diskMb: number;
  pidsMax: number;
  /** Volumes in this VM's slots (volumes.ts), mounted by its guest. */
  volumes?: VolumeAttachment[];
  /** Mounts its guest kept from a snapshot whose media was not put back: their slots stay empty. */
  staleVolumes?: SnapshotVolume[];
}

export interface SnapshotOptions {
  id: string;
  keepRunning?: boolean;
  ignoreShared?: boolean;
  stateSink?: StateSink;
  ramFile?: string;
  /**
   * Called once the snapshot's disk is in `dir` and its state file exists (still empty),
   * before the state is saved into it: a fork starts its children's QEMUs meanwhile. Their
   * disks may overlay the snapshot's once `diskReady` resolves (a rebase may still be under way).
   */
  beforeSave?: (dir: string, diskReady: Promise<void>) => void;
  /** An internal snapshot (a fork's, gone once its children run): its state is not hashed. */
  unhashed?: boolean;
}

export interface SnapshotResult {
  dir: string;
  manifest: SnapshotManifest;
}

/** Hooks the runtime gives a sandbox: where things live, and what to do on destroy. */
export interface SandboxContext {
  host: HostProfile;
  templateDisk(ref: TemplateRef): string;
  /** The template's RAM file, which a sandbox's saved stream is restored over. */
  templateMemory(ref: TemplateRef): string;
  onDestroyed(id: string): Promise<void>;
}

/**
 * The controller of one sandbox VM. Lifecycle operations (pause, resume, snapshot,
 * destroy) run one at a time through a queue; exec and file calls run concurrently with
 * each other and wait while a snapshot holds the agent channel.
 */
export class Sandbox {
  private lifecycle = new SerialQueue();
  /** The snapshot in progress, if one is: its VM, and whether a cancel was asked of it. */
  private snapshotting: { vm: Vm; cancelled: boolean } | undefined;
  private agentConn: Promise<AgentClient> | undefined;
  /** Agent connections dropped because the guest broke the protocol (a hostile or broken guest). */
  agentProtocolErrors = 0;
  lastAgentError: string | undefined;
  readonly files: GuestFiles;
  /** The previous CPU reading: each metrics() is the busy share since then. */
  private readonly cpu = new CpuMeter();

  constructor(
    readonly dir: string,
    private record: SandboxRecord,
    private vm: Vm | undefined,
    private readonly ctx: SandboxContext,
  ) {
    this.files = new GuestFiles(() => this.agent());
  }

  get id(): string {
    return this.record.id;
  }

  get state(): SandboxState {
    return this.record.state;
  }

  get info(): Readonly<SandboxRecord> {
    return this.record;
  }

  get pid(): number | undefined {
    return this.vm?.pid;
  }

  /** Host CPU seconds the VM's QEMU process has used (guest work plus emulation). */
  cpuSeconds(): number | undefined {
    const pid = this.vm?.pid;
    if (!pid) return undefined;
    try {
      const fields = readFileSync(`/proc/${pid}/stat`, "latin1").replace(/^.*\) /, "").split(" ");
      // utime and stime are fields 14 and 15 of /proc/pid/stat; 12 and 13 after "pid (comm) ".
      return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
    } catch {
      return undefined;
    }
  }

  /** Whether the VM's QEMU process still exists. */
  vmAlive(): boolean {
    const pid = this.vm?.pid;
    return pid !== undefined && existsSync(`/proc/${pid}`);
  }

  /** The agent connection, (re)established on demand. */
  agent(): Promise<AgentClient> {
    this.assertUsable();
    if (this.record.state === "paused") return Promise.reject(new DenError("sandbox_not_running", `sandbox ${this.id} is paused; resume it first`));
    if (this.record.state === "stopped") return Promise.reject(new DenError("sandbox_not_running", `sandbox ${this.id} is shut down (its disk is kept); boot it first`));
    const existing = this.agentConn;
    if (existing) {
      return existing.then((a) => (a.closed ? this.reconnect() : a), () => this.reconnect());
    }
    return this.reconnect();
  }

  /**
   * Opens the agent connection of a new VM; `afterConnect` (resuming a restore) runs once the
   * socket is up. `restored`: a VM that just started from a snapshot or booted gets its clock,
   * entropy and limits, sent right behind the hello.
   */
  connectAgent(afterConnect?: () => Promise<void>, timeoutMs?: number, restored = false): Promise<AgentClient> {
    return this.reconnect(afterConnect, timeoutMs, restored ? (a) => this.syncRequests(a, true) : undefined);
  }

  private reconnect(afterConnect?: () => Promise<void>, timeoutMs?: number, first?: (a: AgentClient) => Promise<unknown>): Promise<AgentClient> {
    const conn = AgentClient.connect(join(this.dir, VM_FILES.agent), timeoutMs, afterConnect, first).catch(async (e: unknown) => {
      if (!(e instanceof DenError) || e.code !== "agent_unavailable") throw e;
      // What the guest printed last is the best clue to why its agent is silent.
      const tail = await readFile(join(this.dir, VM_FILES.consoleLog), "latin1").then((t) => t.slice(-600), () => "");
      throw new DenError("agent_unavailable", `sandbox ${this.id}: ${e.message}${tail ? `; console: ${JSON.stringify(tail)}` : ""}`);
    });
    this.agentConn = conn;
    const noteError = (e: unknown) => {
      if (e instanceof DenError && e.code === "agent_protocol_error") {
        this.agentProtocolErrors++;
        this.lastAgentError = e.message;
      }
    };
    conn.then((a) => a.onClose(noteError), (e: unknown) => {
      noteError(e);
      if (this.agentConn === conn) this.agentConn = undefined;
    });
    return conn;
  }

  private assertUsable(): void {
    if (this.record.state === "destroyed") throw new DenError("sandbox_destroyed", `sandbox ${this.id} has been destroyed`);
  }

  /** Runs a command to completion and returns its output and exit status. */
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

  readonly processes = {
    list: async (): Promise<ProcInfo[]> => (await (await this.agent()).request("proc.list", {})).procs,
    read: async (proc: number, channel: "stdout" | "stderr", offset = 0, max = 256 * 1024): Promise<ProcReadReply> =>
      (await this.agent()).request("proc.read", { proc, channel: channel === "stdout" ? 1 : 2, offset, max }),
    wait: async (proc: number, timeoutMs = 0): Promise<ProcWaitReply> => {
      if (!(timeoutMs >= 0)) throw new DenError("invalid_argument", "timeout must be >= 0");
      return (await this.agent()).request("proc.wait", { proc, timeout_ms: timeoutMs });
    },
    write: async (proc: number, data: Buffer | string, eof = false): Promise<void> => {
      await (await this.agent()).request("proc.stdin", { proc, data: Buffer.from(data).toString("base64"), eof });
    },
    signal: async (proc: number, signal: number): Promise<void> => {
      await (await this.agent()).request("proc.signal", { proc, signal });
    },
    kill: async (proc: number): Promise<void> => {
      await (await this.agent()).request("proc.kill", { proc });
    },
  };

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
    return this.lifecycle.run(async () => {
      this.assertUsable();
      if (this.record.state === "paused") return;
      // No frame may be half-read by the guest while it is frozen: a snapshot of the
      // paused VM would restore with it. A wedged agent must not block the pause, though.
      const agent = await this.agentConn?.catch(() => undefined);
      if (agent && !agent.closed) {
        await agent.quiesce(5_000).catch(() => undefined);
      }
      await this.requireVm().stop();
      await this.setState("paused");
    });
  }

  resume(): Promise<void> {
    return this.lifecycle.run(async () => {
      this.assertUsable();
      if (this.record.state === "running") return;
      const vm = this.requireVm();
      // The clock goes out with the cont, not after it: the guest reads it as soon as it
      // runs, so a wake costs one round trip to the guest instead of two.
      const agent = await this.agentConn?.catch(() => undefined);
      agent?.unhold();
      const clock = agent && !agent.closed ? this.syncRequests(agent, false) : undefined;
      clock?.catch(() => undefined);
      await vm.cont();
      await this.setState("running");
      try {
        await (clock ?? this.syncClock());
      } catch (e) {
        // A guest that does not take its clock (a wedged agent) stays paused: the wake
        // failed, and the record must not say otherwise.
        await vm.stop();
        await this.setState("paused");
        throw e;
      }
    });
  }

  /**
   * Writes a snapshot of the running VM into `dir`: the VM is paused only while its
   * memory and disk overlay are copied; hashing and the manifest come after it resumes.
   * `ramFile`: the guest's RAM is written to that file instead (its template's RAM with the
   * pages it changed over it, which the kernel names), and the state carries no page of it:
   * a fork's children map the file and share every page none of them writes. Where the
   * kernel cannot say (a VM whose RAM is not its template's), the snapshot is as without it.
   */
  snapshot(dir: string, opts: SnapshotOptions & { releaseVolumes?: boolean } = { id: "" }): Promise<SnapshotResult> {
    return this.lifecycle.run(async () => {
      this.assertUsable();
      const vm = this.requireVm();
      // A hibernation lets go of the volumes it can, so others may use them meanwhile (a wake mounts them again).
      const released = opts.releaseVolumes ? await this.releaseVolumes(vm) : [];
      try {
        this.snapshotting = { vm, cancelled: false };
        return await this.snapshotNow(dir, vm, opts, released);
      } catch (e) {
        await this.remount(vm, released).catch(() => undefined);
        throw e;
      } finally {
        this.snapshotting = undefined;
      }
    });
  }

  /**
   * Stops a snapshot in progress (it fails, leaving nothing; the VM stays as it was): a
   * wake or destroy need not wait for a warm hibernation's local snapshot.
   */
  async cancelSnapshot(): Promise<void> {
    if (!this.snapshotting) return;
    // Before QEMU's migration has begun a migrate_cancel does nothing: the flag stops it there.
    this.snapshotting.cancelled = true;
    await this.snapshotting.vm.qmp.execute("migrate_cancel").catch(() => undefined);
  }

  private async snapshotNow(dir: string, vm: Vm, opts: SnapshotOptions, released: VolumeAttachment[]): Promise<SnapshotResult> {
    const wasRunning = this.record.state === "running";
    await mkdir(dir, { recursive: true });
    const agent = wasRunning ? await this.agent() : undefined;
    await agent?.quiesce();
    const t0 = performance.now();
    let pauseMs = 0;
    let changedOnly = false;
    let stateDigest: FileDigest | undefined;
    const filtered: PageFilterStats = { pages: 0, kept: 0, passedThrough: false, bytesIn: 0, bytesOut: 0 };
    const base = this.ctx.templateMemory(this.record.template);
    const bytes = this.record.memoryMb * 1024 * 1024;
    let asFile = false;
    // The template's part of the RAM file is copied before the pause (it never changes).
    const ramFile = opts.ramFile && !this.record.ramFile ? opts.ramFile : undefined;
    if (ramFile) await runTool("cp", ["--sparse=always", "--", base, ramFile]);
    try {
      if (wasRunning) await vm.stop();
      else if ((await vm.status()) === "postmigrate") {
        // QEMU will not migrate a VM a previous migration paused: let it take one breath.
        await vm.cont();
        await vm.stop();
      }
      // A stream is restored over its template's RAM: it need carry only the pages that differ
      // (not for a stream a helper loads into an empty RAM file: `ignoreShared: false`).
      changedOnly = !this.record.ramFile && opts.ignoreShared !== false && process.env.DEN_SNAPSHOT_ALL_PAGES !== "1";
      // Which pages it wrote, from the kernel, while it is stopped (undefined: compare instead).
      let changed = changedOnly || ramFile ? await changedPages(vm.pid, base, bytes) : undefined;
      if (ramFile && changed && (await copyChangedPages(vm.pid, base, bytes, changed, ramFile)) !== undefined) {
        // Every page is in the file: the stream keeps none of them.
        asFile = true;
        changedOnly = true;
        changed = new Uint8Array(changed.length);
      }
      // Before the state, for a fork whose children start their QEMUs while it is saved: the
      // disk (the stop flushed it, and nothing writes it until the VM runs again) and the
      // state's file (empty yet: a child opens it at its spawn and reads it once it is whole).
      let diskReady: Promise<void> | undefined;
      if (opts.beforeSave) {
        await copyFile(join(this.dir, VM_FILES.disk), join(dir, "disk.qcow2"));
        await writeFile(join(dir, "state.bin"), "");
        diskReady = this.rebaseOnTemplate(dir);
        diskReady.catch(() => undefined);
        opts.beforeSave(dir, diskReady);
      }
      // (With a sink, the state is the sink's: the manifest names it, the directory has no copy.)
      stateDigest = await vm.saveState(opts.stateSink ?? join(dir, "state.bin"), {
        cancelled: () => this.snapshotting?.cancelled === true,
        ...(opts.unhashed ? { unhashed: true } : {}),
        ignoreShared: this.record.ramFile ? true : opts.ignoreShared,
        ...(changedOnly ? { changedAgainst: base, stats: filtered } : {}),
        ...(changed ? { changed: { pages: changed, ramBytes: bytes } } : {}),
      });
      if (diskReady) await diskReady;
      else await copyFile(join(this.dir, VM_FILES.disk), join(dir, "disk.qcow2"));
      // Shared RAM is skipped by the migration (x-ignore-shared): it is the file itself.
      if (this.record.ramFile) await copyFile(join(this.dir, RAM_FILE), join(dir, "memory.bin"));
      // (Not hashed: such a snapshot is internal, gone once the children run.)
      if (asFile) await symlink(ramFile!, join(dir, "memory.bin"));
    } catch (e) {
      if (ramFile) await rm(ramFile, { force: true });
      throw e;
    } finally {
      if (ramFile && !asFile) await rm(ramFile, { force: true });
      if (wasRunning && opts.keepRunning !== false) {
        await vm.cont();
        pauseMs = performance.now() - t0;
        agent?.unhold();
        // Not waited for: the agent takes requests in order, so whatever is asked of the guest
        // next runs after its clock is set; a fork's children need not wait a round trip for it.
        void this.syncClock().catch(() => undefined);
      } else {
        pauseMs = performance.now() - t0;
        if (wasRunning) await this.setState("paused");
      }
    }
    if (!opts.beforeSave) await this.rebaseOnTemplate(dir);
    const manifest: SnapshotManifest = {
      format: 1,
      kind: "sandbox",
      id: opts.id,
      createdAt: new Date().toISOString(),
      template: this.record.template,
      memory: this.record.ramFile || asFile ? "file" : "stream",
      ...(changedOnly && !asFile ? { changedPagesOnly: true, pages: { total: filtered.pages, kept: filtered.kept } } : {}),
      host: hostSection(this.ctx.host),
      vm: { vcpus: this.record.vcpus, memoryMb: this.record.memoryMb, diskMb: this.record.diskMb },
      pauseMs: Math.round(pauseMs * 10) / 10,
      sourceSandbox: this.id,
      ...this.mountsToRecord(released),
      files: { "state.bin": stateDigest!, ...(await digestFiles(dir, this.record.ramFile ? ["disk.qcow2", "memory.bin"] : ["disk.qcow2"])) },
    };
    await writeManifest(dir, manifest);
    return { dir, manifest };
  }

  /** Keeps every snapshot's disk one level above the template's, so chains stay short. */
  private async rebaseOnTemplate(dir: string): Promise<void> {
    if (!this.record.backingSnapshot) return;
    await runTool("qemu-img", ["rebase", "-q", "-f", "qcow2", "-b", this.ctx.templateDisk(this.record.template), "-F", "qcow2", join(dir, "disk.qcow2")], "qemu_error");
  }

  /** The manifest's `volumes`: what the guest still has mounted once `released` are not. */
  private mountsToRecord(released: VolumeAttachment[]): Pick<SnapshotManifest, "volumes"> {
    const mounted = (this.record.volumes ?? []).filter((v) => !released.includes(v));
    const all = snapshotVolumes(mounted, this.record.staleVolumes ?? []);
    return all.length ? { volumes: all } : {};
  }

  /** Releases the guest's volumes (a paused VM runs for it a moment); returns those it let go of. */
  private async releaseVolumes(vm: Vm): Promise<VolumeAttachment[]> {
    const volumes = this.record.volumes ?? [];
    if (!volumes.length) return [];
    return this.whileRunning(vm, (agent) => releaseVolumes(agent, volumes));
  }

  /** After a failed hibernation: the guest gets back the volumes it released. */
  private async remount(vm: Vm, released: VolumeAttachment[]): Promise<void> {
    if (released.length) await this.whileRunning(vm, (agent) => mountVolumes(agent, released));
  }

  /** Runs `fn` with the agent, letting a paused VM run for it and pausing it again after. */
  private async whileRunning<T>(vm: Vm, fn: (agent: AgentClient) => Promise<T>): Promise<T> {
    if (this.record.state === "running") return fn(await this.agent());
    await vm.cont();
    await this.setState("running");
    try {
      const agent = await this.agent();
      agent.unhold();
      const r = await fn(agent);
      await agent.quiesce(5_000).catch(() => undefined);
      return r;
    } finally {
      await vm.stop();
      await this.setState("paused");
    }
  }

  /**
   * After a start: lets go of a snapshot's stale mounts (their media was not put back), and
   * mounts `mount`, the volumes just put in their slots.
   */
  async settleVolumes(mount: VolumeAttachment[]): Promise<void> {
    const stale = this.record.staleVolumes ?? [];
    if (!mount.length && !stale.length) return;
    const agent = await this.agent();
    const kept = await detachStale(agent, stale);
    await mountVolumes(agent, mount);
    const { staleVolumes: _, ...rest } = this.record;
    this.record = { ...rest, ...(kept.length ? { staleVolumes: kept } : {}) };
    await writeRecord(this.dir, this.record);
  }

  /**
   * Shuts the VM down keeping its disk overlay (a disk hibernation): the guest flushes its
   * filesystems, the vCPUs stop, and only then QEMU quits. Its memory is gone; a paused VM
   * runs again just long enough to flush. `Runtime.bootFromDisk` boots it again.
   */
  stopKeepingDisk(): Promise<void> {
    return this.lifecycle.run(async () => {
      this.assertUsable();
      if (this.record.state === "stopped") return;
      const vm = this.requireVm();
      const wasPaused = this.record.state === "paused";
      if (wasPaused) {
        await vm.cont();
        await this.setState("running");
        (await this.agentConn?.catch(() => undefined))?.unhold();
      }
      try {
        // Volumes unmounted cleanly (a reader of a read-only one cannot replay a journal).
        await releaseVolumes(await this.agent(), this.record.volumes ?? []);
        // A guest flush reaches QEMU's qcow2 caches too: after it the overlay holds every write.
        const r = await runToCompletion(await this.agent(), ["/bin/sync"], { timeoutMs: SYNC_TIMEOUT_MS });
        if (r.exitCode !== 0 || r.timedOut) throw new DenError("io_error", `sandbox ${this.id}: the guest could not flush its disk (${r.timedOut ? "timed out" : `exit ${r.exitCode}`})`);
        await vm.stop();
      } catch (e) {
        // Nothing changed: it stays as it was (a pause again for one that was paused).
        if (wasPaused) await vm.stop().then(() => this.setState("paused"), () => undefined);
        throw e;
      }
      // Its disk is whole now: a crash from here on finds a stopped sandbox.
      await this.toStopped(vm, (v) => v.quit());
    });
  }

  /**
   * Records it stopped first (a crash then never finds a running record without a VM),
   * then lets its VM go with `end`, and its RAM (a boot makes a new one).
   */
  private async toStopped(vm: Vm, end: (vm: Vm) => Promise<void>): Promise<void> {
    await this.setState("stopped");
    await this.agentConn?.then((a) => a.close(), () => undefined);
    this.agentConn = undefined;
    this.vm = undefined;
    await end(vm);
    await rm(join(this.dir, RAM_FILE), { force: true });
  }

  /**
   * Takes a VM just booted from this sandbox's own disk (by the runtime) and waits for its
   * agent; the sandbox runs again with a fresh memory. A failure kills that VM and leaves
   * the sandbox stopped, disk untouched.
   */
  bootedFromDisk(vm: Vm, timeoutMs: number): Promise<void> {
    return this.lifecycle.run(async () => {
      this.assertUsable();
      if (this.record.state !== "stopped") throw new DenError("invalid_state", `sandbox ${this.id} is ${this.record.state}, not shut down`);
      this.vm = vm;
      try {
        const agent = await this.connectAgent(undefined, timeoutMs, true);
        // A new kernel: nothing is mounted, nothing stale.
        await mountVolumes(agent, this.record.volumes ?? []);
        const { staleVolumes: _, ...rest } = this.record;
        // Its RAM is now a file in its directory, as a cold boot's: its snapshots carry it.
        this.record = { ...rest, ramFile: true };
        await this.setState("running");
      } catch (e) {
        await this.toStopped(vm, (v) => v.kill());
        throw e;
      }
    });
  }

  /** Stops the VM and removes everything it owned on the host. Idempotent. */
  async destroy(): Promise<void> {
    await this.flushVolumes();
    // A lifecycle step waiting on a wedged guest fails now instead of at its deadline.
    void this.agentConn?.then((a) => a.close(), () => undefined);
    return this.lifecycle.run(async () => {
      if (this.record.state === "destroyed") return;
      await this.agentConn?.then((a) => a.close(), () => undefined);
      await this.vm?.kill();
      this.record = { ...this.record, state: "destroyed" };
      await rm(this.dir, { recursive: true, force: true });
      await this.ctx.onDestroyed(this.id);
    });
  }

  /**
   * Before a destroy: what the guest wrote to its read-write volumes reaches their images
   * (they outlive it), within VOLUME_FLUSH_MS; a guest that does not answer loses what it
   * had not flushed, as a machine losing power would.
   */
  private async flushVolumes(): Promise<void> {
    const rw = (this.record.volumes ?? []).filter((v) => !v.readOnly);
    const vm = this.vm;
    if (!rw.length || !vm || (this.record.state !== "running" && this.record.state !== "paused")) return;
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<void>((resolve) => (timer = setTimeout(resolve, VOLUME_FLUSH_MS)));
    const flush = this.lifecycle.run(() => this.whileRunning(vm, (agent) => releaseVolumes(agent, rw))).catch(() => undefined);
    await Promise.race([flush, deadline]);
    clearTimeout(timer);
  }

  /** Drops host connections without stopping the VM (runtime shutdown). */
  detach(): void {
    void this.agentConn?.then((a) => a.close(), () => undefined);
    this.vm?.detach();
  }

  /** After a resume: the guest's clock stood still while it was stopped, so set it from the host. */
  private async syncClock(): Promise<void> {
    await this.syncRequests(await this.agent(), false);
  }

  /**
   * After a restore or resume: the guest's clock stood still while it was stopped, so
   * set it from the host; after a restore also reseed its RNG (forks must not share
   * random state) and apply the pids limit.
   */
  private async syncRequests(agent: AgentClient, restored: boolean): Promise<void> {
    const tasks: Promise<unknown>[] = [agent.request("sys.clock", { unix_ms: Date.now() })];
    if (restored) {
      tasks.push(agent.request("sys.entropy", { seed: randomBytes(64).toString("base64") }));
      tasks.push(agent.request("sys.limits", { pids_max: this.record.pidsMax }));
    }
    await Promise.all(tasks);
  }

  /**
   * Grows the virtual disk to `diskMb` and the guest's root filesystem with it (online
   * ext4 resize). The guest learns the new size from virtio's config-change interrupt.
   */
  growDisk(diskMb: number): Promise<void> {
    return this.lifecycle.run(async () => {
      const bytes = diskMb * 1024 * 1024;
      await this.requireVm().qmp.execute("block_resize", { device: "root", size: bytes });
      this.record = { ...this.record, diskMb };
      await writeRecord(this.dir, this.record);
      const agent = await this.agent();
      const r = await runToCompletion(agent, ["/bin/sh", "-c",
        `i=0; while [ $(( $(cat /sys/block/vda/size) * 512 )) -lt ${bytes} ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; resize2fs /dev/vda 2>&1`,
      ], { timeoutMs: 120_000 });
      if (r.exitCode !== 0) throw new DenError("io_error", `growing the guest filesystem failed: ${r.stdout.toString().slice(-500)}`);
    });
  }

  /**
   * Grows a volume this VM mounts read-write to `sizeMb`: the guest resizes its ext4 online
   * (the image is a slot's full size already, so only the filesystem grows; nothing of a
   * guest-written image is parsed on the host).
   */
  growVolume(volume: string, sizeMb: number): Promise<void> {
    return this.lifecycle.run(async () => {
      this.assertUsable();
      const v = (this.record.volumes ?? []).find((x) => x.volume === volume);
      if (!v || v.readOnly) throw new DenError("invalid_state", `sandbox ${this.id} has no read-write mount of volume ${volume}`);
      if (!Number.isInteger(sizeMb) || sizeMb < 16 || sizeMb * 1024 * 1024 > SLOT_BYTES) throw new DenError("invalid_argument", `a volume's size must be a whole number of MiB in 16..${SLOT_BYTES / 1024 / 1024}`);
      const agent = await this.agent();
      agent.requireFeature("volumes", "volumes");
      await agent.request("vol.grow", { path: v.path, bytes: sizeMb * 1024 * 1024 });
    });
  }

  async setState(state: SandboxState): Promise<void> {
    this.record = { ...this.record, state };
    await writeRecord(this.dir, this.record);
  }

  private requireVm(): Vm {
    if (!this.vm) throw new DenError("sandbox_not_running", `sandbox ${this.id} has no VM`);
    return this.vm;
  }
}

export async function writeRecord(dir: string, record: SandboxRecord): Promise<void> {
  const tmp = join(dir, ".sandbox.json.tmp");
  await writeFile(tmp, JSON.stringify(record, null, 2) + "\n");
  await rename(tmp, join(dir, "sandbox.json"));
}
