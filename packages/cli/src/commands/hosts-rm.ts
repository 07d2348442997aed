import type { Command } from "commander";
import { Hosts } from "@den/sdk";

/** `den hosts rm ID`. */
export function registerHostsRm(hosts: Command): void {
  hosts
    .command("rm")
    .description("remove a host that holds no sandbox (drain it first); its certificates are revoked")
    .argument("<id>", "host id")
    .action(async (id: string) => {
      await Hosts.remove(id);
      process.stdout.write(`${id} removed\n`);
    });
}
