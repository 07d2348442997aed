/**
 * A process of an in-memory guest: its output (ring buffers for a spawned one, a
 * credit-bounded stream for an exec), its stdin, its exit, and how a kill or a timeout
 * ends it. Also its serialized form, for snapshots: a process running when its guest is
 * snapshotted comes back running (it then lives until it is killed).
 */
import { DenError, ExecOutput, type GuestChunk, type GuestExecProcess, type GuestExit, type ProcInfo, type ProcReadReply, type PtySize } from "@den/protocol";

/** How far a streamed exec may run ahead of its reader (the runtime's OUTPUT_WINDOW). */
const OUTPUT_WINDOW = 256 * 1024;
/** A spawned process's ring buffers: 1 MiB each by default, 8 MiB at most (the guest agent's bounds). */
export const RING_DEFAULT = 1 << 20;
export const RING_MAX = 8 << 20;
/** The most a `proc.read` returns, and the most stdin queued for a process that does not read. */
const READ_MAX = 512 * 1024;
const STDIN_QUEUE_MAX = 4 << 20;
const SIGKILL = 9;
/** Signals whose default action leaves a process running (SIGCHLD, SIGCONT, SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU, SIGURG, SIGWINCH). */
const HARMLESS = new Set([0, 17, 18, 19, 20, 21, 22, 23, 28]);

/** The last `max` bytes written to one channel, at absolute offsets. */
export class Ring {
  private data = Buffer.alloc(0);
  /** Offset of `data[0]` in everything ever written. */
  start = 0;

  constructor(readonly max: number) {}

  get end(): number {
    return this.start + this.data.length;
  }

  push(chunk: Buffer): void {
    this.data = Buffer.concat([this.data, chunk]);
    const over = this.data.length - this.max;
    if (over > 0) {
      this.data = Buffer.from(this.data.subarray(over));
      this.start += over;
    }
  }

  read(offset: number, max: number): { data: Buffer; offset: number; dropped: boolean } {
    const dropped = offset < this.start;
    const from = Math.min(Math.max(offset, this.start), this.end);
    const len = Math.min(this.end - from, max);
    return { data: this.data.subarray(from - this.start, from - this.start + len), offset: from, dropped };
  }

  serialize(): { start: number; data: string } {
    return { start: this.start, data: this.data.toString("base64") };
  }

  static from(s: { start: number; data: string }, max: number): Ring {
    const r = new Ring(max);
    r.data = Buffer.from(s.data, "base64");
    r.start = s.start;
    return r;
  }
}

/** Bytes on their way to a process's stdin; `read` resolves with the next chunk, or null at EOF. */
export class StdinPipe {
  private chunks: Buffer[] = [];
  private ended = false;
  private wake: (() => void) | undefined;
  queued = 0;

  static of(data: Buffer | string | undefined): StdinPipe {
    const p = new StdinPipe();
    if (data !== undefined && data.length) p.push(Buffer.from(data));
    p.end();
    return p;
  }

  push(data: Buffer): void {
    if (this.ended) return;
    this.chunks.push(data);
    this.queued += data.length;
    this.wake?.();
  }

  end(): void {
    this.ended = true;
    this.wake?.();
  }

  async read(signal?: AbortSignal): Promise<Buffer | null> {
    for (;;) {
      const c = this.chunks.shift();
      if (c) {
        this.queued -= c.length;
        return c;
      }
      if (this.ended) return null;
      if (signal?.aborted) throw signal.reason;
      await new Promise<void>((resolve) => {
        const done = () => {
          signal?.removeEventListener("abort", done);
          this.wake = undefined;
          resolve();
        };
        this.wake = done;
        signal?.addEventListener("abort", done);
      });
    }
  }
}

export interface SerialProc {
  proc: number;
  pid: number;
  argv?: string[];
  cmd?: string;
  running: boolean;
  exit?: GuestExit;
  startedMs: number;
  bufferBytes: number;
  rings: [{ start: number; data: string }, { start: number; data: string }];
}

type Sink = (c: GuestChunk) => Promise<void>;

