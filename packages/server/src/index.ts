export { startServer, type RunningServer } from "./server.js";
export { loadConfig, type ServerConfig } from "./config.js";
export { buildApp } from "./app.js";
export { ControlPlane, type Clock } from "./control-plane.js";
export { openStore } from "./object-store.js";
