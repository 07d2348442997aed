import type { Command } from "commander";
import { actOn } from "./lifecycle.js";

/** `den rm ID...`: destroys sandboxes (idempotent). */
export function registerRm(program: Command): void {
  program
    .command("rm")
    .description("destroy sandboxes (their VMs, disks and snapshots)")
    .argument("<ids...>", "sandbox ids")
    .option("--json", "print each sandbox as JSON")
    .action(async (ids: string[], opts: { json?: boolean }) => {
      for (const id of ids) await actOn(id, "destroying", (s) => s.destroy(), opts.json);
    });
}
