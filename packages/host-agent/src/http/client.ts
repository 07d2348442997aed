import { DenError, host, type HostAgent, type HostGuest, type HostInventory, type TransferEvent } from "@den/protocol";
import { controlCall, TIMEOUTS, type ControlCall } from "./control-call.js";
import { EventFollower } from "./event-follower.js";
import { HostHttp, type HostLink } from "./fetch.js";
import { HttpGuest } from "./guest-client.js";
import { HttpSnapshots, HttpTemplates, HttpVms, HttpVolumes } from "./http-services.js";

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
  /** Transfer progress from the host's event stream, into `onTransfer` as it is set now. */
  private readonly events: EventFollower;

  private constructor(private readonly http: HostHttp, readonly instance: string) {
    this.call = controlCall(http);
    this.vms = new HttpVms(this.call);
    this.volumes = new HttpVolumes(this.call);
    this.templates = new HttpTemplates(this.call);
    this.snapshots = new HttpSnapshots(this.call);
    this.events = new EventFollower(http, (t) => this.onTransfer?.(t));
  }

  get address(): string {
    return this.http.base;
  }

  /**
   * Asks the host who it is (its instance id, its protocol version), then follows its events.
   * A link whose peer id is not known yet (a host listed by URL) learns it from the answer and
   * is then pinned to it: the host's certificate must name that same instance (asked again over
   * the pinned link), so one host of the CA cannot answer for another.
   */
  static async connect(url: string, link: HostLink): Promise<HttpHostAgent> {
    const base = url.replace(/\/+$/, "");
    let http = new HostHttp(base, link);
    const info = await http.json("GET", host.control.info.path, host.HostInfo, { timeoutMs: TIMEOUTS.info });
    if (info.protocol !== host.PROTOCOL_VERSION) throw new DenError("agent_protocol_error", `the host agent at ${url} speaks protocol ${info.protocol}, this control plane ${host.PROTOCOL_VERSION}`);
    if (link.peer.id === undefined) {
      http.close();
      http = new HostHttp(base, { ...link, peer: { ...link.peer, id: info.instance } });
      try {
        await http.json("GET", host.control.info.path, host.HostInfo, { timeoutMs: TIMEOUTS.info });
      } catch (e) {
        http.close();
        // (clientTlsOptions' refusal: "the peer is host X, expected host Y"; anything else is the network's.)
        if (e instanceof DenError && /the peer is/.test(e.message)) throw new DenError("forbidden", `the host agent at ${url} says it is ${info.instance}, but its certificate names another machine (${e.message}): issue it one for host ${info.instance}`);
        throw e;
      }
    }
    const agent = new HttpHostAgent(http, info.instance);
    void agent.events.follow();
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

  /** Stops following events and lets go of the pooled connections (calls in flight finish first). */
  close(): void {
    this.events.stop();
    this.http.close();
  }
}
