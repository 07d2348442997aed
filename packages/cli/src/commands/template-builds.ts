import type { Command } from "commander";
import { Templates, type TemplateBuild } from "@den/sdk";
import { UsageError, duration, printJson, printTable } from "../output.js";

/** What a build builds from, for the table: `image python:3.12`, `dockerfile base`, ... */
export function sourceCell(b: TemplateBuild): string {
  const { kind, ...rest } = b.source;
  return [kind, ...Object.values(rest)].filter(Boolean).join(" ") || "-";
}

/** `den template builds [NAME]`: this owner's template builds, newest first. */
export function registerTemplateBuilds(parent: Command): void {
  parent
    .command("builds")
    .description("template builds on a running server, newest first (of one template with NAME)")
    .argument("[name]", "only the builds of this template")
    .option("--limit <n>", "at most this many (1 to 200)", "50")
    .option("--json", "print JSON")
    .action(async (name: string | undefined, opts: { limit: string; json?: boolean }) => {
      const limit = Number(opts.limit);
      if (!Number.isInteger(limit) || limit < 1 || limit > 200) throw new UsageError(`--limit wants a number from 1 to 200, got ${JSON.stringify(opts.limit)}`);
      const list = await Templates.builds({ ...(name ? { name } : {}), limit });
      if (opts.json) {
        printJson(list);
        return;
      }
      const now = Date.now();
      printTable([["ID", "NAME", "STATE", "VERSION", "SOURCE", "CREATED", "TOOK", "ERROR"], ...list.map((b) => [
        b.id, b.name, b.state, b.version ?? "-", sourceCell(b), b.createdAt.toISOString(),
        duration((b.finishedAt?.getTime() ?? now) - b.createdAt.getTime()), b.error ? `${b.error.code}: ${b.error.message}`.replace(/\s*\n\s*/g, " ").slice(0, 100) : "-",
      ])]);
    });
}
