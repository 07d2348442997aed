/** Webhooks: an owner's sandbox lifecycle events, POSTed to a URL of theirs. */
import { api } from "@den/protocol";
import { DenClient, type DenClientOptions, type RequestOptions, listOf, seg } from "./client.js";
import {
  type WebhookDeliveryInfo,
  type WebhookDeliveryStatus,
  type WebhookEventType,
  type WebhookInfo,
  type WireInput,
  toWebhookDeliveryInfo,
  toWebhookInfo,
} from "./types.js";

/**
 * Every event type a webhook can subscribe to (what a webhook created without `events` gets).
 *
 * @example
 * ```ts
 * const lifecycle = WEBHOOK_EVENT_TYPES.filter((t) => t.startsWith("sandbox."));
 * ```
 */
export const WEBHOOK_EVENT_TYPES: readonly WebhookEventType[] = api.WebhookEventType.options;

/**
 * Options of {@link Webhooks.create}.
 *
 * @example
 * ```ts
 * const opts: CreateWebhookOptions = { url: "https://example.com/den", events: ["sandbox.destroyed"], description: "cleanup" };
 * ```
 */
export interface CreateWebhookOptions extends DenClientOptions, RequestOptions {
  /**
   * Where deliveries are POSTed: http or https, resolving to a public address (the server
   * refuses loopback, private and link-local ones unless its operator allows them). Redirects
   * are not followed.
   */
  url: string;
  /** What to be told (default: every event type, {@link WEBHOOK_EVENT_TYPES}). */
  events?: WebhookEventType[];
  /** A note for people (at most 256 characters). */
  description?: string;
}

/**
 * Options of {@link Webhooks.deliveries}.
 *
 * @example
 * ```ts
 * const opts: WebhookDeliveriesOptions = { status: "failed", limit: 20 };
 * ```
 */
export interface WebhookDeliveriesOptions extends DenClientOptions, RequestOptions {
  /** Deliveries in this page (the server caps it). */
  limit?: number;
  /** The `nextCursor` of the page before. */
  cursor?: string;
  /** Only deliveries in this status. */
  status?: WebhookDeliveryStatus;
}

/**
 * Options of {@link Webhooks.allDeliveries}.
 *
 * @example
 * ```ts
 * const opts: AllWebhookDeliveriesOptions = { status: "pending", pageSize: 100 };
 * ```
 */
export interface AllWebhookDeliveriesOptions extends DenClientOptions, RequestOptions {
  /** Only deliveries in this status. */
  status?: WebhookDeliveryStatus;
  /** Deliveries per request (the `limit` query parameter). */
  pageSize?: number;
}

/**
 * One page of a webhook's deliveries, newest first; `nextCursor` is null on the last page.
 *
 * @example
 * ```ts
 * const page: WebhookDeliveriesPage = await Webhooks.deliveries(hook.id);
 * if (page.nextCursor) await Webhooks.deliveries(hook.id, { cursor: page.nextCursor });
 * ```
 */
export interface WebhookDeliveriesPage {
  deliveries: WebhookDeliveryInfo[];
  nextCursor: string | null;
}

function deliveriesQuery(opts: { limit?: number | undefined; cursor?: string | null | undefined; status?: WebhookDeliveryStatus | undefined }): URLSearchParams {
  const qs = new URLSearchParams();
  if (opts.limit !== undefined) qs.set("limit", String(opts.limit));
  if (opts.cursor !== undefined && opts.cursor !== null) qs.set("cursor", opts.cursor);
  if (opts.status !== undefined) qs.set("status", opts.status);
  return qs;
}

/**
 * The caller's webhooks: every key sees and manages only its own owner's. Each delivery is
 * signed the Standard Webhooks way; verify it with the `standardwebhooks` npm package.
 *
 * @example
 * ```ts
 * const hook = await Webhooks.create({ url: "https://example.com/den", events: ["sandbox.destroyed"] });
 * // keep hook.secret: it is never shown again
 * for (const h of await Webhooks.list()) console.log(h.id, h.url, h.events.join(","));
 * await Webhooks.delete(hook.id);
 * ```
 */
