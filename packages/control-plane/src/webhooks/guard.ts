/**
 * What a tenant's webhook URL may reach: never this machine or a private network (a webhook
 * must not turn Den into a probe of the networks it sits on), unless the operator allows
 * that network. The check applies to the address actually connected to: names are resolved
 * at connect time by `guardedLookup`, so a name that resolves elsewhere later is caught then.
 */
import { BlockList, isIP } from "node:net";
import { lookup, type LookupAddress, type LookupAllOptions, type LookupOneOptions } from "node:dns";
import { DenError } from "@den/protocol";

/** Loopback, private, shared, link-local, multicast and reserved ranges (IANA special-purpose registries). */
const INTERNAL: Array<[string, number, "ipv4" | "ipv6"]> = [
  ["0.0.0.0", 8, "ipv4"], ["10.0.0.0", 8, "ipv4"], ["100.64.0.0", 10, "ipv4"], ["127.0.0.0", 8, "ipv4"],
  ["169.254.0.0", 16, "ipv4"], ["172.16.0.0", 12, "ipv4"], ["192.0.0.0", 24, "ipv4"], ["192.168.0.0", 16, "ipv4"],
  ["198.18.0.0", 15, "ipv4"], ["224.0.0.0", 4, "ipv4"], ["240.0.0.0", 4, "ipv4"],
  ["::", 128, "ipv6"], ["::1", 128, "ipv6"], ["64:ff9b::", 96, "ipv6"], ["100::", 64, "ipv6"],
  ["fc00::", 7, "ipv6"], ["fe80::", 10, "ipv6"], ["ff00::", 8, "ipv6"],
];

/** How long a create waits for its URL's name to resolve. */
const LOOKUP_TIMEOUT_MS = 5000;

export class AddressGuard {
  private readonly internal = new BlockList();
  private readonly allowed = new BlockList();

  /** `allow`: CIDRs the operator lets webhooks reach though they are internal (DEN_WEBHOOK_ALLOW_NETWORKS). */
  constructor(allow: string[]) {
    for (const [net, prefix, type] of INTERNAL) this.internal.addSubnet(net, prefix, type);
    for (const cidr of allow) {
      const [net, bits] = cidr.split("/");
      const type = isIP(net ?? "") === 6 ? "ipv6" : "ipv4";
      if (!isIP(net ?? "")) throw new Error(`DEN_WEBHOOK_ALLOW_NETWORKS: ${JSON.stringify(cidr)} is not a CIDR`);
      this.allowed.addSubnet(net!, bits === undefined ? (type === "ipv6" ? 128 : 32) : Number(bits), type);
    }
  }

  /** Why `address` (an IP) may not be reached, or undefined if it may. */
  refusal(address: string): string | undefined {
    let ip = address;
    let type: "ipv4" | "ipv6" = isIP(ip) === 6 ? "ipv6" : "ipv4";
    // An IPv4-mapped IPv6 address is the IPv4 address it maps.
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
    if (mapped) [ip, type] = [mapped[1]!, "ipv4"];
    if (this.allowed.check(ip, type)) return undefined;
    return this.internal.check(ip, type) ? `${address} is a loopback, private or internal address` : undefined;
  }

  /** A `lookup` for http.request that refuses a name resolving to an address not allowed (checked at every connect). */
  readonly lookup = (hostname: string, options: LookupOneOptions | LookupAllOptions, cb: (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void): void => {
    lookup(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return cb(err, "");
      const bad = addresses.map((a) => this.refusal(a.address)).find((r) => r !== undefined);
      if (bad) return cb(Object.assign(new Error(`${hostname} resolves to ${bad}`), { code: "EDENREFUSED" }), "");
      if ((options as LookupAllOptions).all) return cb(null, addresses);
      cb(null, addresses[0]!.address, addresses[0]!.family);
    });
  };

  /**
   * Checks a webhook URL as given: http(s), and every address its host resolves to now may be
   * reached. A 400 (`invalid_argument`) says why not.
   */
  async checkUrl(raw: string): Promise<URL> {
    let url: URL;
    try {
      url = new URL(raw);
    } catch {
      throw new DenError("invalid_argument", `webhook url ${JSON.stringify(raw.slice(0, 200))} is not a URL`);
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") throw new DenError("invalid_argument", `webhook url must be http or https, not ${url.protocol}`);
    const host = url.hostname.replace(/^\[(.*)\]$/, "$1");
    if (isIP(host)) {
      const why = this.refusal(host);
      if (why) throw new DenError("invalid_argument", `webhook url refused: ${why} (an operator may allow a network with DEN_WEBHOOK_ALLOW_NETWORKS)`);
      return url;
    }
    const addresses = await new Promise<LookupAddress[]>((resolve, reject) => {
      const t = setTimeout(() => reject(Object.assign(new Error("timed out"), { code: "ETIMEOUT" })), LOOKUP_TIMEOUT_MS);
      lookup(host, { all: true }, (err, a) => (clearTimeout(t), err ? reject(err) : resolve(a)));
    })
      .catch((e: NodeJS.ErrnoException) => {
        throw new DenError("invalid_argument", `webhook url refused: ${host} does not resolve (${e.code ?? e.message})`);
      });
    for (const a of addresses) {
      const why = this.refusal(a.address);
      if (why) throw new DenError("invalid_argument", `webhook url refused: ${host} resolves to ${why} (an operator may allow a network with DEN_WEBHOOK_ALLOW_NETWORKS)`);
    }
    return url;
  }
}
