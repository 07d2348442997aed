import type { Command } from "commander";
import { LocalHostAgent, startHostServer } from "@den/host-agent";
import { loadConfig, openStore } from "@den/server";
import { globalOptions, logLine } from "./options.js";

/**
 * `den host run`: this machine's host agent alone (its VMs, warm snapshots, templates and
 * networks in the data dir), serving /host/v1 to a control plane (`den serve --host-agent`).
 * The snapshot store is configured as for `den serve` (DEN_STORE, DEN_STORE_DIR, DEN_S3_*)
 * and must be the one the control plane opens.
 */
export function registerHostRun(host: Command): void {
  host
    .command("run")
    .description("run this machine's host agent alone, serving the host protocol to a control plane (needs DEN_HOST_SECRET)")
    .option("-p, --port <port>", "port (default 8788)", "8788")
    .option("--host <host>", "address to listen on (default 127.0.0.1)", "127.0.0.1")
    .action(async (opts: { port: string; host: string }, cmd: Command) => {
      const root = cmd.optsWithGlobals<{ dataDir?: string }>();
      const config = loadConfig({ ...(root.dataDir ? { dataDir: globalOptions(cmd).dataDir } : {}) });
      const secret = process.env.DEN_HOST_SECRET;
      if (!secret) throw new Error("den host run needs DEN_HOST_SECRET: the control plane sends it with every request");
      const agent = await LocalHostAgent.open(config.dataDir, openStore(config), config.capacity);
      let server;
      try {
        server = await startHostServer(agent, { secret, port: Number(opts.port), host: opts.host, logger: { level: config.logLevel } });
      } catch (e) {
        agent.close();
        throw e;
      }
      logLine(`den: host agent ${agent.instance} listening on ${server.url} (data dir ${config.dataDir})`);
      let stopping = false;
      // A stop leaves the VMs running: the next start adopts them (draining them is the control plane's call).
      const stop = (signal: string) => {
        if (stopping) return;
        stopping = true;
        logLine(`den: ${signal}: host agent stopping; its VMs keep running and are adopted at the next start`);
        server.close().finally(() => {
          agent.close();
          process.exit(0);
        });
      };
      process.on("SIGTERM", () => stop("SIGTERM"));
      process.on("SIGINT", () => stop("SIGINT"));
    });
}
