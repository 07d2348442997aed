import type { Command } from "commander";
import { Webhooks } from "@den/sdk";
import { printJson } from "../output.js";

/** `den webhook redeliver ID DELIVERY_ID`: prints the new delivery's id. */
export function registerWebhookRedeliver(webhook: Command): void {
  webhook
    .command("redeliver")
    .description("send a delivery's event again (a new pending delivery of the same message)")
    .argument("<id>", "webhook id")
    .argument("<delivery-id>", "delivery id (from den webhook deliveries)")
    .option("--json", "print JSON")
    .action(async (id: string, deliveryId: string, opts: { json?: boolean }) => {
      const d = await Webhooks.redeliver(id, deliveryId);
      if (opts.json) printJson(d);
      else process.stdout.write(`${d.id}\n`);
      if (!opts.json) process.stderr.write(`${d.type} queued again as ${d.id} (${d.status}; webhook-id ${d.messageId})\n`);
    });
}
