import type { Command } from "commander";
import { Sandbox, type SandboxInfo, type SandboxState } from "@den/sdk";
import { SANDBOX_HEADER, collect, parsePairs, printJson, printTable, sandboxJson, sandboxRow } from "../output.js";

/** `den ls`: the caller's sandboxes (not destroyed ones unless --state destroyed). */
export function registerLs(program: Command): void {
  program
    .command("ls")
    .description("list sandboxes")
    .option("--state <state>", "only this state: running, hibernated, creating, lost, error, destroyed")
    .option("--meta <key=value>", "only sandboxes with this metadata (repeat: all must match)", collect)
    .option("--json", "print JSON")
    .action(async (opts: { state?: string; meta?: string[]; json?: boolean }) => {
      const metadata = parsePairs(opts.meta);
      const all: SandboxInfo[] = [];
      for await (const s of Sandbox.list({ ...(opts.state ? { state: opts.state as SandboxState } : {}), ...(metadata ? { metadata } : {}) })) all.push(s);
      if (opts.json) printJson(all.map(sandboxJson));
      else printTable([SANDBOX_HEADER, ...all.map((s) => sandboxRow(s))]);
    });
}
