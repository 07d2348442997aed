import type { Command } from "commander";
import { WEBHOOK_EVENT_TYPES, Webhooks, type WebhookEventType } from "@den/sdk";
import { UsageError, collect, printJson } from "../output.js";

/** The `--event` values, checked here so a typo gets the list of valid ones. */
export function parseEvents(events: string[] | undefined): WebhookEventType[] | undefined {
  if (!events?.length) return undefined;
  for (const e of events) {
    if (!(WEBHOOK_EVENT_TYPES as readonly string[]).includes(e)) throw new UsageError(`--event wants one of ${WEBHOOK_EVENT_TYPES.join(", ")}; got ${JSON.stringify(e)}`);
  }
  return [...new Set(events)] as WebhookEventType[];
}

/** `den webhook add URL [--event TYPE ...] [--description D]`: prints the signing secret (shown only this once). */
export function registerWebhookAdd(webhook: Command): void {
  webhook
    .command("add")
    .description("add a webhook; prints its signing secret (shown only this once)")
    .argument("<url>", "where events are POSTed (http or https, a public address)")
    .option("--event <type>", `only this event type (repeat; default: all): ${WEBHOOK_EVENT_TYPES.join(", ")}`, collect)
    .option("--description <text>", "a note for people")
    .option("--json", "print JSON")
    .action(async (url: string, opts: { event?: string[]; description?: string; json?: boolean }) => {
      const events = parseEvents(opts.event);
      const w = await Webhooks.create({ url, ...(events ? { events } : {}), ...(opts.description !== undefined ? { description: opts.description } : {}) });
      if (opts.json) printJson(w);
      else process.stdout.write(`${w.secret}\n`);
      if (!opts.json) process.stderr.write(`webhook ${w.id} for ${w.url}: keep the signing secret, it is not shown again\n`);
    });
}
