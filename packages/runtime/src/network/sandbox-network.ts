import { spawn, type ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import { chmodSync, chownSync, closeSync, existsSync, mkdirSync, openSync, rmSync, writeFileSync } from "node:fs";
import { mkdir, writeFile, rm } from "node:fs/promises";
import { basename, join } from "node:path";
import { DenError, type NetSetup } from "@den/protocol";
import { VM_FILES, hasExited } from "../qemu.js";
import { runTool } from "../util.js";
import { isCidr, slotLink } from "./addresses.js";
import { SandboxDns } from "./dns.js";
import { hostCgroups } from "../jail/host.js";
import { ROUTER_JAIL, jailArgs, prepareJail, vmIdentity } from "../jail/identity.js";
import { Refuser } from "./refuser.js";
import { MAX_LEARNED, firewallRules, parseCounters, type EgressMode, type RefusedCounts } from "./firewall.js";

/** How long an address a DNS answer let through stays past the answer's TTL, and how often expired ones are taken out. */
const LEARNED_GRACE_SECONDS = 600;
const LEARNED_SWEEP_MS = 15_000;

export interface EgressPolicy {
  egress: EgressMode;
  /** CIDRs, addresses or domain names (`*.example.com` for subdomains). */
  allow?: string[];
  deny?: string[];
  /** New connections at once (default: no limit). */
  maxConnections?: number | null;
  /** Bandwidth each way in megabits per second (default: no limit). */
  bandwidthMbps?: number | null;
}

export interface NetworkEnv {
  /** The pool of /30 links (one per networked sandbox). */
  pool: string;
  /** This machine's own addresses: never reachable from a sandbox. */
  hostAddresses: string[];
  /** Test-only fixed DNS answers. */
  hosts: Record<string, string>;
}

const netnsName = (sandboxId: string) => `den-${sandboxId}`;

/** A locally administered unicast MAC derived from a sandbox id. */
export function guestMac(sandboxId: string): string {
  const h = createHash("sha256").update(sandboxId).digest();
  return ["02", ...[...h.subarray(0, 5)].map((b) => b.toString(16).padStart(2, "0"))].join(":");
}

/** The host end of a slot's link: unique per runtime instance, within the 15 characters Linux allows. */
export const hostInterfaceName = (instance: string, slot: number) => `d${instance.slice(-4)}${slot.toString(36)}`;

/** What the guest sees: libslirp's usual addresses (each sandbox has its own router, so they never meet). */
export const GUEST_NET = { cidr: "10.0.2.0/24", address: "10.0.2.15", gateway: "10.0.2.2", dns: "10.0.2.3" } as const;

/**
 * One sandbox's way out: a network namespace linked to the host by a veth pair, an
 * nftables table in it that every connection passes, Den's DNS server on the host end,
 * and a router process in the namespace whose user-mode network turns the guest's frames
 * (from QEMU's stream socket) into connections made there. The guest never reaches
 * anything the namespace's firewall does not let through; the router's alias for "the
 * host" (10.0.2.2) leads to the namespace's own loopback, which the firewall refuses.
 */
export class SandboxNetwork {
  private router: ChildProcess | undefined;
  private dns: SandboxDns | undefined;
  private refuser: Refuser | undefined;
  /** Addresses its DNS answers let through (allowlist mode), and until when (epoch ms). */
  private learned = new Map<string, number>();
  private sweeper: NodeJS.Timeout | undefined;
  dnsRefused = 0;

  private constructor(
    readonly instance: string,
    readonly sandboxId: string,
    readonly slot: number,
    private policy: EgressPolicy,
    private readonly env: NetworkEnv,
    private readonly dir: string,
  ) {}

  get currentPolicy(): EgressPolicy {
    return this.policy;
  }

  get netns(): string {
    return netnsName(this.sandboxId);
  }

  get link(): { host: string; guest: string; cidr: string } {
    return slotLink(this.env.pool, this.slot);
  }

  /** `ip netns exec` puts this dir's resolv.conf in place of /etc/resolv.conf. */
  private get etcDir(): string {
    return join("/etc/netns", this.netns);
  }

  get hostInterface(): string {
    return hostInterfaceName(this.instance, this.slot);
  }

  static validate(policy: EgressPolicy): void {
    for (const e of [...(policy.allow ?? []), ...(policy.deny ?? [])]) {
      if (!isCidr(e) && !/^(\*\.)?([a-z0-9-]{1,63}\.)*[a-z0-9-]{1,63}$/i.test(e)) throw new DenError("invalid_argument", `not a CIDR, address or domain name: ${JSON.stringify(e)}`);
    }
    if ((policy.deny ?? []).some((e) => !isCidr(e))) throw new DenError("invalid_argument", "deny takes CIDRs and addresses");
  }

  /** Builds the namespace, link, firewall and DNS server, and plugs passt into the VM's NIC socket. */
  static async up(instance: string, sandboxId: string, slot: number, policy: EgressPolicy, env: NetworkEnv, dir: string): Promise<SandboxNetwork> {
    SandboxNetwork.validate(policy);
    const n = new SandboxNetwork(instance, sandboxId, slot, policy, env, dir);
    try {
      await n.createLink();
      n.refuser = await Refuser.listen(n.link.host);
      await n.applyFirewall();
      // (A new link has no qdisc to take off.)
      if (policy.bandwidthMbps != null) await n.applyShaping();
      n.dns = await SandboxDns.listen(n.link.host, () => n.dnsPolicy());
      await n.startRouter();
      return n;
    } catch (e) {
      await n.down();
      throw e;
    }
  }

  private async createLink(): Promise<void> {
    const { host, guest } = this.link;
    const ns = this.netns;
    // (A leftover of an earlier life of this sandbox or slot only: each `ip` is a process.)
    if (existsSync(join("/run/netns", ns)) || existsSync(join("/sys/class/net", this.hostInterface))) await SandboxNetwork.remove(this.instance, this.sandboxId, this.slot);
    await runTool("ip", ["netns", "add", ns]);
    // The rest in two batches (each stops at its first error), one per side of the link.
    await this.ipBatch([], [
      `link add ${this.hostInterface} type veth peer name eth0 netns ${ns}`, `addr add ${host}/30 dev ${this.hostInterface}`, `link set ${this.hostInterface} up`,
    ]);
    await this.ipBatch(["-n", ns], [`addr add ${guest}/30 dev eth0`, "link set eth0 up", "link set lo up", `route add default via ${host}`]);
    // Every refused connect is answered by an ICMP error; rate-limited, a burst of refusals
    // (a port scan) would leave the later connects hanging until they time out.
    await runTool("ip", ["netns", "exec", ns, "sysctl", "-qw", "net.ipv4.icmp_ratelimit=0", "net.ipv4.icmp_msgs_per_sec=100000"]).catch(() =>
      runTool("ip", ["netns", "exec", ns, "sysctl", "-qw", "net.ipv4.icmp_ratelimit=0"]));
  }

  /** Runs `ip [global] -batch` over `lines` (written to a file in the sandbox's directory). */
  private async ipBatch(global: string[], lines: string[]): Promise<void> {
    const file = join(this.dir, "ip.batch");
    await writeFile(file, lines.join("\n") + "\n");
    try {
      await runTool("ip", [...global, "-batch", file]);
    } finally {
      await rm(file, { force: true });
    }
  }

  private dnsPolicy() {
    const p = this.policy;
    const names = p.egress === "allowlist" ? (p.allow ?? []).filter((e) => !isCidr(e)) : p.egress === "open" ? null : [];
    return {
      names, hosts: this.env.hosts,
      onResolved: async (_name: string, addresses: string[], ttlSeconds: number) => {
        if (p.egress !== "allowlist") return true;
        // Let through for as long as the guest may use the answer, and a while after (a
        // connection made near the end); the sweep takes them out again.
        const until = Date.now() + (ttlSeconds + LEARNED_GRACE_SECONDS) * 1000;
        const fresh = addresses.filter((a) => !this.learned.has(a));
        if (this.learned.size + fresh.length > MAX_LEARNED) return false;
        for (const a of addresses) this.learned.set(a, Math.max(until, this.learned.get(a) ?? 0));
        if (fresh.length) await this.nftElements("add", fresh);
        this.sweepLater();
        return true;
      },
      onRefused: () => {
        this.dnsRefused++;
      },
    };
  }

  private async nftElements(verb: "add" | "delete", addresses: string[]): Promise<void> {
    await runTool("ip", ["netns", "exec", this.netns, "nft", verb, "element", "inet", "den", "dns4", `{ ${addresses.join(", ")} }`]);
  }

  /** Every LEARNED_SWEEP_MS while it has learned addresses: the expired ones leave the firewall. */
  private sweepLater(): void {
    if (this.sweeper) return;
    this.sweeper = setInterval(() => {
      const now = Date.now();
      const expired = [...this.learned].filter(([, until]) => until <= now).map(([a]) => a);
      for (const a of expired) this.learned.delete(a);
      if (this.learned.size === 0) {
        clearInterval(this.sweeper);
        this.sweeper = undefined;
      }
      if (expired.length) void this.nftElements("delete", expired).catch(() => undefined);
    }, LEARNED_SWEEP_MS);
    this.sweeper.unref();
  }

  private async applyFirewall(): Promise<void> {
    const p = this.policy;
    const rules = firewallRules({
      mode: p.egress, allow: (p.allow ?? []).filter(isCidr), learned: [...this.learned.keys()], deny: p.deny ?? [],
      dns: this.link.host, hostAddresses: this.env.hostAddresses, maxConnections: p.maxConnections ?? null,
      refuser: { address: this.refuser!.address, port: this.refuser!.port },
    });
    const file = join(this.dir, "nft.rules");
    await writeFile(file, rules);
    await runTool("ip", ["netns", "exec", this.netns, "nft", "-f", file]);
  }

  /**
   * The router: a QEMU with no machine, only its user-mode network (libslirp) joined by a
   * hub to a stream connection into the sandbox VM's NIC socket. It runs inside the
   * namespace, so every connection it makes for the guest passes the firewall. Its DNS
   * forwards to the resolver in the namespace's resolv.conf: Den's server. Jailed as a VM
   * is: a uid of its own, chrooted to router-jail/ (the NIC socket, and the resolv.conf
   * libslirp reads again at each lookup), no fork or exec.
   */
  private async startRouter(): Promise<void> {
    await mkdir(this.etcDir, { recursive: true });
    await writeFile(join(this.etcDir, "resolv.conf"), `nameserver ${this.link.host}\n`);
    // A VM of an older Den has its NIC socket one level up: that router stays unjailed.
    const jailed = existsSync(join(this.dir, VM_FILES.net));
    // QEMU connects a stream netdev asynchronously, maybe after it has chrooted: the path is
    // relative to its working dir, the jail, which is "/" once inside it.
    const nic = jailed ? basename(VM_FILES.net) : join(this.dir, "net.sock");
    const confinement = jailed ? this.prepareRouterJail() : ["-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"];
    const args = [
      "netns", "exec", this.netns, process.env.DEN_QEMU ?? "qemu-system-x86_64", "-M", "none", "-nodefaults", "-no-user-config", "-display", "none",
      ...confinement,
      "-netdev", `user,id=u,net=${GUEST_NET.cidr},host=${GUEST_NET.gateway},dns=${GUEST_NET.dns},ipv6=off`,
      "-netdev", `stream,id=s,server=off,addr.type=unix,addr.path=${nic}`,
      "-netdev", "hubport,id=hu,hubid=0,netdev=u", "-netdev", "hubport,id=hs,hubid=0,netdev=s",
      "-pidfile", join(this.dir, "router.pid"),
    ];
    const log = openSync(join(this.dir, "router.log"), "a");
    try {
      const child = spawn("ip", args, {
        stdio: ["ignore", log, log], detached: true, cwd: jailed ? join(this.dir, ROUTER_JAIL) : this.dir,
        env: { PATH: process.env.PATH ?? "/usr/bin:/bin", DEN_INSTANCE: this.instance, DEN_SANDBOX: `net-${this.sandboxId}` },
      });
      child.on("error", () => undefined);
      child.unref();
      this.router = child;
      // `ip netns exec` becomes the router (same pid): its own cgroup, a core and a little memory.
      if (child.pid) hostCgroups()?.place(this.instance, this.routerCgroup, child.pid, { vcpus: 1, memoryMb: 128 });
    } finally {
      closeSync(log);
    }
  }

  /**
   * The router's chroot (root's: see prepareJail) with the one file it reads there; its jail
   * arguments. Everything is made afresh by path only inside that root-owned dir.
   */
  private prepareRouterJail(): string[] {
    const id = vmIdentity(this.instance, this.routerCgroup);
    const jail = prepareJail(this.dir, ROUTER_JAIL);
    // (readable by the router's uid whatever Den's umask: `den serve` runs with 077; `rm` follows no link)
    rmSync(join(jail, "etc"), { recursive: true, force: true });
    mkdirSync(join(jail, "etc"), { mode: 0o755 });
    chmodSync(join(jail, "etc"), 0o755);
    writeFileSync(join(jail, "etc", "resolv.conf"), `nameserver ${this.link.host}\n`, { flag: "wx", mode: 0o644 });
    chmodSync(join(jail, "etc", "resolv.conf"), 0o644);
    // (the VM made its NIC socket as root; the router may connect after dropping to its uid)
    chownSync(join(jail, basename(VM_FILES.net)), id.uid, id.gid);
    return jailArgs(jail, id);
  }

  /**
   * The guest side: MAC, address, route and resolver for its NIC, as the agent's `net.setup`
   * takes them. A MAC of its own (locally administered, from its id): forks of one sandbox,
   * which share its snapshot, do not share a link-layer identity.
   */
  guestConfig(): NetSetup {
    const g = GUEST_NET;
    return { dev: "eth0", mac: guestMac(this.sandboxId), address: g.address, prefix: 24, gateway: g.gateway, dns: g.dns };
  }

  /** The same as a shell command, for an agent without `net.setup` (a template of an older Den). */
  guestSetup(): string {
    const c = this.guestConfig();
    // One `ip` for all of it (its batch stops at the first error): each program a new VM runs costs it tens of milliseconds under TCG.
    const batch = [
      `link set ${c.dev} down`, `link set ${c.dev} address ${c.mac}`, `link set ${c.dev} up`, `addr flush dev ${c.dev}`,
      `addr add ${c.address}/${c.prefix} dev ${c.dev}`, `route replace default via ${c.gateway}`,
    ];
    return `printf '${batch.join("\\n")}\\n' | ip -batch - && printf 'nameserver ${c.dns}\\n' > /etc/resolv.conf`;
  }

  /** Changes the policy of a running sandbox: takes effect at once (the table is replaced atomically). */
  async setPolicy(policy: EgressPolicy): Promise<void> {
    SandboxNetwork.validate(policy);
    this.policy = policy;
    this.learned.clear();
    await this.applyFirewall();
    await this.applyShaping();
  }

  /**
   * Bandwidth limits: a token bucket on each end of the link, so the namespace's uplink
   * (the guest's uploads) and the host end (its downloads) are each held to the rate.
   */
  private async applyShaping(): Promise<void> {
    const mbps = this.policy.bandwidthMbps ?? null;
    const ends: Array<[string[], string]> = [[["-n", this.netns], "eth0"], [[], this.hostInterface]];
    for (const [ns, dev] of ends) {
      if (mbps === null) {
        await runTool("tc", [...ns, "qdisc", "del", "dev", dev, "root"]).catch(() => undefined);
        continue;
      }
      // The bucket holds 10 ms of traffic (at least 16 KiB): small enough to hold the rate, big enough for the timer.
      const burst = Math.max(16384, Math.ceil((mbps * 125_000) / 100));
      await runTool("tc", [...ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", `${mbps}mbit`, "burst", String(burst), "latency", "200ms"]);
    }
  }

  async refused(): Promise<RefusedCounts & { dns: number }> {
    try {
      const json = await runTool("ip", ["netns", "exec", this.netns, "nft", "-j", "list", "counters", "table", "inet", "den"]);
      return { ...parseCounters(json), dns: this.dnsRefused };
    } catch {
      return { private: 0, policy: 0, limit: 0, dns: this.dnsRefused };
    }
  }

  /** The router's cgroup, beside its VM's. */
  private get routerCgroup(): string {
    return `net-${this.sandboxId}`;
  }

  /** Closes what lives in this process (the DNS server), leaving the namespace and router. */
  detach(): void {
    clearInterval(this.sweeper);
    this.sweeper = undefined;
    this.dns?.close();
    this.dns = undefined;
    this.refuser?.close();
    this.refuser = undefined;
  }

  async down(): Promise<void> {
    this.detach();
    if (this.router?.pid) {
      try {
        process.kill(-this.router.pid, "SIGKILL");
      } catch {
        // gone
      }
    }
    await rm(join(this.dir, "router.pid"), { force: true });
    await rm(this.etcDir, { recursive: true, force: true });
    // Once the router has gone (it was SIGKILLed above), its cgroup goes too.
    for (let i = 0; i < 40 && this.router?.pid && !hasExited(this.router.pid); i++) await new Promise((r) => setTimeout(r, 50));
    hostCgroups()?.remove(this.instance, this.routerCgroup);
    await SandboxNetwork.remove(this.instance, this.sandboxId, this.slot);
  }

  /** Removes a sandbox's namespace and link, whatever is left of them (idempotent). */
  static async remove(instance: string, sandboxId: string, slot: number): Promise<void> {
    await runTool("ip", ["netns", "del", netnsName(sandboxId)]).catch(() => undefined);
    await runTool("ip", ["link", "del", hostInterfaceName(instance, slot)]).catch(() => undefined);
    await rm(join("/etc/netns", netnsName(sandboxId)), { recursive: true, force: true });
  }
}
