import type { Command } from "commander";
import { Templates } from "@den/sdk";
import { collect } from "../output.js";

/**
 * `den template create`: asks a running `den serve` (DEN_API_URL, DEN_API_KEY) to build a
 * template from a template or checkpoint plus setup commands.
 */
export function registerTemplateCreate(parent: Command): void {
  parent
    .command("create")
    .description("build a template on a running server: a source plus setup commands, captured with its memory")
    .argument("<name>", "the new template's name")
    .option("--from <template>", "start from this template", "base")
    .option("--from-checkpoint <id>", "start from a checkpoint instead")
    .option("--run <command>", "a setup command (repeatable, run in order; each must exit 0)", collect, [] as string[])
    .option("--timeout <seconds>", "per setup command", "600")
    .option("--json", "print the template as JSON")
    .action(async (name: string, opts: { from: string; fromCheckpoint?: string; run: string[]; timeout: string; json?: boolean }) => {
      const t0 = Date.now();
      const t = await Templates.create({
        name, setup: opts.run, setupTimeoutSeconds: Number(opts.timeout),
        ...(opts.fromCheckpoint ? { fromCheckpoint: opts.fromCheckpoint } : { fromTemplate: opts.from }),
      });
      if (opts.json) process.stdout.write(JSON.stringify(t, null, 2) + "\n");
      else process.stdout.write(`${t.name}@${t.version} (${((Date.now() - t0) / 1000).toFixed(1)} s)\n`);
    });
}
