import type { Command } from "commander";
import { Sandbox } from "@den/sdk";
import { printJson, sandboxJson, withSpinner } from "../output.js";

/** `den fork ID [-n N]`: N copies of a running sandbox; prints their ids. */
export function registerFork(program: Command): void {
  program
    .command("fork")
    .description("fork a running sandbox into independent copies (exact state, copy-on-write); prints their ids")
    .argument("<id>", "sandbox id")
    .option("-n, --count <n>", "how many copies", "1")
    .option("--json", "print the new sandboxes as JSON")
    .action(async (id: string, opts: { count: string; json?: boolean }) => {
      const sbx = await Sandbox.connect(id);
      const kids = await withSpinner(`forking ${id}`, () => sbx.fork({ count: Number(opts.count) }));
      if (opts.json) printJson(kids.map((k) => sandboxJson(k.info)));
      else for (const k of kids) process.stdout.write(`${k.id}\n`);
    });
}
