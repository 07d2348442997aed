import type { Command } from "commander";
import { Keys } from "@den/sdk";
import { printJson, printTable } from "../output.js";

/** `den keys ls`. */
export function registerKeysLs(keys: Command): void {
  keys
    .command("ls")
    .description("list keys")
    .option("--json", "print JSON")
    .action(async (opts: { json?: boolean }) => {
      const list = await Keys.list();
      if (opts.json) printJson(list);
      else printTable([["ID", "OWNER", "ADMIN", "CREATED", "REVOKED"], ...list.map((k) => [k.id, k.owner, k.admin ? "yes" : "no", k.createdAt.toISOString(), k.revokedAt ? k.revokedAt.toISOString() : "-"])]);
    });
}
