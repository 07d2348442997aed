/** The deployment's host agents (admin routes: the calling key must be an admin key). */
import { api } from "@den/protocol";
import { DenClient, type DenClientOptions, type RequestOptions, listOf, seg } from "./client.js";

/** One host agent as `GET /v1/hosts` shows it. */
export interface HostInfo {
  id: string;
  url: string;
  /** Whether it answers now (a registered host: and holds its lease). */
  status: "up" | "unreachable";
  error: string | null;
  /** `draining`: it takes no new sandbox and its own go cold. */
  state: "up" | "draining" | "removed";
  /** `config`: given by the server's configuration; `lease`: registered itself. */
  managed: "config" | "lease";
  leaseUntil: Date | null;
  /** When its running and warm sandboxes were declared lost. */
  lostAt: Date | null;
  kind: { qemuVersion: string; accelerator: string; cpuModel: string; arch: string } | null;
  capacity: { memoryMb: number; vcpus: number; diskReserveMb: number } | null;
  used: { memoryMb: number; vcpus: number; sandboxes: number } | null;
  /** Sandboxes the database places on it (any state but destroyed). */
  sandboxes: number;
  /** When its newest unrevoked certificate expires (null: it has none, say over the legacy secret). */
  certExpiresAt: Date | null;
}

/** A new one-time join token (`Hosts.createJoinToken`): its text is shown only this once. */
export interface JoinTokenInfo {
  id: string;
  token: string;
  kind: "host" | "control-plane";
  expiresAt: Date;
}

const date = (s: string | null) => (s === null ? null : new Date(s));

function toHostInfo(w: api.HostEntry): HostInfo {
  return {
    id: w.id, url: w.url, status: w.status, error: w.error, state: w.state, managed: w.managed, leaseUntil: date(w.lease_until), lostAt: date(w.lost_at), kind: w.kind,
    capacity: w.capacity ? { memoryMb: w.capacity.memory_mb, vcpus: w.capacity.vcpus, diskReserveMb: w.capacity.disk_reserve_mb } : null,
    used: w.used ? { memoryMb: w.used.memory_mb, vcpus: w.used.vcpus, sandboxes: w.used.sandboxes } : null, certExpiresAt: date(w.cert_expires_at ?? null),
    sandboxes: w.sandboxes,
  };
}

/**
 * The host agents sandboxes run on (needs an admin key).
 *
 * @example
 * ```ts
 * for (const h of await Hosts.list()) console.log(h.id, h.status, h.used?.sandboxes);
 * await Hosts.drain("den_abc");   // its sandboxes go cold, to wake on other hosts
 * ```
 */
export const Hosts = {
  async list(opts: DenClientOptions & RequestOptions = {}): Promise<HostInfo[]> {
    const client = new DenClient(opts);
    return (await client.json({ method: "GET", path: "/v1/hosts", signal: opts.signal }, listOf("hosts", api.HostEntry.parse))).map(toHostInfo);
  },

  /** Starts draining a host (its sandboxes go cold, then its volumes are parked in the store); resolves with how many sandboxes and volumes are still on it (ask again for progress). */
  async drain(id: string, opts: DenClientOptions & RequestOptions = {}): Promise<{ left: number }> {
    const client = new DenClient(opts);
    return client.json({ method: "POST", path: `/v1/hosts/${seg(id)}/drain`, json: {}, signal: opts.signal }, (v) => ({ left: Number((v as { left: number }).left) }));
  },

  /** Ends a drain: the host takes new sandboxes again. */
  async undrain(id: string, opts: DenClientOptions & RequestOptions = {}): Promise<void> {
    const client = new DenClient(opts);
    await client.request({ method: "POST", path: `/v1/hosts/${seg(id)}/undrain`, json: {}, signal: opts.signal });
  },

  /**
   * A one-time token a machine joins the fleet with (`den host run --join TOKEN`): it gets a
   * certificate of its own from the deployment's CA. Default: a host's, valid an hour (at most
   * a week). {@link ConflictError} `ca_not_configured` when the deployment has no CA.
   */
  async createJoinToken(params: { kind?: "host" | "control-plane"; ttlSeconds?: number } = {}, opts: DenClientOptions & RequestOptions = {}): Promise<JoinTokenInfo> {
    const client = new DenClient(opts);
    const body = { ...(params.kind ? { kind: params.kind } : {}), ...(params.ttlSeconds !== undefined ? { ttl_seconds: params.ttlSeconds } : {}) };
    const t = await client.json({ method: "POST", path: "/v1/hosts/tokens", json: body, signal: opts.signal }, api.JoinToken.parse);
    return { id: t.id, token: t.token, kind: t.kind, expiresAt: new Date(t.expires_at) };
  },

  /**
   * Revokes a host: its certificates are refused from now on, no call goes to it, and its
   * sandboxes are recovered elsewhere as a lost host's; resolves with how many certificates.
   */
  async revoke(id: string, opts: DenClientOptions & RequestOptions = {}): Promise<{ revoked: number }> {
    const client = new DenClient(opts);
    return client.json({ method: "POST", path: `/v1/hosts/${seg(id)}/revoke`, json: {}, signal: opts.signal }, (v) => ({ revoked: Number((v as { revoked: number }).revoked) }));
  },

  /** Removes a host that holds no sandbox (drain it first); its certificates are revoked. */
  async remove(id: string, opts: DenClientOptions & RequestOptions = {}): Promise<void> {
    const client = new DenClient(opts);
    await client.request({ method: "DELETE", path: `/v1/hosts/${seg(id)}`, signal: opts.signal });
  },
};
