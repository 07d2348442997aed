import { X509Certificate } from "node:crypto";
import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import type { ConnectionOptions, PeerCertificate, SecureContextOptions, TLSSocket } from "node:tls";
import { DenError } from "@den/protocol";
import { IDENTITY_FILES } from "./files.js";
import type { Ca } from "./ca.js";
import { issue, newKeyAndCsr } from "./certs.js";
import { identityOf, type Identity } from "./identity.js";

/** A machine's TLS identity: its key, its certificate and the deployment's CA, as PEM. */
export interface MachineTls {
  key: string;
  cert: string;
  ca: string;
}

/**
 * Reads a machine's identity from `dir` (writeIdentityFiles' files). Refuses a key others may
 * read and a certificate that names no machine.
 */
export function readMachineTls(dir: string): MachineTls {
  const path = (f: string) => join(dir, f);
  let files: MachineTls;
  try {
    if ((statSync(path(IDENTITY_FILES.key)).mode & 0o077) !== 0) throw new Error(`${path(IDENTITY_FILES.key)} may be read by others: chmod 600 it`);
    files = { key: readFileSync(path(IDENTITY_FILES.key), "utf8"), cert: readFileSync(path(IDENTITY_FILES.cert), "utf8"), ca: readFileSync(path(IDENTITY_FILES.ca), "utf8") };
  } catch (e) {
    throw new Error(`no machine identity in ${dir} (${(e as Error).message}): join the deployment first (den host run --join TOKEN), or issue one (den ca issue)`);
  }
  if (!identityOf(files.cert)) throw new Error(`${path(IDENTITY_FILES.cert)} names no Den machine (no urn:den: SAN URI)`);
  return files;
}

/** Who `tls` says this machine is. */
export function ownIdentity(tls: MachineTls): Identity {
  const id = identityOf(tls.cert);
  if (!id) throw new DenError("invalid_argument", "this machine's certificate names no Den machine");
  return id;
}

/** What both ends of a link set: TLS 1.3 only, the deployment's CA alone trusted. */
function common(tls: MachineTls): SecureContextOptions & { minVersion: "TLSv1.3" } {
  return { key: tls.key, cert: tls.cert, ca: tls.ca, minVersion: "TLSv1.3" };
}

/**
 * A server's options: a client must present a certificate of the deployment's CA (the
 * handshake fails otherwise). `optionalClient`: a client without one is let in (a join, which
 * a token authenticates); the routes then check `peerIdentity` themselves.
 */
export function serverTlsOptions(tls: MachineTls, opts: { optionalClient?: boolean } = {}): SecureContextOptions & { requestCert: true; rejectUnauthorized: boolean; minVersion: "TLSv1.3" } {
  return { ...common(tls), requestCert: true, rejectUnauthorized: !opts.optionalClient };
}

/**
 * A client's options for a peer that must be `expect` (its kind, and its id when known):
 * the peer's certificate chains to the deployment's CA and names that machine by its SAN
 * URI. Host names are not checked: machines are named by identity, not by address.
 */
export function clientTlsOptions(tls: MachineTls, expect: { kind: Identity["kind"]; id?: string }): ConnectionOptions {
  return {
    ...common(tls),
    rejectUnauthorized: true,
    checkServerIdentity: (_host: string, cert: PeerCertificate) => {
      const peer = cert.raw ? identityOf(cert.raw) : undefined;
      if (!peer || peer.kind !== expect.kind || (expect.id !== undefined && peer.id !== expect.id)) {
        return new Error(`the peer is ${peer ? `${peer.kind} ${peer.id}` : "no Den machine"}, expected ${expect.kind}${expect.id ? ` ${expect.id}` : ""}`);
      }
      return undefined;
    },
  };
}

/** The machine at the other end of a TLS socket whose certificate the handshake verified; undefined otherwise. */
export function peerIdentity(socket: unknown): Identity | undefined {
  const s = socket as Partial<TLSSocket>;
  if (!s || typeof s.getPeerX509Certificate !== "function" || s.authorized !== true) return undefined;
  const cert: X509Certificate | undefined = s.getPeerX509Certificate();
  return cert ? identityOf(cert) : undefined;
}

/** The serial of the peer's verified certificate (for a revocation check); undefined as peerIdentity. */
export function peerSerial(socket: unknown): string | undefined {
  const s = socket as Partial<TLSSocket>;
  if (!s || typeof s.getPeerX509Certificate !== "function" || s.authorized !== true) return undefined;
  return s.getPeerX509Certificate()?.serialNumber.toLowerCase();
}

/**
 * A key made here and a certificate for it from `ca` (the CA's own machine: `den ca issue`,
 * a first replica, a test's fleet). A machine joining from elsewhere makes its key itself.
 */
export async function issueMachine(ca: Ca, identity: Identity, opts: Parameters<typeof issue>[3]): Promise<MachineTls & { serial: string; notAfter: number }> {
  const { keyPem, csrPem } = await newKeyAndCsr(identity);
  const cert = await issue(ca, csrPem, identity, opts);
  return { key: keyPem, cert: cert.certPem, ca: ca.certPem, serial: cert.serial, notAfter: cert.notAfter };
}
