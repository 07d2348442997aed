/**
 * Webhooks as the API sees them: an owner's webhooks and their delivery logs, the outbox
 * lifecycle events go into, the sender, and owner-level refusals (a create refused before
 * any sandbox existed), aggregated.
 */
import { randomBytes } from "node:crypto";
import { DenError, api } from "@den/protocol";
import { newId } from "@den/protocol";
import type { ServerConfig } from "../config.js";
import type { Principal, Store } from "../db/store.js";
import { WebhookStore, type DeliveryRow, type WebhookRow } from "../db/webhook-store.js";
import { AddressGuard } from "./guard.js";
import { Outbox } from "./outbox.js";
import { WebhookSender } from "./sender.js";

/** Refusals of one code to one owner are told at most once per window, with how many there were. */
const REFUSAL_WINDOW_MS = 60_000;
/** Owners × codes whose refusal windows are tracked at once (the rest are dropped, not queued). */
const MAX_REFUSAL_WINDOWS = 10_000;

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

export function toApiWebhook(r: WebhookRow, secret?: string): api.Webhook {
  return {
    id: r.id, url: r.url, events: JSON.parse(r.events) as api.WebhookEventType[], description: r.description, created_at: iso(r.created_at)!,
    ...(secret ? { secret } : {}),
  };
}

export function toApiDelivery(r: DeliveryRow): api.WebhookDelivery {
  return {
    id: r.id, message_id: r.message_id, webhook_id: r.webhook_id, type: r.type as api.WebhookEventType, sandbox_id: r.sandbox_id,
    status: r.status as api.WebhookDelivery["status"], attempts: r.attempts, created_at: iso(r.created_at)!,
    last_attempt_at: iso(r.last_attempt_at), next_attempt_at: r.status === "pending" ? iso(r.next_attempt_at) : null,
    delivered_at: iso(r.delivered_at), response_status: r.response_status, error: r.error, payload: JSON.parse(r.payload) as api.WebhookPayload,
  };
}

export class Webhooks {
  readonly outbox: Outbox;
  readonly sender: WebhookSender;
  private readonly guard: AddressGuard;
  private readonly refusals = new Map<string, { count: number; timer: NodeJS.Timeout }>();

  constructor(
    private readonly store: Store,
    private readonly config: ServerConfig["webhooks"],
    replica: string,
    private readonly now: () => number,
    private readonly log: { warn(o: object, m: string): void },
  ) {
    this.guard = new AddressGuard(config.allowNetworks);
    this.outbox = new Outbox(now);
    this.sender = new WebhookSender(store, config, this.guard, replica, now, log);
    this.outbox.onEnqueued = () => this.sender.nudge();
  }

  async create(p: Principal, req: api.CreateWebhookRequest): Promise<api.Webhook> {
    const url = await this.guard.checkUrl(req.url);
    const ws = new WebhookStore(this.store);
    if ((await ws.webhooks(p.owner)).length >= this.config.perOwner) {
      throw new DenError("quota_exceeded", `at most ${this.config.perOwner} webhooks per owner (DEN_MAX_WEBHOOKS_PER_OWNER); delete one first`);
    }
    const secret = `whsec_${randomBytes(24).toString("base64")}`;
    const row: WebhookRow = {
      id: newId("wh"), owner: p.owner, url: url.href, events: JSON.stringify([...new Set(req.events ?? api.WebhookEventType.options)]),
      description: req.description ?? null, secret, created_at: this.now(),
    };
    await ws.insertWebhook(row);
    return toApiWebhook(row, secret);
  }

  async list(p: Principal): Promise<api.Webhook[]> {
    return (await new WebhookStore(this.store).webhooks(p.owner)).map((r) => toApiWebhook(r));
  }

  /** The caller's webhook, or 404 (another owner's does not exist for them). */
  async owned(p: Principal, id: string): Promise<WebhookRow> {
    const row = api.WebhookId.safeParse(id).success ? await new WebhookStore(this.store).webhook(id) : undefined;
    if (!row || row.owner !== p.owner) throw new DenError("not_found", `webhook ${JSON.stringify(id)} does not exist`);
    return row;
  }

  async delete(p: Principal, id: string): Promise<void> {
    const row = await this.owned(p, id);
    await this.store.transaction((tx) => new WebhookStore(tx).deleteWebhook(row.id));
  }

  async deliveries(p: Principal, id: string, q: { status?: string; cursor?: string; limit: number }): Promise<api.ListWebhookDeliveriesResponse> {
    const row = await this.owned(p, id);
    const before = q.cursor === undefined ? undefined : Number(q.cursor);
    if (before !== undefined && !Number.isSafeInteger(before)) throw new DenError("invalid_argument", "cursor is not one this API gave");
    const rows = await new WebhookStore(this.store).deliveries(row.id, { ...(q.status ? { status: q.status } : {}), ...(before !== undefined ? { beforeSeq: before } : {}), limit: q.limit + 1 });
    const page = rows.slice(0, q.limit);
    return { deliveries: page.map(toApiDelivery), next_cursor: rows.length > q.limit ? String(page[page.length - 1]!.seq) : null };
  }

  /** Sends a delivery's message again: a new pending delivery with the same message id, after the rest of its queue. */
  async redeliver(p: Principal, id: string, deliveryId: string): Promise<api.WebhookDelivery> {
    const hook = await this.owned(p, id);
    const ws = new WebhookStore(this.store);
    const d = api.WebhookDeliveryId.safeParse(deliveryId).success ? await ws.delivery(deliveryId) : undefined;
    if (!d || d.webhook_id !== hook.id) throw new DenError("not_found", `delivery ${JSON.stringify(deliveryId)} of webhook ${hook.id} does not exist`);
    const now = this.now();
    const again = {
      ...d, id: newId("whd"), status: "pending", attempts: 0, created_at: now, next_attempt_at: now, last_attempt_at: null, delivered_at: null,
      response_status: null, error: null, claimed_by: null, claimed_until: null,
    };
    const { seq: _seq, ...row } = again;
    await ws.insertDeliveries([row]);
    this.sender.nudge();
    return toApiDelivery((await ws.delivery(row.id))!);
  }

  /**
   * An owner's create, restore or fork was refused before any sandbox existed (quota,
   * capacity): its webhooks hear of the first at once, then of the rest of each minute as
   * one event with their count (a client retrying in a loop must not flood its receiver).
   */
  refused(owner: string, e: DenError, operation: string): void {
    const key = `${owner}\n${e.code}`;
    const w = this.refusals.get(key);
    if (w) {
      w.count++;
      return;
    }
    if (this.refusals.size >= MAX_REFUSAL_WINDOWS) return;
    const tell = (count: number) => this.store.transaction((tx) => this.outbox.enqueue(tx, owner, null, {
      type: "sandbox.refused", data: { code: e.code, message: e.message.slice(0, 500), count, operation, ...(e.details?.resource ? { resource: e.details.resource } : {}) },
    })).catch((err: unknown) => this.log.warn({ err, owner }, "could not record a refusal for webhooks"));
    void tell(1);
    const close = () => {
      const cur = this.refusals.get(key)!;
      if (!cur.count) return void this.refusals.delete(key);
      void tell(cur.count);
      cur.count = 0;
      cur.timer = setTimeout(close, REFUSAL_WINDOW_MS).unref();
    };
    this.refusals.set(key, { count: 0, timer: setTimeout(close, REFUSAL_WINDOW_MS).unref() });
  }

  async stop(): Promise<void> {
    for (const w of this.refusals.values()) clearTimeout(w.timer);
    this.refusals.clear();
    await this.sender.stop();
  }
}
