/** `process.Process`: start, attach to, list, feed, signal and resize the sandbox's processes. */
import { e2b, type GuestExecOptions } from "@den/protocol";
import { ConnectError, parseMessage, type EnvelopeStream } from "./connect.js";
import { withDeadline } from "./deadline.js";
import { adoptedProcess, configOf, guestProcess, runningProcesses } from "./adopted.js";
import { MAX_PROCESSES, ManagedProcess, type Subscriber } from "./process-table.js";
import { resolvePath } from "./request.js";
import type { RpcContext, Service } from "./rpc.js";

/** How long List waits for the guest's own list. */
const LIST_MS = 5_000;
/** Starting a process takes at most this (the guest forks and answers). */
const START_MS = 60_000;

/**
 * The process a request names: one this server tracks, else (by pid) one the guest still
 * runs that it no longer streams to anyone here (after a pause and wake, a Den restart), taken
 * into the table with a pump reading its buffers; or one streamed to someone else (a /v1
 * exec, another replica's envd), which can be signalled and fed but not followed from here
 * (`readable` false).
 */
async function find(ctx: RpcContext, sel: e2b.ProcessSelector): Promise<ManagedProcess & { readable?: boolean }> {
  const p = ctx.state.processes.find(sel);
  if (p) return p;
  const info = sel.pid !== undefined ? await guestProcess(ctx.sandbox.guest, sel.pid) : undefined;
  if (!info) throw new ConnectError("not_found", sel.pid !== undefined ? `process with pid ${sel.pid} not found` : `process with tag ${JSON.stringify(sel.tag)} not found`);
  const proc = adoptedProcess(ctx.sandbox.guest, info);
  const meta = { config: configOf(info), pty: false, stdin: true };
  if (!proc.readable || ctx.state.processes.size >= MAX_PROCESSES) return Object.assign(new ManagedProcess(proc, meta, () => undefined), { readable: false });
  const adopted = ctx.state.processes.add(proc, meta);
  void adopted.run();
  return adopted;
}

/**
 * Feeds one stream from a process: `start {pid}` first, then its output, then `end`; a
 * process lost with the guest connection cuts the stream (no end-of-stream), as a killed
 * sandbox does. Resolves when the stream is finished either way.
 */
async function follow(ctx: RpcContext, p: ManagedProcess, out: EnvelopeStream, opts: { ownDeadline: boolean }): Promise<void> {
  let settle!: () => void;
  const finished = new Promise<void>((r) => (settle = r));
  const sub: Subscriber = {
    data: async (ev) => {
      ctx.sandbox.touch();
      await out.send({ event: ev });
    },
    end: (ev) => {
      if (!ev) {
        out.abort();
        return settle();
      }
      void out.send({ event: { end: ev } }).finally(() => {
        out.end();
        settle();
      });
    },
    stalled: () => {
      out.end(new ConnectError("resource_exhausted", "the client read the output too slowly and was detached"));
      settle();
    },
  };
  const unsubscribe = p.subscribe(sub);
  if (!unsubscribe) throw new ConnectError(p.running ? "resource_exhausted" : "not_found", p.running ? `too many streams attached to process ${p.pid}` : `process ${p.pid} has exited`);
  await out.send({ event: { start: { pid: p.pid } } });
  let timer: NodeJS.Timeout | undefined;
  // Connect's deadline ends this stream only; Start's is the command's timeout (killAfter).
  if (!opts.ownDeadline && ctx.timeoutMs) {
    timer = setTimeout(() => {
      out.end(new ConnectError("deadline_exceeded", "stream deadline exceeded"));
      settle();
    }, ctx.timeoutMs);
  }
  await Promise.race([finished, out.closed]);
  clearTimeout(timer);
  unsubscribe();
}

