import type { Command } from "commander";
import { DenError } from "@den/protocol";
import { actOn } from "./lifecycle.js";

/** `den hibernate ID [--cold | --disk]`. */
export function registerHibernate(program: Command): void {
  program
    .command("hibernate")
    .description("hibernate a sandbox: warm (paused in place, instant wake), --cold (to the snapshot store, no CPU or RAM) or --disk (shut down keeping its files only; a wake boots it)")
    .argument("<id>", "sandbox id")
    .option("--cold", "cold: the VM is removed and its state kept in the snapshot store")
    .option("--disk", "disk: the VM shuts down keeping its disk on its host; its memory and processes are gone")
    .option("--json", "print the sandbox as JSON")
    .action((id: string, opts: { cold?: boolean; disk?: boolean; json?: boolean }) => {
      if (opts.cold && opts.disk) throw new DenError("invalid_argument", "--cold and --disk are two different modes: pick one");
      return actOn(id, "hibernating", (s) => s.hibernate({ mode: opts.cold ? "cold" : opts.disk ? "disk" : "warm" }), opts.json);
    });
}
