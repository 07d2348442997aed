import type { Command } from "commander";
import { Templates } from "@den/sdk";
import { openRuntime } from "./options.js";
import { printJson, printTable } from "../output.js";

/**
 * `den template ls`: the templates a running server offers this key (its own and the
 * caller's); `--local` reads this host's data dir instead (no server needed, but not
 * while one runs on it).
 */
export function registerTemplateLs(parent: Command): void {
  parent
    .command("ls")
    .description("list templates of a running server (--local: of this host's data dir)")
    .option("--local", "read the data dir (--data-dir) instead of asking a server")
    .option("--json", "print JSON")
    .action(async (opts: { local?: boolean; json?: boolean }, cmd: Command) => {
      if (!opts.local) {
        const list = await Templates.list();
        if (opts.json) printJson(list);
        else printTable([["NAME", "VERSION", "CURRENT", "OWNER", "VCPUS", "MEMORY", "DISK", "CREATED"], ...list.map((t) => [
          t.name, t.version, t.current ? "*" : "", t.owner ?? "-", String(t.vcpus), `${t.memoryMb} MiB`, `${t.diskMb} MiB`, t.createdAt.toISOString(),
        ])]);
        return;
      }
      const rt = await openRuntime(cmd);
      try {
        const list = await rt.templates.list();
        const rows = list.map((t) => ({
          name: t.name, version: t.version, current: t.current, created_at: t.manifest.createdAt,
          vcpus: t.manifest.vm.vcpus, memory_mb: t.manifest.vm.memoryMb, disk_mb: t.manifest.vm.diskMb,
          qemu: t.manifest.host.qemuVersion, accelerator: t.manifest.host.accelerator, cpu_model: t.manifest.host.cpuModel,
          tsc_khz: t.manifest.host.tscKhz,
        }));
        if (opts.json) {
          printJson(rows);
          return;
        }
        const header = ["NAME", "VERSION", "CURRENT", "VCPUS", "MEMORY", "DISK", "QEMU", "ACCEL", "CREATED"];
        const table = rows.map((r) => [r.name, r.version, r.current ? "*" : "", String(r.vcpus), `${r.memory_mb} MiB`, `${r.disk_mb} MiB`, r.qemu, r.accelerator, r.created_at]);
        printTable([header, ...table]);
      } finally {
        rt.close();
      }
    });
}
