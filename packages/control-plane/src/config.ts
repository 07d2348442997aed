import type { host } from "@den/protocol";
import type { Prices } from "./usage.js";
import type { NetworkLimits } from "./network.js";
import type { DatabaseConfig } from "./db/db.js";

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
    /** At once per owner (per control-plane process): buffered execs (each holds its output), exec streams and PTYs (envd's process streams too), event follows (and envd's directory watches). */
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
  capacity: host.Capacity;
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
   * but what it put in the store); or other processes (`remote`, DEN_HOST_AGENT_URL or `den
   * serve --host-agent URL`: one or more host agents, comma-separated or the flag repeated,
   * reached over mutual TLS (`fleet`); this server runs no VM itself).
   */
  hostAgent: { kind: "local" } | { kind: "loopback" } | { kind: "memory" } | {
    kind: "remote"; urls: string[];
    /** `registered` was given: hosts register themselves, and share template versions through the store. */
    registered?: boolean;
  };
  /**
   * Registered host agents (`den host run --control-plane URL`, taken whenever host agents
   * are remote; `--host-agent registered` for none but those): a heartbeat's lease, and the
   * grace after it before a silent host's running and warm sandboxes are declared lost.
   */
  hostLeases: { leaseMs: number; graceMs: number };
  /**
   * The deployment's certificate authority (DEN_CA_DIR: `ca.crt` and `ca.key`, from `den ca
   * init` or the operator's own): with it, admins make join tokens and machines redeem them for
   * certificates (see Enrollment); without it, both are refused with `ca_not_configured`.
   * `certTtlHours`: how long a machine's certificate lives (DEN_CERT_TTL_HOURS, default 24).
   */
  ca?: { dir: string; certTtlHours: number };
  /**
   * Mutual TLS with the hosts (whenever they are remote; DEN_TLS_DIR or DEN_CA_DIR is then required): this replica's
   * identity (`tlsDir`, files as writeIdentityFiles writes them; without it, a certificate it
   * issues itself from the CA at start, kept in memory), and the host-facing listener's port and
   * address (DEN_FLEET_PORT, default 8789; DEN_FLEET_HOST, default DEN_HOST). Absent when the
   * host agent is in this process.
   */
  /**
   * `tlsDir`: this replica's identity files; `join`: a one-time token it joins with when the dir
   * holds none yet, through `peers` (other replicas' hosts' listeners, https), which also renew
   * its certificate when it holds no CA.
   */
  fleet?: { tlsDir?: string; port: number; host: string; join?: string; peers: string[] };
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
