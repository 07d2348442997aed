import dgram from "node:dgram";
import { promises as dns } from "node:dns";

/** What a sandbox's DNS server may answer, and what it reports back. */
export interface DnsPolicy {
  /** null: any name; else only these (exact, or `*.example.com` for subdomains). */
  names: string[] | null;
  /** Test-only fixed answers (name -> IPv4), consulted before the host's resolver. */
  hosts: Record<string, string>;
  /** Called with the addresses of an allowed name before the answer is sent. */
  onResolved: (name: string, addresses: string[]) => Promise<void>;
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

function reply(query: Buffer, q: { end: number }, rcode: number, addresses: string[]): Buffer {
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
    rr.writeUInt32BE(60, 6);
    rr.writeUInt16BE(4, 10);
    a.split(".").forEach((o, k) => rr.writeUInt8(Number(o), 12 + k));
    return rr;
  });
  return Buffer.concat([head, ...answers]);
}

/**
 * A sandbox's DNS server, on the host end of its link: the only resolver its namespace
 * may reach. It answers A queries for allowed names (IPv6 stays closed) and, before it
 * answers, lets the firewall through to the addresses it hands out.
 */
export class SandboxDns {
  private constructor(private readonly sock: dgram.Socket) {}

  static async listen(address: string, policy: () => DnsPolicy): Promise<SandboxDns> {
    const sock = dgram.createSocket({ type: "udp4", reuseAddr: false });
    sock.on("message", (msg, from) => {
      void SandboxDns.answer(msg, policy()).then((out) => out && sock.send(out, from.port, from.address), () => undefined);
    });
    sock.on("error", () => undefined);
    await new Promise<void>((resolve, reject) => {
      sock.once("error", reject);
      sock.bind(53, address, () => {
        sock.off("error", reject);
        resolve();
      });
    });
    return new SandboxDns(sock);
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
    let addresses: string[];
    try {
      addresses = fixed ? [fixed] : await dns.resolve4(q.name);
    } catch {
      return reply(msg, q, 3, []); // NXDOMAIN
    }
    await p.onResolved(q.name, addresses);
    return reply(msg, q, 0, addresses);
  }

  close(): void {
    this.sock.close();
  }
}
