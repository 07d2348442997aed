import { host } from "@den/protocol";
import { type MachineTls, certInfo, identityOf, newKeyAndCsr, ownIdentity, renewDelay, verifyIssuedBy, writeIdentityFiles } from "@den/pki";
import { HostHttp } from "./http/fetch.js";

/** A failed renewal is tried again this soon (or sooner, for a certificate about to expire). */
const RETRY_MS = 30_000;

export interface RenewerOptions {
  /** The control planes' hosts' listeners (https); the next is tried when one fails. */
  controlPlanes: string[];
  /** Where the identity files are rewritten (writeIdentityFiles). */
  dir: string;
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

  /** One renewal (tried on each control plane); reschedules itself. */
  async renew(): Promise<void> {
    const me = ownIdentity(this.tls);
    const { keyPem, csrPem } = await newKeyAndCsr(me);
    let last: unknown;
    for (const url of this.opts.controlPlanes) {
      try {
        const http = new HostHttp(url, { tls: this.tls, peer: { kind: "control-plane" } });
        const r = await http.json("POST", host.registration.renew.path, host.JoinReply, { json: { csr: csrPem }, timeoutMs: 15_000 });
        http.close();
        const id = identityOf(r.certificate);
        if (r.ca !== this.tls.ca || !verifyIssuedBy(r.certificate, { certPem: this.tls.ca }) || id?.kind !== me.kind || id.id !== me.id) throw new Error("the renewed certificate is not this machine's of its CA");
        const tls = { key: keyPem, cert: r.certificate, ca: r.ca };
        await writeIdentityFiles(this.opts.dir, { keyPem, certPem: tls.cert, caPem: tls.ca });
        this.tls = tls;
        this.opts.onRenew(tls);
        this.opts.log?.(`den: certificate renewed (valid until ${r.not_after})`);
        this.start();
        return;
      } catch (e) {
        last = e;
      }
    }
    const left = certInfo(this.tls.cert).notAfter - Date.now();
    this.opts.log?.(`den: could not renew this host's certificate (${(last as Error).message}); trying again (it expires in ${Math.round(left / 1000)} s)`);
    this.schedule(Math.max(1000, Math.min(RETRY_MS, left / 10)));
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }
}
