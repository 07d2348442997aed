import type { Command } from "commander";
import { openRuntime } from "./options.js";
import { printTable } from "../output.js";

export function registerTemplateLs(parent: Command): void {
  parent
    .command("ls")
    .description("list template versions on this host")
    .option("--json", "print JSON")
    .action(async (opts: { json?: boolean }, cmd: Command) => {
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
          process.stdout.write(JSON.stringify(rows, null, 2) + "\n");
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
