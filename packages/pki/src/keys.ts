import { KeyObject, createPrivateKey, createPublicKey, webcrypto } from "node:crypto";
import { DenError } from "@den/protocol";

type CryptoKey = webcrypto.CryptoKey;

/** How a key is imported into WebCrypto and what it signs with. */
interface SigningAlgorithm {
  import: webcrypto.EcKeyImportParams | webcrypto.RsaHashedImportParams;
  sign: webcrypto.Algorithm | webcrypto.EcdsaParams;
}

const P256 = { import: { name: "ECDSA", namedCurve: "P-256" }, sign: { name: "ECDSA", hash: "SHA-256" } } as const satisfies SigningAlgorithm;

/**
 * The signing algorithm of a CA's key: ECDSA P-256 (what `initCa` makes) or P-384, or RSA
 * (PKCS#1 v1.5 with SHA-256), for a CA the operator brings. Anything else is refused.
 */
export function caAlgorithm(key: KeyObject, what: string): SigningAlgorithm {
  const curve = key.asymmetricKeyDetails?.namedCurve;
  if (key.asymmetricKeyType === "ec" && curve === "prime256v1") return P256;
  if (key.asymmetricKeyType === "ec" && curve === "secp384r1") return { import: { name: "ECDSA", namedCurve: "P-384" }, sign: { name: "ECDSA", hash: "SHA-384" } };
  if (key.asymmetricKeyType === "rsa" && (key.asymmetricKeyDetails?.modulusLength ?? 0) >= 2048) return { import: { name: "RSASSA-PKCS1-v1_5", hash: "SHA-256" }, sign: { name: "RSASSA-PKCS1-v1_5", hash: "SHA-256" } };
  throw new DenError("invalid_argument", `${what} is a ${key.asymmetricKeyType}${curve ? ` ${curve}` : ""} key: a CA's key must be ECDSA P-256 or P-384, or RSA of at least 2048 bits`);
}

/** Whether a SubjectPublicKeyInfo (DER) is an ECDSA P-256 key, the only kind a machine's certificate is issued for. */
export function isP256(spki: ArrayBuffer | Buffer): boolean {
  try {
    const k = createPublicKey({ key: Buffer.from(spki as ArrayBuffer), format: "der", type: "spki" });
    return k.asymmetricKeyType === "ec" && k.asymmetricKeyDetails?.namedCurve === "prime256v1";
  } catch {
    return false;
  }
}

/** A new ECDSA P-256 key pair, extractable (its private key is written out as PKCS#8 PEM). */
export async function newP256(): Promise<webcrypto.CryptoKeyPair> {
  return webcrypto.subtle.generateKey(P256.import, true, ["sign", "verify"]);
}

export const P256_SIGNING = P256.sign;

/** A WebCrypto private key as PKCS#8 PEM. */
export function privatePem(key: CryptoKey): string {
  return KeyObject.from(key).export({ type: "pkcs8", format: "pem" }) as string;
}

/** A PEM private key as a WebCrypto signing key, with its algorithm (throws `invalid_argument` for a key that is not one). */
export async function signingKey(pem: string, what: string): Promise<{ key: CryptoKey; algorithm: SigningAlgorithm }> {
  let k: KeyObject;
  try {
    k = createPrivateKey(pem);
  } catch {
    throw new DenError("invalid_argument", `${what} is not a PEM private key`);
  }
  const algorithm = caAlgorithm(k, what);
  const der = k.export({ type: "pkcs8", format: "der" });
  return { key: await webcrypto.subtle.importKey("pkcs8", der, algorithm.import, false, ["sign"]), algorithm };
}
