import type { Command } from "commander";
import { actOn } from "./lifecycle.js";

/** `den hibernate ID [--cold]`. */
export function registerHibernate(program: Command): void {
  program
    .command("hibernate")
    .description("hibernate a sandbox: warm (paused in place, instant wake) or --cold (to the snapshot store, no CPU or RAM)")
    .argument("<id>", "sandbox id")
    .option("--cold", "cold: the VM is removed and its state kept in the snapshot store")
    .option("--json", "print the sandbox as JSON")
    .action((id: string, opts: { cold?: boolean; json?: boolean }) => actOn(id, "hibernating", (s) => s.hibernate({ mode: opts.cold ? "cold" : "warm" }), opts.json));
}
