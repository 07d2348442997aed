import { defaultDataDir } from "@den/runtime";
import { defaultCapacity, memoryOvercommit, memoryReserveMb, type Capacity } from "@den/host-agent";
import type { Prices } from "./usage.js";
import type { NetworkLimits } from "./network.js";
import { databaseConfig, type DatabaseConfig } from "./db.js";

/** Server configuration: flags override environment, environment overrides defaults. */
export interface ServerConfig {
  port: number;
  host: string;
  dataDir: string;
  /** The control plane's database (DEN_DATABASE_URL): SQLite in the data dir unless a postgres:// URL is given. */
  database: DatabaseConfig;
  /** Bootstrap admin key (DEN_API_KEY); with none and an empty database one is created and printed. */
  apiKey?: string;
  defaults: {
    ttlSeconds: number;
    idleTimeoutSeconds: number;
    /** An idle-hibernated (warm) sandbox goes cold after this much more quiet. */
    coldAfterSeconds: number;
    /** On a clean stop, how long to spend cold-hibernating sandboxes before leaving the rest to be adopted. */
    shutdownTimeoutSeconds: number;
    onIdle: "hibernate" | "destroy";
    template: string;
    /** A sandbox whose deadline counts only while it runs (E2B's timeout) is kept this long paused, then destroyed. */
    pausedRetentionSeconds: number;
  };
  limits: {
    sandboxesPerOwner: number;
    vcpusPerSandbox: number;
    memoryMbPerSandbox: number;
    diskMbPerSandbox: number;
    bodyBytes: number;
    uploadBytes: number;
    execOutputBytes: number;
    eventsPerSandbox: number;
    /** At once per owner (per control-plane process): buffered execs (each holds its output), exec streams and PTYs, event follows. */
    bufferedExecsPerOwner: number;
    streamsPerOwner: number;
    followsPerOwner: number;
    /** Bytes an owner may keep in the snapshot store (checkpoints and cold-hibernated sandboxes). */
    storedBytesPerOwner: number;
    /** Templates an owner may make with `POST /v1/templates`. */
    templatesPerOwner: number;
    /** A template build's TTL: all its setup commands together (its sandbox counts as one of the owner's meanwhile). */
    templateBuildSeconds: number;
    /** A build context's size (DEN_MAX_CONTEXT_MB). */
    contextBytes: number;
    /** Template builds an owner may run at once (DEN_MAX_BUILDS_PER_OWNER). */
    buildsPerOwner: number;
    /** Volumes an owner may have, and their sizes summed (MiB). */
    volumesPerOwner: number;
    volumeMbPerOwner: number;
    /** Volume file transfers and grows at once per owner (each runs a helper VM). */
    volumeTransfersPerOwner: number;
  };
  /** What this host may hold (admission control). */
  capacity: Capacity;
  /** Sandbox networks: limits and how refusals are reported. */
  network: NetworkLimits;
  ports: {
    /** Ports are also served at `P-sbx-ID.<domain>` (default "localhost": browsers resolve *.localhost to this machine). */
    domain: string;
    /** The address users reach this server at, for the URLs it hands out; default: the request's Host. */
    publicUrl?: string;
    /** The longest a signed port URL may live. */
    maxUrlTtlSeconds: number;
    /** Connections to sandboxes' ports an owner may hold open at once (each buffers up to 256 KiB here). */
    maxConnectionsPerOwner: number;
  };
  meter: {
    /** A sandbox's usage is written in segments at most this long (and at every transition). */
    intervalMs: number;
  };
  /** The price table usage costs are computed with; null: no costs in usage reports. */
  prices: Prices | null;
  reaper: {
    intervalMs: number;
    /** Guest CPU (share of one core, from the QEMU process) above which a sandbox counts as active. */
    cpuActiveShare: number;
  };
  /** The snapshot store's garbage collector: released snapshots are deleted after `graceMs`, checked every `intervalMs`. */
  storeGc: { graceMs: number; intervalMs: number; contextMaxAgeMs: number };
  /**
   * Volumes nothing has held for `parkIdleMs` are parked in the store (uploaded, their host's
   * image removed), so a host lost for good takes only the volumes in use on it; 0: never.
   */
  volumes: { parkIdleMs: number };
  /** Lifecycle webhooks: their delivery and what a tenant's URL may reach. */
  webhooks: {
    /** Each delivery is retried with exponential backoff for this long after its event, then marked failed. */
    retryMs: number;
    /** The first retry waits `firstBackoffMs`, each next one twice as long, at most `maxBackoffMs`. */
    firstBackoffMs: number;
    maxBackoffMs: number;
    /** One attempt's deadline (connect, send, the receiver's answer). */
    timeoutMs: number;
    /** Networks (CIDR) a webhook may reach though they are loopback, private or internal (`DEN_WEBHOOK_ALLOW_NETWORKS`); none by default. */
    allowNetworks: string[];
    perOwner: number;
    /** Delivered and failed deliveries are kept this long for the delivery log. */
    keepMs: number;
  };
  /** Where cold-hibernated sandboxes' snapshots go. */
  store:
    | { kind: "local"; dir?: string }
    | { kind: "s3"; bucket: string; prefix: string; endpoint?: string; region?: string; accessKeyId?: string; secretAccessKey?: string };
  logLevel: string;
  /** Serve /metrics without a key (for a scraper on a private network). */
  metricsPublic: boolean;
  /**
   * Where the host agent runs: in this process (`local`, single-node mode: no network hop);
   * in this process behind a real HTTP hop on 127.0.0.1 (`loopback`, DEN_HOST_TRANSPORT=loopback:
   * every host call crosses the wire protocol); an in-memory host with no VM at all (`memory`,
   * DEN_HOST_TRANSPORT=memory: fast tests of the control plane; nothing outlives the process
   * but what it put in the store); or other processes (`remote`, DEN_HOST_AGENT_URL
   * + DEN_HOST_SECRET, or `den serve --host-agent URL`: one or more host agents, comma-separated
   * or the flag repeated, all with the one shared secret; this server runs no VM itself).
   */
  hostAgent: { kind: "local" } | { kind: "loopback" } | { kind: "memory" } | {
    kind: "remote"; urls: string[]; secret: string;
    /** `registered` was given: hosts register themselves, and share template versions through the store. */
    registered?: boolean;
  };
  /**
   * Registered host agents (`den host run --control-plane URL`, taken whenever host agents
   * are remote; `--host-agent registered` for none but those): a heartbeat's lease, and the
   * grace after it before a silent host's running and warm sandboxes are declared lost.
   */
  hostLeases: { leaseMs: number; graceMs: number };
  /** The E2B-compatible API: its envd listener (a port of its own: guest bytes never share the API's origin). */
  e2b: {
    /** null: no envd listener (DEN_ENVD_PORT=off); 0: a free port. */
    envdPort: number | null;
    envdHost: string;
    /** E2B's sandbox domain (`getHost(port)` = `<port>-<id>.<domain>`); default: the ports domain with the API's port. */
    sandboxDomain?: string;
    /** The size of a volume made through E2B's `Volume.create` (it names none), MiB; /v1 grows it. */
    volumeMb: number;
    /** How long a volume content token (E2B's `VolumeAndToken.token`) opens its volume; `Volume.connect` gets a new one. */
    volumeTokenSeconds: number;
  };
}

