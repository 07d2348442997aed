/**
 * A template build's setup commands, run in order in its building sandbox under the build's
 * TTL, with the failure a user sees (`setup_failed`, the command's index, exit and output
 * tails). Both hosts' (LocalHostAgent and the in-memory one) build with it.
 */
import { DenError, type host } from "@den/protocol";

type Exec = (cmd: string, opts: { timeoutMs: number }) => Promise<host.GuestExecResult>;

export async function runSetup(spec: host.TemplateBuildSpec, exec: Exec): Promise<void> {
  // The build's TTL bounds all its commands together, as a sandbox's bounds its life.
  const deadline = spec.ttlSeconds ? Date.now() + spec.ttlSeconds * 1000 : Infinity;
  for (const [i, cmd] of spec.setup.entries()) {
    const leftMs = deadline - Date.now();
    if (leftMs <= 0) throw new DenError("setup_failed", `the template build passed its TTL (${spec.ttlSeconds} s) before setup command ${i + 1}`, { command_index: i });
    const timeoutMs = Math.min(spec.setupTimeoutSeconds * 1000, leftMs);
    const r = await exec(cmd, { timeoutMs });
    if (r.exitCode !== 0 || r.timedOut) {
      const why = r.timedOut ? (timeoutMs < spec.setupTimeoutSeconds * 1000 ? `passed the build's TTL (${spec.ttlSeconds} s)` : `timed out after ${spec.setupTimeoutSeconds} s`) : r.exitCode === null ? `died of signal ${r.signal}` : `exited with ${r.exitCode}`;
      throw new DenError("setup_failed", `setup command ${i + 1} ${why}: ${cmd.slice(0, 200)}`, {
        command_index: i, exit_code: r.exitCode, stdout: r.stdout.subarray(-4096).toString("utf8"), stderr: r.stderr.subarray(-4096).toString("utf8"),
      });
    }
  }
}
