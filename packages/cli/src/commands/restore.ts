import type { Command } from "commander";
import { Sandbox } from "@den/sdk";
import { collect, parsePairs, printJson, sandboxJson, withSpinner } from "../output.js";

/** `den restore CHECKPOINT`: a new sandbox from a checkpoint; prints its id. */
export function registerRestore(program: Command): void {
  program
    .command("restore")
    .description("create a new sandbox from a checkpoint; prints its id")
    .argument("<checkpoint>", "checkpoint id")
    .option("--ttl <seconds>", "hard deadline from now, in seconds")
    .option("--persistent", "hibernate instead of being destroyed when idle")
    .option("--meta <key=value>", "a metadata label (repeat for more)", collect)
    .option("--json", "print the sandbox as JSON")
    .action(async (checkpoint: string, opts: { ttl?: string; persistent?: boolean; meta?: string[]; json?: boolean }) => {
      const metadata = parsePairs(opts.meta);
      const sbx = await withSpinner(`restoring ${checkpoint}`, () => Sandbox.restore(checkpoint, {
        ...(opts.ttl ? { ttlSeconds: Number(opts.ttl) } : {}), ...(opts.persistent ? { persistent: true } : {}), ...(metadata ? { metadata } : {}),
      }));
      if (opts.json) printJson(sandboxJson(sbx.info));
      else process.stdout.write(`${sbx.id}\n`);
    });
}
