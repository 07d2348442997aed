import { createHash } from "node:crypto";
import { createWriteStream, lstatSync, unlinkSync } from "node:fs";
import { chown, open, readFile, rm } from "node:fs/promises";
import net from "node:net";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import { DenError } from "@den/protocol";
import { ConsoleLog } from "./console-log.js";
import type { HostProfile } from "./host.js";
import { QmpClient } from "./qmp.js";
import { INCOMING_STATE_FD, VM_FILES, hasExited, killAndWait, processTags, spawnQemu, type VmSpec } from "./qemu.js";
import { prepareJail, vmIdentity } from "./jail/identity.js";
import { hostCgroups } from "./jail/host.js";
import { cpuCeiling } from "./jail/cgroups.js";
import { sleep } from "./util.js";
import { keepChangedPages, type PageFilterStats } from "./migration-stream.js";
import { hasNativePageFilter, nativeKeepChangedPages, nativeKeepChangedPagesTo } from "./native.js";
import { UNHASHED, type FileDigest } from "./snapshot.js";

/** Where a saved state goes instead of a file: consumes the whole stream, or fails. */
/**
 * Where a saved state goes as QEMU writes it (the store, compressing it on the way). With
 * `compressed`, the sink also takes it compressed by that command (which reads stdin and
 * writes stdout): the native page filter then runs it, so the raw bytes never pass through Node.
 */
export type StateSink = ((source: AsyncIterable<Buffer>) => Promise<void>) & {
  compressed?: {
    command: string[];
    /** The same compression as a zstd level (the native filter compresses in its own process when it can). */
    zstdLevel?: number;
    put: (source: AsyncIterable<Buffer>) => Promise<void>;
    /** Where the sink is a local file: it hands `write` the descriptor the filter writes into itself. */
    putTo?: (write: (fd: number) => Promise<void>) => Promise<void>;
  };
};

/** A pipeline stage that counts what passes through it, and hashes it when given a hash. */
function digesting(into: { size: number; hash?: ReturnType<typeof createHash> }) {
  return async function* (source: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
    for await (const c of source) {
      into.hash?.update(c);
      into.size += c.length;
      yield c;
    }
  };
}

/** Milliseconds before the n-th poll of a migration: 2 ms while it may be a small one, then up to 20. */
const pollDelay = (n: number) => Math.min(2 + n, 20);

/** Migration throughput cap: QEMU's default (128 MiB/s) would stretch every snapshot pause. */
const MIGRATE_BANDWIDTH = 64 * 1024 * 1024 * 1024;

/** Spawns before a QEMU that keeps failing to open its network socket is an error (see Vm.launch). */
const NIC_ATTEMPTS = 3;

function isSocket(path: string): boolean {
  try {
    return lstatSync(path).isSocket();
  } catch {
    return false;
  }
}

/** Removes a file if it is there (what cannot be removed, QEMU cannot replace either: launch sees that). */
function removeStale(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // not there, or not a file
  }
}

/** One QEMU process: its QMP connection and console log. Knows nothing of the guest agent. */
export class Vm {
  private constructor(
    private where: string,
    readonly pid: number,
    readonly qmp: QmpClient,
    private console: ConsoleLog | undefined,
  ) {}

  /** Its directory (a pooled VM's moves to its sandbox's when claimed). */
  get dir(): string {
    return this.where;
  }

  /** The state file QEMU was given at spawn (loadState of it needs no copy through Den). */
  private incomingState: string | undefined;