export const Webhooks = {
  /**
   * Creates a webhook. The answer's `secret` (`whsec_...`) signs its deliveries and is shown
   * only this once. Deliveries are signed the Standard Webhooks way (`webhook-id`,
   * `webhook-timestamp` and `webhook-signature` headers); a receiver verifies one with the
   * `standardwebhooks` npm package: `new Webhook(secret).verify(body, headers)` (the raw body,
   * as a string, before any JSON parsing), and dedupes on `webhook-id` (a redelivery keeps it).
   *
   * @example
   * ```ts
   * const hook = await Webhooks.create({ url: "https://example.com/den", events: ["sandbox.created", "sandbox.destroyed"] });
   * saveSecret(hook.secret!);
   *
   * // In the receiver (npm install standardwebhooks):
   * import { Webhook } from "standardwebhooks";
   * const payload = new Webhook(secret).verify(rawBody, req.headers) as WebhookPayload; // throws if forged or stale
   * ```
   */
  async create(opts: CreateWebhookOptions): Promise<WebhookInfo> {
    const client = new DenClient(opts);
    const body: WireInput<typeof api.CreateWebhookRequest> = { url: opts.url };
    if (opts.events !== undefined) body.events = opts.events;
    if (opts.description !== undefined) body.description = opts.description;
    return toWebhookInfo(await client.json({ method: "POST", path: "/v1/webhooks", json: body, signal: opts.signal }, api.Webhook.parse));
  },

  /**
   * The owner's webhooks (without secrets).
   *
   * @example
   * ```ts
   * const toMe = (await Webhooks.list()).filter((h) => h.url.startsWith("https://example.com/"));
   * ```
   */
  async list(opts: DenClientOptions & RequestOptions = {}): Promise<WebhookInfo[]> {
    const client = new DenClient(opts);
    const list = await client.json({ method: "GET", path: "/v1/webhooks", signal: opts.signal }, listOf("webhooks", api.Webhook.parse));
    return list.map(toWebhookInfo);
  },

  /**
   * One webhook (without its secret); {@link NotFoundError} if there is none of this owner's.
   *
   * @example
   * ```ts
   * const hook = await Webhooks.get("wh_abcdefghijklmnop");
   * console.log(hook.url, hook.events);
   * ```
   */
  async get(id: string, opts: DenClientOptions & RequestOptions = {}): Promise<WebhookInfo> {
    const client = new DenClient(opts);
    return toWebhookInfo(await client.json({ method: "GET", path: `/v1/webhooks/${seg(id)}`, signal: opts.signal }, api.Webhook.parse));
  },

  /**
   * Deletes a webhook: nothing more is delivered to it.
   *
   * @example
   * ```ts
   * await Webhooks.delete(hook.id);
   * ```
   */
  async delete(id: string, opts: DenClientOptions & RequestOptions = {}): Promise<void> {
    const client = new DenClient(opts);
    await client.empty({ method: "DELETE", path: `/v1/webhooks/${seg(id)}`, signal: opts.signal });
  },

  /**
   * One page of a webhook's deliveries, newest first. Pass the answer's `nextCursor` as
   * `cursor` for the next page (or iterate them all with {@link Webhooks.allDeliveries}).
   *
   * @example
   * ```ts
   * const { deliveries, nextCursor } = await Webhooks.deliveries(hook.id, { status: "failed", limit: 20 });
   * for (const d of deliveries) console.log(d.type, d.sandboxId, d.attempts, d.responseStatus ?? "-", d.error);
   * ```
   */
  async deliveries(id: string, opts: WebhookDeliveriesOptions = {}): Promise<WebhookDeliveriesPage> {
    const client = new DenClient(opts);
    const page = await client.json(
      { method: "GET", path: `/v1/webhooks/${seg(id)}/deliveries`, query: deliveriesQuery(opts), signal: opts.signal },
      api.ListWebhookDeliveriesResponse.parse,
    );
    return { deliveries: page.deliveries.map(toWebhookDeliveryInfo), nextCursor: page.next_cursor };
  },

  /**
   * Every delivery of a webhook (matching `status`), newest first, fetched a page at a time
   * (following `next_cursor`) as you iterate.
   *
   * @example
   * ```ts
   * for await (const d of Webhooks.allDeliveries(hook.id, { status: "failed" })) {
   *   await Webhooks.redeliver(hook.id, d.id);
   * }
   * ```
   */
  async *allDeliveries(id: string, opts: AllWebhookDeliveriesOptions = {}): AsyncGenerator<WebhookDeliveryInfo, void, undefined> {
    const client = new DenClient(opts);
    let cursor: string | null = null;
    do {
      const page: api.ListWebhookDeliveriesResponse = await client.json(
        { method: "GET", path: `/v1/webhooks/${seg(id)}/deliveries`, query: deliveriesQuery({ limit: opts.pageSize, cursor, status: opts.status }), signal: opts.signal },
        api.ListWebhookDeliveriesResponse.parse,
      );
      for (const d of page.deliveries) yield toWebhookDeliveryInfo(d);
      if (page.next_cursor !== null && page.next_cursor === cursor) break; // a server bug; never loop forever
      cursor = page.next_cursor;
    } while (cursor !== null);
  },

  /**
   * Sends a delivery's event again: resolves with a new `pending` delivery of the same message
   * (the same `messageId`, so a receiver that dedupes on `webhook-id` sees it once).
   *
   * @example
   * ```ts
   * const again = await Webhooks.redeliver(hook.id, "whd_abcdefghijklmnop");
   * console.log(again.id, again.status); // "pending"
   * ```
   */
  async redeliver(id: string, deliveryId: string, opts: DenClientOptions & RequestOptions = {}): Promise<WebhookDeliveryInfo> {
    const client = new DenClient(opts);
    const path = `/v1/webhooks/${seg(id)}/deliveries/${seg(deliveryId)}/redeliver`;
    return toWebhookDeliveryInfo(await client.json({ method: "POST", path, signal: opts.signal }, api.WebhookDelivery.parse));
  },
};
