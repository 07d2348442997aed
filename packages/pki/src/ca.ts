import { X509Certificate, createHash, createPrivateKey, randomBytes } from "node:crypto";
import { access, readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { DenError, privateDir } from "@den/protocol";
import { loadX509 } from "./x509.js";
import { validity } from "./validity.js";
import { CA_FILES, writeAtomic } from "./files.js";
import { P256_SIGNING, caAlgorithm, newP256, privatePem } from "./keys.js";

/** The deployment's certificate authority: its certificate, its private key, and the certificate's SHA-256 (of its DER, hex). */
export interface Ca {
  certPem: string;
  keyPem: string;
  fingerprint: string;
}

const DAY_MS = 86_400_000;

/** The SHA-256 of a certificate's DER, lowercase hex (what a join token pins the CA by). */
export function fingerprintOf(cert: string | Buffer | X509Certificate): string {
  const c = cert instanceof X509Certificate ? cert : new X509Certificate(cert);
  return createHash("sha256").update(c.raw).digest("hex");
}

/** A positive 16-byte serial number, hex (its top bit clear, so DER keeps it 16 bytes; its first byte never 0). */
export function newSerial(): string {
  const b = randomBytes(16);
  b[0] = (b[0]! & 0x7f) || 0x01;
  return b.toString("hex");
}

const exists = (p: string) => access(p).then(() => true, () => false);

/**
 * A new CA kept in memory only: an ECDSA P-256 key and a self-signed CA certificate (a
 * process's own fleet: the loopback transport, a test's machines). `initCa` writes one.
 */
export async function newCa(opts: { commonName?: string; days?: number } = {}): Promise<Ca> {
  const x509 = await loadX509();
  const days = opts.days ?? 3650;
  if (!Number.isInteger(days) || days < 1 || days > 36_500) throw new DenError("invalid_argument", `a CA's lifetime is 1 to 36500 days, got ${days}`);
  const commonName = opts.commonName ?? "Den deployment CA";
  if (!/^[A-Za-z0-9 _.:-]{1,64}$/.test(commonName)) throw new DenError("invalid_argument", "a CA's common name is 1-64 letters, digits, spaces, _ . : -");
  const keys = await newP256();
  const now = Date.now();
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: newSerial(),
    name: `CN=${commonName}`,
    notBefore: new Date(now - 5 * 60_000),
    notAfter: new Date(now + days * DAY_MS),
    keys: keys as never,
    signingAlgorithm: P256_SIGNING,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey as never),
    ],
  });
  const certPem = cert.toString("pem") + "\n";
  return { certPem, keyPem: privatePem(keys.privateKey), fingerprint: fingerprintOf(certPem) };
}

/**
 * Makes a new CA in `dir` (`den ca init`): `newCa`'s key (`ca.key`, 0600) and certificate
 * (`ca.crt`), written atomically in a directory made 0700.
 * Refuses a directory that holds either already (a CA is never overwritten).
 */
export async function initCa(dir: string, opts: { commonName?: string; days?: number } = {}): Promise<Ca> {
  const keyPath = join(dir, CA_FILES.key);
  const certPath = join(dir, CA_FILES.cert);
  for (const p of [keyPath, certPath]) if (await exists(p)) throw new DenError("already_exists", `${p} exists: a CA is never overwritten (use another directory, or load this one)`);
  // Checked (and made) before the directory is: bad options leave nothing behind.
  const ca = await newCa(opts);
  privateDir(dir);
  // The key first: a crash between the two leaves no certificate without its key (loadCa refuses either alone).
  await writeAtomic(keyPath, ca.keyPem, 0o600);
  await writeAtomic(certPath, ca.certPem, 0o644);
  return ca;
}

/**
 * The CA in `dir` (made by `initCa`, or the operator's own: `ca.crt` and `ca.key` in PEM).
 * Refuses, naming the file: a key readable or writable by anyone but its owner, a
 * certificate that is not a CA's (basicConstraints cA), a key that is not the certificate's,
 * a key of a kind it cannot sign with, and a certificate out of its validity period.
 */
export async function loadCa(dir: string): Promise<Ca> {
  const keyPath = join(dir, CA_FILES.key);
  const certPath = join(dir, CA_FILES.cert);
  for (const p of [certPath, keyPath]) {
    if (!(await exists(p))) throw new DenError("ca_not_configured", `no CA in ${dir}: ${p} is missing (make one with \`den ca init --dir ${dir}\`, or put your own ca.crt and ca.key there)`);
  }
  const mode = (await stat(keyPath)).mode & 0o777;
  if (mode & 0o077) throw new DenError("invalid_state", `${keyPath} is open to others (mode ${mode.toString(8).padStart(4, "0")}): the CA's key must be its owner's alone: chmod 600 ${keyPath}`);
  const [certPem, keyPem] = await Promise.all([readFile(certPath, "utf8"), readFile(keyPath, "utf8")]);
  let cert: X509Certificate;
  try {
    cert = new X509Certificate(certPem);
  } catch {
    throw new DenError("invalid_state", `${certPath} is not a PEM certificate`);
  }
  if (!cert.ca) throw new DenError("invalid_state", `${certPath} is not a CA's certificate (its basicConstraints do not say cA)`);
  let key;
  try {
    key = createPrivateKey(keyPem);
  } catch {
    throw new DenError("invalid_state", `${keyPath} is not a PEM private key`);
  }
  caAlgorithm(key, keyPath);
  if (!cert.checkPrivateKey(key)) throw new DenError("invalid_state", `${keyPath} is not the key of ${certPath}`);
  const { notBefore, notAfter } = validity(cert);
  const now = Date.now();
  if (!(notBefore <= now && now < notAfter)) throw new DenError("invalid_state", `${certPath} is valid from ${new Date(notBefore).toISOString()} to ${new Date(notAfter).toISOString()}, not now`);
  return { certPem, keyPem, fingerprint: fingerprintOf(cert) };
}
