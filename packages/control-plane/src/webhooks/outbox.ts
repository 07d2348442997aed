/**
 * The webhook outbox: a lifecycle event becomes one delivery row per webhook of its owner
 * that wants it, written in the transaction of the change it tells of, so an event is
 * delivered (at least once) exactly when the change committed.
 */
import { api } from "@den/protocol";
import { newId } from "@den/protocol";
import type { Store } from "../db/store.js";
import { WebhookStore, type NewDelivery } from "../db/webhook-store.js";

type Event = { type: api.WebhookEventType; data: Record<string, unknown> };

/** A sandbox event (type, reason, data as the events log has them; the operation's kind) as a webhook event, if it is one. */
export function webhookEvent(type: string, reason: string | null, data: Record<string, unknown>, kind?: string): Event | undefined {
  const why = reason ? { reason } : {};
  const pick = (...keys: string[]) => Object.fromEntries(keys.filter((k) => data[k] !== undefined).map((k) => [k, data[k]]));
  switch (type) {
    case "running":
      if (kind === "wake") return { type: "sandbox.woken", data: { ...why, ...pick("mode", "ms", "recovered") } };
      if (kind === "recover") return { type: "sandbox.recovered", data: { ...why, ...pick("recovered_from", "checkpoint_age_seconds") } };
      return { type: "sandbox.created", data: { ...why, via: kind === "restore" || kind === "fork" ? kind : "create", ...pick("forked_from", "host") } };
    case "hibernated":
      return { type: "sandbox.hibernated", data: { ...why, ...pick("mode", "ms", "stored_bytes", "recovered") } };
    case "destroyed":
      return { type: "sandbox.destroyed", data: { ...why, ...pick("message") } };
    case "lost":
      return { type: "sandbox.lost", data: { ...why, ...pick("host") } };
    case "error":
      return { type: "sandbox.error", data: { ...why, ...pick("message") } };
    case "forked":
      return { type: "sandbox.forked", data: { ...why, ...pick("children") } };
    case "checkpoint":
      return { type: "checkpoint.created", data: { ...why, ...pick("checkpoint", "name", "stored_bytes") } };
    case "checkpoint.deleted":
      return { type: "checkpoint.deleted", data: { ...why, ...pick("checkpoint", "name") } };
    case "network.refused":
      return { type: "network.refused", data: { ...data } };
    default:
      return undefined;
  }
}

export class Outbox {
  /** Told after an enqueue (the sender looks sooner than its next poll; the row may not have committed yet). */
  onEnqueued: () => void = () => undefined;

  constructor(private readonly now: () => number) {}

  /** Enqueues sandbox `id`'s event for its owner's webhooks (in `s`, the event's transaction). */
  async sandboxEvent(s: Store, id: string, type: string, reason: string | null, data: Record<string, unknown>, kind?: string): Promise<void> {
    const ev = webhookEvent(type, reason, data, kind);
    if (!ev) return;
    const owner = (await s.sandboxes.get(id))?.owner;
    if (owner !== undefined) await this.enqueue(s, owner, id, ev);
  }

  /** Enqueues an event for `owner`'s webhooks that want its type: one message, one delivery per webhook. */
  async enqueue(s: Store, owner: string, sandboxId: string | null, ev: Event): Promise<void> {
    const ws = new WebhookStore(s);
    const hooks = (await ws.webhooks(owner)).filter((h) => (JSON.parse(h.events) as string[]).includes(ev.type));
    if (!hooks.length) return;
    const now = this.now();
    const payload: api.WebhookPayload = { type: ev.type, timestamp: new Date(now).toISOString(), data: { ...(sandboxId ? { sandbox_id: sandboxId } : {}), ...ev.data } };
    const body = JSON.stringify(payload);
    const messageId = newId("msg");
    await ws.insertDeliveries(hooks.map((h): NewDelivery => ({
      id: newId("whd"), message_id: messageId, webhook_id: h.id, owner, sandbox_id: sandboxId, ordering_key: sandboxId ?? `owner:${owner}`.slice(0, 64),
      type: ev.type, payload: body, status: "pending", attempts: 0, created_at: now, next_attempt_at: now,
      last_attempt_at: null, delivered_at: null, response_status: null, error: null, claimed_by: null, claimed_until: null,
    })));
    this.onEnqueued();
  }
}
