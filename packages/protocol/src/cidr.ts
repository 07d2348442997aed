/** IPv4 arithmetic: the per-sandbox point-to-point links, the refused ranges, policy entries. */

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

/** A policy entry is a CIDR (or one address) or a domain name. */
export function isCidr(s: string): boolean {
  try {
    parseCidr(s);
    return true;
  } catch {
    return false;
  }
}
