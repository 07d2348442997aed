import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { defaultDataDir } from "@den/runtime";
import { defaultCapacity, memoryOvercommit, memoryReserveMb } from "@den/host-agent";
import { databaseConfig, type ServerConfig } from "@den/control-plane";
import { MAX_CERT_TTL_HOURS } from "@den/pki";
import { refusePlaceholderSecrets, refuseRetiredHostSecret } from "./placeholder-secrets.js";

export type { ServerConfig };

/**
 * A list of URLs as a flag or variable gives them: separated by commas or spaces (both are
 * accepted everywhere: `--host-agent`, `--control-plane`, DEN_HOST_AGENT_URL,
 * DEN_CONTROL_PLANE_URL), repeated flags, trailing slashes dropped.
 */
export function urlList(given: string | readonly string[] | undefined): string[] {
  const parts = typeof given === "string" ? [given] : given ?? [];
  return parts.flatMap((p) => p.split(/[\s,]+/)).map((u) => u.replace(/\/+$/, "")).filter(Boolean);
}

/** Every URL of `urls` is http(s)://, and none is given twice (what: which list, for the error). */
export function checkUrls(urls: readonly string[], what: string): void {
  for (const url of urls) if (!/^https?:\/\/[^/]/.test(url)) throw new Error(`${what} URL must be http(s)://..., got ${url}`);
  if (new Set(urls).size !== urls.length) throw new Error(`${what} is given twice: ${urls.join(", ")}`);
}

function hostAgentConfig(list: string | undefined, env: NodeJS.ProcessEnv, joining: boolean): ServerConfig["hostAgent"] {
  const given = urlList(list);
  // `registered`: no host is given here; they register themselves (and may be given beside it).
  const urls = given.filter((u) => u !== "registered");
  if (given.length) {
    checkUrls(urls, "a host agent");
    // An old fleet's unit file fails loudly rather than running without the links it expected.
    refuseRetiredHostSecret(env);
    for (const url of urls) if (!url.startsWith("https://")) throw new Error(`a host agent is reached over mutual TLS: its URL is https://..., got ${url}`);
    if (!env.DEN_TLS_DIR && !env.DEN_CA_DIR && !joining) throw new Error("remote host agents (DEN_HOST_AGENT_URL, --host-agent) are reached over mutual TLS: give this replica its identity (DEN_TLS_DIR, --tls-dir), the deployment's CA to issue one from (DEN_CA_DIR), or a token to join with (--join TOKEN --peers URL)");
    return { kind: "remote", urls, registered: given.includes("registered") };
  }
  const transport = env.DEN_HOST_TRANSPORT ?? "local";
  if (transport !== "local" && transport !== "loopback" && transport !== "memory") throw new Error(`DEN_HOST_TRANSPORT must be local, loopback or memory, got ${transport}`);
  return { kind: transport };
}

/** Other replicas' hosts' listeners (a join goes through one; a replica without the CA renews through them): https only. */
function fleetPeers(list: string | undefined): string[] {
  const urls = urlList(list);
  checkUrls(urls, "a peer replica");
  for (const u of urls) if (!u.startsWith("https://")) throw new Error(`a peer replica is its hosts' listener over mutual TLS (https://HOST:8789), not ${u}`);
  return urls;
}

function required(env: NodeJS.ProcessEnv, name: string): string {
  const v = env[name];
  if (!v) throw new Error(`${name} must be set when DEN_STORE=s3`);
  return v;
}

function num(v: string | undefined, fallback: number): number {
  if (v === undefined || v === "") return fallback;
  const n = Number(v);
  if (!Number.isFinite(n)) throw new Error(`not a number: ${v}`);
  return n;
}

