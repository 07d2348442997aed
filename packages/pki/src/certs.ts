import { X509Certificate } from "node:crypto";
import { isIP } from "node:net";
import { DenError } from "@den/protocol";
import { loadX509, type X509 } from "./x509.js";
import { validity } from "./validity.js";
import { type Ca, fingerprintOf, newSerial } from "./ca.js";
import { type Identity, checkIdentity, identityOf, identityUri } from "./identity.js";
import { P256_SIGNING, isP256, newP256, privatePem, signingKey } from "./keys.js";

/** The largest CSR read (a P-256 CSR is under 1 KiB): anything longer is refused before it is parsed. */
export const MAX_CSR_BYTES = 16 * 1024;
/** The longest a machine's certificate may live (they are short-lived and renewed; a bootstrap's may be longer). */
export const MAX_CERT_TTL_HOURS = 24 * 366;
/** How far back a new certificate's validity starts, for clocks a little behind ours. */
const BACKDATE_MS = 5 * 60_000;
const HOUR_MS = 3_600_000;
const DNS_NAME = /^(?=.{1,253}$)(\*\.)?([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;

/** A machine's subject name (informational: who a certificate is for is its SAN URI). */
const subjectOf = (i: Identity) => `CN=${i.id}, OU=${i.kind}, O=Den`;

/**
 * A new ECDSA P-256 key pair for `identity` and a CSR of it, signed by the key: the key never
 * leaves the machine that made it; the CSR goes to the CA with a join token (or a renewal).
 */
export async function newKeyAndCsr(identity: Identity): Promise<{ keyPem: string; csrPem: string }> {
  const i = checkIdentity(identity);
  const x509 = await loadX509();
  const keys = await newP256();
  const csr = await x509.Pkcs10CertificateRequestGenerator.create({
    name: subjectOf(i),
    keys: keys as never,
    signingAlgorithm: P256_SIGNING,
    extensions: [new x509.SubjectAlternativeNameExtension([{ type: "url", value: identityUri(i) }])],
  });
  return { keyPem: privatePem(keys.privateKey), csrPem: csr.toString("pem") + "\n" };
}

/** A CSR no bigger than MAX_CSR_BYTES (and a string at all), checked before anything reads it; `payload_too_large` otherwise. */
export function checkCsrSize(csrPem: unknown): asserts csrPem is string {
  if (typeof csrPem !== "string" || Buffer.byteLength(csrPem) > MAX_CSR_BYTES) throw new DenError("payload_too_large", `a CSR is at most ${MAX_CSR_BYTES} bytes`);
}

/** A CSR whose signature verifies (its maker holds the key) and whose key is ECDSA P-256; `invalid_argument` otherwise. */
async function verifiedCsr(csrPem: string): Promise<X509.Pkcs10CertificateRequest> {
  const x509 = await loadX509();
  if (typeof csrPem !== "string") throw new DenError("invalid_argument", "a CSR is a PEM string");
  checkCsrSize(csrPem);
  if (!/^\s*-----BEGIN CERTIFICATE REQUEST-----\r?\n[A-Za-z0-9+/=\r\n]+-----END CERTIFICATE REQUEST-----\s*$/.test(csrPem)) {
    throw new DenError("invalid_argument", "not a PEM certificate signing request (-----BEGIN CERTIFICATE REQUEST-----)");
  }
  let csr: X509.Pkcs10CertificateRequest;
  try {
    csr = new x509.Pkcs10CertificateRequest(csrPem);
  } catch {
    throw new DenError("invalid_argument", "the certificate signing request does not parse");
  }
  if (!isP256(csr.publicKey.rawData)) throw new DenError("invalid_argument", "the CSR's key is not ECDSA P-256 (the only kind a machine's certificate is issued for)");
  const ok = await csr.verify().catch(() => false);
  if (!ok) throw new DenError("invalid_argument", "the CSR's signature does not verify");
  return csr;
}

function sanOf(identity: Identity, dnsNames: string[] = [], ips: string[] = []): X509.JsonGeneralNames {
  if (dnsNames.length + ips.length > 32) throw new DenError("invalid_argument", "at most 32 DNS names and IP addresses in a certificate");
  for (const d of dnsNames) if (typeof d !== "string" || !DNS_NAME.test(d)) throw new DenError("invalid_argument", `not a DNS name: ${JSON.stringify(d)?.slice(0, 260)}`);
  for (const ip of ips) if (typeof ip !== "string" || !isIP(ip)) throw new DenError("invalid_argument", `not an IP address: ${JSON.stringify(ip)?.slice(0, 60)}`);
  return [
    { type: "url", value: identityUri(identity) },
    ...dnsNames.map((value) => ({ type: "dns" as const, value })),
    ...ips.map((value) => ({ type: "ip" as const, value })),
  ];
}

/**
 * A certificate for `identity` from `ca`, for the key of `csrPem`. The CSR is checked first
 * (at most MAX_CSR_BYTES, then its signature, then its key: ECDSA P-256 only); what it says
 * of itself (its subject, any SAN) is ignored: the subject, the SAN URI `urn:den:<kind>:<id>`
 * and any DNS names and IPs come from the arguments. Usable for TLS both ways (serverAuth and
 * clientAuth), a random 16-byte serial, valid from 5 minutes ago for `ttlHours` (never past
 * the CA's own end).
 */
export async function issue(ca: Ca, csrPem: string, identity: Identity, opts: { ttlHours: number; dnsNames?: string[]; ips?: string[]; now?: number }): Promise<{ certPem: string; serial: string; notAfter: number }> {
  const x509 = await loadX509();
  const i = checkIdentity(identity);
  const { ttlHours } = opts;
  if (typeof ttlHours !== "number" || !Number.isFinite(ttlHours) || ttlHours <= 0 || ttlHours > MAX_CERT_TTL_HOURS) {
    throw new DenError("invalid_argument", `a certificate lives more than 0 and at most ${MAX_CERT_TTL_HOURS} hours, got ${ttlHours}`);
  }
  const san = sanOf(i, opts.dnsNames, opts.ips);
  const csr = await verifiedCsr(csrPem);
  const caCert = new x509.X509Certificate(ca.certPem);
  const now = opts.now ?? Date.now();
  const caEnd = caCert.notAfter.getTime();
  if (caEnd <= now) throw new DenError("invalid_state", `the CA's certificate expired at ${caCert.notAfter.toISOString()}`);
  // X.509 keeps whole seconds.
  const notAfter = Math.floor(Math.min(now + ttlHours * HOUR_MS, caEnd) / 1000) * 1000;
  const { key, algorithm } = await signingKey(ca.keyPem, "the CA's key");
  const serial = newSerial();
  const caKeyId = caCert.getExtension(x509.SubjectKeyIdentifierExtension)?.keyId;
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serial,
    subject: subjectOf(i),
    issuer: caCert.subjectName,
    notBefore: new Date(Math.floor((now - BACKDATE_MS) / 1000) * 1000),
    notAfter: new Date(notAfter),
    publicKey: csr.publicKey,
    signingKey: key as never,
    signingAlgorithm: algorithm.sign,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth, x509.ExtendedKeyUsage.clientAuth]),
      new x509.SubjectAlternativeNameExtension(san),
      await x509.SubjectKeyIdentifierExtension.create(csr.publicKey),
      // The CA's own key id, where its certificate has one (a brought CA's may be made differently from ours).
      ...(caKeyId ? [new x509.AuthorityKeyIdentifierExtension(caKeyId)] : []),
    ],
  });
  return { certPem: cert.toString("pem") + "\n", serial, notAfter };
}

