/**
 * The processes envd started in one sandbox. Each is a streamed guest exec owned here, not
 * by the HTTP request that started it: a pump reads its output for as long as it runs and
 * hands each chunk to whoever is attached (the Start stream, Connect streams), at the
 * slowest reader's pace; with nobody attached the output is dropped, so a background
 * command never stalls on a reader that went away.
 */
import type { GuestExecProcess, GuestExit, e2b } from "@den/protocol";
import { withDeadline } from "./deadline.js";

/** Processes tracked per sandbox (running ones; an exited one leaves at once). */
export const MAX_PROCESSES = 128;
/** Streams attached to one process. */
export const MAX_SUBSCRIBERS = 16;
/** A reader that takes longer than this over one chunk is detached, so it cannot stall the process. */
const STALL_MS = 30_000;

export type EndEvent = Extract<e2b.ProcessEvent, { end: unknown }>["end"];

export interface Subscriber {
  /** One output event; the pump waits for it (backpressure). */
  data(ev: e2b.ProcessEvent): Promise<void>;
  /** The process ended (exit event), or was lost (`undefined`: the guest connection broke). */
  end(ev: EndEvent | undefined): void;
  /** Detached for being too slow. */
  stalled(): void;
}

export interface ProcessMeta {
  config: e2b.ProcessInfo["config"];
  tag?: string;
  pty: boolean;
  stdin: boolean;
}

const SIGNAL_NAMES: Record<number, string> = { 1: "hangup", 2: "interrupt", 9: "killed", 15: "terminated", 6: "aborted", 11: "segmentation fault", 13: "broken pipe" };

/** The end event as envd reports it (Go's ProcessState: "exit status 1", "signal: killed"). */
export function endEvent(exit: GuestExit): EndEvent {
  if (exit.exitCode !== null) {
    const status = `exit status ${exit.exitCode}`;
    return { exitCode: exit.exitCode, exited: true, status, ...(exit.exitCode !== 0 ? { error: status } : {}) };
  }
  const status = `signal: ${SIGNAL_NAMES[exit.signal ?? 0] ?? `signal ${exit.signal}`}`;
  return { exitCode: -1, exited: false, status, error: status };
}

export class ManagedProcess {
  readonly pid: number;
  private readonly subs = new Set<Subscriber>();
  private stdinOpen: boolean;
  private ended = false;
  /** Its timeout passed (the guest killed it): told before the end goes out, so the Start stream ends with `deadline_exceeded`. */
  onTimeout: (() => void) | undefined;

  constructor(readonly proc: GuestExecProcess, readonly meta: ProcessMeta, private readonly onDone: (p: ManagedProcess) => void) {
    this.pid = proc.pid;
    this.stdinOpen = meta.stdin;
  }

  get running(): boolean {
    return !this.ended;
  }

  /** Attach a reader (false when the process has too many or has ended). */
  subscribe(s: Subscriber): (() => void) | undefined {
    if (this.ended || this.subs.size >= MAX_SUBSCRIBERS) return undefined;
    this.subs.add(s);
    return () => this.subs.delete(s);
  }

  /**
   * Reads output until the process exits. Called once, after the first subscriber attached.
   * Resolves with how it exited; undefined when it was lost (the guest connection broke).
   */
  async run(): Promise<GuestExit | undefined> {
    let exit: EndEvent | undefined;
    let exited: GuestExit | undefined;
    try {
      for await (const c of this.proc) {
        if (!this.subs.size) continue; // nobody attached: dropped, so the process never stalls
        const b64 = c.data.toString("base64");
        const ev: e2b.ProcessEvent = { data: this.meta.pty ? { pty: b64 } : c.stream === "stderr" ? { stderr: b64 } : { stdout: b64 } };
        await Promise.all([...this.subs].map((s) => this.deliver(s, ev)));
      }
      exited = await this.proc.wait();
      if (exited.timedOut) this.onTimeout?.();
      exit = endEvent(exited);
    } catch {
      exit = exited = undefined; // the guest connection broke: the sandbox went away or restarted
    } finally {
      this.ended = true;
      for (const s of this.subs) s.end(exit);
      this.subs.clear();
      this.onDone(this);
    }
    return exited;
  }

  private async deliver(s: Subscriber, ev: e2b.ProcessEvent): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const slow = new Promise<"slow">((r) => (timer = setTimeout(() => r("slow"), STALL_MS)));
    try {
      if ((await Promise.race([s.data(ev).then(() => "ok" as const, () => "ok" as const), slow])) === "slow" && this.subs.delete(s)) s.stalled();
    } finally {
      clearTimeout(timer);
    }
  }

  /** Whether SendInput may write: a PTY always, a pipe only if asked for and not closed. */
  get acceptsInput(): boolean {
    return this.meta.pty || this.stdinOpen;
  }

  write(data: Buffer): Promise<void> {
    return withDeadline(this.proc.write(data), `input to process ${this.pid}`);
  }

  closeStdin(): void {
    this.stdinOpen = false;
    this.proc.closeStdin();
  }

  resize(rows: number, cols: number): Promise<void> {
    return withDeadline(this.proc.resize(rows, cols), `resize of process ${this.pid}`);
  }

  signal(signal: number): Promise<void> {
    return withDeadline(this.proc.signal(signal), `signal to process ${this.pid}`);
  }

  /** Kills its whole tree (the guest reaps it). */
  kill(): Promise<void> {
    return withDeadline(this.proc.kill(), `kill of process ${this.pid}`);
  }
}

export class ProcessTable {
  private readonly byPid = new Map<number, ManagedProcess>();
  /** Called when the last process leaves (the sandbox's state waits for it to be dropped). */
  onEmpty: (() => void) | undefined;

  get size(): number {
    return this.byPid.size;
  }

  /** Tracks a started process; the caller subscribes, then calls `run()`. */
  add(proc: GuestExecProcess, meta: ProcessMeta): ManagedProcess {
    const p = new ManagedProcess(proc, meta, (done) => {
      if (this.byPid.get(done.pid) === done) this.byPid.delete(done.pid);
      if (!this.byPid.size) this.onEmpty?.();
    });
    this.byPid.set(p.pid, p);
    return p;
  }

  find(sel: { pid?: number | undefined; tag?: string | undefined }): ManagedProcess | undefined {
    if (sel.pid !== undefined) return this.byPid.get(sel.pid);
    for (const p of this.byPid.values()) if (p.meta.tag === sel.tag) return p;
    return undefined;
  }

  list(): ManagedProcess[] {
    return [...this.byPid.values()];
  }

  /** The sandbox is gone: forget everything (pumps end on their own as the guest connection closes). */
  clear(): void {
    this.byPid.clear();
  }
}
