import { DenError, host, type HostAgent, type HostGuest, type HostInventory, type TransferEvent } from "@den/protocol";
import { controlCall, TIMEOUTS, type ControlCall } from "./control-call.js";
import { HostHttp } from "./fetch.js";
import { HttpGuest } from "./guest-client.js";
import { HttpSnapshots, HttpTemplates, HttpVms, HttpVolumes } from "./http-services.js";

/** Reconnect delays of the event stream, and how long it may be silent (the host pings every 10 s). */
const RECONNECT_MS = [500, 1000, 2000, 5000];
const EVENTS_SILENT_MS = 35 * 1000;

/**
 * A host agent over HTTP (`/host/v1`): every control call of `HostAgent` as its route, with
 * a deadline fitting the call, answers checked against the protocol's schemas and errors
 * turned back into the host's DenErrors; `guest(id)` is an HttpGuest; transfer progress
 * comes from the host's event stream (kept open, reconnecting) into `onTransfer`.
 */
export class HttpHostAgent implements HostAgent {
  onTransfer: ((t: TransferEvent) => void) | undefined;
  readonly vms: HttpVms;
  readonly volumes: HttpVolumes;
  readonly templates: HttpTemplates;
  readonly snapshots: HttpSnapshots;
  private readonly call: ControlCall;
  private closed = false;
  private events: AbortController | undefined;

  private constructor(private readonly http: HostHttp, readonly instance: string) {
    this.call = controlCall(http);
    this.vms = new HttpVms(this.call);
    this.volumes = new HttpVolumes(this.call);
    this.templates = new HttpTemplates(this.call);
    this.snapshots = new HttpSnapshots(this.call);
  }

  get address(): string {
    return this.http.base;
  }

  /** Asks the host who it is (its instance id, its protocol version), then follows its events. */
  static async connect(url: string, secret: string): Promise<HttpHostAgent> {
    const http = new HostHttp(url.replace(/\/+$/, ""), secret);
    const info = await http.json("GET", host.control.info.path, host.HostInfo, { timeoutMs: TIMEOUTS.info });
    if (info.protocol !== host.PROTOCOL_VERSION) throw new DenError("agent_protocol_error", `the host agent at ${url} speaks protocol ${info.protocol}, this control plane ${host.PROTOCOL_VERSION}`);
    const agent = new HttpHostAgent(http, info.instance);
    void agent.follow();
    return agent;
  }

  async settled(op: string): Promise<void> {
    await this.call("settled", { op });
  }

  inventory(): Promise<HostInventory> {
    return this.call("inventory", {});
  }

  guest(id: string): HostGuest {
    return new HttpGuest(this.http, id);
  }

  /** Follows `GET /host/v1/events` until closed, reconnecting after a drop (progress reports lost meanwhile are only progress). */
  private async follow(): Promise<void> {
    for (let attempt = 0; !this.closed; attempt++) {
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
        // dropped, refused or aborted: try again below unless closed
      } finally {
        clearTimeout(watchdog);
      }
      if (this.closed) return;
      await new Promise((r) => setTimeout(r, RECONNECT_MS[Math.min(attempt, RECONNECT_MS.length - 1)]).unref());
    }
  }

  private dispatch(line: string): void {
    if (!line.trim()) return;
    try {
      const e = host.HostEvent.parse(JSON.parse(line));
      if (e.type === "transfer") this.onTransfer?.(e.transfer);
    } catch {
      // a line off the protocol: skip it
    }
  }

  close(): void {
    this.closed = true;
    this.events?.abort();
  }
}
