/**
 * exec: runs a command on the SDK's streaming exec and keeps a bounded part of each output
 * stream (see OutputCap), so a command that prints gigabytes costs this process its cap and
 * no more. Long commands report progress to clients that asked for it (a progressToken), which
 * keeps clients that reset their timeout on progress waiting; cancelling the call hangs up the
 * stream, and Den kills the command.
 */
import { OutputCap } from "../output-cap.js";
import { ok } from "../result.js";
import * as schemas from "../schemas.js";
import { tool, type ToolExtra } from "./define.js";

/** How often a long command says it is still running. */
const PROGRESS_EVERY_MS = 10_000;

export const exec = tool({
  name: "exec",
  description:
    "Run a command in a sandbox and wait for it: returns its exit code, stdout and stderr. Everything persists between calls (files, installed packages, " +
    "background processes started with `nohup ... &`); a hibernated sandbox is woken first. The command is killed after timeout_seconds (default 120): " +
    "start longer work in the background and poll it. Output past max_output_bytes per stream keeps its start and end and marks what was dropped.",
  input: schemas.Exec,
  annotations: { title: "Run a command", readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: true },
  async run(args, den, extra) {
    const sbx = await den.sandbox(args.sandbox_id, extra.signal);
    const t0 = Date.now();
    const stop = reportProgress(extra, t0);
    const out = new OutputCap(args.max_output_bytes);
    const err = new OutputCap(args.max_output_bytes);
    try {
      const run = sbx.execStream(args.cmd ?? args.argv!, {
        timeoutSeconds: args.timeout_seconds,
        signal: extra.signal,
        ...(args.cwd !== undefined ? { cwd: args.cwd } : {}),
        ...(args.env !== undefined ? { env: args.env } : {}),
        ...(args.stdin_b64 !== undefined ? { stdin: new Uint8Array(Buffer.from(args.stdin_b64, "base64")) } : {}),
      });
      for await (const chunk of run) (chunk.stream === "stdout" ? out : err).push(chunk.data);
      const exit = await run.wait();
      const status = exit.timedOut ? `timed out after ${args.timeout_seconds} s (killed)`
        : exit.exitCode !== null ? `exit code ${exit.exitCode}` : `killed by signal ${exit.signal}`;
      const stdout = out.text();
      const stderr = err.text();
      const text = [status, ...(stdout ? ["--- stdout ---", stdout] : []), ...(stderr ? ["--- stderr ---", stderr] : [])].join("\n");
      return ok(text, {
        exit_code: exit.exitCode, signal: exit.signal, timed_out: exit.timedOut, duration_ms: Date.now() - t0,
        stdout, stderr, stdout_bytes: out.total, stderr_bytes: err.total, stdout_truncated: out.dropped > 0, stderr_truncated: err.dropped > 0,
      });
    } finally {
      stop();
    }
  },
});

/** Sends `notifications/progress` (elapsed seconds) while the command runs, if the caller gave a progress token. */
export function reportProgress(extra: ToolExtra, t0: number): () => void {
  const progressToken = extra._meta?.progressToken;
  if (progressToken === undefined) return () => {};
  const timer = setInterval(() => {
    const progress = Math.round((Date.now() - t0) / 1000);
    extra.sendNotification({ method: "notifications/progress", params: { progressToken, progress, message: `still running after ${progress} s` } }).catch(() => {});
  }, PROGRESS_EVERY_MS);
  return () => clearInterval(timer);
}
