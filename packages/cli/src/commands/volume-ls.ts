import type { Command } from "commander";
import { Volumes, type VolumeInfo } from "@den/sdk";
import { printJson, printTable } from "../output.js";

/** Where a volume is mounted, for the table: `sbx_...:/path (ro)`, `(asleep)` for a mount that does not hold it now. */
export function mountsCell(v: VolumeInfo): string {
  return v.mounts.map((m) => `${m.sandboxId}:${m.path}${m.readOnly ? " (ro)" : ""}${m.held ? "" : " (asleep)"}`).join(", ") || "-";
}

/** `den volume ls`. */
export function registerVolumeLs(volume: Command): void {
  volume
    .command("ls")
    .description("list this owner's volumes and where they are mounted")
    .option("--json", "print JSON")
    .action(async (opts: { json?: boolean }) => {
      const list = await Volumes.list();
      if (opts.json) printJson(list);
      else printTable([["NAME", "SIZE", "MOUNTED IN", "CREATED"], ...list.map((v) => [v.name, `${v.sizeMb} MiB`, mountsCell(v), v.createdAt.toISOString()])]);
    });
}
