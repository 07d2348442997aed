/**
 * envd's state per sandbox (its processes and watchers), made at the first request for it
 * and dropped when the sandbox goes away.
 */
import { ProcessTable } from "./process-table.js";
import { WatcherTable } from "./watchers.js";
import type { EnvdSandbox } from "./seam.js";

export interface SandboxState {
  processes: ProcessTable;
  watchers: WatcherTable;
  /** getXattrs is known not to exist in this guest (older agent): don't ask again. */
  noXattrs: boolean;
}

/** Sandboxes with state at once; past it the oldest state is dropped (its processes keep running). */
const MAX_SANDBOXES = 10_000;

export class SandboxStates {
  private readonly states = new Map<string, { state: SandboxState; unsubscribe: () => void; dropped?: boolean }>();

  get(id: string, sandbox: EnvdSandbox): SandboxState {
    const have = this.states.get(id);
    if (have) {
      if (have.dropped) {
        // In use again (a wake): kept until the next drop, which it must hear of again.
        have.state.processes.onEmpty = undefined;
        have.dropped = false;
        have.unsubscribe();
        have.unsubscribe = sandbox.onGone(() => this.drop(id));
      }
      return have.state;
    }
    if (this.states.size >= MAX_SANDBOXES) this.drop(this.states.keys().next().value!);
    const state: SandboxState = { processes: new ProcessTable(), watchers: new WatcherTable(), noXattrs: false };
    const unsubscribe = sandbox.onGone(() => this.drop(id));
    this.states.set(id, { state, unsubscribe });
    return state;
  }

  /**
   * The sandbox stopped running (destroyed, or hibernated). Processes this server streams
   * stay tracked until their pumps end: a warm hibernation keeps the guest's connection, so
   * after the wake they are still streamed here (and connected to as before); a VM that is gone
   * ends them at once (after a cold wake the guest lists them, as buffered ones: adopted.ts).
   */
  drop(id: string): void {
    const s = this.states.get(id);
    if (!s) return;
    s.dropped = true;
    s.state.watchers.clear();
    if (s.state.processes.size) {
      s.state.processes.onEmpty = () => this.forget(id, s);
      return;
    }
    this.forget(id, s);
  }

  private forget(id: string, s: { state: SandboxState; unsubscribe: () => void; dropped?: boolean }): void {
    if (this.states.get(id) !== s) return;
    this.states.delete(id);
    s.unsubscribe();
  }

  clear(): void {
    for (const [id, s] of [...this.states]) {
      s.state.processes.clear();
      this.drop(id);
    }
  }
}
