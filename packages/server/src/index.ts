export { startServer, type RunningServer, type ServerOptions } from "./server.js";
export { checkUrls, loadConfig, urlList, type ServerConfig } from "./config.js";
export { isPlaceholderSecret, refusePlaceholderSecrets, refuseRetiredHostSecret } from "./placeholder-secrets.js";
export { buildApp } from "./app.js";
export { ControlPlane, type Clock } from "@den/control-plane";
export { openStore } from "./object-store.js";
export { buildEnvdServer, EnvdDenied, EnvdUnavailable, checkCredentials, envdSignature, signatureMatches, type EnvdCredentials, type EnvdSandbox, type EnvdSandboxes, type EnvdServerOptions, type EnvdSignature } from "./e2b/envd/index.js";
export { formatLogLine, logFormat, readableLogStream } from "./log-format.js";
