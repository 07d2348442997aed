import { DenError, type api } from "@den/protocol";
import { isCidr } from "@den/protocol";

/** The server's network limits (see config). */
export interface NetworkLimits {
  /** The egress of a template build's RUN steps (DEN_BUILD_EGRESS). */
  buildEgress: "open" | "none";
  /** Connections a sandbox may hold open at once (its default and maximum). */
  maxConnections: number;
  /** Bandwidth each way per sandbox in Mbit/s (its default and maximum); 0: none. */
  bandwidthMbps: number;
  /** How often refused attempts are read and written to the events log (aggregated). */
  eventsIntervalMs: number;
}

export const NO_NETWORK: api.NetworkPolicy = { egress: "none" };

/**
 * The policy a sandbox gets: the one asked for, checked, and held to the server's limits
 * (which also fill in what the request left out), so what the API shows is what applies.
 */
export function effectivePolicy(req: api.NetworkPolicy | undefined, lim: NetworkLimits): api.NetworkPolicy {
  if (!req || req.egress === "none") return NO_NETWORK;
  for (const e of [...(req.allow ?? []), ...(req.deny ?? [])]) {
    if (/^[\d./]+$/.test(e) && !isCidr(e)) throw new DenError("invalid_argument", `network: not an IPv4 address or CIDR: ${JSON.stringify(e)}`);
  }
  const badDeny = (req.deny ?? []).find((e) => !isCidr(e));
  if (badDeny !== undefined) throw new DenError("invalid_argument", `network.deny takes IPv4 addresses and CIDRs, not ${JSON.stringify(badDeny)}`);
  if (req.egress === "open" && req.allow?.length) throw new DenError("invalid_argument", "network.allow applies to egress \"allowlist\"; \"open\" takes deny");
  if (req.egress === "allowlist" && req.deny?.length) throw new DenError("invalid_argument", "network.deny applies to egress \"open\"; \"allowlist\" takes allow");
  const out: api.NetworkPolicy = { egress: req.egress };
  if (req.allow?.length) out.allow = [...new Set(req.allow.map((a) => a.toLowerCase()))];
  if (req.deny?.length) out.deny = [...new Set(req.deny)];
  out.max_connections = Math.min(req.max_connections ?? lim.maxConnections, lim.maxConnections);
  const bw = lim.bandwidthMbps > 0 ? Math.min(req.bandwidth_mbps ?? lim.bandwidthMbps, lim.bandwidthMbps) : req.bandwidth_mbps;
  if (bw !== undefined) out.bandwidth_mbps = bw;
  return out;
}

export const serializePolicy = (p: api.NetworkPolicy): string | null => (p.egress === "none" ? null : JSON.stringify(p));

export type Refusals = api.NetworkStatus["refused"];
export const NO_REFUSALS: Refusals = { private: 0, policy: 0, limit: 0, dns: 0 };

/**
 * Turns a sandbox's refusal counters into what is new since the last reading. Counters
 * start again from zero whenever its network is rebuilt (wake, restart), which shows as a
 * counter going down: then everything it holds is new.
 */
export class RefusalTracker {
  private last = new Map<string, Refusals>();

  /** What is new in `now` for this sandbox, or undefined if nothing is. */
  delta(id: string, now: Refusals): Refusals | undefined {
    const prev = this.last.get(id) ?? NO_REFUSALS;
    this.last.set(id, now);
    const reset = (Object.keys(NO_REFUSALS) as Array<keyof Refusals>).some((k) => now[k] < prev[k]);
    const base = reset ? NO_REFUSALS : prev;
    const d: Refusals = { private: now.private - base.private, policy: now.policy - base.policy, limit: now.limit - base.limit, dns: now.dns - base.dns };
    return d.private + d.policy + d.limit + d.dns > 0 ? d : undefined;
  }

  /** Drops a sandbox's last reading (its network is gone). */
  forget(id: string): void {
    this.last.delete(id);
  }
}
