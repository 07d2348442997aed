import type { Command } from "commander";
import type { Runtime } from "@den/runtime";

// The runtime, the server, the host agent, the PKI and the images are imported by the verbs
// that use them, when they run: loaded at start they made every `den exec` wait about a second.

/** The global options every verb sees. */
export async function globalOptions(cmd: Command): Promise<{ dataDir: string }> {
  const root = cmd.optsWithGlobals<{ dataDir?: string }>();
  return { dataDir: root.dataDir ?? (await import("@den/runtime")).defaultDataDir() };
}

export async function openRuntime(cmd: Command): Promise<Runtime> {
  const { Runtime } = await import("@den/runtime");
  return Runtime.open({ dataDir: (await globalOptions(cmd)).dataDir });
}

/** Progress lines go to stderr, so stdout stays clean for --json. */
export function logLine(line: string): void {
  process.stderr.write(`${line}\n`);
}

/**
 * Says so when a process about to run VMs holds capabilities they do not use (a plain `den
 * serve` as root): scripts/start.sh and the systemd units start Den with only the ones it needs.
 */
export async function warnSurplusCapabilities(): Promise<void> {
  const surplus = (await import("@den/runtime")).surplusCapabilities();
  if (surplus.length) logLine(`den: running with capabilities Den does not use (${surplus.join(", ")}); scripts/start.sh and deploy/den-host-agent.service start it without them`);
}