/** One process of the guest's table. */
export class GuestProcess {
  exit: GuestExit | undefined;
  /** Why it ended without an exit (its guest went away): its exec's caller sees this. */
  error: Error | undefined;
  readonly stdin: StdinPipe | undefined;
  readonly rings: [Ring, Ring] | undefined;
  /** Aborted when it is killed: whatever it waits on (sleep, stdin) gives up. */
  readonly abort = new AbortController();
  private waiters: Array<() => void> = [];
  /** A streamed exec's reader (set by ExecStream). */
  sink: Sink | undefined;
  /** Its terminal, if it runs on one. */
  pty: PtySize | undefined;
  /** Told when what a snapshot keeps of it changes (its output, its end): a buffered one's guest sets it. */
  onChange: (() => void) | undefined;

  constructor(
    readonly proc: number,
    readonly pid: number,
    readonly command: { argv?: string[]; cmd?: string },
    readonly mode: "stream" | "buffer",
    readonly startedMs: number,
    opts: { stdin?: StdinPipe; bufferBytes?: number; pty?: PtySize; rings?: [Ring, Ring] } = {},
  ) {
    this.stdin = opts.stdin;
    this.pty = opts.pty;
    const size = opts.bufferBytes ?? RING_DEFAULT;
    if (mode === "buffer") this.rings = opts.rings ?? [new Ring(size), new Ring(size)];
  }

  get running(): boolean {
    return !this.exit && !this.error;
  }

  /** Output from the process: into its rings, or to its exec's reader (waiting for room there). */
  async output(stream: "stdout" | "stderr", data: Buffer): Promise<void> {
    if (!this.running || !data.length) return;
    // A terminal turns "\n" into "\r\n", and carries stderr on the same stream.
    if (this.pty) {
      data = Buffer.from(data.toString("latin1").replace(/\r?\n/g, "\r\n"), "latin1");
      stream = "stdout";
    }
    if (this.rings) {
      this.rings[stream === "stdout" ? 0 : 1].push(data);
      this.onChange?.();
    } else await this.sink?.({ stream, data });
  }

  finish(exit: GuestExit): void {
    if (!this.running) return;
    this.exit = exit;
    this.settle();
  }

  /** Its guest went away (destroyed, its VM gone): it ends with no exit status. */
  lose(error: Error): void {
    if (!this.running) return;
    this.error = error;
    this.settle();
  }

  /** A signal from outside (kill, timeout): one that terminates ends it at once. */
  signal(signal: number, timedOut = false): void {
    if (!Number.isInteger(signal) || signal < 0 || signal >= 65) throw new DenError("invalid_argument", `bad signal ${signal}`);
    if (!this.running || HARMLESS.has(signal)) return;
    this.finish({ exitCode: null, signal: timedOut ? SIGKILL : signal, timedOut });
  }

  private settle(): void {
    this.abort.abort(new DenError("aborted", `process ${this.proc} ended`));
    for (const w of this.waiters.splice(0)) w();
    this.onChange?.();
  }

