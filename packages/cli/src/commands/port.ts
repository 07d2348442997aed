import type { Command } from "commander";
import { Sandbox } from "@den/sdk";
import { printTable } from "../output.js";

/** `den port ID [PORT]`: what listens in a sandbox, or a signed URL to one port. */
export function registerPort(program: Command): void {
  program
    .command("port")
    .description("list a sandbox's listening ports, or print a signed URL to one")
    .argument("<id>", "sandbox id")
    .argument("[port]", "a port: print a URL to it that works in a browser until it expires")
    .option("--expires <seconds>", "how long the URL works", "3600")
    .option("--json", "print JSON")
    .action(async (id: string, port: string | undefined, opts: { expires: string; json?: boolean }) => {
      const sbx = await Sandbox.connect(id);
      if (port === undefined) {
        const ports = await sbx.ports();
        if (opts.json) process.stdout.write(JSON.stringify(ports, null, 2) + "\n");
        else printTable([["PORT", "ADDRESS", "PROCESS"], ...ports.map((p) => [String(p.port), p.address, p.process ? `${p.process} (${p.pid})` : "-"])]);
        return;
      }
      const u = await sbx.createPortUrl(Number(port), { expiresInSeconds: Number(opts.expires) });
      if (opts.json) process.stdout.write(JSON.stringify(u, null, 2) + "\n");
      else process.stdout.write(`${u.url}\nexpires ${u.expiresAt.toISOString()}\n`);
    });
}
