import type { X509Certificate } from "node:crypto";

/** A certificate's validity period (ms; a certificate's times are whole seconds), read by Node alone (no @peculiar/x509 to load). */
export function validity(c: X509Certificate): { notBefore: number; notAfter: number } {
  return { notBefore: Date.parse(c.validFrom), notAfter: Date.parse(c.validTo) };
}