  /** Resolves once it has ended, or after `timeoutMs` (undefined: no bound). */
  ended(timeoutMs?: number): Promise<void> {
    if (!this.running) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        const i = this.waiters.indexOf(done);
        if (i >= 0) this.waiters.splice(i, 1);
        resolve();
      };
      const timer = timeoutMs === undefined ? undefined : setTimeout(done, timeoutMs);
      this.waiters.push(done);
    });
  }

  write(data: Buffer, eof: boolean): void {
    if (!this.stdin) throw new DenError("invalid_argument", `process ${this.proc} has no stdin pipe`);
    if (data.length > 256 * 1024) throw new DenError("invalid_argument", "at most 256 KiB per call");
    if (this.stdin.queued > STDIN_QUEUE_MAX) throw new DenError("invalid_argument", "stdin buffer full (process not reading)");
    this.stdin.push(data);
    if (eof) this.stdin.end();
  }

  read(channel: "stdout" | "stderr", offset: number, max: number): ProcReadReply {
    if (!this.rings) throw new DenError("invalid_argument", `process ${this.proc} is streamed, not buffered`);
    if (!(offset >= 0) || !(max >= 0) || (channel !== "stdout" && channel !== "stderr")) throw new DenError("invalid_argument", "bad channel, offset or max");
    const ring = this.rings[channel === "stdout" ? 0 : 1];
    const r = ring.read(offset, Math.min(max, READ_MAX));
    const next = r.offset + r.data.length;
    return { data: r.data.toString("base64"), offset: r.offset, next_offset: next, dropped: r.dropped, eof: !this.running && next >= ring.end };
  }

  /**
   * Its command line as `ps` would show it: its argv, or a shell job's command with the
   * wrappers that exec what follows (`nohup`, `setsid`, `exec`) and its redirections left out.
   */
  commandLine(): string {
    if (this.command.argv) return this.command.argv.join(" ");
    return (this.command.cmd ?? "").replace(/\s*(?:\d?>>?|<)\s*\S+/g, "").replace(/\s+2>&1/g, "").replace(/^\s*(?:(?:nohup|setsid|exec)\s+)+/, "").trim();
  }

  info(): ProcInfo {
    const e = this.exit ?? { exitCode: null, signal: this.error ? SIGKILL : null, timedOut: false };
    return {
      proc: this.proc, pid: this.pid, ...this.command, mode: this.mode, running: this.running,
      exit_code: this.running ? null : e.exitCode, signal: this.running ? null : e.signal, timed_out: this.running ? false : e.timedOut, started_ms: this.startedMs,
    };
  }

  /** A buffered process as a snapshot keeps it (a streamed one belongs to its exec's connection, which a snapshot does not keep). */
  serialize(): SerialProc | undefined {
    if (!this.rings) return undefined;
    return {
      proc: this.proc, pid: this.pid, ...this.command, running: this.running, ...(this.exit ? { exit: this.exit } : {}),
      startedMs: this.startedMs, bufferBytes: this.rings[0].max, rings: [this.rings[0].serialize(), this.rings[1].serialize()],
    };
  }

  /** A process back from a snapshot: ended as it was, or running (until it is killed). */
  static from(s: SerialProc): GuestProcess {
    const command = { ...(s.argv ? { argv: s.argv } : {}), ...(s.cmd !== undefined ? { cmd: s.cmd } : {}) };
    const p = new GuestProcess(s.proc, s.pid, command, "buffer", s.startedMs, { rings: [Ring.from(s.rings[0], s.bufferBytes), Ring.from(s.rings[1], s.bufferBytes)] });
    if (!s.running) p.exit = s.exit ?? { exitCode: null, signal: SIGKILL, timedOut: false };
    return p;
  }
}

/**
 * A streamed exec as its caller holds it (the runtime's ExecProcess): output read by async
 * iteration at the reader's pace (the process waits while a window's worth is unread),
 * dropped if `wait()` is called with no reader.
 */
export class ExecStream implements GuestExecProcess {
  /** The reading side, as every transport's (a paused source is a producer waiting for `room`). */
  private readonly out: ExecOutput;
  private room: (() => void) | undefined;
  private full = false;

  /** `reachable`: throws if its guest cannot be reached now (control messages go to the guest). */
  constructor(private readonly p: GuestProcess, private readonly reachable: () => void) {
    this.out = new ExecOutput({
      high: OUTPUT_WINDOW,
      low: OUTPUT_WINDOW + 1,
      pause: () => (this.full = true),
      resume: () => {
        this.full = false;
        this.room?.();
      },
    });
    p.sink = (c) => this.push(c);
    // Once it has ended, its output is all queued: the reader (or a writer waiting for room) goes on.
    void p.ended().then(() => this.out.finish(p.exit, p.error));
  }

  get proc(): number {
    return this.p.proc;
  }

  get pid(): number {
    return this.p.pid;
  }

  private async push(c: GuestChunk): Promise<void> {
    this.out.push(c);
    while (this.full && this.p.running) await new Promise<void>((r) => (this.room = r));
    this.room = undefined;
  }

  [Symbol.asyncIterator](): AsyncIterator<GuestChunk> {
    return this.out[Symbol.asyncIterator]();
  }

  wait(): Promise<GuestExit> {
    return this.out.wait();
  }

  async write(data: Buffer | string): Promise<void> {
    if (!this.p.running) throw new DenError("invalid_state", "stream is closed");
    this.p.write(Buffer.from(data), false);
  }

  closeStdin(): void {
    this.p.stdin?.end();
  }

  async resize(rows: number, cols: number): Promise<void> {
    this.reachable();
    if (!this.p.pty) throw new DenError("invalid_argument", `process ${this.p.proc} has no pty`);
    if (!(rows > 0 && cols > 0 && rows <= 65535 && cols <= 65535)) throw new DenError("invalid_argument", "bad size");
    this.p.pty = { rows, cols };
  }

  async signal(signal: number): Promise<void> {
    this.reachable();
    this.p.signal(signal);
  }

  async kill(): Promise<void> {
    this.reachable();
    this.p.signal(SIGKILL);
  }
}
