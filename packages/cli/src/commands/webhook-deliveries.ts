import type { Command } from "commander";
import { Webhooks, type WebhookDeliveryStatus } from "@den/sdk";
import { UsageError, printJson, printTable } from "../output.js";

const STATUSES: readonly WebhookDeliveryStatus[] = ["pending", "delivered", "failed"];

/** One line, bounded: an error cell of the table. */
const short = (s: string, max = 80) => {
  const one = s.replace(/\s+/g, " ");
  return one.length > max ? `${one.slice(0, max - 1)}…` : one;
};

/** `den webhook deliveries ID [--status S] [--limit N] [--cursor C]`: newest first, one page. */
export function registerWebhookDeliveries(webhook: Command): void {
  webhook
    .command("deliveries")
    .description("a webhook's deliveries, newest first (one page; --cursor for the next)")
    .argument("<id>", "webhook id")
    .option("--status <status>", "only pending, delivered or failed ones")
    .option("--limit <n>", "at most this many")
    .option("--cursor <cursor>", "the page after the one that printed this cursor")
    .option("--json", "print JSON")
    .action(async (id: string, opts: { status?: string; limit?: string; cursor?: string; json?: boolean }) => {
      if (opts.status !== undefined && !(STATUSES as readonly string[]).includes(opts.status)) {
        throw new UsageError(`--status wants one of ${STATUSES.join(", ")}; got ${JSON.stringify(opts.status)}`);
      }
      const limit = opts.limit === undefined ? undefined : Number(opts.limit);
      if (limit !== undefined && !(Number.isInteger(limit) && limit > 0)) throw new UsageError(`--limit wants a positive integer, got ${JSON.stringify(opts.limit)}`);
      const page = await Webhooks.deliveries(id, {
        ...(opts.status !== undefined ? { status: opts.status as WebhookDeliveryStatus } : {}),
        ...(limit !== undefined ? { limit } : {}),
        ...(opts.cursor !== undefined ? { cursor: opts.cursor } : {}),
      });
      if (opts.json) printJson(page.deliveries);
      else printTable([["ID", "TYPE", "SANDBOX", "STATUS", "ATTEMPTS", "HTTP", "CREATED", "ERROR"], ...page.deliveries.map((d) => [
        d.id, d.type, d.sandboxId ?? "-", d.status, String(d.attempts), d.responseStatus === null ? "-" : String(d.responseStatus),
        d.createdAt.toISOString(), d.error === null ? "-" : short(d.error),
      ])]);
      if (page.nextCursor !== null) process.stderr.write(`more: den webhook deliveries ${id} --cursor ${page.nextCursor}\n`);
    });
}
