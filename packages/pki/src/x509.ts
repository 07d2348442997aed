// The one module that loads @peculiar/x509. Its dependency injection (tsyringe) needs the
// Reflect metadata API before x509 is evaluated: ES modules evaluate their imports in order,
// so "reflect-metadata" comes first. Node's WebCrypto is its crypto provider.
import "reflect-metadata";
import { webcrypto } from "node:crypto";
import * as x509 from "@peculiar/x509";

x509.cryptoProvider.set(webcrypto as never);

export { x509, webcrypto };