function hostAgentConfig(list: string | undefined, env: NodeJS.ProcessEnv): ServerConfig["hostAgent"] {
  const given = (list ?? "").split(",").map((u) => u.trim().replace(/\/+$/, "")).filter(Boolean);
  // `registered`: no host is given here; they register themselves (and may be given beside it).
  const urls = given.filter((u) => u !== "registered");
  if (given.length) {
    for (const url of urls) if (!/^https?:\/\/[^/]/.test(url)) throw new Error(`a host agent URL must be http(s)://..., got ${url}`);
    if (new Set(urls).size !== urls.length) throw new Error(`a host agent is given twice: ${urls.join(", ")}`);
    const secret = env.DEN_HOST_SECRET;
    if (!secret) throw new Error("remote host agents (DEN_HOST_AGENT_URL, --host-agent) need their shared secret in DEN_HOST_SECRET");
    return { kind: "remote", urls, secret, registered: given.includes("registered") };
  }
  const transport = env.DEN_HOST_TRANSPORT ?? "local";
  if (transport !== "local" && transport !== "loopback" && transport !== "memory") throw new Error(`DEN_HOST_TRANSPORT must be local, loopback or memory, got ${transport}`);
  return { kind: transport };
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

export function loadConfig(flags: Partial<{ port: string; host: string; dataDir: string; hostAgent: string; envdPort: string }> = {}, env = process.env): ServerConfig {
  const onIdle = env.DEN_ON_IDLE ?? "hibernate";
  if (onIdle !== "hibernate" && onIdle !== "destroy") throw new Error(`DEN_ON_IDLE must be hibernate or destroy, got ${onIdle}`);
  const hostAgent = hostAgentConfig(flags.hostAgent ?? env.DEN_HOST_AGENT_URL, env);
  return {
    port: num(flags.port ?? env.DEN_PORT, 8787),
    host: flags.host ?? env.DEN_HOST ?? "127.0.0.1",
    dataDir: flags.dataDir ?? env.DEN_DATA_DIR ?? defaultDataDir(),
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
    e2b: {
      envdPort: (flags.envdPort ?? env.DEN_ENVD_PORT) === "off" ? null : num(flags.envdPort ?? env.DEN_ENVD_PORT, 49983),
      envdHost: env.DEN_ENVD_HOST ?? flags.host ?? env.DEN_HOST ?? "127.0.0.1",
      ...(env.DEN_E2B_DOMAIN ? { sandboxDomain: env.DEN_E2B_DOMAIN } : {}),
      volumeMb: num(env.DEN_E2B_VOLUME_MB, 5 * 1024),
      volumeTokenSeconds: num(env.DEN_E2B_VOLUME_TOKEN_SECONDS, 86_400),
    },
  };
}

/** DEN_BUILD_EGRESS: the network of a template build's RUN steps (`open`, the default: they fetch packages; or `none`). */
function egressOf(v: string | undefined): "open" | "none" {
  if (v === undefined || v === "" || v === "open") return "open";
  if (v === "none") return "none";
  throw new Error(`DEN_BUILD_EGRESS must be open or none, got ${JSON.stringify(v)}`);
}
