import type { Command } from "commander";
import { Hosts } from "@den/sdk";

/** `den hosts revoke ID`. */
export function registerHostsRevoke(hosts: Command): void {
  hosts
    .command("revoke")
    .description("revoke a host: its certificates are refused, no call goes to it, its sandboxes are recovered elsewhere after its lease and grace")
    .argument("<id>", "host id")
    .action(async (id: string) => {
      const r = await Hosts.revoke(id);
      process.stdout.write(`${id} revoked (${r.revoked} certificate(s))\n`);
    });
}
