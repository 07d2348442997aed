import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DenError, type NetSetup } from "@den/protocol";
import { runTool } from "../util.js";
import { SandboxNetwork, type EgressPolicy, type NetworkEnv } from "./sandbox-network.js";

/** What a sandbox dir records of its network, so a restarted runtime can rebuild it. */
interface NetworkRecord {
  slot: number;
  policy: EgressPolicy;
}

const RECORD = "network.json";

/** The guest side of a sandbox, as far as its network needs it. */
export interface NetworkedGuest {
  id: string;
  dir: string;
  exec(cmd: string, opts?: { timeoutMs?: number }): Promise<{ exitCode: number | null; stderr: Buffer }>;
  /** Configures the NIC through the agent; false if the agent cannot (then `exec` runs `ip`). */
  setupNetwork?(cfg: NetSetup): Promise<boolean>;
}

/** The guest's side of `net`: through its agent where it can, else by running `ip` in it. */
async function configureGuest(guest: NetworkedGuest, net: SandboxNetwork): Promise<{ exitCode: number | null; stderr: Buffer }> {
  const failed = (e: unknown) => ({ exitCode: -1, stderr: Buffer.from(String(e)) });
  try {
    if (await guest.setupNetwork?.(net.guestConfig())) return { exitCode: 0, stderr: Buffer.alloc(0) };
  } catch (e) {
    return failed(e);
  }
  return guest.exec(net.guestSetup(), { timeoutMs: 30_000 }).catch(failed);
}

/** Parses `DEN_NET_HOSTS` ("name=1.2.3.4,other=5.6.7.8"): fixed DNS answers, for tests. */
export function parseHostsMap(text: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of (text ?? "").split(",").map((s) => s.trim()).filter(Boolean)) {
    const [name, ip] = pair.split("=");
    if (name && ip) out[name.toLowerCase()] = ip;
  }
  return out;
}

/** This machine's own IPv4 addresses (every namespace's): a sandbox must reach none of them. */
async function hostAddresses(): Promise<string[]> {
  const json = await runTool("ip", ["-j", "-4", "addr", "show"]).catch(() => "[]");
  const links = JSON.parse(json) as Array<{ addr_info?: Array<{ local?: string }> }>;
  return links.flatMap((l) => (l.addr_info ?? []).map((a) => a.local).filter((a): a is string => !!a && !a.startsWith("127.")));
}

function samePolicy(a: EgressPolicy, b: EgressPolicy): boolean {
  const norm = (p: EgressPolicy) => JSON.stringify([p.egress, p.allow ?? [], p.deny ?? [], p.maxConnections ?? null, p.bandwidthMbps ?? null]);
  return norm(a) === norm(b);
}

/**
 * Routes the pool's traffic out of this machine: forwarding on, and the pool's source
 * addresses rewritten to the outgoing interface's (a table of its own, keyed by the pool,
 * replaced whole so a restart never stacks rules).
 */
async function enableHostNat(pool: string): Promise<void> {
  await writeFile("/proc/sys/net/ipv4/ip_forward", "1");
  const table = `den_nat_${pool.replace(/[./]/g, "_")}`;
  const rules = [
    `table ip ${table}`,
    `delete table ip ${table}`,
    `table ip ${table} {`,
    "  chain post {",
    "    type nat hook postrouting priority srcnat; policy accept;",
    `    ip saddr ${pool} ip daddr != ${pool} masquerade`,
    "  }",
    "}",
    "",
  ].join("\n");
  const dir = await mkdtemp(join(tmpdir(), "den-nat-"));
  try {
    await writeFile(join(dir, "nat.rules"), rules);
    await runTool("nft", ["-f", join(dir, "nat.rules")]);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * The networks of one runtime's sandboxes: which slot (link) each has, its policy, and
 * bringing them up, changing and tearing them down — also after a restart.
 */
export class NetworkManager {
  private nets = new Map<string, SandboxNetwork>();
  private env: NetworkEnv | undefined;

  /**
   * `masquerade`: let sandboxes' connections out through this machine (IP forwarding and
   * NAT for the pool), which a real deployment needs; off where a router does it.
   */
  constructor(
    private readonly instance: string,
    private readonly pool: string,
    private readonly hosts: Record<string, string>,
    private readonly masquerade = true,
  ) {}

  private async netEnv(): Promise<NetworkEnv> {
    if (!this.env) {
      if (this.masquerade) await enableHostNat(this.pool);
      this.env = { pool: this.pool, hostAddresses: await hostAddresses(), hosts: this.hosts };
    }
    return this.env;
  }

  get(id: string): SandboxNetwork | undefined {
    return this.nets.get(id);
  }

  /**
   * Gives a running sandbox this egress policy: `none` takes its network away (its NIC
   * leads nowhere again); anything else brings one up or changes it in place.
   */
  async set(guest: NetworkedGuest, policy: EgressPolicy): Promise<void> {
    SandboxNetwork.validate(policy);
    const cur = this.nets.get(guest.id);
    if (policy.egress === "none") {
      await this.release(guest.id, guest.dir);
      return;
    }
    if (cur && samePolicy(cur.currentPolicy, policy)) return;
    if (cur) {
      await cur.setPolicy(policy);
    } else {
      const slot = this.freeSlot();
      const net = await SandboxNetwork.up(this.instance, guest.id, slot, policy, await this.netEnv(), guest.dir);
      this.nets.set(guest.id, net);
      const r = await configureGuest(guest, net);
      if (r.exitCode !== 0) {
        await this.release(guest.id, guest.dir);
        throw new DenError("io_error", `cannot configure the guest's network: ${r.stderr.toString().slice(0, 500)}`);
      }
    }
    await writeFile(join(guest.dir, RECORD), JSON.stringify({ slot: this.nets.get(guest.id)!.slot, policy } satisfies NetworkRecord));
  }

  /** Tears a sandbox's network down (idempotent; also when its dir is already gone). */
  async release(id: string, dir?: string): Promise<void> {
    const net = this.nets.get(id);
    this.nets.delete(id);
    if (net) await net.down();
    else if (dir && existsSync(join(dir, RECORD))) {
      const rec = JSON.parse(await readFile(join(dir, RECORD), "utf8")) as NetworkRecord;
      await SandboxNetwork.remove(this.instance, id, rec.slot);
    }
    if (dir) await rm(join(dir, RECORD), { force: true });
  }

  /** After a restart: rebuild the network of a sandbox that was adopted (its old router is gone). */
  async readopt(guest: NetworkedGuest): Promise<void> {
    const file = join(guest.dir, RECORD);
    if (!existsSync(file)) return;
    const rec = JSON.parse(readFileSync(file, "utf8")) as NetworkRecord;
    await SandboxNetwork.remove(this.instance, guest.id, rec.slot);
    const net = await SandboxNetwork.up(this.instance, guest.id, rec.slot, rec.policy, await this.netEnv(), guest.dir);
    this.nets.set(guest.id, net);
  }

  private freeSlot(): number {
    const used = new Set([...this.nets.values()].map((n) => n.slot));
    for (let i = 0; ; i++) if (!used.has(i)) return i;
  }

  /** Lets go of this process's part (DNS servers); namespaces and routers stay for the next runtime. */
  detach(): void {
    for (const n of this.nets.values()) n.detach();
    this.nets.clear();
  }

}
