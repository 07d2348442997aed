import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { DenError } from "@den/protocol";
import { AgentClient } from "./agent-client.js";
import { VM_FILES } from "./qemu.js";

/**
 * A sandbox's connection to its guest agent: made on demand, made again after it drops, and
 * counting the drops the guest caused by breaking the protocol (a hostile or broken guest).
 */
export class AgentLink {
  private conn: Promise<AgentClient> | undefined;

  constructor(
    private readonly dir: string,
    private readonly sandboxId: string,
    private readonly onProtocolError: (message: string) => void,
  ) {}

  /** The connection, made again if it is gone. */
  get(): Promise<AgentClient> {
    const existing = this.conn;
    if (existing) {
      return existing.then((a) => (a.closed ? this.connect() : a), () => this.connect());
    }
    return this.connect();
  }

  /**
   * A new connection (it replaces the one held); `afterConnect` runs once the socket is up,
   * `first` is sent right behind the hello.
   */
  connect(afterConnect?: () => Promise<void>, timeoutMs?: number, first?: (a: AgentClient) => Promise<unknown>): Promise<AgentClient> {
    const conn = AgentClient.connect(join(this.dir, VM_FILES.agent), timeoutMs, afterConnect, first).catch(async (e: unknown) => {
      if (!(e instanceof DenError) || e.code !== "agent_unavailable") throw e;
      // What the guest printed last is the best clue to why its agent is silent.
      const tail = await readFile(join(this.dir, VM_FILES.consoleLog), "latin1").then((t) => t.slice(-600), () => "");
      throw new DenError("agent_unavailable", `sandbox ${this.sandboxId}: ${e.message}${tail ? `; console: ${JSON.stringify(tail)}` : ""}`);
    });
    this.conn = conn;
    const noteError = (e: unknown) => {
      if (e instanceof DenError && e.code === "agent_protocol_error") this.onProtocolError(e.message);
    };
    conn.then((a) => a.onClose(noteError), (e: unknown) => {
      noteError(e);
      if (this.conn === conn) this.conn = undefined;
    });
    return conn;
  }

  /** The connection held, if it is up or coming (undefined if it failed); never makes one. */
  async current(): Promise<AgentClient | undefined> {
    return this.conn?.catch(() => undefined);
  }

  /** Closes the connection held, if any (it is made again on the next `get`). */
  async close(): Promise<void> {
    await this.conn?.then((a) => a.close(), () => undefined);
  }

  /** Forgets the connection held (its VM is gone). */
  forget(): void {
    this.conn = undefined;
  }
}

/**
 * After a restore or resume: the guest's clock stood still while it was stopped, so
 * set it from the host; after a restore also reseed its RNG (forks must not share
 * random state) and apply the pids limit.
 */
export async function syncGuest(agent: AgentClient, restored: boolean, pidsMax: number): Promise<void> {
  const tasks: Promise<unknown>[] = [agent.request("sys.clock", { unix_ms: Date.now() })];
  if (restored) {
    tasks.push(agent.request("sys.entropy", { seed: randomBytes(64).toString("base64") }));
    tasks.push(agent.request("sys.limits", { pids_max: pidsMax }));
  }
  await Promise.all(tasks);
}
