import type { Command } from "commander";
import { Hosts } from "@den/sdk";

/** `den hosts drain ID [--wait]`. */
export function registerHostsDrain(hosts: Command): void {
  hosts
    .command("drain")
    .description("take no new sandboxes on a host, cold-hibernate its own and park its volumes in the store, so they wake on other hosts")
    .argument("<id>", "host id")
    .option("--wait", "wait until none is left on it")
    .action(async (id: string, opts: { wait?: boolean }) => {
      let { left } = await Hosts.drain(id);
      while (opts.wait && left > 0) {
        process.stderr.write(`${left} sandbox(es) and volume(s) left on ${id}\n`);
        await new Promise((r) => setTimeout(r, 2000));
        ({ left } = await Hosts.drain(id));
      }
      process.stdout.write(left ? `${id} draining: ${left} sandbox(es) and volume(s) left\n` : `${id} drained\n`);
    });
}