  /** `console: false`: the console log is attached later, by `claim` (a pooled VM). */
  static async launch(spec: VmSpec, host: HostProfile, opts: { console?: boolean } = {}): Promise<Vm> {
    const nic = join(spec.dir, VM_FILES.net);
    for (let attempt = 1; ; attempt++) {
      removeStale(nic); // a dead QEMU's socket would pass for this one's
      const vm = await Vm.launchOnce(spec, host, opts);
      // QEMU 7.2 binds a stream netdev's socket in a thread of its own and only then marks
      // the link down. When the thread comes after the chroot and uid change, the bind fails
      // silently and the NIC is left up with no socket: the first packet the guest or a
      // restore's `cont` sends segfaults QEMU (object_get_class(NULL) under
      // qio_channel_writev). Attach's QMP commands have been answered by QEMU's main loop,
      // which runs only once the chroot is done: no socket now means no socket ever.
      if (isSocket(nic)) return vm;
      await vm.kill();
      if (attempt >= NIC_ATTEMPTS) throw new DenError("qemu_error", `QEMU did not open its network socket (${NIC_ATTEMPTS} attempts)`);
      process.emitWarning(`QEMU ${vm.pid} in ${spec.dir} started without its network socket; starting another (attempt ${attempt + 1} of ${NIC_ATTEMPTS})`, "DenRestoreWarning");
    }
  }

  private static async launchOnce(spec: VmSpec, host: HostProfile, opts: { console?: boolean }): Promise<Vm> {
    const pid = spawnQemu(spec, host);
    try {
      // (Synchronous: ~12 ms on cgroup v1, on the event loop. A move off it was reverted for
      // ECONNRESETs that turned out to be QEMU's own crash at a restore's cont, see
      // Launcher.restoreFrom; it could go off the event loop again.)
      hostCgroups()?.place(spec.tag.instance, spec.tag.sandbox, pid, { vcpus: spec.vcpus, memoryMb: spec.memoryMb, cpuMax: cpuCeiling(spec.vcpus) });
      return await Vm.attach(spec.dir, pid, { ...opts, ...(spec.incomingState ? { incomingState: spec.incomingState } : {}) });
    } catch (e) {
      await killAndWait(pid);
      const log = await readFile(join(spec.dir, VM_FILES.log), "utf8").then((t) => t.slice(-2000), () => "");
      throw new DenError("qemu_error", `QEMU failed to start: ${(e as Error).message}${log ? `\n${log}` : ""}`);
    }
  }

  /**
   * Connects to a QEMU that is already running (just launched, or adopted after a restart).
   * `incomingState`: the state file it was spawned with (loadState loads only that one).
   */
  static async attach(dir: string, pid: number, opts: { console?: boolean; incomingState?: string } = {}): Promise<Vm> {
    const qmp = await QmpClient.connect(join(dir, VM_FILES.qmp));
    try {
      const console = opts.console === false ? undefined : await ConsoleLog.attach(join(dir, VM_FILES.console), join(dir, VM_FILES.consoleLog));
      const vm = new Vm(dir, pid, qmp, console);
      vm.incomingState = opts.incomingState;
      await vm.setIgnoreShared(true);
      // No self-announce (gratuitous RARP) after a restore: nothing on a VM's link learns
      // MACs, and QEMU 7.2 queues it during the load and sends it at `cont` into a stream
      // netdev whose socket may not be set up yet (see launch), which segfaults QEMU.
      await qmp.execute("migrate-set-parameters", { "announce-rounds": 0 });
      return vm;
    } catch (e) {
      qmp.close();
      throw e;
    }
  }

  /**
   * A pooled VM's directory has been renamed to its sandbox's (`dir`): its sockets and
   * jail moved with it (QEMU holds them open, and chroot follows the directory); the
   * console log, rotated by path, is attached there.
   */
  async claim(dir: string): Promise<void> {
    this.where = dir;
    this.console ??= await ConsoleLog.attach(join(dir, VM_FILES.console), join(dir, VM_FILES.consoleLog));
  }

  /** With it, RAM in a shared file stays out of saved states: the file is the memory. */
  async setIgnoreShared(on: boolean): Promise<void> {
    await this.qmp.execute("migrate-set-capabilities", { capabilities: [{ capability: "x-ignore-shared", state: on }] });
  }

  async status(): Promise<string> {
    const s = await this.qmp.execute<{ status: string }>("query-status");
    return s.status;
  }

  async stop(): Promise<void> {
    await this.qmp.execute("stop");
  }

  async cont(): Promise<void> {
    await this.qmp.execute("cont");
  }

