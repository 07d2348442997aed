import type { Command } from "commander";
import { Webhooks } from "@den/sdk";

/** `den webhook rm ID`. */
export function registerWebhookRm(webhook: Command): void {
  webhook
    .command("rm")
    .description("delete a webhook (nothing more is delivered to it)")
    .argument("<id>", "webhook id")
    .action(async (id: string) => {
      await Webhooks.delete(id);
      process.stdout.write(`${id} deleted\n`);
    });
}
