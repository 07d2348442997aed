import type { Command } from "commander";
import { globalOptions, logLine, warnSurplusCapabilities } from "./options.js";
import { configured } from "../output.js";

export function registerServe(program: Command): void {
  program
    .command("serve")
    .description("run the Den API server (control plane + this host's sandboxes)")
    .option("-p, --port <port>", "port (env DEN_PORT, default 8787)")
    .option("--host <host>", "address to listen on (env DEN_HOST, default 127.0.0.1)")
    .option("--host-agent <url>", "run no VMs here: use the host agent at URL (`den host run`, https://, over mutual TLS); repeat it, or separate URLs with commas, for several; `registered` for hosts that register themselves (env DEN_HOST_AGENT_URL)", (v: string, prev: string[] = []) => [...prev, v])
    .option("--tls-dir <dir>", "this replica's identity toward the hosts (key.pem, cert.pem, ca.pem), for mutual TLS with them (env DEN_TLS_DIR; without it, DEN_CA_DIR issues one at start)")
    .option("--join <token>", "join the deployment as a control-plane replica with a one-time token (den hosts token create --kind control-plane) through --peers, when its --tls-dir holds no identity yet")
    .option("--peers <url...>", "other replicas' hosts' listeners (https://HOST:8789): a --join goes through one, and a replica without DEN_CA_DIR renews its certificate through them (env DEN_FLEET_PEERS)")
    .option("--fleet-port <port>", "the hosts' listener (mutual TLS: joins, heartbeats, renewals) (env DEN_FLEET_PORT, default 8789)")
    .option("--envd-port <port>", "port of the E2B-compatible envd listener (env DEN_ENVD_PORT, default 49983; off: none)")
    .option("--log-format <format>", "pretty (one readable line per event) or json (JSON lines); default: pretty on a terminal, json otherwise (env DEN_LOG_FORMAT)")
    .action(async (opts: { port?: string; host?: string; hostAgent?: string[]; envdPort?: string; logFormat?: string; tlsDir?: string; fleetPort?: string; join?: string; peers?: string[] }, cmd: Command) => {
      const { privateFiles } = await import("@den/runtime");
      const { loadConfig, logFormat, readableLogStream, startServer } = await import("@den/server");
      // Everything it writes (database, snapshots, memory images, logs) is for root's eyes only.
      privateFiles();
      const root = cmd.optsWithGlobals<{ dataDir?: string }>();
      const dataDir = root.dataDir ? { dataDir: (await globalOptions(cmd)).dataDir } : {};
      const config = configured(() => loadConfig({
        ...(opts.port ? { port: opts.port } : {}), ...(opts.host ? { host: opts.host } : {}), ...(opts.hostAgent?.length ? { hostAgent: opts.hostAgent.join(",") } : {}),
        ...(opts.envdPort ? { envdPort: opts.envdPort } : {}), ...(opts.tlsDir ? { tlsDir: opts.tlsDir } : {}), ...(opts.fleetPort ? { fleetPort: opts.fleetPort } : {}),
        ...(opts.join ? { join: opts.join } : {}), ...(opts.peers?.length ? { peers: opts.peers.join(",") } : {}),
        ...dataDir,
      }));
      if (config.hostAgent.kind !== "remote") await warnSurplusCapabilities();
      const format = logFormat(opts.logFormat);
      const server = await startServer(config, { logger: { level: config.logLevel, ...(format === "pretty" ? { stream: readableLogStream() } : {}) } });
      const hosts = server.cp.hosts.all.map((h) => h.address);
      // Registered hosts come by heartbeat: at start there may be none yet.
      const hostsSaid = config.hostAgent.kind === "remote" && config.hostAgent.registered
        ? `registered host agents: ${hosts.length ? hosts.join(", ") : "none yet (den host run --control-plane URL)"}`
        : `host agent${hosts.length > 1 ? "s" : ""} ${hosts.join(", ")}`;
      logLine(`den: listening on ${server.url} (data dir ${config.dataDir}; ${hostsSaid})`);
      if (server.fleetUrl) logLine(`den: hosts' listener (mutual TLS) at ${server.fleetUrl} as ${server.fleetIdentity!.identity.kind} ${server.fleetIdentity!.identity.id}`);
      if (server.envdUrl) logLine(`den: E2B API at ${server.url} (E2B_API_URL), envd at ${server.envdUrl} (E2B_SANDBOX_URL)`);
      if (server.createdAdminKey) logLine(`den: created an admin API key (shown once): ${server.createdAdminKey}`);
      let stopping = false;
      const stop = (signal: string) => {
        if (stopping) return;
        stopping = true;
        logLine(config.hostAgent.kind === "remote"
          ? `den: ${signal}: stopping; the host agent's VMs keep running`
          : `den: ${signal}: stopping; cold-hibernating sandboxes (up to ${config.defaults.shutdownTimeoutSeconds} s)`);
        server.close().then(() => process.exit(0), () => process.exit(1));
      };
      process.on("SIGTERM", () => stop("SIGTERM"));
      process.on("SIGINT", () => stop("SIGINT"));
    });
}
