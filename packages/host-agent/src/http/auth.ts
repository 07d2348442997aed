import { createHash, timingSafeEqual } from "node:crypto";

/** The token of an `Authorization: Bearer <token>` header, if that is what it is. */
export function bearerToken(header: string | undefined): string | undefined {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(header ?? "");
  return m?.[1];
}

const digest = (s: string) => createHash("sha256").update(s, "utf8").digest();

/**
 * Whether a request carries the host's secret. Both sides are hashed first, so the
 * comparison is constant-time over equal lengths whatever the caller sent.
 */
export function hasSecret(header: string | undefined, secret: string): boolean {
  const token = bearerToken(header);
  return token !== undefined && timingSafeEqual(digest(token), digest(secret));
}

/** A secret must be long enough not to be guessed: the host agent refuses to start without one. */
export function checkSecret(secret: string | undefined): string {
  if (!secret) throw new Error("the host agent needs a secret (DEN_HOST_SECRET): every request must carry it as a bearer token");
  if (secret.length < 16) throw new Error("DEN_HOST_SECRET must be at least 16 characters");
  return secret;
}
