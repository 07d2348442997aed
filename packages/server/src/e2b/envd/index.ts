export { buildEnvdServer, type EnvdServerOptions } from "./server.js";
export type { EnvdPortTraffic } from "./listener.js";
export { EnvdDenied, EnvdUnavailable, checkCredentials, envdSignature, secretEquals, signatureDigest, signatureMatches, signedWith, type EnvdCredentials, type EnvdCommandCall, type EnvdSandbox, type EnvdSandboxes, type EnvdSignature, type EnvdStreamKind } from "./seam.js";
