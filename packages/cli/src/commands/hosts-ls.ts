import type { Command } from "commander";
import { Hosts } from "@den/sdk";
import { printJson, printTable } from "../output.js";

const gib = (mb: number) => `${Math.round(mb / 1024)}G`;

/** `den hosts ls`. */
export function registerHostsLs(hosts: Command): void {
  hosts
    .command("ls")
    .description("list hosts: status, lease, kind, capacity and use")
    .option("--json", "print JSON")
    .action(async (opts: { json?: boolean }) => {
      const list = await Hosts.list();
      if (opts.json) return printJson(list);
      printTable([["ID", "URL", "STATUS", "STATE", "MANAGED", "KIND", "MEMORY", "VCPUS", "SANDBOXES", "CERT EXPIRES"], ...list.map((h) => [
        h.id, h.url, h.status, h.state, h.managed, h.kind ? `${h.kind.accelerator} ${h.kind.arch} qemu ${h.kind.qemuVersion}` : "-",
        h.capacity && h.used ? `${gib(h.used.memoryMb)}/${gib(h.capacity.memoryMb)}` : "-", h.capacity && h.used ? `${h.used.vcpus}/${h.capacity.vcpus}` : "-", String(h.sandboxes),
        h.certExpiresAt ? h.certExpiresAt.toISOString().replace(/\.\d+Z$/, "Z") : "-",
      ])]);
    });
}
