import type { Command } from "commander";
import { Keys } from "@den/sdk";
import { printJson } from "../output.js";

/** `den keys create --owner O [--admin] [--e2b]`: prints the new secret (shown only this once). */
export function registerKeysCreate(keys: Command): void {
  keys
    .command("create")
    .description("create a key; prints the secret (shown only this once)")
    .requiredOption("--owner <owner>", "who the key belongs to (keys of one owner see the same sandboxes)")
    .option("--admin", "the key may manage keys")
    .option("--e2b", "an e2b_<hex> secret, the form E2B's Python client accepts (works everywhere a Den key does)")
    .option("--json", "print JSON")
    .action(async (opts: { owner: string; admin?: boolean; e2b?: boolean; json?: boolean }) => {
      const k = await Keys.create({ owner: opts.owner, ...(opts.admin ? { admin: true } : {}), ...(opts.e2b ? { format: "e2b" as const } : {}) });
      if (opts.json) printJson(k);
      else process.stdout.write(`${k.key}\n`);
      if (!opts.json) process.stderr.write(`key ${k.id} for ${k.owner}${k.admin ? " (admin)" : ""}: keep the secret, it is not shown again\n`);
    });
}
