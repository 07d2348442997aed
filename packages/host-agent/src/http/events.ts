import { PassThrough } from "node:stream";
import type { host } from "@den/protocol";

/** A subscriber whose stream holds this much unsent is slow: its progress events are dropped, not queued. */
const MAX_BUFFERED = 1024 * 1024;
const PING_MS = 10_000;

/**
 * The host's events as NDJSON streams (`GET /host/v1/events`), one per subscriber. Events
 * are progress reports, so a subscriber that cannot keep up loses some rather than making
 * the host buffer without bound; a ping every few seconds lets the client notice a dead stream.
 */
export class EventHub {
  private subscribers = new Set<PassThrough>();
  private readonly ping = setInterval(() => this.publish({ type: "ping" }), PING_MS).unref();

  subscribe(): PassThrough {
    const s = new PassThrough();
    this.subscribers.add(s);
    s.on("close", () => this.subscribers.delete(s));
    s.write(`${JSON.stringify({ type: "ping" } satisfies host.HostEvent)}\n`);
    return s;
  }

  publish(e: host.HostEvent): void {
    const line = `${JSON.stringify(e)}\n`;
    for (const s of this.subscribers) if (s.writableLength < MAX_BUFFERED) s.write(line);
  }

  close(): void {
    clearInterval(this.ping);
    for (const s of this.subscribers) s.end();
    this.subscribers.clear();
  }
}
