import type { Command } from "commander";
import { Runtime, defaultDataDir } from "@den/runtime";

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
