import type { Command } from "commander";
import { Sandbox } from "@den/sdk";
import { bytes, printJson, withSpinner } from "../output.js";

/** `den snapshot ID [--name N]`: a durable checkpoint; prints its id. */
export function registerSnapshot(program: Command): void {
  program
    .command("snapshot")
    .description("take a durable checkpoint of a running sandbox (it keeps running); prints the checkpoint id")
    .argument("<id>", "sandbox id")
    .option("--name <name>", "a name for the checkpoint")
    .option("--json", "print the checkpoint as JSON")
    .action(async (id: string, opts: { name?: string; json?: boolean }) => {
      const sbx = await Sandbox.connect(id);
      const cp = await withSpinner(`checkpointing ${id}`, () => sbx.snapshot(opts.name ? { name: opts.name } : {}));
      if (opts.json) printJson(cp);
      else process.stdout.write(`${cp.id}\n`);
      process.stderr.write(`paused ${cp.pauseMs} ms, ${bytes(cp.storedBytes)} stored\n`);
    });
}
