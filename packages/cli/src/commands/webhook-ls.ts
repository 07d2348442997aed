import type { Command } from "commander";
import { WEBHOOK_EVENT_TYPES, Webhooks, type WebhookInfo } from "@den/sdk";
import { printJson, printTable } from "../output.js";

/** "all" when a webhook is told everything, else its event types. */
export function eventsCell(w: WebhookInfo): string {
  return WEBHOOK_EVENT_TYPES.every((t) => w.events.includes(t)) ? "all" : w.events.join(",");
}

/** `den webhook ls`. */
export function registerWebhookLs(webhook: Command): void {
  webhook
    .command("ls")
    .description("list this owner's webhooks")
    .option("--json", "print JSON")
    .action(async (opts: { json?: boolean }) => {
      const list = await Webhooks.list();
      if (opts.json) printJson(list);
      else printTable([["ID", "URL", "EVENTS", "CREATED"], ...list.map((w) => [w.id, w.url, eventsCell(w), w.createdAt.toISOString()])]);
    });
}