async function start(ctx: RpcContext, raw: unknown, out: EnvelopeStream): Promise<void> {
  const req = parseMessage(e2b.StartRequest, raw);
  if (ctx.state.processes.size >= MAX_PROCESSES) throw new ConnectError("resource_exhausted", `at most ${MAX_PROCESSES} processes per sandbox`);
  const cfg = req.process;
  // The sandbox's env under the call's, its cwd (relative: under the user's home) else the
  // template's (as E2B's envd starts there): set up as every surface's commands are.
  const opts: GuestExecOptions = ctx.sandbox.command({ env: cfg.envs, cwd: cfg.cwd ? resolvePath(ctx.user, cfg.cwd) : undefined, user: ctx.user });
  if (req.pty) opts.pty = { rows: req.pty.size.rows, cols: req.pty.size.cols };
  else if (req.stdin) opts.interactive = true;
  // The command's timeout is the guest's to keep, on its own clock: it holds with nobody
  // attached, and counts only while the sandbox runs (a pause stops it, as E2B's envd,
  // inside the VM, counts), across a cold wake or a Den restart too.
  if (ctx.timeoutMs) opts.timeoutMs = ctx.timeoutMs;
  const argv = [cfg.cmd, ...(cfg.args ?? [])];
  const proc = await withDeadline(ctx.sandbox.guest.execStream(argv, opts), "process start", START_MS,
    (lateProc) => void lateProc.kill().catch(() => undefined)); // nobody tracks it: it must not run on
  await ctx.sandbox.execStarted(argv, { pid: proc.pid });
  const p = ctx.state.processes.add(proc, {
    config: { cmd: cfg.cmd, args: cfg.args ?? [], envs: cfg.envs ?? {}, ...(cfg.cwd ? { cwd: cfg.cwd } : {}) },
    ...(req.tag ? { tag: req.tag } : {}),
    pty: !!req.pty,
    stdin: !!req.stdin,
  });
  if (ctx.timeoutMs) p.onTimeout = () => out.end(new ConnectError("deadline_exceeded", `command timed out after ${ctx.timeoutMs} ms`));
  const following = follow(ctx, p, out, { ownDeadline: true });
  // Its end goes to the sandbox's events whenever it comes (the stream may be long gone); a process lost with the guest connection has none.
  void p.run().then((exit) => exit && ctx.sandbox.execEnded(exit, { pid: p.pid }));
  await following;
}

async function connect(ctx: RpcContext, raw: unknown, out: EnvelopeStream): Promise<void> {
  const req = parseMessage(e2b.ConnectRequest, raw);
  const p = await find(ctx, req.process);
  if (p.readable === false) throw new ConnectError("failed_precondition", `process ${p.pid} streams its output to another connection (a /v1 exec, or another Den server's envd): it cannot be followed here`);
  await follow(ctx, p, out, { ownDeadline: false });
}

function bytes(b64: string): Buffer {
  return Buffer.from(b64, "base64");
}

export const processService: Service = {
  stream: {
    Start: { handler: start, keepalive: { event: { keepalive: {} } }, holds: "process" },
    Connect: { handler: connect, keepalive: { event: { keepalive: {} } }, holds: "process" },
  },
  unary: {
    async List(ctx): Promise<e2b.ListResponse> {
      const mine = ctx.state.processes.list().map((p) => ({ config: p.meta.config, pid: p.pid, ...(p.meta.tag ? { tag: p.meta.tag } : {}) }));
      // And what the guest still runs that this server does not stream (see find).
      const known = new Set(mine.map((p) => p.pid));
      // A guest slow to answer costs the list those, not the call.
      const guestSide = await runningProcesses(ctx.sandbox.guest, LIST_MS).catch(() => []);
      const others = guestSide.filter((p) => !known.has(p.pid)).map((p) => ({ config: configOf(p), pid: p.pid }));
      return { processes: [...mine, ...others] };
    },
    async SendInput(ctx, raw) {
      const req = parseMessage(e2b.SendInputRequest, raw);
      const p = await find(ctx, req.process);
      const data = req.input.pty ?? req.input.stdin;
      if (data === undefined) throw new ConnectError("invalid_argument", "input needs stdin or pty bytes");
      if (!p.acceptsInput) throw new ConnectError("failed_precondition", `process ${p.pid} has no open stdin (start it with stdin: true)`);
      await p.write(bytes(data));
      return {};
    },
    async CloseStdin(ctx, raw) {
      const p = await find(ctx, parseMessage(e2b.CloseStdinRequest, raw).process);
      if (p.meta.pty) throw new ConnectError("failed_precondition", "a PTY has no stdin to close");
      p.closeStdin();
      return {};
    },
    async SendSignal(ctx, raw) {
      const req = parseMessage(e2b.SendSignalRequest, raw);
      const p = await find(ctx, req.process);
      if (req.signal === "SIGNAL_SIGKILL") await p.kill();
      else if (req.signal === "SIGNAL_SIGTERM") await p.signal(15);
      else throw new ConnectError("invalid_argument", "signal must be SIGNAL_SIGTERM or SIGNAL_SIGKILL");
      return {};
    },
    async Update(ctx, raw) {
      const req = parseMessage(e2b.UpdateRequest, raw);
      const p = await find(ctx, req.process);
      if (req.pty) {
        if (!p.meta.pty) throw new ConnectError("failed_precondition", `process ${p.pid} has no PTY`);
        await p.resize(req.pty.size.rows, req.pty.size.cols);
      }
      return {};
    },
  },
};
