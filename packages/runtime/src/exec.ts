import { Channel, DenError, ExecOutput, type ExitEvent, type GuestChunk, type GuestExecOptions, type GuestExecResult, type GuestExit } from "@den/protocol";
import type { AgentClient } from "./agent-client.js";
import { checkGuestUser } from "./files.js";

/** Credit granted per output channel: how far the guest may run ahead of the reader. */
const OUTPUT_WINDOW = 256 * 1024;

/** The guest's exec contract lives in the protocol (the host agent serves the same over HTTP); these are its names here. */
export type ExecOptions = GuestExecOptions;
export type ExecResult = GuestExecResult;
export type ExecChunk = GuestChunk;
export type ExitInfo = GuestExit;

export type Command = string | string[];

export function execBody(command: Command, opts: ExecOptions, mode: "stream" | "buffer"): Record<string, unknown> {
  if (typeof command === "string") {
    if (!command.length) throw new DenError("invalid_argument", "command is empty");
  } else if (!command.length || command.some((a) => typeof a !== "string")) {
    throw new DenError("invalid_argument", "argv must be a non-empty array of strings");
  }
  if (opts.timeoutMs !== undefined && (!Number.isFinite(opts.timeoutMs) || opts.timeoutMs < 0)) {
    throw new DenError("invalid_argument", `timeout must be a non-negative number of milliseconds, got ${opts.timeoutMs}`);
  }
  if (opts.cwd !== undefined && !opts.cwd.startsWith("/")) throw new DenError("invalid_argument", `cwd must be absolute, got ${opts.cwd}`);
  if (opts.user !== undefined) checkGuestUser(opts.user);
  const body: Record<string, unknown> = { op: "exec", mode };
  if (opts.user !== undefined) body.user = opts.user;
  if (typeof command === "string") body.cmd = command;
  else body.argv = command;
  if (opts.cwd) body.cwd = opts.cwd;
  if (opts.env) body.env = opts.env;
  if (opts.timeoutMs) body.timeout_ms = Math.ceil(opts.timeoutMs);
  if (opts.pty) body.pty = opts.pty;
  if (opts.stdin !== undefined) body.stdin_data = Buffer.from(opts.stdin).toString("base64");
  if (opts.interactive) body.stdin = true;
  if (mode === "stream") body.window = OUTPUT_WINDOW;
  return body;
}

/** Sends an exec request, once the agent is known to honour its `user` (an old one would run it as root). */
export function startExec(agent: AgentClient, body: Record<string, unknown>, sink?: Parameters<AgentClient["requestRaw"]>[1], onId?: (id: number) => void): Promise<Record<string, unknown>> {
  if (body.user !== undefined) agent.requireFeature("exec.user", "an exec as a user");
  return agent.requestRaw(body, sink, onId);
}

/**
 * A running exec whose output streams back with backpressure: the guest only sends what
 * the reader has made room for, so a slow reader slows the command instead of growing memory.
 */
export class ExecProcess implements AsyncIterable<ExecChunk> {
  proc = 0;
  pid = 0;
  private id = 0;
  /** Each chunk the reader is done with (or that wait() drops) is granted back to the guest as credit. */
  private readonly output = new ExecOutput({ release: (c) => this.agent.grant(this.id, c.stream === "stderr" ? Channel.Stderr : Channel.Stdout, c.data.length) });

  private constructor(private readonly agent: AgentClient) {}

  static async start(agent: AgentClient, command: Command, opts: ExecOptions = {}): Promise<ExecProcess> {
    const p = new ExecProcess(agent);
    const body = execBody(command, opts, "stream");
    const res = await startExec(agent, body, p.sink(), (id) => (p.id = id));
    p.proc = Number(res.proc);
    p.pid = Number(res.pid);
    return p;
  }

  private sink() {
    return {
      onData: (ch: Channel, data: Buffer) => this.output.push({ stream: ch === Channel.Stderr ? "stderr" : "stdout", data }),
      onEvent: (ev: Record<string, unknown>) => {
        if (ev.event !== "exit") return;
        const e = ev as unknown as ExitEvent;
        this.agent.release(this.id);
        this.output.finish({ exitCode: e.exit_code, signal: e.signal, timedOut: e.timed_out });
      },
      onClose: (e: Error) => this.output.finish(undefined, e),
    };
  }

  [Symbol.asyncIterator](): AsyncIterator<ExecChunk> {
    return this.output[Symbol.asyncIterator]();
  }

  /**
   * Resolves when the main process has exited (its output fully delivered). Called
   * without a reader attached, it discards the output so the command can finish.
   */
  wait(): Promise<ExitInfo> {
    return this.output.wait();
  }

  /** Writes to stdin (exec started with `interactive: true` or a pty). */
  write(data: Buffer | string): Promise<void> {
    return this.agent.write(this.id, Channel.Stdin, Buffer.from(data));
  }

  closeStdin(): void {
    this.agent.end(this.id, Channel.Stdin);
  }

  async resize(rows: number, cols: number): Promise<void> {
    await this.agent.request("pty.resize", { proc: this.proc, rows, cols });
  }

  async signal(signal: number): Promise<void> {
    await this.agent.request("proc.signal", { proc: this.proc, signal });
  }

  /** Kills the whole process tree. */
  async kill(): Promise<void> {
    await this.agent.request("proc.kill", { proc: this.proc });
  }
}

/** Runs a command to completion and collects its output (capped at `maxOutputBytes` per stream). */
export async function runToCompletion(agent: AgentClient, command: Command, opts: ExecOptions = {}): Promise<ExecResult> {
  const maxOutputBytes = opts.maxOutputBytes ?? 64 * 1024 * 1024;
  const p = await ExecProcess.start(agent, command, opts);
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  let outLen = 0;
  let errLen = 0;
  for await (const c of p) {
    const isOut = c.stream === "stdout";
    if ((isOut ? outLen : errLen) + c.data.length > maxOutputBytes) {
      await p.kill().catch(() => undefined);
      throw new DenError("payload_too_large", `${c.stream} exceeded ${maxOutputBytes} bytes; use a streamed exec`);
    }
    (isOut ? out : err).push(c.data);
    if (isOut) outLen += c.data.length;
    else errLen += c.data.length;
  }
  const exit = await p.wait();
  return { stdout: Buffer.concat(out), stderr: Buffer.concat(err), ...exit };
}
