import { host } from "@den/protocol";
import { type Identity, type MachineTls, certInfo, identityOf, newKeyAndCsr, ownIdentity, renewDelay, verifyIssuedBy, writeIdentityFiles } from "@den/pki";
import { HostHttp } from "./http/fetch.js";

/** A failed renewal is tried again this soon (or sooner, for a certificate about to expire). */
const RETRY_MS = 30_000;

export interface RenewerOptions {
  /** The control planes' hosts' listeners (https); the next is tried when one fails. */
  controlPlanes: string[];
  /** Where the identity files are rewritten (writeIdentityFiles); none: the identity lives in memory. */
  dir?: string;
  /**
   * How a new certificate is got (default: a new key and a CSR to the control planes' renew
   * route). A replica holding the CA issues its own instead.
   */
  obtain?: (me: Identity, current: MachineTls) => Promise<MachineTls>;
  /** Called with each renewed identity (the host server's reload, the registrar's link). */
  onRenew: (tls: MachineTls) => void;
  log?: (msg: string) => void;
}

/**
 * A machine's certificate renewed before it expires: at two thirds of its life, a new key
 * and a CSR for the same identity go to `/internal/v1/renew` over the current certificate;
 * the answer is checked (the same CA, the same identity) before it is written and used.
 * Connections open keep their certificate; new ones take the new.
 */
export class CertRenewer {
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(public tls: MachineTls, private readonly opts: RenewerOptions) {}

  start(): void {
    const { notBefore, notAfter } = certInfo(this.tls.cert);
    this.schedule(renewDelay(notBefore, notAfter));
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.renew(), Math.min(ms, 2 ** 31 - 1));
    this.timer.unref();
  }

  /** One renewal; reschedules itself (sooner after a failure, bounded by what is left of the certificate's life). */
  async renew(): Promise<void> {
    try {
      const tls = await (this.opts.obtain ?? ((me, current) => this.fromControlPlanes(me, current)))(ownIdentity(this.tls), this.tls);
      if (this.opts.dir) await writeIdentityFiles(this.opts.dir, { keyPem: tls.key, certPem: tls.cert, caPem: tls.ca });
      this.tls = tls;
      this.opts.onRenew(tls);
      this.opts.log?.(`den: certificate renewed (valid until ${new Date(certInfo(tls.cert).notAfter).toISOString()})`);
      this.start();
    } catch (e) {
      const left = certInfo(this.tls.cert).notAfter - Date.now();
      this.opts.log?.(`den: could not renew this machine's certificate (${(e as Error).message}); trying again (it expires in ${Math.round(left / 1000)} s)`);
      this.schedule(Math.max(1000, Math.min(RETRY_MS, left / 10)));
    }
  }

  /** A new key, and a certificate for it from the first control plane that renews it; the answer checked (the same CA, the same identity). */
  private async fromControlPlanes(me: Identity, current: MachineTls): Promise<MachineTls> {
    const { keyPem, csrPem } = await newKeyAndCsr(me);
    let last: unknown = new Error("no control plane to renew through");
    for (const url of this.opts.controlPlanes) {
      const http = new HostHttp(url, { tls: current, peer: { kind: "control-plane" } });
      try {
        const r = await http.json("POST", host.registration.renew.path, host.JoinReply, { json: { csr: csrPem }, timeoutMs: 15_000 });
        const id = identityOf(r.certificate);
        if (r.ca !== current.ca || !verifyIssuedBy(r.certificate, { certPem: current.ca }) || id?.kind !== me.kind || id.id !== me.id) throw new Error("the renewed certificate is not this machine's of its CA");
        return { key: keyPem, cert: r.certificate, ca: r.ca };
      } catch (e) {
        last = e;
      } finally {
        http.close();
      }
    }
    throw last;
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }
}
