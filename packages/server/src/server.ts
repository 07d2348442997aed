import { mkdir } from "node:fs/promises";
import type { FastifyInstance } from "fastify";
import { buildApp } from "./app.js";
import type { ServerConfig } from "./config.js";
import { ControlPlane, newDeploymentId, systemClock, type Clock } from "@den/control-plane";
import { openDatabase } from "@den/control-plane";
import { connectHost } from "./host-connection.js";
import { HttpHostAgent, processCpuSeconds, withHostWork } from "@den/host-agent";
import type { HostAgent } from "@den/protocol";
import { REPLICA_LEASE_MS, Replica } from "@den/control-plane";
import { openStore } from "./object-store.js";
import { Store } from "@den/control-plane";
import { openE2b, volumeContentRoutes } from "./e2b/index.js";
import { FleetIdentity } from "./fleet-identity.js";
import { startFleetListener, type FleetListener } from "./fleet-listener.js";
import { DenEnvdSandboxes } from "./e2b/envd-access.js";
import { E2bPortTraffic } from "./e2b/port-traffic.js";
import { buildEnvdServer } from "./e2b/envd/index.js";

/** http://host:port, an IPv6 address in brackets. */
const baseUrl = (host: string, port: number) => `http://${host.includes(":") ? `[${host}]` : host}:${port}`;

/** How often the guests of E2B sandboxes are asked for their metrics (E2B samples every 5 s). */
const E2B_METRICS_INTERVAL_MS = 5000;

export interface RunningServer {
  app: FastifyInstance;
  cp: ControlPlane;
  url: string;
  /** The hosts' listener (mutual TLS, DEN_FLEET_PORT), when the fleet speaks it. */
  fleetUrl?: string;
  /** This replica's identity toward the hosts, when the fleet speaks mutual TLS. */
  fleetIdentity?: FleetIdentity;
  /** The E2B envd listener's base URL (E2B_SANDBOX_URL), if it has one. */
  envdUrl?: string;
  /** Set when this start created the first admin key (no DEN_API_KEY, empty database). */
  createdAdminKey?: string;
  /** Stops serving and cold-hibernates sandboxes (bounded by the shutdown timeout); the rest are adopted by the next start. */
  close(): Promise<void>;
}

export interface ServerOptions {
  clock?: Clock;
  logger?: boolean | object;
  /**
   * The host agent to use instead of opening the one `config.hostAgent` names (a test's
   * MemoryHostAgent, given the same object store as `openStore(config)`). With a config of no
   * remote host agents it runs as the single-node one does (a clean stop cold-hibernates its
   * sandboxes). It stays the caller's: `close()` leaves it open, so another server on the
   * same database can take it over, as after a restart.
   */
  host?: HostAgent;
}

/**
 * `den serve`: control plane + reapers + HTTP, with the host agent in this process
 * (single-node mode, or behind a loopback HTTP hop) or another one (`config.hostAgent`).
 */
