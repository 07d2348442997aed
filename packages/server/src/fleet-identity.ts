import { existsSync } from "node:fs";
import { join } from "node:path";
import { type Ca, type Identity, type MachineTls, IDENTITY_FILES, MACHINE_ID, certInfo, issueMachine, loadCa, ownIdentity, readMachineTls, writeIdentityFiles } from "@den/pki";
import { CertRenewer, joinFleet } from "@den/host-agent";
import type { ServerConfig } from "./config.js";

/** Where an issued certificate is recorded (machine_certs: revocation and expiry read it). */
export type RecordCert = (row: { serial: string; kind: string; machine_id: string; not_after: number; issued_at: number }) => Promise<void>;

/**
 * This replica's identity toward the hosts (mutual TLS): read from DEN_TLS_DIR; or got with a
 * one-time token through a peer replica (`den serve --join TOKEN --peers URL`: the key made
 * here, the files written to DEN_TLS_DIR or `<data dir>/identity`); or issued at start from
 * the deployment's CA (DEN_CA_DIR) for `control-plane:<replica id>` and kept in memory only (a
 * new start issues a new one; nothing to protect on disk). It renews itself at 2/3 of the
 * certificate's life, from the CA when it holds it, else through its peers' renew route
 * (writing its files), and tells `onRenew`'s listeners (the fleet listener, the host clients).
 */
export class FleetIdentity {
  private renewer: CertRenewer | undefined;
  private readonly listeners: Array<(tls: MachineTls) => void | Promise<void>> = [];

  private constructor(
    public tls: MachineTls,
    private readonly ca: Ca | undefined,
    private readonly ttlHours: number,
    private readonly dir: string | undefined,
    private readonly store: RecordCert,
    private readonly log: (err: unknown, msg: string) => void,
    private readonly peers: string[] = [],
  ) {}

  static async open(config: ServerConfig, store: RecordCert, replicaId: string, log: (err: unknown, msg: string) => void = () => undefined): Promise<FleetIdentity> {
    const fleet = config.fleet!;
    const ca = config.ca ? await loadCa(config.ca.dir) : undefined;
    const ttlHours = config.ca?.certTtlHours ?? 24;
    // Joined once, the identity is in the data dir: later starts use it with or without the token.
    const joined = join(config.dataDir, "identity");
    const dir = fleet.tlsDir ?? (fleet.join || existsSync(join(joined, IDENTITY_FILES.cert)) ? joined : undefined);
    if (dir && fleet.join && !existsSync(join(dir, IDENTITY_FILES.cert))) await FleetIdentity.join(dir, fleet.join, fleet.peers, replicaId);
    if (dir) {
      const tls = readMachineTls(dir);
      const me = ownIdentity(tls);
      if (me.kind !== "control-plane") throw new Error(`${dir} holds a ${me.kind}'s identity (${me.id}): a control plane needs a control-plane certificate (den ca issue control-plane:ID)`);
      return new FleetIdentity(tls, ca, ttlHours, dir, store, log, fleet.peers);
    }
    if (!ca) throw new Error("mutual TLS with the hosts needs this replica's identity (DEN_TLS_DIR) or the CA to issue one from (DEN_CA_DIR)");
    if (!MACHINE_ID.test(replicaId)) throw new Error(`replica id ${replicaId} cannot name a certificate`);
    const me = new FleetIdentity(await FleetIdentity.issue(ca, { kind: "control-plane", id: replicaId }, ttlHours, store), ca, ttlHours, undefined, store, log);
    return me;
  }

  /** A first start with a token: joined through the first peer that answers; the files written for the next starts. */
  private static async join(dir: string, token: string, peers: string[], replicaId: string): Promise<void> {
    if (!peers.length) throw new Error("--join needs a replica to join through: --peers https://HOST:8789 (env DEN_FLEET_PEERS)");
    if (!MACHINE_ID.test(replicaId)) throw new Error(`replica id ${replicaId} cannot name a certificate`);
    let last: unknown;
    for (const url of peers) {
      try {
        const tls = await joinFleet(url, token, replicaId, "control-plane");
        await writeIdentityFiles(dir, { keyPem: tls.key, certPem: tls.cert, caPem: tls.ca });
        return;
      } catch (e) {
        last = e;
      }
    }
    throw new Error(`could not join the deployment through ${peers.join(", ")}: ${(last as Error).message}`);
  }

  private static async issue(ca: Ca, identity: Identity, ttlHours: number, record: RecordCert): Promise<MachineTls> {
    const m = await issueMachine(ca, identity, { ttlHours });
    await record({ serial: m.serial, kind: identity.kind, machine_id: identity.id, not_after: m.notAfter, issued_at: Date.now() });
    return { key: m.key, cert: m.cert, ca: m.ca };
  }

  /** When the current certificate expires. */
  get notAfter(): number {
    return certInfo(this.tls.cert).notAfter;
  }

  get identity(): Identity {
    return ownIdentity(this.tls);
  }

  onRenew(fn: (tls: MachineTls) => void | Promise<void>): void {
    this.listeners.push(fn);
  }

  /**
   * Schedules renewals: from the CA at hand; without it, through the peers' renew route
   * (CertRenewer, as a host's); with neither, the operator renews DEN_TLS_DIR's files and restarts.
   */
  start(): void {
    if (this.renewer || (!this.ca && (!this.peers.length || !this.dir))) return;
    const ca = this.ca;
    this.renewer = new CertRenewer(this.tls, {
      controlPlanes: this.peers, ...(this.dir ? { dir: this.dir } : {}),
      ...(ca ? { obtain: (me: Identity) => FleetIdentity.issue(ca, me, this.ttlHours, this.store) } : {}),
      onRenew: (tls) => {
        this.tls = tls;
        void (async () => {
          for (const l of this.listeners) await l(tls);
        })().catch((err: unknown) => this.log(err, "a listener of this replica's renewed certificate failed"));
      },
      log: (msg) => this.log(undefined, msg),
    });
    this.renewer.start();
  }

  close(): void {
    this.renewer?.stop();
  }
}
