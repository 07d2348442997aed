import type { Command } from "commander";
import { Templates, type TemplateBuild } from "@den/sdk";
import { printJson } from "../output.js";

/** How long `den template cancel` waits for the build to end after asking. */
const WAIT_MS = 30_000;

/** `den template cancel BUILD_ID`: stops a running template build (it ends `cancelled`). */
export function registerTemplateCancel(parent: Command): void {
  parent
    .command("cancel")
    .description("cancel a running template build (it ends cancelled; its VMs are gone)")
    .argument("<build-id>", "the build's id (den template builds lists them)")
    .option("--json", "print the build as JSON")
    .action(async (id: string, opts: { json?: boolean }) => {
      let b: TemplateBuild = await Templates.cancelBuild(id);
      // The host stops the build after it answers: wait (a while) to say how it ended.
      const deadline = Date.now() + WAIT_MS;
      while (b.state === "building" && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 250));
        b = await Templates.build(id);
      }
      if (opts.json) printJson(b);
      else process.stdout.write(`${b.id} ${b.state}${b.state === "building" ? " (still stopping)" : ""}\n`);
    });
}
