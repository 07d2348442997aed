export { buildEnvdServer, type EnvdServerOptions } from "./server.js";
export type { EnvdPortTraffic } from "./listener.js";
export { EnvdDenied, EnvdUnavailable, checkCredentials, envdSignature, secretEquals, signatureDigest, signatureMatches, signedWith, type EnvdCredentials, type EnvdSandbox, type EnvdSandboxes, type EnvdSignature } from "./seam.js";
