import type { Command } from "commander";
import { Hosts } from "@den/sdk";

/** `den hosts undrain ID`. */
export function registerHostsUndrain(hosts: Command): void {
  hosts
    .command("undrain")
    .description("end a drain: the host takes new sandboxes again")
    .argument("<id>", "host id")
    .action(async (id: string) => {
      await Hosts.undrain(id);
      process.stdout.write(`${id} takes sandboxes again\n`);
    });
}
