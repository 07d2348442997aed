export { buildEnvdServer, type EnvdServerOptions } from "./server.js";
export { EnvdDenied, EnvdUnavailable, checkCredentials, envdSignature, secretEquals, signatureMatches, type EnvdCredentials, type EnvdSandbox, type EnvdSandboxes, type EnvdSignature } from "./seam.js";
