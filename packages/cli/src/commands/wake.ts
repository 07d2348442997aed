import type { Command } from "commander";
import { actOn } from "./lifecycle.js";

/** `den wake ID`. */
export function registerWake(program: Command): void {
  program
    .command("wake")
    .description("wake a hibernated sandbox (processes, memory and files as they were)")
    .argument("<id>", "sandbox id")
    .option("--json", "print the sandbox as JSON")
    .action((id: string, opts: { json?: boolean }) => actOn(id, "waking", (s) => s.wake(), opts.json));
}