  /**
   * Where QEMU sees the migration socket Den listens on: in its jail, a dir root owns (see
   * prepareJail), so the path Den creates and chowns cannot be a link QEMU planted. (QEMU may
   * neither fork nor exec: states leave over a unix socket Den reads.)
   */
  private migrationSocket(name: string): { host: string; qemu: string } {
    return { host: join(prepareJail(this.dir), name), qemu: `/${name}` };
  }

  /**
   * Loads a saved state into a VM started with `-incoming defer`; leaves it paused. QEMU
   * reads it from the descriptor it was given at spawn (no byte passes through Den, and QEMU
   * never listens for one: a socket it made would be a path it controls).
   */
  async loadState(stateFile: string): Promise<void> {
    if (stateFile !== this.incomingState) throw new DenError("internal", `restore: QEMU ${this.pid} was started for another state than ${stateFile}`);
    this.incomingState = undefined;
    await this.qmp.execute("migrate-incoming", { uri: `fd:${INCOMING_STATE_FD}` });
    await this.incomingDone();
  }

  /** Waits for an incoming migration to end; anything but a loaded (paused) VM is an error. */
  private async incomingDone(): Promise<void> {
    for (let n = 0; ; n++) {
      const st = await this.status();
      if (st !== "inmigrate") {
        if (st !== "paused" && st !== "postmigrate" && st !== "running") throw new DenError("qemu_error", `restore ended in state ${st}`);
        return;
      }
      await sleep(pollDelay(n));
    }
  }

