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
  private readonly states = new Map<string, { state: SandboxState; unsubscribe: () => void }>();

  get(id: string, sandbox: EnvdSandbox): SandboxState {
    const have = this.states.get(id);
    if (have) return have.state;
    if (this.states.size >= MAX_SANDBOXES) this.drop(this.states.keys().next().value!);
    const state: SandboxState = { processes: new ProcessTable(), watchers: new WatcherTable(), noXattrs: false };
    const unsubscribe = sandbox.onGone(() => this.drop(id));
    this.states.set(id, { state, unsubscribe });
    return state;
  }

  drop(id: string): void {
    const s = this.states.get(id);
    if (!s) return;
    this.states.delete(id);
    s.unsubscribe();
    s.state.processes.clear();
    s.state.watchers.clear();
  }

  clear(): void {
    for (const id of [...this.states.keys()]) this.drop(id);
  }
}
