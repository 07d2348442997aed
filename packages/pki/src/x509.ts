// The one module that loads @peculiar/x509, and only once a certificate or CSR is made or read
// by it: loading it (tsyringe, reflect-metadata) took ~0.3 s, which every `den serve` and `den
// host run` paid at start whether it made a certificate or not. Its dependency injection needs
// the Reflect metadata API before x509 is evaluated, so "reflect-metadata" is loaded first.
// Node's WebCrypto is its crypto provider.
import { webcrypto } from "node:crypto";
import type * as X509 from "@peculiar/x509";

let loaded: Promise<typeof X509> | undefined;

/** @peculiar/x509, loaded at the first call. */
export function loadX509(): Promise<typeof X509> {
  loaded ??= (async () => {
    await import("reflect-metadata");
    const x509 = await import("@peculiar/x509");
    x509.cryptoProvider.set(webcrypto as never);
    return x509;
  })();
  return loaded;
}

export { webcrypto };
export type { X509 };
