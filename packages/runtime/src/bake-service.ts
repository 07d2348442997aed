import { DenError } from "@den/protocol";
import type { AgentClient } from "./agent-client.js";
import { execBody, runToCompletion, startExec, type Command } from "./exec.js";
import type { TemplateRunConfig } from "./snapshot.js";

/** How a template's service is started before its snapshot (a recipe's `run`, a build's start, or a base template's for its variants). */
export interface ServiceStart {
  run: TemplateRunConfig;
  /** What runs, when not `run.startCmd` in a shell (an image's CMD as argv). */
  command?: Command;
  readyTimeoutSeconds?: number;
}

/** A start command with no ready command gets this long to come up before the snapshot. */
const START_GRACE_MS = 2000;
const READY_POLL_MS = 500;
const DEFAULT_READY_TIMEOUT_S = 600;

/**
 * Starts the template's service in the VM about to be baked and waits until its ready
 * command exits 0, so every sandbox made from the snapshot has it running already. The
 * deadline passing, or the service failing first (a non-zero exit or a signal: one that
 * exits 0 may have left a daemon behind), fails the bake with the service's stderr.
 */
export async function startService(agent: AgentClient, s: ServiceStart, log: (l: string) => void): Promise<void> {
  const { run } = s;
  const command = s.command ?? run.startCmd;
  if (!command) return;
  const opts = { env: run.env, ...(run.workdir ? { cwd: run.workdir } : {}), ...(run.user ? { user: run.user } : {}) };
  log(`starting: ${run.startCmd ?? ([] as string[]).concat(command).join(" ")}`);
  const started = await startExec(agent, execBody(command, opts, "buffer"));
  const proc = Number(started.proc);
  const ready = run.readyCmd;
  if (!ready) {
    await new Promise((r) => setTimeout(r, START_GRACE_MS));
    return;
  }
  const timeoutS = s.readyTimeoutSeconds ?? DEFAULT_READY_TIMEOUT_S;
  const t0 = Date.now();
  const deadline = t0 + timeoutS * 1000;
  const stderrTail = () => agent.request("proc.read", { proc, channel: 2, offset: 0, max: 256 * 1024 })
    .then((x) => Buffer.from(x.data, "base64").toString("utf8").slice(-2000)).catch(() => "");
  log(`waiting for: ${ready}`);
  for (;;) {
    const r = await runToCompletion(agent, ready, { env: run.env, timeoutMs: Math.max(1000, Math.min(30_000, deadline - Date.now())), maxOutputBytes: 64 * 1024 });
    if (r.exitCode === 0) {
      log(`ready after ${((Date.now() - t0) / 1000).toFixed(1)} s`);
      return;
    }
    const state = await agent.request("proc.wait", { proc, timeout_ms: 0 });
    if (!state.running && (state.exit_code !== 0 || state.signal !== null)) {
      const why = state.exit_code === null ? `died of signal ${state.signal}` : `exited with ${state.exit_code}`;
      throw new DenError("setup_failed", `the start command ${why} before it was ready: ${String(run.startCmd ?? command).slice(0, 200)}`, { stderr: await stderrTail() });
    }
    if (Date.now() > deadline) {
      throw new DenError("setup_failed", `the ready command did not pass within ${timeoutS} s: ${ready.slice(0, 200)}`, { stderr: await stderrTail(), ready_stderr: r.stderr.subarray(-2000).toString("utf8") });
    }
    await new Promise((res) => setTimeout(res, READY_POLL_MS));
  }
}
