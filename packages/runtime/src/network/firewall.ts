import { REFUSED_V4 } from "./addresses.js";

export type EgressMode = "none" | "allowlist" | "open";

/** Addresses an allowlist sandbox's DNS answers may have let through at once. */
export const MAX_LEARNED = 4096;

/** The nftables ruleset of one sandbox's network namespace, which its egress passes through. */
export interface FirewallSpec {
  mode: EgressMode;
  /** allowlist mode: the only destinations let through (CIDRs) ... */
  allow: string[];
  /** ... and the addresses its DNS answers handed out (kept in a set of their own, `dns4`, which expires them). */
  learned: string[];
  /** open mode: destinations refused anyway. */
  deny: string[];
  /** Den's DNS server for this sandbox (the host end of its link): port 53 only. */
  dns: string;
  /** This machine's own addresses: never reachable. */
  hostAddresses: string[];
  /** New connections allowed at once (conntrack), or null for no limit. */
  maxConnections: number | null;
  /** Where refused TCP connections are sent to be reset (see Refuser). */
  refuser: { address: string; port: number };
}

const set = (name: string, elements: string[]) =>
  `  set ${name} { type ipv4_addr; flags interval; auto-merge;${elements.length ? ` elements = { ${elements.join(", ")} }` : ""} }`;

/**
 * The whole table, replaced atomically on every policy change (`nft -f`): output of the
 * namespace (where the user-mode network makes the guest's connections) is filtered;
 * the refused ranges come before any allow, so no policy reaches them.
 */
export function firewallRules(spec: FirewallSpec): string {
  // The same refusals twice: in the nat chain, TCP connections go to the refuser (counted
  // once per connection); in the filter chain, everything else is rejected (counted per
  // packet), and so is anything the nat chain let by.
  const verdicts = (proto: string, verdict: string) => {
    const policy =
      spec.mode === "allowlist" ? [`ip daddr != @allow4 ip daddr != @dns4 ${proto}counter name refused_policy ${verdict}`]
      : spec.mode === "open" ? [`ip daddr @deny4 ${proto}counter name refused_policy ${verdict}`]
      : [`${proto}counter name refused_policy ${verdict}`];
    return [
      `ip daddr @refused4 ${proto}counter name refused_private ${verdict}`,
      ...policy,
      ...(spec.maxConnections !== null ? [`${proto}ct state new ct count over ${spec.maxConnections} counter name refused_limit ${verdict}`] : []),
    ].map((r) => `    ${r}`);
  };
  const r = spec.refuser;
  return [
    "table inet den",
    "delete table inet den",
    "table inet den {",
    set("allow4", spec.allow),
    `  set dns4 { type ipv4_addr; size ${MAX_LEARNED};${spec.learned.length ? ` elements = { ${spec.learned.join(", ")} }` : ""} }`,
    set("deny4", spec.deny),
    set("refused4", [...REFUSED_V4, ...spec.hostAddresses.map((a) => `${a}/32`)]),
    "  counter refused_private {}",
    "  counter refused_policy {}",
    "  counter refused_limit {}",
    "  chain refuse_tcp {",
    "    type nat hook output priority -100; policy accept;",
    "    meta nfproto ipv6 return",
    ...verdicts("meta l4proto tcp ", `dnat ip to ${r.address}:${r.port}`),
    "  }",
    "  chain out {",
    "    type filter hook output priority 0; policy accept;",
    `    ip daddr ${r.address} tcp dport ${r.port} ct status dnat accept`,
    // The errors the rejects below send back to this namespace's own sockets.
    "    icmp type destination-unreachable fib daddr type local accept",
    // Den's resolver is UDP only: a TCP listener on the host's port 53 is not its to reach.
    `    ip daddr ${spec.dns} udp dport 53 accept`,
    // IPv6 stays closed until it gets the same care (private ranges, the host's addresses).
    "    meta nfproto ipv6 counter name refused_private reject",
    ...verdicts("", "reject"),
    "  }",
    "}",
    "",
  ].join("\n");
}

/** Counters of refused attempts, by why. */
export interface RefusedCounts {
  private: number;
  policy: number;
  limit: number;
}

/** Reads the counters out of `nft -j list counters` output. */
export function parseCounters(json: string): RefusedCounts {
  const out: RefusedCounts = { private: 0, policy: 0, limit: 0 };
  const doc = JSON.parse(json) as { nftables?: Array<{ counter?: { name: string; packets: number } }> };
  for (const item of doc.nftables ?? []) {
    const c = item.counter;
    if (c?.name === "refused_private") out.private = c.packets;
    else if (c?.name === "refused_policy") out.policy = c.packets;
    else if (c?.name === "refused_limit") out.limit = c.packets;
  }
  return out;
}