/** What a certificate says of itself: its validity (ms), serial (lowercase hex), SHA-256 fingerprint, and the machine its SAN URI names. */
export function certInfo(certPem: string): { notAfter: number; notBefore: number; serial: string; fingerprint: string; identity?: Identity } {
  const c = new X509Certificate(certPem);
  const identity = identityOf(c);
  return {
    ...validity(c),
    serial: c.serialNumber.toLowerCase(),
    fingerprint: fingerprintOf(c),
    ...(identity ? { identity } : {}),
  };
}

/** Whether `certPem` was signed by the CA of `ca` (issuer name and signature) and is within its validity period now. */
export function verifyIssuedBy(certPem: string, ca: Pick<Ca, "certPem">, now = Date.now()): boolean {
  try {
    const c = new X509Certificate(certPem);
    const issuer = new X509Certificate(ca.certPem);
    if (!c.checkIssued(issuer) || !c.verify(issuer.publicKey)) return false;
    const { notBefore, notAfter } = validity(c);
    return notBefore <= now && now < notAfter;
  } catch {
    return false;
  }
}

/** When to renew a certificate valid from `notBefore` to `notAfter`: two thirds of the way through its life. */
export function renewAt(notBefore: number, notAfter: number): number {
  return notBefore + Math.floor(((notAfter - notBefore) * 2) / 3);
}

/**
 * How long from `now` to wait before renewing: until renewAt, or, for a certificate already
 * past it (a fresh one is back-dated 5 minutes, so a short-lived one starts past it), two
 * thirds of what is left of its life; never a tight loop.
 */
export function renewDelay(notBefore: number, notAfter: number, now = Date.now()): number {
  const at = renewAt(notBefore, notAfter);
  return Math.max(1000, at > now ? at - now : Math.floor(((notAfter - now) * 2) / 3));
}
