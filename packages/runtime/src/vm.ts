import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { DenError } from "@den/protocol";
import { ConsoleLog } from "./console-log.js";
import type { HostProfile } from "./host.js";
import { QmpClient } from "./qmp.js";
import { VM_FILES, isAlive, killAndWait, spawnQemu, type VmSpec } from "./qemu.js";
import { sleep } from "./util.js";

/** Migration throughput cap: QEMU's default (128 MiB/s) would stretch every snapshot pause. */
const MIGRATE_BANDWIDTH = 64 * 1024 * 1024 * 1024;

function shellQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

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

  /** Loads a saved state into a VM started with `-incoming defer`; leaves it paused. */
  async loadState(stateFile: string): Promise<void> {
    await this.qmp.execute("migrate-incoming", { uri: `exec:cat ${shellQuote(stateFile)}` });
    for (;;) {
      const st = await this.status();
      if (st !== "inmigrate") {
        if (st !== "paused" && st !== "postmigrate" && st !== "running") throw new DenError("qemu_error", `restore ended in state ${st}`);
        return;
      }
      await sleep(2);
    }
  }

  /** Writes the VM's state to a file. The VM must be stopped (so the disk is quiescent too). */
  async saveState(stateFile: string, opts: { ignoreShared?: boolean } = {}): Promise<void> {
    const ignoreShared = opts.ignoreShared ?? true;
    await this.qmp.execute("migrate-set-parameters", { "max-bandwidth": MIGRATE_BANDWIDTH });
    if (!ignoreShared) await this.setIgnoreShared(false);
    try {
      await this.qmp.execute("migrate", { uri: `exec:cat > ${shellQuote(stateFile)}` });
      for (;;) {
        const m = await this.qmp.execute<{ status?: string; "error-desc"?: string }>("query-migrate");
        if (m.status === "completed") return;
        if (m.status === "failed" || m.status === "cancelled") throw new DenError("qemu_error", `snapshot failed: ${m["error-desc"] ?? m.status}`);
        await sleep(2);
      }
    } finally {
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

  /** Kills the process and waits for it to be gone. */
  async kill(): Promise<void> {
    this.qmp.close();
    this.console.close();
    await killAndWait(this.pid);
  }

  /** Drops the connections without touching the process (it keeps running). */
  detach(): void {
    this.qmp.close();
    this.console.close();
  }
}
