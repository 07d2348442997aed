import { DenError } from "@den/protocol";
import type { AgentClient } from "./agent-client.js";
import { AgentLink, syncGuest } from "./agent-link.js";
import { writeRecord, type SandboxContext, type SandboxRecord, type SandboxState } from "./sandbox-record.js";
import { SerialQueue } from "./util.js";
import type { Vm } from "./vm.js";

/**
 * What one sandbox is, shared by the modules that do its jobs (sandbox.ts is its face):
 * its directory, record and VM, its agent connection, and the queue its lifecycle steps
 * (pause, resume, snapshot, growth, shutdown, destroy) run through one at a time.
 */
export class SandboxCore {
  readonly lifecycle = new SerialQueue();
  readonly link: AgentLink;

  constructor(
    readonly dir: string,
    public record: SandboxRecord,
    public vm: Vm | undefined,
    readonly ctx: SandboxContext,
    onProtocolError: (message: string) => void,
  ) {
    this.link = new AgentLink(dir, record.id, onProtocolError);
  }

  get id(): string {
    return this.record.id;
  }

  assertUsable(): void {
    if (this.record.state === "destroyed") throw new DenError("sandbox_destroyed", `sandbox ${this.id} has been destroyed`);
  }

  requireVm(): Vm {
    if (!this.vm) throw new DenError("sandbox_not_running", `sandbox ${this.id} has no VM`);
    return this.vm;
  }

  /** The agent connection, (re)established on demand; refused while the guest cannot answer. */
  agent(): Promise<AgentClient> {
    this.assertUsable();
    if (this.record.state === "paused") return Promise.reject(new DenError("sandbox_not_running", `sandbox ${this.id} is paused; resume it first`));
    if (this.record.state === "stopped") return Promise.reject(new DenError("sandbox_not_running", `sandbox ${this.id} is shut down (its disk is kept); boot it first`));
    return this.link.get();
  }

  /** Opens the agent connection of a new VM; see `Sandbox.connectAgent`. */
  connectAgent(afterConnect?: () => Promise<void>, timeoutMs?: number, restored = false): Promise<AgentClient> {
    return this.link.connect(afterConnect, timeoutMs, restored ? (a) => this.syncRequests(a, true) : undefined);
  }

  /** The clock (and after a restore entropy and limits) the guest gets; see `syncGuest`. */
  syncRequests(agent: AgentClient, restored: boolean): Promise<void> {
    return syncGuest(agent, restored, this.record.pidsMax);
  }

  /** After a resume: the guest's clock stood still while it was stopped, so set it from the host. */
  async syncClock(): Promise<void> {
    await this.syncRequests(await this.agent(), false);
  }

  async setState(state: SandboxState): Promise<void> {
    await this.save({ ...this.record, state });
  }

  /** Replaces the record and writes it (durably, before anything relies on it). */
  async save(record: SandboxRecord): Promise<void> {
    this.record = record;
    await writeRecord(this.dir, this.record);
  }

  /** Runs `fn` with the agent, letting a paused VM run for it and pausing it again after. */
  async whileRunning<T>(vm: Vm, fn: (agent: AgentClient) => Promise<T>): Promise<T> {
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
}
