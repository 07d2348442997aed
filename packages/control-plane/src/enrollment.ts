import { DenError, api } from "@den/protocol";
import {
  type Ca, type Identity, IDENTITY_KINDS, MACHINE_ID, MAX_JOIN_TOKEN, checkCsrSize, checkIdentity, issue, loadCa, newJoinToken, parseJoinToken, pinMatches, tokenMatches,
} from "@den/pki";
import type { ServerConfig } from "./config.js";
import type { Principal, Store } from "./db/store.js";
import type { Clock } from "./operations.js";

/** How long a join token is valid unless its maker says otherwise. */
export const DEFAULT_JOIN_TOKEN_TTL_SECONDS = 3600;
/** How long a used or expired token's row is kept (who joined with which token) before it is dropped. */
const TOKEN_KEPT_MS = 7 * 86_400_000;

/** A certificate the CA issued a machine, with the CA's own. */
export interface IssuedCert {
  certPem: string;
  caPem: string;
  serial: string;
  notAfter: number;
}

/** One refusal for every token that will not do (unknown, mistyped, wrong secret, used, expired, another CA's): no oracle. */
const refused = () => new DenError("unauthorized", "invalid, used or expired join token");

/**
 * Machines' identities: admins make one-time join tokens, a machine redeems one with a CSR
 * for a certificate of the deployment's CA bound to its id, and a machine renews its own
 * (over its verified certificate) unless it was revoked. Only the hash of a token's secret
 * is stored; every certificate issued is recorded (machine_certs), for revocation and expiry.
 */
export class Enrollment {
  private loaded: Promise<Ca> | undefined;

  constructor(private readonly store: Store, private readonly config: ServerConfig["ca"], private readonly clock: Clock) {}

  /** Whether the deployment has a CA (DEN_CA_DIR). */
  get configured(): boolean {
    return this.config !== undefined;
  }

  /** The deployment's CA, read once (a failed read, say of a key others may read, is tried again at the next call). */
  authority(): Promise<Ca> {
    const config = this.config;
    if (!config) {
      return Promise.reject(new DenError("ca_not_configured", "this deployment has no certificate authority: set DEN_CA_DIR to a directory made by `den ca init` (or holding your own ca.crt and ca.key)"));
    }
    this.loaded ??= loadCa(config.dir).catch((e: unknown) => {
      this.loaded = undefined;
      throw e;
    });
    return this.loaded;
  }

  /** A one-time token a machine of `kind` joins with, valid `ttlSeconds` (at most a week); its text is returned only here. */
  async createToken(p: Principal, kind: Identity["kind"] = "host", ttlSeconds = DEFAULT_JOIN_TOKEN_TTL_SECONDS): Promise<{ token: string; id: string; kind: Identity["kind"]; expiresAt: number }> {
    if (!p.admin) throw new DenError("forbidden", "making a join token needs an admin key");
    if (!IDENTITY_KINDS.includes(kind)) throw new DenError("invalid_argument", "a join token is for a host or a control-plane");
    if (!Number.isInteger(ttlSeconds) || ttlSeconds < 1 || ttlSeconds > api.MAX_JOIN_TOKEN_TTL_SECONDS) {
      throw new DenError("invalid_argument", `a join token is valid 1 to ${api.MAX_JOIN_TOKEN_TTL_SECONDS} seconds`);
    }
    const ca = await this.authority();
    const t = newJoinToken(ca.fingerprint);
    const now = this.clock.now();
    const expiresAt = now + ttlSeconds * 1000;
    await this.store.joinTokens.prune(now - TOKEN_KEPT_MS);
    await this.store.joinTokens.create({ id: t.id, secret_hash: t.secretHash, kind, created_at: now, expires_at: expiresAt, created_by: p.keyId });
    return { token: t.token, id: t.id, kind, expiresAt };
  }

  /**
   * A certificate for `machineId` (of the token's kind) for the key of `csrPem`, for a token
   * used once: the certificate is made first, then the token is claimed and the certificate
   * recorded in one transaction (an UPDATE that matches only an unused, unexpired token), so
   * of two redeeming one token at once, exactly one gets a certificate. A CSR that does not
   * verify is refused without using the token up.
   */
  async redeem(token: string, csrPem: string, machineId: string): Promise<IssuedCert> {
    if (typeof token !== "string" || token.length > MAX_JOIN_TOKEN) throw refused();
    checkCsrSize(csrPem);
    if (typeof machineId !== "string" || !MACHINE_ID.test(machineId)) throw new DenError("invalid_argument", "a machine id is 1-128 letters, digits, _ or -");
    const ca = await this.authority();
    const parsed = parseJoinToken(token);
    const row = parsed && pinMatches(parsed.caPin, ca.fingerprint) ? await this.store.joinTokens.get(parsed.id) : undefined;
    const now = this.clock.now();
    if (!parsed || !row || !tokenMatches(parsed.secret, row.secret_hash) || row.used_at !== null || row.expires_at <= now) throw refused();
    const identity = checkIdentity({ kind: row.kind as Identity["kind"], id: machineId });
    await this.notRevoked(identity);
    const cert = await issue(ca, csrPem, identity, { ttlHours: this.config!.certTtlHours });
    const claimed = await this.store.transaction(async (s) => {
      if (!(await s.joinTokens.claim(row.id, machineId, this.clock.now()))) return false;
      await s.machineCerts.record({ serial: cert.serial, kind: identity.kind, machine_id: identity.id, not_after: cert.notAfter, issued_at: now });
      return true;
    });
    if (!claimed) throw refused();
    return { certPem: cert.certPem, caPem: ca.certPem, serial: cert.serial, notAfter: cert.notAfter };
  }

  /**
   * A new certificate for a machine that has one: `identity` is the one its verified TLS
   * certificate names (never the caller's word), `csrPem` its key (a new one or the same).
   * Refused once the machine was revoked.
   */
  async renew(identity: Identity, csrPem: string): Promise<IssuedCert> {
    const i = checkIdentity(identity);
    checkCsrSize(csrPem);
    const ca = await this.authority();
    await this.notRevoked(i);
    const cert = await issue(ca, csrPem, i, { ttlHours: this.config!.certTtlHours });
    await this.store.machineCerts.record({ serial: cert.serial, kind: i.kind, machine_id: i.id, not_after: cert.notAfter, issued_at: this.clock.now() });
    return { certPem: cert.certPem, caPem: ca.certPem, serial: cert.serial, notAfter: cert.notAfter };
  }

  /**
   * A caller of the fleet listener by its verified certificate: refused once the machine or
   * that certificate was revoked (a certificate the CA issued outside, `den ca issue`, has no
   * row: the machine's revocation still applies).
   */
  async admit(i: Identity, serial: string): Promise<void> {
    const row = await this.store.machineCerts.get(serial);
    if (row?.revoked_at != null) throw new DenError("forbidden", `the certificate ${serial} of ${i.kind} ${i.id} was revoked`);
    await this.notRevoked(i);
  }

  /** Revokes every certificate of a machine; how many. */
  revoke(i: Identity): Promise<number> {
    return this.store.machineCerts.revoke(i.kind, i.id, this.clock.now());
  }

  private async notRevoked(i: Identity): Promise<void> {
    if (await this.store.machineCerts.revoked(i.kind, i.id)) throw new DenError("forbidden", `${i.kind} ${i.id} was revoked: it gets no certificate under that id again`);
  }
}
