import { DenError } from "@den/protocol";
import type { AgentClient } from "./agent-client.js";
import { execBody, runToCompletion, startExec } from "./exec.js";
import type { TemplateRunConfig } from "./snapshot.js";

/** How a template's service is started before its snapshot (a recipe's `run`, or a base template's for its variants). */
export interface ServiceStart {
  run: TemplateRunConfig;
  readyTimeoutSeconds?: number;
}

/** A start command with no ready command gets this long to come up before the snapshot. */
const START_GRACE_MS = 2000;
const READY_POLL_MS = 500;
const DEFAULT_READY_TIMEOUT_S = 600;

/**
 * Starts the template's service in the VM about to be baked and waits until its ready
 * command exits 0, so every sandbox made from the snapshot has it running already. The
 * service dying first, or the deadline passing, fails the bake with the service's stderr.
 */
export async function startService(agent: AgentClient, s: ServiceStart, log: (l: string) => void): Promise<void> {
  const { run } = s;
  if (!run.startCmd) return;
  const opts = { env: run.env, ...(run.workdir ? { cwd: run.workdir } : {}), ...(run.user ? { user: run.user } : {}) };
  log(`starting: ${run.startCmd}`);
  const started = await startExec(agent, execBody(run.startCmd, opts, "buffer"));
  const proc = Number(started.proc);
  if (!run.readyCmd) {
    await new Promise((r) => setTimeout(r, START_GRACE_MS));
    return;
  }
  const timeoutS = s.readyTimeoutSeconds ?? DEFAULT_READY_TIMEOUT_S;
  const t0 = Date.now();
  const deadline = t0 + timeoutS * 1000;
  log(`waiting for: ${run.readyCmd}`);
  for (;;) {
    const r = await runToCompletion(agent, run.readyCmd, { env: run.env, timeoutMs: Math.max(1000, Math.min(30_000, deadline - Date.now())), maxOutputBytes: 64 * 1024 });
    if (r.exitCode === 0) {
      log(`ready after ${((Date.now() - t0) / 1000).toFixed(1)} s`);
      return;
    }
    const state = await agent.request("proc.wait", { proc, timeout_ms: 0 });
    const exited = !state.running;
    if (exited || Date.now() > deadline) {
      const tail = await agent.request("proc.read", { proc, channel: 2, offset: 0, max: 256 * 1024 })
        .then((x) => Buffer.from(x.data, "base64").toString("utf8").slice(-2000)).catch(() => "");
      const why = exited ? "the start command exited before it was ready" : `the ready command did not pass within ${timeoutS} s`;
      throw new DenError("setup_failed", `${why}: ${run.startCmd.slice(0, 200)}`, { stderr: tail });
    }
    await new Promise((res) => setTimeout(res, READY_POLL_MS));
  }
}
