import { randomBytes } from "node:crypto";

const B32 = "abcdefghijklmnopqrstuvwxyz234567";

/** A random id like `sbx_k3j9...`: 16 base32 characters, 80 bits. */
export function newId(prefix: string): string {
  const bytes = randomBytes(16);
  let s = "";
  for (const b of bytes) s += B32[b & 31];
  return `${prefix}_${s}`;
}

export const ID_PATTERN = /^[a-z]+_[a-z2-7]{16}$/;
