import type { Command } from "commander";
import { Sandbox, type SandboxEvent } from "@den/sdk";

function line(e: SandboxEvent): string {
  const data = Object.keys(e.data).length ? ` ${JSON.stringify(e.data)}` : "";
  return `${e.at.toISOString()}  ${e.type}${e.reason ? ` (${e.reason})` : ""}${data}\n`;
}

/** `den events ID [--follow]`: the sandbox's lifecycle log. */
export function registerEvents(program: Command): void {
  program
    .command("events")
    .description("a sandbox's lifecycle log; --follow keeps printing until it is destroyed")
    .argument("<id>", "sandbox id")
    .option("-f, --follow", "keep following")
    .option("--json", "one JSON object per line")
    .action(async (id: string, opts: { follow?: boolean; json?: boolean }) => {
      const sbx = await Sandbox.connect(id);
      const print = (e: SandboxEvent) => process.stdout.write(opts.json ? JSON.stringify(e) + "\n" : line(e));
      if (opts.follow) {
        for await (const e of sbx.events({ follow: true })) print(e);
      } else {
        for (const e of await sbx.events()) print(e);
      }
    });
}
