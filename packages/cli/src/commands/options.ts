import type { Command } from "commander";
import { Runtime, defaultDataDir, surplusCapabilities } from "@den/runtime";

/** The global options every verb sees. */
export function globalOptions(cmd: Command): { dataDir: string } {
  const root = cmd.optsWithGlobals<{ dataDir?: string }>();
  return { dataDir: root.dataDir ?? defaultDataDir() };
}

export function openRuntime(cmd: Command): Promise<Runtime> {
  return Runtime.open({ dataDir: globalOptions(cmd).dataDir });
}

/** Progress lines go to stderr, so stdout stays clean for --json. */
export function logLine(line: string): void {
  process.stderr.write(`${line}\n`);
}

/**
 * Says so when a process about to run VMs holds capabilities they do not use (a plain `den
 * serve` as root): scripts/start.sh and the systemd units start Den with only the ones it needs.
 */
export function warnSurplusCapabilities(): void {
  const surplus = surplusCapabilities();
  if (surplus.length) logLine(`den: running with capabilities Den does not use (${surplus.join(", ")}); scripts/start.sh and deploy/den-host-agent.service start it without them`);
}
