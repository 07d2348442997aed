/**
 * The in-memory host's test controls: scripted exec answers, servers on guest ports, the
 * host's death, revival and restart, a VM's death, a guest's CPU load, refused
 * connections, and the views a test reads (a sandbox, a volume's files, local snapshots).
 * Scripts and listeners are the test's, not the host's: its state file does not keep them.
 */
import { DenError, type GuestExecOptions, type ProcInfo, type api, type host } from "@den/protocol";
import type { CallFrame } from "./host-frame.js";
import type { HostState, MemoryVmState, Shape } from "./host-state.js";
import { MemoryFs, type Filesystem } from "./memory-fs.js";
import type { PortHandler, ScriptReply } from "./memory-guest.js";
import type { TemplateRef } from "./memory-templates.js";

/** A scripted exec answer: a reply, or a function of the command (undefined: the mini shell runs it). */
export type ScriptAnswer = ScriptReply | ((command: string, opts: GuestExecOptions, sandbox: string) => ScriptReply | undefined | Promise<ScriptReply | undefined>);

/** A sandbox as a test sees it (`sandbox(id)`). */
export interface MemorySandboxView {
  id: string;
  state: MemoryVmState;
  template: TemplateRef;
  shape: Shape;
  volumes: host.VolumeSpec[];
  network: api.NetworkPolicy | undefined;
  /** Its files, volumes mounted (read or write them directly). */
  fs: MemoryFs;
  processes: ProcInfo[];
  cpuSeconds: number | undefined;
}

export class TestControls {
  private readonly scripts: Array<{ match: string | RegExp; answer: ScriptAnswer }> = [];
  private readonly listeners = new Map<string, Map<number, PortHandler>>();

  /** `forget`: what else a restart makes the host forget (template builds in flight). */
  constructor(private readonly state: HostState, private readonly frame: CallFrame, private readonly forget: () => void) {}

  // ---- scripts and listeners ----

  script(match: string | RegExp, answer: ScriptAnswer): () => void {
    const entry = { match, answer };
    this.scripts.push(entry);
    return () => {
      const i = this.scripts.indexOf(entry);
      if (i >= 0) this.scripts.splice(i, 1);
    };
  }

  /** The reply of the latest script that matches and answers `command`, if any. */
  async scripted(command: string, opts: GuestExecOptions, sandbox: string): Promise<ScriptReply | undefined> {
    // The latest script first: a test narrows what an earlier one said.
    for (const s of [...this.scripts].reverse()) {
      if (typeof s.match === "string" ? !command.includes(s.match) : !s.match.test(command)) continue;
      const reply = typeof s.answer === "function" ? await s.answer(command, opts, sandbox) : s.answer;
      if (reply) return reply;
    }
    return undefined;
  }

  listen(id: string, port: number, handler: PortHandler): () => void {
    const ports = this.listeners.get(id) ?? new Map<number, PortHandler>();
    ports.set(port, handler);
    this.listeners.set(id, ports);
    return () => {
      if (this.listeners.get(id)?.get(port) === handler) this.listeners.get(id)!.delete(port);
    };
  }

  listener(id: string, port: number): PortHandler | undefined {
    return this.listeners.get(id)?.get(port);
  }

  ports(id: string): number[] {
    return [...(this.listeners.get(id)?.keys() ?? [])].sort((a, b) => a - b);
  }

  /** Its servers stop (a fresh boot of its VM). */
  dropListeners(id: string): void {
    this.listeners.delete(id);
  }

  /** A fork's child listens where its parent did (its processes are copies). */
  copyListeners(from: string, to: string): void {
    const ports = this.listeners.get(from);
    if (ports) this.listeners.set(to, new Map(ports));
  }

  // ---- the host and its VMs ----

  die(): void {
    if (this.frame.dead) return;
    this.frame.dead = true;
    this.frame.cut(`the host agent ${this.state.instance} is unreachable (ECONNRESET)`);
    this.state.change(() => {
      const boxes = [...this.state.boxes.values()];
      this.state.boxes.clear();
      for (const s of boxes) {
        s.destroyed = true;
        s.guest.lose(new DenError("agent_unavailable", "agent connection closed"));
      }
    });
    this.listeners.clear();
    this.forget();
  }

  revive(): void {
    this.frame.dead = false;
  }

  restart(): void {
    this.frame.cut("the host agent restarted (ECONNRESET)");
    this.forget();
  }

  killVm(id: string): void {
    const s = this.state.get(id);
    if (s.state === "off") throw new DenError("invalid_state", `sandbox ${id} has no VM to kill`);
    this.state.change(() => {
      this.state.setState(s, "stopped");
      s.guest.lose(new DenError("agent_unavailable", "agent connection closed"));
    });
  }

  setCpuLoad(id: string, share: number): void {
    const s = this.state.get(id);
    this.state.change(() => {
      this.state.setState(s, s.state);
      s.cpu.share = share;
    });
  }

  refuse(id: string, kind: keyof host.Refusals = "policy", count = 1): void {
    const s = this.state.get(id);
    if (!s.network) throw new DenError("invalid_state", `sandbox ${id} has no network`);
    this.state.change(() => void (s.refused[kind] += count));
  }

  // ---- views ----

  sandbox(id: string): MemorySandboxView | undefined {
    const s = this.state.boxes.get(id);
    return s && {
      id: s.id, state: s.state, template: s.template, shape: s.shape, volumes: s.volumes, network: s.network, fs: s.fs,
      processes: s.guest.running(), cpuSeconds: this.state.cpuOf(s),
    };
  }

  sandboxes(): MemorySandboxView[] {
    return [...this.state.boxes.keys()].map((id) => this.sandbox(id)!);
  }

  volume(id: string): MemoryFs | undefined {
    if (!this.state.vols.has(id)) return undefined;
    const fs: Filesystem = this.state.vols.get(id).fs;
    return new MemoryFs(fs, () => this.state.clock.now());
  }

  localSnapshots(): string[] {
    return [...this.state.warm.keys()];
  }
}
