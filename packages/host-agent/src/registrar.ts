import { host } from "@den/protocol";
import { HostHttp, type HostLink } from "./http/fetch.js";

/** What registration asks of a host agent (LocalHostAgent, or MemoryHostAgent for tests). */
export interface RegisteredHost {
  readonly instance: string;
  /** Its kind and capacity go in every heartbeat. */
  inventory(): Promise<host.HostInventory & { kind: host.HostKind }>;
  /** Pauses every running VM (the lease ran out); the ids it paused. */
  readonly vms: { fence(): Promise<string[]> };
}

export interface RegistrarOptions {
  /** Control-plane replicas (any one will do; the next is tried when one does not answer). */
  controlPlanes: string[];
  /** How it authenticates to them: its certificate (the control planes' listener for hosts, https). */
  link: HostLink;
  /** Where the control plane reaches this host's /host/v1. */
  address: string;
  intervalMs?: number;
  log?: (msg: string) => void;
}

/**
 * A host agent's registration: a heartbeat to the control plane every `intervalMs` with
 * who, where and what it is, renewing its lease. Once the lease has run out without a
 * renewal, the host fences itself: its running VMs are paused (the control plane may have
 * declared them lost and recovered them elsewhere; they must never run twice). The lease
 * is counted from when the renewing heartbeat was sent, so this side errs early.
 */
export class Registrar {
  private timer: NodeJS.Timeout | undefined;
  private leaseUntil = 0;
  private fenced = false;
  private next = 0;
  private stopped = false;
  state: host.HeartbeatReply["state"] | undefined;
  /** One link per control plane, kept (over TLS a new one per beat was a handshake and a pool each time). */
  private readonly links = new Map<string, HostHttp>();

  constructor(private readonly agent: RegisteredHost, private readonly opts: RegistrarOptions) {
    this.opts = { ...opts };
  }

  /** Registers now (the first heartbeat must be answered, or the start fails), then keeps the lease. */
  async start(): Promise<void> {
    await this.beat(true);
    this.schedule();
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      void this.beat(false).catch(() => undefined).finally(() => this.schedule());
    }, this.opts.intervalMs ?? 2000);
  }

  private async beat(first: boolean): Promise<void> {
    const sentAt = performance.now();
    const inv = await this.agent.inventory();
    const body: host.Heartbeat = {
      id: this.agent.instance, address: this.opts.address, protocol: host.PROTOCOL_VERSION,
      kind: inv.kind, capacity: inv.capacity, ...(first ? { starting: true } : {}),
    };
    let lastError: unknown;
    for (let i = 0; i < this.opts.controlPlanes.length; i++) {
      const url = this.opts.controlPlanes[(this.next + i) % this.opts.controlPlanes.length]!;
      try {
        const reply = await this.http(url).json("POST", host.registration.heartbeat.path, host.HeartbeatReply, { json: body, timeoutMs: 10_000 });
        this.next = (this.next + i) % this.opts.controlPlanes.length;
        this.leaseUntil = sentAt + reply.leaseMs;
        if (this.fenced) this.opts.log?.(`den: lease renewed through ${url}; the control plane resumes what is still ours`);
        this.fenced = false;
        this.state = reply.state;
        return;
      } catch (e) {
        lastError = e;
      }
    }
    if (!first && !this.fenced && performance.now() >= this.leaseUntil) {
      this.fenced = true;
      const paused = await this.agent.vms.fence();
      this.opts.log?.(`den: lease lost (no control plane answered: ${(lastError as Error).message}); ${paused.length} running VM(s) paused until it is renewed`);
    }
    throw lastError;
  }

  /** Asks the control plane to cold-hibernate this host's sandboxes; resolves when none is left here or after `timeoutMs`. */
  async drain(timeoutMs: number): Promise<number> {
    const end = Date.now() + timeoutMs;
    let left = Number.NaN;
    while (Date.now() < end) {
      for (const url of this.opts.controlPlanes) {
        try {
          left = (await this.http(url).json("POST", host.registration.drain.path.replace(":id", this.agent.instance), host.registration.drain.response, { json: {}, timeoutMs: 10_000 })).left;
          break;
        } catch {
          /* the next replica */
        }
      }
      if (left === 0) return 0;
      await new Promise((r) => setTimeout(r, 1000));
    }
    return left;
  }

  private http(url: string): HostHttp {
    let h = this.links.get(url);
    if (!h) this.links.set(url, (h = new HostHttp(url, this.opts.link)));
    return h;
  }

  /** A renewed certificate: the next calls present it (on new connections; a call in flight finishes on its own). */
  setLink(link: HostLink): void {
    this.opts.link = link;
    const old = [...this.links.values()];
    this.links.clear();
    setTimeout(() => old.forEach((h) => h.close()), 15_000).unref();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    for (const h of this.links.values()) h.close();
    this.links.clear();
  }
}