export function loadConfig(flags: Partial<{ port: string; host: string; dataDir: string; hostAgent: string; envdPort: string; tlsDir: string; fleetPort: string; join: string; peers: string }> = {}, env = process.env): ServerConfig {
  // Before anything else: `den serve` and `den host run` both start here.
  refusePlaceholderSecrets(env);
  const onIdle = env.DEN_ON_IDLE ?? "hibernate";
  if (onIdle !== "hibernate" && onIdle !== "destroy") throw new Error(`DEN_ON_IDLE must be hibernate or destroy, got ${onIdle}`);
  const tlsDir = flags.tlsDir ?? env.DEN_TLS_DIR;
  const dataDir = flags.dataDir ?? env.DEN_DATA_DIR ?? defaultDataDir();
  // A replica that joined once keeps its identity in its data dir (FleetIdentity reads it there).
  const joined = flags.join !== undefined || existsSync(join(dataDir, "identity", "cert.pem"));
  const hostAgent = hostAgentConfig(flags.hostAgent ?? env.DEN_HOST_AGENT_URL, { ...env, ...(tlsDir ? { DEN_TLS_DIR: tlsDir } : {}) }, joined);
  return {
    port: num(flags.port ?? env.DEN_PORT, 8787),
    host: flags.host ?? env.DEN_HOST ?? "127.0.0.1",
    dataDir,
    database: databaseConfig(env.DEN_DATABASE_URL),
    ...(env.DEN_API_KEY ? { apiKey: env.DEN_API_KEY } : {}),
    defaults: {
      ttlSeconds: num(env.DEN_DEFAULT_TTL_SECONDS, 3600),
      idleTimeoutSeconds: num(env.DEN_DEFAULT_IDLE_TIMEOUT_SECONDS, 600),
      coldAfterSeconds: num(env.DEN_COLD_AFTER_SECONDS, 1800),
      shutdownTimeoutSeconds: num(env.DEN_SHUTDOWN_TIMEOUT_SECONDS, 60),
      onIdle,
      template: env.DEN_DEFAULT_TEMPLATE ?? "base",
      pausedRetentionSeconds: num(env.DEN_PAUSED_RETENTION_SECONDS, 30 * 86_400),
    },
    limits: {
      sandboxesPerOwner: num(env.DEN_MAX_SANDBOXES_PER_OWNER, 20),
      vcpusPerSandbox: num(env.DEN_MAX_SANDBOX_VCPUS, 4),
      memoryMbPerSandbox: num(env.DEN_MAX_SANDBOX_MEMORY_MB, 8192),
      diskMbPerSandbox: num(env.DEN_MAX_SANDBOX_DISK_MB, 65536),
      bodyBytes: num(env.DEN_MAX_BODY_BYTES, 16 * 1024 * 1024),
      uploadBytes: num(env.DEN_MAX_UPLOAD_BYTES, 1024 * 1024 * 1024),
      execOutputBytes: num(env.DEN_MAX_EXEC_OUTPUT_BYTES, 16 * 1024 * 1024),
      eventsPerSandbox: num(env.DEN_MAX_EVENTS_PER_SANDBOX, 200),
      storedBytesPerOwner: num(env.DEN_MAX_STORED_BYTES_PER_OWNER, 100 * 1024 ** 3),
      templatesPerOwner: num(env.DEN_MAX_TEMPLATES_PER_OWNER, 20),
      templateBuildSeconds: num(env.DEN_TEMPLATE_BUILD_TTL_SECONDS, 3600),
      contextBytes: num(env.DEN_MAX_CONTEXT_MB, 1024) * 1024 * 1024,
      buildsPerOwner: num(env.DEN_MAX_BUILDS_PER_OWNER, 2),
      volumesPerOwner: num(env.DEN_MAX_VOLUMES_PER_OWNER, 20),
      volumeMbPerOwner: num(env.DEN_MAX_VOLUME_MB_PER_OWNER, 100 * 1024),
      volumeTransfersPerOwner: num(env.DEN_MAX_VOLUME_TRANSFERS_PER_OWNER, 2),
      bufferedExecsPerOwner: num(env.DEN_MAX_BUFFERED_EXECS_PER_OWNER, 8),
      streamsPerOwner: num(env.DEN_MAX_STREAMS_PER_OWNER, 64),
      followsPerOwner: num(env.DEN_MAX_FOLLOWS_PER_OWNER, 16),
    },
    meter: { intervalMs: num(env.DEN_METER_INTERVAL_SECONDS, 60) * 1000 },
    prices: env.DEN_PRICE_VCPU_SECOND || env.DEN_PRICE_GIB_SECOND || env.DEN_PRICE_GB_MONTH
      ? { vcpuSecond: num(env.DEN_PRICE_VCPU_SECOND, 0), gibSecond: num(env.DEN_PRICE_GIB_SECOND, 0), gbMonth: num(env.DEN_PRICE_GB_MONTH, 0) }
      : null,
    capacity: {
      memoryMb: num(env.DEN_CAPACITY_MEMORY_MB, defaultCapacity().memoryMb),
      vcpus: num(env.DEN_CAPACITY_VCPUS, defaultCapacity().vcpus),
      diskReserveMb: num(env.DEN_DISK_RESERVE_MB, defaultCapacity().diskReserveMb),
      memoryReserveMb: memoryReserveMb(env),
      memoryOvercommit: memoryOvercommit(env),
    },
    network: {
      buildEgress: egressOf(env.DEN_BUILD_EGRESS),
      maxConnections: num(env.DEN_NET_MAX_CONNECTIONS, 256),
      bandwidthMbps: num(env.DEN_NET_BANDWIDTH_MBPS, 0),
      eventsIntervalMs: num(env.DEN_NET_EVENTS_INTERVAL_SECONDS, 10) * 1000,
    },
    ports: {
      domain: env.DEN_PORTS_DOMAIN ?? "localhost",
      ...(env.DEN_PUBLIC_URL ? { publicUrl: env.DEN_PUBLIC_URL.replace(/\/+$/, "") } : {}),
      maxUrlTtlSeconds: num(env.DEN_MAX_URL_TTL_SECONDS, 7 * 24 * 3600),
      maxConnectionsPerOwner: num(env.DEN_MAX_PORT_CONNECTIONS_PER_OWNER, 256),
    },
    reaper: {
      intervalMs: num(env.DEN_REAPER_INTERVAL_MS, 1000),
      cpuActiveShare: num(env.DEN_IDLE_CPU_SHARE, 0.2),
    },
    storeGc: {
      graceMs: num(env.DEN_STORE_GC_GRACE_SECONDS, 600) * 1000,
      /** Build contexts not uploaded again for this long are removed (DEN_BUILD_CONTEXT_DAYS). */
      contextMaxAgeMs: num(env.DEN_BUILD_CONTEXT_DAYS, 7) * 86_400_000,
      intervalMs: num(env.DEN_STORE_GC_INTERVAL_SECONDS, 60) * 1000,
    },
    volumes: {
      // Only with hosts apart from the control plane: a single machine's store is on its own disk.
      parkIdleMs: num(env.DEN_VOLUME_PARK_IDLE_SECONDS, hostAgent.kind === "remote" ? 3600 : 0) * 1000,
    },
    webhooks: {
      retryMs: num(env.DEN_WEBHOOK_RETRY_SECONDS, 24 * 3600) * 1000,
      firstBackoffMs: num(env.DEN_WEBHOOK_FIRST_BACKOFF_MS, 5000),
      maxBackoffMs: num(env.DEN_WEBHOOK_MAX_BACKOFF_SECONDS, 3600) * 1000,
      timeoutMs: num(env.DEN_WEBHOOK_TIMEOUT_SECONDS, 10) * 1000,
      allowNetworks: (env.DEN_WEBHOOK_ALLOW_NETWORKS ?? "").split(",").map((c) => c.trim()).filter(Boolean),
      perOwner: num(env.DEN_MAX_WEBHOOKS_PER_OWNER, 20),
      keepMs: num(env.DEN_WEBHOOK_KEEP_DAYS, 7) * 86_400_000,
    },
    store: env.DEN_STORE === "s3"
      ? {
        kind: "s3", bucket: required(env, "DEN_S3_BUCKET"), prefix: env.DEN_S3_PREFIX ?? "den/",
        ...(env.DEN_S3_ENDPOINT ? { endpoint: env.DEN_S3_ENDPOINT } : {}), ...(env.DEN_S3_REGION ? { region: env.DEN_S3_REGION } : {}),
        ...(env.AWS_ACCESS_KEY_ID ? { accessKeyId: env.AWS_ACCESS_KEY_ID } : {}), ...(env.AWS_SECRET_ACCESS_KEY ? { secretAccessKey: env.AWS_SECRET_ACCESS_KEY } : {}),
      }
      : { kind: "local", ...(env.DEN_STORE_DIR ? { dir: env.DEN_STORE_DIR } : {}) },
    logLevel: env.DEN_LOG_LEVEL ?? "info",
    metricsPublic: env.DEN_METRICS_PUBLIC === "1",
    hostAgent,
    hostLeases: { leaseMs: num(env.DEN_HOST_LEASE_SECONDS, 15) * 1000, graceMs: num(env.DEN_HOST_LOST_GRACE_SECONDS, 30) * 1000 },
    ...(hostAgent.kind === "remote"
      ? { fleet: { ...(tlsDir ? { tlsDir: resolve(tlsDir) } : {}), port: num(flags.fleetPort ?? env.DEN_FLEET_PORT, 8789), host: env.DEN_FLEET_HOST ?? flags.host ?? env.DEN_HOST ?? "127.0.0.1", ...(flags.join ? { join: flags.join } : {}), peers: fleetPeers(flags.peers ?? env.DEN_FLEET_PEERS) } }
      : {}),
    ...(env.DEN_CA_DIR ? { ca: { dir: resolve(env.DEN_CA_DIR), certTtlHours: certTtlHours(env.DEN_CERT_TTL_HOURS) } } : {}),
    e2b: {
      envdPort: (flags.envdPort ?? env.DEN_ENVD_PORT) === "off" ? null : num(flags.envdPort ?? env.DEN_ENVD_PORT, 49983),
      envdHost: env.DEN_ENVD_HOST ?? flags.host ?? env.DEN_HOST ?? "127.0.0.1",
      ...(env.DEN_E2B_DOMAIN ? { sandboxDomain: env.DEN_E2B_DOMAIN } : {}),
      volumeMb: num(env.DEN_E2B_VOLUME_MB, 5 * 1024),
      volumeTokenSeconds: num(env.DEN_E2B_VOLUME_TOKEN_SECONDS, 86_400),
    },
  };
}

/** DEN_CERT_TTL_HOURS: how long a machine's certificate from the deployment's CA lives (default 24 h). */
function certTtlHours(v: string | undefined): number {
  const h = num(v, 24);
  if (!(h > 0 && h <= MAX_CERT_TTL_HOURS)) throw new Error(`DEN_CERT_TTL_HOURS must be more than 0 and at most ${MAX_CERT_TTL_HOURS}, got ${v}`);
  return h;
}

/** DEN_BUILD_EGRESS: the network of a template build's RUN steps (`open`, the default: they fetch packages; or `none`). */
function egressOf(v: string | undefined): "open" | "none" {
  if (v === undefined || v === "" || v === "open") return "open";
  if (v === "none") return "none";
  throw new Error(`DEN_BUILD_EGRESS must be open or none, got ${JSON.stringify(v)}`);
}
