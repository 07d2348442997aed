import type { Command } from "commander";
import { Usage } from "@den/sdk";
import { printTable } from "../output.js";

/** `den usage`: the server's metering (DEN_API_URL, DEN_API_KEY), as a table or JSON. */
export function registerUsage(program: Command): void {
  program
    .command("usage")
    .description("metered usage of a running server: time per state, CPU, memory, storage, cost")
    .option("--from <time>", "start (ISO 8601; default 24 h before --to)")
    .option("--to <time>", "end (ISO 8601; default now)")
    .option("--group-by <g>", "sandbox, owner or metadata.<key>", "sandbox")
    .option("--owner <owner>", "admin keys: one owner's usage")
    .option("--json", "print JSON")
    .action(async (opts: { from?: string; to?: string; groupBy: string; owner?: string; json?: boolean }) => {
      const r = await Usage.get({
        groupBy: opts.groupBy, ...(opts.from ? { from: new Date(opts.from) } : {}), ...(opts.to ? { to: new Date(opts.to) } : {}),
        ...(opts.owner ? { owner: opts.owner } : {}),
      });
      if (opts.json) {
        process.stdout.write(JSON.stringify(r, null, 2) + "\n");
        return;
      }
      const s = (x: number) => x.toFixed(1);
      const header = [opts.groupBy.toUpperCase(), "SANDBOXES", "RUNNING s", "WARM s", "COLD s", "vCPU s", "GiB s", "HOST CPU s", "DEN CPU s", "STORED GB-mo", "COST"];
      const rows = r.groups.map((g) => [
        g.key ?? "(none)", String(g.sandboxes), s(g.runningSeconds), s(g.warmHibernatedSeconds), s(g.coldHibernatedSeconds), s(g.vcpuSeconds),
        s(g.memoryGibSeconds), s(g.hostCpuSeconds), s(g.denCpuSeconds), g.storedGbMonths.toExponential(2), g.cost ? g.cost.total.toFixed(4) : "-",
      ]);
      process.stdout.write(`${r.from.toISOString()} .. ${r.to.toISOString()}\n`);
      printTable([header, ...rows]);
    });
}
