/**
 * Sends the outbox: every replica polls for deliveries due, claims each before sending
 * (two replicas never send one delivery at once; a claim that runs out, a crash, is taken
 * over: at least once), signs it the Standard Webhooks way and records the attempt. One
 * sandbox's events go out in order, one at a time; a slow or dead receiver holds at most
 * its webhook's few slots, never another webhook's.
 */
import { request as httpRequest, type IncomingMessage } from "node:http";
import { request as httpsRequest } from "node:https";
import { isIP } from "node:net";
import { Webhook } from "standardwebhooks";
import type { ServerConfig } from "../config.js";
import type { Store } from "../db/store.js";
import { WebhookStore, type DeliveryRow } from "../db/webhook-store.js";
import type { AddressGuard } from "./guard.js";

/** Deliveries in flight in this replica, in all and per webhook. */
const MAX_IN_FLIGHT = 32;
const MAX_IN_FLIGHT_PER_WEBHOOK = 4;
/** How often due deliveries are looked for (sooner after an enqueue here). */
const POLL_MS = 1000;
/** What of a receiver's answer is read (the rest is dropped): its status is what counts. */
const MAX_RESPONSE_BYTES = 4096;

type Attempt = { ok: boolean; status: number | null; error: string | null };

export class WebhookSender {
  private readonly inFlight = new Map<string, { webhook: string; abort: AbortController; done: Promise<void> }>();
  private timer: NodeJS.Timeout | undefined;
  private soon: NodeJS.Timeout | undefined;
  private polling = false;
  private stopped = false;
  private lastPrune = 0;

  constructor(
    private readonly store: Store,
    private readonly config: ServerConfig["webhooks"],
    private readonly guard: AddressGuard,
    private readonly replica: string,
    private readonly now: () => number = Date.now,
    private readonly log: { warn(o: object, m: string): void } = { warn: () => undefined },
  ) {}

  start(): void {
    this.timer = setInterval(() => this.poll(), POLL_MS);
    this.timer.unref();
  }

  /** Looks for due deliveries soon (an enqueue happened here). */
  nudge(): void {
    if (this.stopped || this.soon) return;
    this.soon = setTimeout(() => {
      this.soon = undefined;
      this.poll();
    }, 50);
  }

  /** Stops polling; attempts in flight are cut short (recorded as failed attempts, retried later, here or by another replica). */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    clearTimeout(this.soon);
    for (const f of this.inFlight.values()) f.abort.abort();
    await Promise.all([...this.inFlight.values()].map((f) => f.done));
  }

  private poll(): void {
    if (this.polling || this.stopped) return;
    this.polling = true;
    this.pass().catch((err: unknown) => this.log.warn({ err }, "webhook delivery pass failed")).finally(() => (this.polling = false));
  }

  /** One pass: claims and starts what is due and has room (not waiting for the sends). */
  async pass(): Promise<void> {
    const ws = new WebhookStore(this.store);
    const now = this.now();
    if (now - this.lastPrune > 3_600_000) {
      this.lastPrune = now;
      await ws.pruneDeliveries(now - this.config.keepMs);
    }
    if (this.inFlight.size >= MAX_IN_FLIGHT) return;
    for (const d of await ws.dueDeliveries(now, 4 * MAX_IN_FLIGHT)) {
      if (this.stopped || this.inFlight.size >= MAX_IN_FLIGHT) break;
      if (this.inFlight.has(d.id) || [...this.inFlight.values()].filter((f) => f.webhook === d.webhook_id).length >= MAX_IN_FLIGHT_PER_WEBHOOK) continue;
      // Held past the attempt's own deadline, so it never runs out while the attempt still runs.
      if (!(await ws.claimDelivery(d.id, this.replica, now, now + this.config.timeoutMs + 30_000))) continue;
      const abort = new AbortController();
      const done = this.attempt(ws, d, abort.signal).catch((err: unknown) => this.log.warn({ err, delivery: d.id }, "webhook delivery attempt could not be recorded"))
        .finally(() => {
          this.inFlight.delete(d.id);
          this.nudge();
        });
      this.inFlight.set(d.id, { webhook: d.webhook_id, abort, done });
    }
  }

  private async attempt(ws: WebhookStore, d: DeliveryRow, signal: AbortSignal): Promise<void> {
    const hook = await ws.webhook(d.webhook_id);
    if (!hook) return; // deleted, with its deliveries
    const r = await this.send(hook.url, hook.secret, d, signal);
    const now = this.now();
    const attempts = d.attempts + 1;
    const giveUp = !r.ok && now - d.created_at >= this.config.retryMs;
    const backoff = Math.min(this.config.maxBackoffMs, this.config.firstBackoffMs * 2 ** Math.min(attempts - 1, 30));
    await ws.settleAttempt(d.id, this.replica, {
      status: r.ok ? "delivered" : giveUp ? "failed" : "pending", attempts, last_attempt_at: now,
      // A little jitter, so receivers coming back are not hit by every retry at once.
      next_attempt_at: r.ok || giveUp ? now : now + Math.round(backoff * (1 + Math.random() * 0.1)),
      delivered_at: r.ok ? now : null, response_status: r.status, error: r.error?.slice(0, 500) ?? null,
    });
  }

  /** One POST of the delivery's body, signed now; never follows a redirect; connects only to addresses the guard allows. */
  private send(url: string, secret: string, d: DeliveryRow, signal: AbortSignal): Promise<Attempt> {
    const u = new URL(url);
    const host = u.hostname.replace(/^\[(.*)\]$/, "$1");
    if (isIP(host)) {
      const why = this.guard.refusal(host);
      if (why) return Promise.resolve({ ok: false, status: null, error: `refused: ${why}` });
    }
    const body = Buffer.from(d.payload);
    const at = new Date(this.now());
    const headers = {
      "content-type": "application/json", "content-length": String(body.length), "user-agent": "Den-Webhooks/1",
      "webhook-id": d.message_id, "webhook-timestamp": String(Math.floor(at.getTime() / 1000)), "webhook-signature": new Webhook(secret).sign(d.message_id, at, body),
    };
    const request = u.protocol === "https:" ? httpsRequest : httpRequest;
    return new Promise<Attempt>((resolve) => {
      const fail = (error: string, status: number | null = null) => resolve({ ok: false, status, error });
      const req = request(u, { method: "POST", headers, lookup: this.guard.lookup, signal: AbortSignal.any([signal, AbortSignal.timeout(this.config.timeoutMs)]) }, (res: IncomingMessage) => {
        let read = 0;
        res.on("data", (c: Buffer) => {
          read += c.length;
          if (read > MAX_RESPONSE_BYTES) res.destroy();
        });
        const status = res.statusCode ?? 0;
        const settle = () => (status >= 200 && status < 300 ? resolve({ ok: true, status, error: null }) : fail(status >= 300 && status < 400 ? `redirect (${status}): not followed` : `HTTP ${status}`, status));
        res.on("end", settle);
        res.on("close", settle);
        res.on("error", settle);
      });
      req.on("error", (e: NodeJS.ErrnoException) => fail(e.name === "AbortError" || e.name === "TimeoutError" ? `no answer within ${this.config.timeoutMs} ms` : e.message));
      req.end(body);
    });
  }
}
