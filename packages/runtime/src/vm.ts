import { createReadStream, createWriteStream, readlinkSync } from "node:fs";
import { chown, readFile, rm } from "node:fs/promises";
import net from "node:net";
import { join, relative } from "node:path";
import { pipeline } from "node:stream/promises";
import { DenError } from "@den/protocol";
import { ConsoleLog } from "./console-log.js";
import type { HostProfile } from "./host.js";
import { QmpClient } from "./qmp.js";
import { VM_FILES, isAlive, killAndWait, processTags, spawnQemu, type VmSpec } from "./qemu.js";
import { vmIdentity } from "./jail/identity.js";
import { hostCgroups } from "./jail/host.js";
import { cpuCeiling } from "./jail/cgroups.js";
import { connectUnixRetry } from "./qmp.js";
import { sleep } from "./util.js";
import { keepChangedPages, type PageFilterStats } from "./migration-stream.js";

/** Migration throughput cap: QEMU's default (128 MiB/s) would stretch every snapshot pause. */
const MIGRATE_BANDWIDTH = 64 * 1024 * 1024 * 1024;

/** One QEMU process: its QMP connection and console log. Knows nothing of the guest agent. */
export class Vm {
  private constructor(
    readonly dir: string,
    readonly pid: number,
    readonly qmp: QmpClient,
    private readonly console: ConsoleLog,
  ) {}

  static async launch(spec: VmSpec, host: HostProfile): Promise<Vm> {
    const pid = spawnQemu(spec, host);
    try {
      hostCgroups()?.place(spec.tag.instance, spec.tag.sandbox, pid, { vcpus: spec.vcpus, memoryMb: spec.memoryMb, cpuMax: cpuCeiling(spec.vcpus) });
      return await Vm.attach(spec.dir, pid);
    } catch (e) {
      await killAndWait(pid);
      const log = await readFile(join(spec.dir, VM_FILES.log), "utf8").then((t) => t.slice(-2000), () => "");
      throw new DenError("qemu_error", `QEMU failed to start: ${(e as Error).message}${log ? `\n${log}` : ""}`);
    }
  }

  /** Connects to a QEMU that is already running (just launched, or adopted after a restart). */
  static async attach(dir: string, pid: number): Promise<Vm> {
    const qmp = await QmpClient.connect(join(dir, VM_FILES.qmp));
    const console = await ConsoleLog.attach(join(dir, VM_FILES.console), join(dir, VM_FILES.consoleLog));
    const vm = new Vm(dir, pid, qmp, console);
    await vm.setIgnoreShared(true);
    return vm;
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
   * Where QEMU sees a migration socket of ours: in its jail, under the path its chroot
   * makes of it (QEMU may neither fork nor exec, so states move over unix sockets that
   * Den reads and writes; a VM of an older Den, not chrooted, sees the host's path).
   */
  private migrationSocket(name: string): { host: string; qemu: string } {
    let root = "/";
    try {
      root = readlinkSync(`/proc/${this.pid}/root`);
    } catch {
      // gone: the migration fails on its own
    }
    const host = join(root === "/" ? this.dir : root, name);
    return { host, qemu: root === "/" ? host : `/${relative(root, host)}` };
  }

  /** Loads a saved state into a VM started with `-incoming defer`; leaves it paused. */
  async loadState(stateFile: string): Promise<void> {
    const sock = this.migrationSocket("migrate-in.sock");
    await rm(sock.host, { force: true });
    // QEMU listens; we connect and pour the file in.
    await this.qmp.execute("migrate-incoming", { uri: `unix:${sock.qemu}` });
    const conn = await connectUnixRetry(sock.host, 10_000, (why) => new DenError("qemu_error", `restore: QEMU's migration socket did not open: ${why}`));
    const fed = pipeline(createReadStream(stateFile), conn).catch((e: unknown) => e);
    try {
      for (;;) {
        const st = await this.status();
        if (st !== "inmigrate") {
          if (st !== "paused" && st !== "postmigrate" && st !== "running") throw new DenError("qemu_error", `restore ended in state ${st}`);
          return;
        }
        await sleep(2);
      }
    } finally {
      conn.destroy();
      await fed;
      await rm(sock.host, { force: true });
    }
  }

  /**
   * Writes the VM's state to a file. The VM must be stopped (so the disk is quiescent too).
   * `changedAgainst`: a RAM file the state will be loaded over (its template's): the state
   * leaves out every page that equals that file's (migration-stream.ts).
   */
  async saveState(stateFile: string, opts: { ignoreShared?: boolean; changedAgainst?: string } = {}): Promise<void> {
    const ignoreShared = opts.ignoreShared ?? true;
    await this.qmp.execute("migrate-set-parameters", { "max-bandwidth": MIGRATE_BANDWIDTH });
    if (!ignoreShared) await this.setIgnoreShared(false);
    // We listen; QEMU connects and writes its state, which goes to the file until it closes.
    const sock = this.migrationSocket("migrate-out.sock");
    await rm(sock.host, { force: true });
    const server = net.createServer();
    let written: Promise<void> | undefined;
    const accepted = new Promise<void>((resolve) => server.once("connection", (c) => {
      const base = opts.changedAgainst;
      const stats: PageFilterStats = { pages: 0, kept: 0, passedThrough: false, bytesIn: 0, bytesOut: 0 };
      written = base
        ? pipeline(c, (source: AsyncIterable<Buffer>) => keepChangedPages(source, base, stats), createWriteStream(stateFile))
        : pipeline(c, createWriteStream(stateFile));
      resolve();
    }));
    await new Promise<void>((resolve, reject) => server.once("error", reject).listen(sock.host, () => resolve()));
    try {
      // QEMU connects after dropping to the VM's uid: the socket must be that uid's to write.
      const id = vmIdentity(...this.tag());
      await chown(sock.host, id.uid, id.gid);
      await this.qmp.execute("migrate", { uri: `unix:${sock.qemu}` });
      for (;;) {
        const m = await this.qmp.execute<{ status?: string; "error-desc"?: string }>("query-migrate");
        if (m.status === "completed") break;
        if (m.status === "failed" || m.status === "cancelled") throw new DenError("qemu_error", `snapshot failed: ${m["error-desc"] ?? m.status}`);
        await sleep(2);
      }
      await accepted;
      await written;
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
    while (isAlive(this.pid) && Date.now() < deadline) await sleep(10);
    await this.kill();
  }

  /** Kills the process and waits for it to be gone; its cgroup goes with it. */
  async kill(): Promise<void> {
    const tag = processTags(this.pid);
    this.qmp.close();
    this.console.close();
    await killAndWait(this.pid);
    if (tag) hostCgroups()?.remove(tag.instance, tag.sandbox);
  }

  /** The instance and sandbox ids this QEMU was started for (its uid derives from them). */
  private tag(): [string, string] {
    const t = processTags(this.pid);
    if (!t) throw new DenError("qemu_error", `process ${this.pid} is not a Den QEMU`);
    return [t.instance, t.sandbox];
  }

  /** Drops the connections without touching the process (it keeps running). */
  detach(): void {
    this.qmp.close();
    this.console.close();
  }
}
