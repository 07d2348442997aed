import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { DenError } from "@den/protocol";

/**
 * A one-time join token: `den-join.<id>.<secret>.<pin>`. `id` (12 base32 characters) names
 * its row; `secret` (32 random bytes, base64url) proves it, and only its SHA-256 is stored;
 * `pin`, the first 16 hex digits of the CA certificate's SHA-256, lets a joining machine
 * check the CA it has not seen yet (as kubeadm's discovery hash does).
 */
const TOKEN = /^den-join\.([a-z2-7]{12})\.([A-Za-z0-9_-]{43})\.([0-9a-f]{16})$/;
/** The longest text taken as a token (a token is 82 characters): longer is refused unread. */
export const MAX_JOIN_TOKEN = 128;
const BASE32 = "abcdefghijklmnopqrstuvwxyz234567";

const sha256 = (s: string) => createHash("sha256").update(s).digest("hex");

/** A new join token for the CA of `caFingerprint`: its text (shown once), its id, and the hash of its secret (stored). */
export function newJoinToken(caFingerprint: string): { token: string; id: string; secretHash: string } {
  if (typeof caFingerprint !== "string" || !/^[0-9a-fA-F]{64}$/.test(caFingerprint)) throw new DenError("invalid_argument", "a CA fingerprint is 64 hex digits (SHA-256)");
  const id = [...randomBytes(12)].map((b) => BASE32[b & 31]).join("");
  const secret = randomBytes(32).toString("base64url");
  return { token: `den-join.${id}.${secret}.${caFingerprint.slice(0, 16).toLowerCase()}`, id, secretHash: sha256(secret) };
}

/** A token's parts, or undefined for anything not exactly a token (bounded: nothing longer than MAX_JOIN_TOKEN is looked at). */
export function parseJoinToken(token: string): { id: string; secret: string; caPin: string } | undefined {
  if (typeof token !== "string" || token.length > MAX_JOIN_TOKEN) return undefined;
  const m = TOKEN.exec(token);
  return m ? { id: m[1]!, secret: m[2]!, caPin: m[3]! } : undefined;
}

/** Whether `secret` is the one `secretHash` was made from (in constant time). */
export function tokenMatches(secret: string, secretHash: string): boolean {
  if (typeof secret !== "string" || typeof secretHash !== "string" || !/^[0-9a-f]{64}$/.test(secretHash) || secret.length > MAX_JOIN_TOKEN) return false;
  return timingSafeEqual(Buffer.from(sha256(secret), "hex"), Buffer.from(secretHash, "hex"));
}

/** Whether a CA's fingerprint is the one a token's pin names. */
export function pinMatches(caPin: string, caFingerprint: string): boolean {
  return typeof caPin === "string" && /^[0-9a-f]{16}$/.test(caPin) && caFingerprint.slice(0, 16).toLowerCase() === caPin;
}
