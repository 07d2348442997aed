import { X509Certificate } from "node:crypto";
import { DenError } from "@den/protocol";

/** Who a certificate speaks for: a host agent (its instance id) or a control-plane replica (its replica id). */
export interface Identity {
  kind: "host" | "control-plane";
  id: string;
}

export const IDENTITY_KINDS = ["host", "control-plane"] as const;
/** A machine's id as it appears in a certificate: letters, digits, _ and -, at most 128. */
export const MACHINE_ID = /^[A-Za-z0-9_-]{1,128}$/;
const URI = /^urn:den:(host|control-plane):([A-Za-z0-9_-]{1,128})$/;

/** Throws `invalid_argument` unless `identity` is a kind and an id of the allowed form. */
export function checkIdentity(identity: Identity): Identity {
  if (!identity || !IDENTITY_KINDS.includes(identity.kind)) throw new DenError("invalid_argument", `a machine's kind is host or control-plane, got ${JSON.stringify(identity?.kind)?.slice(0, 40)}`);
  if (typeof identity.id !== "string" || !MACHINE_ID.test(identity.id)) throw new DenError("invalid_argument", `a machine id is 1-128 letters, digits, _ or -, got ${JSON.stringify(identity.id)?.slice(0, 160)}`);
  return { kind: identity.kind, id: identity.id };
}

/** The SAN URI a certificate names its machine by: `urn:den:<kind>:<id>`. */
export function identityUri(identity: Identity): string {
  const { kind, id } = checkIdentity(identity);
  return `urn:den:${kind}:${id}`;
}

/**
 * The machine a certificate names (its one `urn:den:` SAN URI); undefined if it names none,
 * more than one, or is not a certificate. It says what the certificate claims: call it on a
 * certificate verified against the deployment's CA (a TLS peer's, or `verifyIssuedBy`).
 */
export function identityOf(cert: string | Buffer | X509Certificate): Identity | undefined {
  let c: X509Certificate;
  try {
    c = cert instanceof X509Certificate ? cert : new X509Certificate(cert);
  } catch {
    return undefined;
  }
  const san = c.subjectAltName;
  if (!san) return undefined;
  // Node writes `URI:value`, entries joined by ", " (a value with a comma or quote is quoted as JSON).
  const found = san.split(", ").filter((e) => e.startsWith("URI:urn:den:")).map((e) => URI.exec(e.slice(4)));
  if (found.length !== 1 || !found[0]) return undefined;
  return { kind: found[0][1] as Identity["kind"], id: found[0][2]! };
}
