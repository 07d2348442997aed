/** IPv4 helpers for the per-sandbox point-to-point links and the refused ranges. */

// The IPv4 arithmetic is the protocol's (policies are checked by the control plane too).
import { ipToInt, intToIp, parseCidr, inCidr, isCidr } from "@den/protocol";
export { ipToInt, intToIp, parseCidr, inCidr, isCidr };

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

