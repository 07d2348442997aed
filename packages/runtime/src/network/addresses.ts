/** IPv4 helpers for the per-sandbox point-to-point links and the refused ranges. */

export function ipToInt(ip: string): number {
  // Dotted decimal only: Number() alone would also take "0x1", "1e2" or " 1".
  if (!/^\d{1,3}(\.\d{1,3}){3}$/.test(ip)) throw new Error(`not an IPv4 address: ${ip}`);
  const p = ip.split(".").map(Number);
  if (p.some((x) => x > 255)) throw new Error(`not an IPv4 address: ${ip}`);
  return ((p[0]! << 24) | (p[1]! << 16) | (p[2]! << 8) | p[3]!) >>> 0;
}

export function intToIp(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join(".");
}

export function parseCidr(cidr: string): { base: number; bits: number } {
  const parts = cidr.split("/");
  if (parts.length > 2) throw new Error(`not a CIDR: ${cidr}`);
  const [ip, bitsText] = parts;
  const bits = bitsText === undefined ? 32 : /^\d{1,2}$/.test(bitsText) ? Number(bitsText) : NaN;
  if (!Number.isInteger(bits) || bits < 0 || bits > 32) throw new Error(`bad prefix length in ${cidr}`);
  const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
  return { base: (ipToInt(ip!) & mask) >>> 0, bits };
}

export function inCidr(ip: string, cidr: string): boolean {
  const { base, bits } = parseCidr(cidr);
  const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
  return ((ipToInt(ip) & mask) >>> 0) === base;
}

/**
 * Destinations a sandbox never reaches, whatever its policy: this machine, its networks,
 * and everything that is not the public internet.
 */
export const REFUSED_V4 = [
  "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
  "192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/4", "240.0.0.0/4",
];

/** The link of sandbox slot `index` inside `pool` (a /30 each): the host's end and the sandbox's. */
export function slotLink(pool: string, index: number): { host: string; guest: string; cidr: string } {
  const { base, bits } = parseCidr(pool);
  const slots = 2 ** (32 - bits) / 4;
  if (!Number.isInteger(index) || index < 0 || index >= slots) throw new Error(`slot ${index} is outside ${pool} (${slots} slots)`);
  const net = base + index * 4;
  return { host: intToIp(net + 1), guest: intToIp(net + 2), cidr: `${intToIp(net)}/30` };
}

/** A policy entry is a CIDR (or one address) or a domain name. */
export function isCidr(s: string): boolean {
  try {
    parseCidr(s);
    return true;
  } catch {
    return false;
  }
}