  /**
   * Writes the VM's state to a file (hashed) or a sink (not hashed: the sink's to do). The VM must be stopped (so the disk is quiescent too).
   * `changedAgainst`: a RAM file the state will be loaded over (its template's): the state
   * leaves out every page that equals that file's (migration-stream.ts).
   */
  async saveState(stateFile: string | StateSink, opts: { ignoreShared?: boolean; changedAgainst?: string; changed?: { pages: Uint8Array; ramBytes: number }; stats?: PageFilterStats; cancelled?: () => boolean; unhashed?: boolean } = {}): Promise<FileDigest> {
    if (opts.cancelled?.()) throw new DenError("invalid_state", "snapshot cancelled");
    const ignoreShared = opts.ignoreShared ?? true;
    await this.qmp.execute("migrate-set-parameters", { "max-bandwidth": MIGRATE_BANDWIDTH });
    if (!ignoreShared) await this.setIgnoreShared(false);
    // We listen; QEMU connects and writes its state, which goes to the file until it closes.
    const sock = this.migrationSocket("migrate-out.sock");
    await rm(sock.host, { force: true });
    // Paused: with the native filter, the stream goes from QEMU to it without Node reading a byte.
    const server = net.createServer({ pauseOnConnect: true });
    // Into a sink (the store), the bytes are hashed there as they are stored, and checked there
    // on every read: a second pass here would hash each byte twice (see UNHASHED).
    // An internal snapshot's (a fork's, gone once its children run) is not hashed at all.
    const digest = { size: 0, ...(typeof stateFile === "string" && !opts.unhashed ? { hash: createHash("sha256") } : {}) };
    let written: Promise<void> | undefined;
    const accepted = new Promise<void>((resolve) => server.once("connection", (c) => {
      const base = opts.changedAgainst;
      const stats: PageFilterStats = opts.stats ?? { pages: 0, kept: 0, passedThrough: false, bytesIn: 0, bytesOut: 0 };
      // Hashed as it is written: the snapshot's manifest needs no second pass over the file.
      // Into a file, or into the caller's sink (a cold hibernate compresses it into the store as it comes).
      const changed = opts.changed;
      const native = base && changed && hasNativePageFilter();
      const packed = native && typeof stateFile !== "string" ? stateFile.compressed : undefined;
      // Unhashed into a file, the filter writes it: not a byte passes through Node.
      const direct = native && typeof stateFile === "string" && !digest.hash ? stateFile : undefined;
      const out = typeof stateFile === "string" ? (direct ? undefined : createWriteStream(stateFile)) : stateFile;
      written = direct
        ? open(direct, "w").then((fh) => nativeKeepChangedPagesTo(fh.fd, c, changed!.pages, changed!.ramBytes, stats).finally(() => fh.close()))
          .then(() => void (digest.size = stats.bytesOut))
        : packed?.putTo
        // Compressed by the filter's own pipeline straight into the store's file.
        ? packed.putTo((fd) => nativeKeepChangedPagesTo(fd, c, changed!.pages, changed!.ramBytes, stats, packed)).then(() => void (digest.size = stats.bytesOut))
        : packed
        // Compressed by the filter's own pipeline: the state's size is what the filter wrote.
        ? packed.put(nativeKeepChangedPages(c, changed!.pages, changed!.ramBytes, stats, packed)).then(() => void (digest.size = stats.bytesOut))
        : native
        ? pipeline(nativeKeepChangedPages(c, changed!.pages, changed!.ramBytes, stats), digesting(digest), out!)
        : base
          ? pipeline(c, (source: AsyncIterable<Buffer>) => keepChangedPages(source, base, stats, "ram", changed?.pages), digesting(digest), out!)
          : pipeline(c, digesting(digest), out!);
      resolve();
    }));
    await new Promise<void>((resolve, reject) => server.once("error", reject).listen(sock.host, () => resolve()));
    try {
      // QEMU connects after dropping to the VM's uid: the socket must be that uid's to write.
      const id = vmIdentity(...this.tag());
      await chown(sock.host, id.uid, id.gid);
      await this.qmp.execute("migrate", { uri: `unix:${sock.qemu}` });
      // The stream's end (QEMU closes the socket) says it is done; the polls only catch a
      // failure meanwhile (each one is a QMP round trip: every 2 ms cost Den ~0.15 s a second).
      const ended = accepted.then(() => written).catch(() => undefined);
      for (let n = 0, cancelling = false; ; n++) {
        // A cancel asked before the migrate began found nothing to cancel: it is sent now.
        if (!cancelling && opts.cancelled?.()) {
          cancelling = true;
          await this.qmp.execute("migrate_cancel").catch(() => undefined);
        }
        const m = await this.qmp.execute<{ status?: string; "error-desc"?: string }>("query-migrate");
        if (m.status === "completed") break;
        if (m.status === "failed" || m.status === "cancelled") throw new DenError("qemu_error", `snapshot failed: ${m["error-desc"] ?? m.status}`);
        // (The stream's end wakes this at once: the polls need not be quick, and each costs Den a QMP round trip.)
        await Promise.race([ended, sleep(n < 5 ? pollDelay(n) : 100)]);
      }
      await accepted;
      await written;
      return { size: digest.size, sha256: digest.hash?.digest("hex") ?? UNHASHED };
    } finally {
      server.close();
      await rm(sock.host, { force: true });
      if (!ignoreShared) await this.setIgnoreShared(true);
    }
  }

  /**
   * Asks QEMU to exit (it flushes and closes its disk image on the way out), and kills it
   * if it has not gone within `timeoutMs`.
   */
  async quit(timeoutMs = 10_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    // The answer may not arrive (QEMU closes the QMP socket as it exits), and a wedged QEMU may never give one.
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.qmp.execute("quit").catch(() => undefined), new Promise((r) => (timer = setTimeout(r, timeoutMs)))]);
    clearTimeout(timer);
    while (!hasExited(this.pid) && Date.now() < deadline) await sleep(10);
    await this.kill();
  }

  /** Kills the process and waits for it to be gone; its cgroup goes with it. */
  async kill(): Promise<void> {
    const tag = processTags(this.pid);
    this.qmp.close();
    this.console?.close();
    await killAndWait(this.pid);
    if (tag) hostCgroups()?.remove(tag.instance, tag.vm);
  }

  /** The instance and VM tags this QEMU was started with (its uid derives from them). */
  private tag(): [string, string] {
    const t = processTags(this.pid);
    if (!t) throw new DenError("qemu_error", `process ${this.pid} is not a Den QEMU`);
    return [t.instance, t.vm];
  }

  /** Drops the connections without touching the process (it keeps running). */
  detach(): void {
    this.qmp.close();
    this.console?.close();
  }
}
