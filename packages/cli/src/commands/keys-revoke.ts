import type { Command } from "commander";
import { Keys } from "@den/sdk";
import { printJson } from "../output.js";

/** `den keys revoke ID`. */
export function registerKeysRevoke(keys: Command): void {
  keys
    .command("revoke")
    .description("revoke a key (its requests get 401 from now on)")
    .argument("<id>", "key id")
    .option("--json", "print JSON")
    .action(async (id: string, opts: { json?: boolean }) => {
      const k = await Keys.revoke(id);
      if (opts.json) printJson(k);
      else process.stdout.write(`${k.id} revoked\n`);
    });
}
