/**
 * A host's event stream (`GET /host/v1/events`), followed until stopped: reconnecting after
 * a drop (progress reports lost meanwhile are only progress), a stream silent past the
 * host's pings taken as dropped, each transfer event handed on.
 */
import { host, type TransferEvent } from "@den/protocol";
import type { HostHttp } from "./fetch.js";

/** Reconnect delays of the event stream, and how long it may be silent (the host pings every 10 s). */
const RECONNECT_MS = [500, 1000, 2000, 5000];
const EVENTS_SILENT_MS = 35 * 1000;

export class EventFollower {
  private stopped = false;
  private events: AbortController | undefined;

  constructor(private readonly http: HostHttp, private readonly onTransfer: (t: TransferEvent) => void) {}

  /** Follows the stream until `stop`. */
  async follow(): Promise<void> {
    for (let attempt = 0; !this.stopped; attempt++) {
      const ac = new AbortController();
      this.events = ac;
      let watchdog: NodeJS.Timeout | undefined;
      const alive = () => {
        clearTimeout(watchdog);
        watchdog = setTimeout(() => ac.abort(), EVENTS_SILENT_MS).unref();
      };
      try {
        alive();
        const res = await this.http.request("GET", "/host/v1/events", { signal: ac.signal });
        attempt = 0;
        let rest = "";
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
          alive();
          rest += Buffer.from(chunk).toString("utf8");
          // A line longer than any event is not one: drop it rather than grow.
          if (rest.length > 1024 * 1024) rest = "";
          let nl: number;
          while ((nl = rest.indexOf("\n")) >= 0) {
            const line = rest.slice(0, nl);
            rest = rest.slice(nl + 1);
            this.dispatch(line);
          }
        }
      } catch {
        // dropped, refused or aborted: try again below unless stopped
      } finally {
        clearTimeout(watchdog);
      }
      if (this.stopped) return;
      await new Promise((r) => setTimeout(r, RECONNECT_MS[Math.min(attempt, RECONNECT_MS.length - 1)]).unref());
    }
  }

  private dispatch(line: string): void {
    if (!line.trim()) return;
    try {
      const e = host.HostEvent.parse(JSON.parse(line));
      if (e.type === "transfer") this.onTransfer(e.transfer);
    } catch {
      // a line off the protocol: skip it
    }
  }

  stop(): void {
    this.stopped = true;
    this.events?.abort();
  }
}
