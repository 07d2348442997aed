import dgram from "node:dgram";
import { promises as dns } from "node:dns";

/** What a sandbox's DNS server may answer, and what it reports back. */
export interface DnsPolicy {
  /** null: any name; else only these (exact, or `*.example.com` for subdomains). */
  names: string[] | null;
  /** Test-only fixed answers (name -> IPv4), consulted before the host's resolver. */
  hosts: Record<string, string>;
  /**
   * Called with the addresses of an allowed name (and how long the answer lives) before
   * the answer is sent; `false` refuses the answer (the sandbox has learned too many).
   */
  onResolved: (name: string, addresses: string[], ttlSeconds: number) => Promise<boolean>;
  /** Called when a name is refused. */
  onRefused: (name: string) => void;
}

export function nameAllowed(name: string, allowed: string[] | null): boolean {
  if (allowed === null) return true;
  const n = name.toLowerCase().replace(/\.$/, "");
  return allowed.some((a) => {
    const p = a.toLowerCase();
    return p.startsWith("*.") ? n.endsWith(p.slice(1)) && n.length > p.length - 1 : n === p;
  });
}

/** The first question of a query: its name, type and where the question ends. */
function question(msg: Buffer): { name: string; type: number; end: number } | undefined {
  if (msg.length < 12 || msg.readUInt16BE(4) < 1) return undefined;
  const labels: string[] = [];
  let i = 12;
  while (i < msg.length) {
    const len = msg[i]!;
    if (len === 0) {
      i++;
      break;
    }
    if (len > 63 || i + 1 + len > msg.length) return undefined;
    labels.push(msg.subarray(i + 1, i + 1 + len).toString("latin1"));
    i += 1 + len;
  }
  if (i + 4 > msg.length) return undefined;
  return { name: labels.join("."), type: msg.readUInt16BE(i), end: i + 4 };
}

/** The TTL a sandbox's answers carry: the real one, within these bounds (the firewall keeps the addresses as long). */
export const MIN_ANSWER_TTL = 30;
export const MAX_ANSWER_TTL = 300;

/** Queries a sandbox may send: a bucket of this many, refilled at this rate per second; the rest are dropped. */
const QUERY_BURST = 100;
const QUERIES_PER_SECOND = 50;

function reply(query: Buffer, q: { end: number }, rcode: number, addresses: string[], ttl = MIN_ANSWER_TTL): Buffer {
  const head = Buffer.from(query.subarray(0, q.end));
  head.writeUInt16BE(0x8180 | rcode, 2); // response, recursion desired + available
  head.writeUInt16BE(1, 4);
  head.writeUInt16BE(addresses.length, 6);
  head.writeUInt16BE(0, 8);
  head.writeUInt16BE(0, 10);
  const answers = addresses.map((a) => {
    const rr = Buffer.alloc(16);
    rr.writeUInt16BE(0xc00c, 0); // the question's name
    rr.writeUInt16BE(1, 2); // A
    rr.writeUInt16BE(1, 4); // IN
    rr.writeUInt32BE(ttl, 6);
    rr.writeUInt16BE(4, 10);
    a.split(".").forEach((o, k) => rr.writeUInt8(Number(o), 12 + k));
    return rr;
  });
  return Buffer.concat([head, ...answers]);
}

/**
 * A sandbox's DNS server, on the host end of its link: the only resolver its namespace
 * may reach (UDP only). It answers A queries for allowed names (IPv6 stays closed) and,
 * before it answers, lets the firewall through to the addresses it hands out. Queries past
 * a rate (a bucket of QUERY_BURST, QUERIES_PER_SECOND) are dropped and counted as refused.
 */
export class SandboxDns {
  private tokens = QUERY_BURST;
  private filledAt = Date.now();

  private constructor(private readonly sock: dgram.Socket) {}

  /** Takes one query's token, if there is one. */
  private take(): boolean {
    const now = Date.now();
    this.tokens = Math.min(QUERY_BURST, this.tokens + ((now - this.filledAt) / 1000) * QUERIES_PER_SECOND);
    this.filledAt = now;
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }

  static async listen(address: string, policy: () => DnsPolicy): Promise<SandboxDns> {
    const sock = dgram.createSocket({ type: "udp4", reuseAddr: false });
    const server = new SandboxDns(sock);
    sock.on("message", (msg, from) => {
      const p = policy();
      if (!server.take()) return p.onRefused("(rate limit)");
      void SandboxDns.answer(msg, p).then((out) => out && sock.send(out, from.port, from.address), () => undefined);
    });
    sock.on("error", () => undefined);
    await new Promise<void>((resolve, reject) => {
      sock.once("error", reject);
      sock.bind(53, address, () => {
        sock.off("error", reject);
        resolve();
      });
    });
    return server;
  }

  private static async answer(msg: Buffer, p: DnsPolicy): Promise<Buffer | undefined> {
    const q = question(msg);
    if (!q) return undefined;
    if (!nameAllowed(q.name, p.names)) {
      p.onRefused(q.name);
      return reply(msg, q, 5, []); // REFUSED
    }
    if (q.type !== 1) return reply(msg, q, 0, []);
    const fixed = p.hosts[q.name.toLowerCase()];
    let answers: Array<{ address: string; ttl: number }>;
    try {
      answers = fixed ? [{ address: fixed, ttl: MIN_ANSWER_TTL }] : await dns.resolve4(q.name, { ttl: true });
    } catch {
      return reply(msg, q, 3, []); // NXDOMAIN
    }
    const ttl = Math.min(MAX_ANSWER_TTL, Math.max(MIN_ANSWER_TTL, Math.min(...answers.map((a) => a.ttl))));
    const addresses = answers.map((a) => a.address);
    if (!(await p.onResolved(q.name, addresses, ttl))) {
      p.onRefused(q.name);
      return reply(msg, q, 5, []); // REFUSED
    }
    return reply(msg, q, 0, addresses, ttl);
  }

  close(): void {
    this.sock.close();
  }
}