export async function startServer(config: ServerConfig, opts: ServerOptions = {}): Promise<RunningServer> {
  await mkdir(config.dataDir, { recursive: true });
  const db = await openDatabase(config.dataDir, config.database);
  const store = new Store(db);
  const objects = openStore(config);
  const clock = opts.clock ?? systemClock;
  const replica = await Replica.open(store, clock, config.dataDir);
  let fleet: FleetIdentity | undefined;
  let connected: Awaited<ReturnType<typeof connectHost>>;
  try {
    // Mutual TLS with the hosts: this replica's identity first, every host connection needs it.
    if (config.fleet) fleet = await FleetIdentity.open(config, (row) => store.machineCerts.record(row), replica.id);
    connected = opts.host ? { hosts: [opts.host], close: async () => undefined } : await connectHost(config, objects, undefined, fleet);
  } catch (e) {
    await replica.retire().catch(() => undefined);
    await db.destroy();
    throw e;
  }
  const { hosts, close: closeHost } = connected;
  const deployment = await store.setting("deployment_id", newDeploymentId);
  const remote = config.hostAgent.kind === "remote" ? config.hostAgent : undefined;
  // A registered host is reached at the address it gave, and must be the host its row names (over TLS: its certificate says so).
  const connectTo = (address: string, id: string) => HttpHostAgent.connect(address, { tls: fleet!.tls, peer: { kind: "host", id } });
  const cp = new ControlPlane(store, hosts, config, objects, deployment, clock, {
    replica: replica.id, hostWork: { run: withHostWork, processCpuSeconds }, ...(remote ? { connectHost: connectTo } : {}),
  });
  let createdAdminKey: string | undefined;
  try {
    // A CA given (DEN_CA_DIR) must load now: a key others may read, or no CA there, stops the start with why.
    if (cp.enrollment.configured) await cp.enrollment.authority();
    createdAdminKey = await cp.keys.bootstrap(config.apiKey);
    await cp.reconcile();
  } catch (e) {
    cp.hosts.close();
    await closeHost();
    await db.destroy();
    throw e;
  }
  let apiPort = config.port;
  const e2b = await openE2b(cp, () => config.e2b.sandboxDomain ?? `${config.ports.domain}:${apiPort}`);
  const app = await buildApp(cp, { logger: opts.logger ?? false, e2b });
  cp.log = app.log;
  // envd on a listener of its own: guest bytes never share the API's (and dashboard's) origin.
  let envdUrl: string | undefined;
  let envd: Awaited<ReturnType<typeof buildEnvdServer>> | undefined;
  let fleetListener: FleetListener | undefined;
  try {
    if (fleet && config.fleet) {
      fleetListener = await inUseSaysHow(startFleetListener(cp, fleet.tls, { port: config.fleet.port, host: config.fleet.host, logger: opts.logger ?? false }), `the hosts' port ${config.fleet.host}:${config.fleet.port}`, "DEN_FLEET_PORT or --fleet-port");
      const listener = fleetListener;
      // A renewed certificate: the hosts' listener serves it, new host connections present it.
      fleet.onRenew(async (tls) => {
        listener.reload(tls);
        await cp.hosts.reconnect();
        app.log.info({ expires: new Date(fleet!.notAfter).toISOString() }, "this replica's certificate was renewed");
      });
      fleet.start();
    }
    await inUseSaysHow(app.listen({ port: config.port, host: config.host }), `the API's port ${config.host}:${config.port}`, "DEN_PORT or --port");
    const addr = app.server.address();
    apiPort = typeof addr === "object" && addr ? addr.port : config.port;
    if (config.e2b.envdPort !== null) {
      envd = await buildEnvdServer(new DenEnvdSandboxes(cp, e2b.tokens), {
        logger: (opts.logger ?? false) as boolean | Record<string, unknown>, maxUploadBytes: config.limits.uploadBytes,
        // E2B's port traffic (`E2b-Sandbox-Port`, the code interpreter's) through the port proxy.
        portTraffic: new E2bPortTraffic(cp, app.portProxy, e2b.tokens),
      });
      // E2B's volume content API: guest bytes too, so on this origin (E2B_VOLUME_API_URL), never the API's.
      await envd.register(volumeContentRoutes(e2b.volumes, { maxUploadBytes: config.limits.uploadBytes }));
      await inUseSaysHow(envd.listen({ port: config.e2b.envdPort, host: config.e2b.envdHost }), `envd's port ${config.e2b.envdHost}:${config.e2b.envdPort}`, "DEN_ENVD_PORT or --envd-port (off: no envd)");
    }
  } catch (e) {
    fleet?.close();
    await fleetListener?.close();
    await envd?.close();
    await app.close();
    cp.hosts.close();
    await closeHost();
    await db.destroy();
    throw e;
  }
  if (envd) {
    const ea = envd.server.address();
    envdUrl = baseUrl(config.e2b.envdHost, typeof ea === "object" && ea ? ea.port : config.e2b.envdPort!);
  }
  /** Runs `pass` every `ms`, never two at once; a failed pass is logged, the next one runs. */
  const every = (ms: number, what: string, pass: () => Promise<void>) => {
    let busy = false;
    return setInterval(() => {
      if (busy) return;
      busy = true;
      pass().catch((err: unknown) => app.log.error({ err }, `${what} failed`)).finally(() => (busy = false));
    }, ms);
  };
  // Work done once for the deployment, by the replica that holds its lease (see control/replica.ts).
  const once = (work: string, pass: () => Promise<void>) => async () => {
    if (await replica.holds(work)) await pass();
  };
  const alive = every(2000, "replica lease renewal", () => replica.renew());
  // Every replica sends webhook deliveries (each claimed first).
  cp.webhooks.sender.start();
  // Every replica keeps its view of the hosts current (a heartbeat reaches only one of them).
  const view = every(1000, "host list refresh", () => cp.hosts.refresh());
  // An exec streaming through this replica keeps its sandbox active for whichever replica reaps.
  const active = every(config.reaper.intervalMs, "activity of execs in flight", () => cp.activity.touchActive());
  const reaper = every(config.reaper.intervalMs, "reaper pass", once("reaper", () => cp.reap()));
  // Registered hosts: who holds a lease, and the loss of those that stopped renewing theirs.
  const leases = every(Math.min(config.reaper.intervalMs, 1000), "host lease pass", once("hosts", () => cp.registry.sweep()));
  const refusals = every(config.network.eventsIntervalMs, "network refusal pass", once("refusals", () => cp.network.poll()));
  const sampler = every(E2B_METRICS_INTERVAL_MS, "guest metrics sampling", () => e2b.metrics.pass());
  // Any replica settles operations of replicas that are gone (each one is claimed first); one collects garbage.
  const gc = every(config.storeGc.intervalMs, "store garbage collection", async () => {
    await cp.recovery.retry();
    if (await replica.holds("gc")) {
      await cp.gc.collect();
      // Images of deleted volumes a failed removal left.
      await cp.volumes.sweep();
    }
  });
  // A replica that dies mid-operation: the others settle what it left within a few seconds of its lease running out.
  const orphans = every(REPLICA_LEASE_MS / 2, "operations of replicas that are gone", async () => {
    await cp.recovery.retry({ othersOnly: true });
    await cp.settleOrphanMoves();
  });
  return {
    app, cp, url: baseUrl(config.host, apiPort),
    ...(fleetListener ? { fleetUrl: fleetListener.url } : {}),
    ...(fleet ? { fleetIdentity: fleet } : {}),
    ...(envdUrl ? { envdUrl } : {}),
    ...(createdAdminKey ? { createdAdminKey } : {}),
    async close() {
      clearInterval(reaper);
      clearInterval(leases);
      clearInterval(alive);
      clearInterval(view);
      clearInterval(active);
      clearInterval(orphans);
      clearInterval(refusals);
      clearInterval(gc);
      clearInterval(sampler);
      fleet?.close();
      await fleetListener?.close();
      await envd?.close();
      await app.close();
      // Its last lifecycle events (the clean stop's hibernations) wait in the outbox for the next start.
      const stopWebhooks = cp.webhooks.stop();
      // Single node: no VM outlives a clean stop. A control plane of a separate host agent
      // touches none of its VMs when it stops (they keep running, and it finds them again).
      if (config.hostAgent.kind !== "remote") {
        const r = await cp.hibernateAllCold(Date.now() + config.defaults.shutdownTimeoutSeconds * 1000);
        if (r.done || r.left) app.log.info(r, "clean stop: sandboxes cold-hibernated (the rest are adopted at the next start)");
      }
      await stopWebhooks;
      cp.hosts.close();
      await closeHost();
      await replica.retire().catch(() => undefined);
      await db.destroy();
    },
  };
}

/**
 * A listen on a port another process holds (a second `den serve` on one machine) fails
 * with what to change, not a bare EADDRINUSE.
 */
async function inUseSaysHow<T>(listening: Promise<T>, what: string, setting: string): Promise<T> {
  try {
    return await listening;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "EADDRINUSE") throw e;
    throw new Error(`${what} is in use (another den serve on this machine?): choose another with ${setting}`);
  }
}
