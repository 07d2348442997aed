import type { Selectable } from "kysely";
import type { WebhookDeliveriesTable, WebhooksTable } from "./db.js";
import type { Store } from "./store.js";

export type WebhookRow = Selectable<WebhooksTable>;
export type DeliveryRow = Selectable<WebhookDeliveriesTable>;
export type NewDelivery = Omit<DeliveryRow, "seq">;

/** The webhooks' SQL: their rows and the delivery outbox (in `s`'s transaction, when it is one). */
export class WebhookStore {
  constructor(private readonly s: Store) {}

  private get db() {
    return this.s.db;
  }

  async insertWebhook(row: WebhookRow): Promise<void> {
    await this.db.insertInto("webhooks").values(row).execute();
  }

  async webhooks(owner: string): Promise<WebhookRow[]> {
    return this.db.selectFrom("webhooks").selectAll().where("owner", "=", owner).orderBy("created_at").orderBy("id").execute();
  }

  async webhook(id: string): Promise<WebhookRow | undefined> {
    return this.db.selectFrom("webhooks").selectAll().where("id", "=", id).executeTakeFirst();
  }

  /** The webhook and its whole delivery log (the caller's transaction makes it one change). */
  async deleteWebhook(id: string): Promise<void> {
    await this.db.deleteFrom("webhook_deliveries").where("webhook_id", "=", id).execute();
    await this.db.deleteFrom("webhooks").where("id", "=", id).execute();
  }

  async insertDeliveries(rows: NewDelivery[]): Promise<void> {
    if (rows.length) await this.db.insertInto("webhook_deliveries").values(rows).execute();
  }

  /**
   * Deliveries due now that head their queue (no earlier pending one of the same webhook and
   * ordering key: one sandbox's events go out in order, one at a time), not claimed by a
   * sender whose claim still runs; oldest first.
   */
  async dueDeliveries(now: number, limit: number): Promise<DeliveryRow[]> {
    return this.db.selectFrom("webhook_deliveries as d").selectAll("d")
      .where("d.status", "=", "pending").where("d.next_attempt_at", "<=", now)
      .where((eb) => eb.or([eb("d.claimed_until", "is", null), eb("d.claimed_until", "<", now)]))
      .where((eb) => eb.not(eb.exists(eb.selectFrom("webhook_deliveries as e").select("e.seq")
        .whereRef("e.webhook_id", "=", "d.webhook_id").whereRef("e.ordering_key", "=", "d.ordering_key")
        .where("e.status", "=", "pending").whereRef("e.seq", "<", "d.seq"))))
      .orderBy("d.seq").limit(limit).execute();
  }

  /** Takes a due delivery for one sender until `until`: true for exactly one caller. */
  async claimDelivery(id: string, by: string, now: number, until: number): Promise<boolean> {
    const r = await this.db.updateTable("webhook_deliveries").set({ claimed_by: by, claimed_until: until })
      .where("id", "=", id).where("status", "=", "pending")
      .where((eb) => eb.or([eb("claimed_until", "is", null), eb("claimed_until", "<", now)])).executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /** Records an attempt by the sender that holds the claim (one whose claim ran out and was taken over records nothing). */
  async settleAttempt(id: string, by: string, patch: Pick<DeliveryRow, "status" | "attempts" | "last_attempt_at" | "next_attempt_at" | "delivered_at" | "response_status" | "error">): Promise<boolean> {
    const r = await this.db.updateTable("webhook_deliveries").set({ ...patch, claimed_by: null, claimed_until: null })
      .where("id", "=", id).where("claimed_by", "=", by).where("status", "=", "pending").executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  async delivery(id: string): Promise<DeliveryRow | undefined> {
    return this.db.selectFrom("webhook_deliveries").selectAll().where("id", "=", id).executeTakeFirst();
  }

  /** A page of one webhook's deliveries, newest first, before `beforeSeq`. */
  async deliveries(webhookId: string, q: { status?: string; beforeSeq?: number; limit: number }): Promise<DeliveryRow[]> {
    let sel = this.db.selectFrom("webhook_deliveries").selectAll().where("webhook_id", "=", webhookId);
    if (q.status) sel = sel.where("status", "=", q.status);
    if (q.beforeSeq !== undefined) sel = sel.where("seq", "<", q.beforeSeq);
    return sel.orderBy("seq", "desc").limit(q.limit).execute();
  }

  /** Delivered and failed deliveries older than `before` leave the log; pending ones always stay. */
  async pruneDeliveries(before: number): Promise<void> {
    await this.db.deleteFrom("webhook_deliveries").where("status", "!=", "pending").where("created_at", "<", before).execute();
  }
}
