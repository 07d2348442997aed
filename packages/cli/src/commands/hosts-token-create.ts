import { Option, type Command } from "commander";
import { Hosts } from "@den/sdk";
import { printJson } from "../output.js";
import { positive } from "./ca-init.js";

/** `den hosts token create [--ttl SECONDS] [--kind host|control-plane]`: prints a one-time join token (shown only this once). */
export function registerHostsTokenCreate(token: Command): void {
  token
    .command("create")
    .description("make a one-time token a machine joins the fleet with (`den host run --join TOKEN`); prints it (shown only this once)")
    .option("--ttl <seconds>", "how long it may be used (default 3600, at most a week)")
    .addOption(new Option("--kind <kind>", "what joins with it").choices(["host", "control-plane"]).default("host"))
    .option("--json", "print JSON")
    .action(async (opts: { ttl?: string; kind: "host" | "control-plane"; json?: boolean }) => {
      const ttl = positive(opts.ttl, "--ttl");
      const t = await Hosts.createJoinToken({ kind: opts.kind, ...(ttl !== undefined ? { ttlSeconds: ttl } : {}) });
      if (opts.json) return printJson(t);
      process.stdout.write(`${t.token}\n`);
      process.stderr.write(`join token ${t.id} for a ${t.kind}, until ${t.expiresAt.toISOString()}: it works once and is not shown again\n`);
    });
}
