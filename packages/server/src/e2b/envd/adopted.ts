/**
 * Processes this server did not start, as the guest agent lists them: those whose envd
 * stream ended with a pause and wake, a Den restart or the state's drop (the guest keeps
 * them running, their output now in its ring buffers), and those another replica streams.
 * E2B's client expects `commands.list/connect/kill` to find a background process after a
 * pause and resume, as E2B's own envd (inside the VM) does.
 */
import { setTimeout as sleep } from "node:timers/promises";
import type { GuestChunk, GuestExecProcess, GuestExit, HostGuest, ProcInfo, ProcWaitReply } from "@den/protocol";
import { withDeadline } from "./deadline.js";
import type { ProcessMeta } from "./process-table.js";

/** How often an adopted process's buffers are read: soon after output, backing off to this while it is quiet. */
const POLL_MIN_MS = 100;
const POLL_MAX_MS = 1000;
/** Per read (the guest caps a reply at 512 KiB). */
const READ_MAX = 256 * 1024;
/** Past the end of any buffer: the first read answers where the output is now, with no bytes. */
const NOW = Number.MAX_SAFE_INTEGER;

/** A `proc.wait` answer as an exit, once the process has one. */
const exitOf = (w: ProcWaitReply): GuestExit | undefined => (w.running ? undefined : { exitCode: w.exit_code, signal: w.signal, timedOut: w.timed_out });

/** The guest's running process with this pid, if any. */
export async function guestProcess(guest: HostGuest, pid: number): Promise<ProcInfo | undefined> {
  return (await runningProcesses(guest)).find((p) => p.pid === pid);
}

export async function runningProcesses(guest: HostGuest, deadlineMs?: number): Promise<ProcInfo[]> {
  return (await withDeadline(guest.processes.list(), "process list", deadlineMs)).filter((p) => p.running);
}

/** E2B's config of a process the guest describes by its argv (or a shell command line); its envs and cwd are not kept. */
export function configOf(info: ProcInfo): ProcessMeta["config"] {
  if (info.argv?.length) return { cmd: info.argv[0]!, args: info.argv.slice(1), envs: {} };
  return { cmd: "/bin/bash", args: ["-c", info.cmd ?? ""], envs: {} };
}

/**
 * A buffered guest process as a streamed exec: its further output (from now on, as E2B's
 * Connect gives) read from the guest's buffers, its exit from `proc.wait`. One streamed to
 * another connection (another replica's envd, a /v1 exec) cannot be read from here:
 * `readable` says so.
 */
export function adoptedProcess(guest: HostGuest, info: ProcInfo): GuestExecProcess & { readonly readable: boolean } {
  const g = guest.processes;
  let exit: GuestExit | undefined;
  async function* output(): AsyncGenerator<GuestChunk> {
    const offset = { stdout: NOW, stderr: NOW };
    let quiet = POLL_MIN_MS;
    for (;;) {
      // Read once more after the exit is seen: what it wrote last is in the buffers.
      const ended = exitOf(await withDeadline(g.wait(info.proc, 0), "process wait"));
      let got = false;
      for (const stream of ["stdout", "stderr"] as const) {
        for (;;) {
          const r = await withDeadline(g.read(info.proc, stream, offset[stream], READ_MAX), "process read");
          offset[stream] = r.next_offset;
          if (!r.data) break;
          got = true;
          yield { stream, data: Buffer.from(r.data, "base64") };
        }
      }
      if (ended) {
        exit = ended;
        return;
      }
      quiet = got ? POLL_MIN_MS : Math.min(quiet * 2, POLL_MAX_MS);
      await sleep(quiet);
    }
  }
  return {
    proc: info.proc,
    pid: info.pid,
    readable: info.mode === "buffer",
    [Symbol.asyncIterator]: output,
    async wait() {
      while (!exit) exit = exitOf(await withDeadline(g.wait(info.proc, 10_000), "process wait", 20_000));
      return exit;
    },
    write: (data) => g.write(info.proc, data),
    closeStdin: () => void g.write(info.proc, "", true).catch(() => undefined),
    resize: () => Promise.reject(new Error(`process ${info.pid} was not started through this server: its PTY cannot be resized here`)),
    signal: (signal) => g.signal(info.proc, signal),
    kill: () => g.kill(info.proc),
  };
}
