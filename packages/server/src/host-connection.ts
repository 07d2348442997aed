import type { HostAgent } from "@den/protocol";
import { MAX_CERT_TTL_HOURS, issueMachine, newCa } from "@den/pki";
import type { ObjectStore } from "@den/store";
import { HttpHostAgent, LocalHostAgent, MemoryHostAgent, startHostServer } from "@den/host-agent";
import type { ServerConfig } from "./config.js";
import type { FleetIdentity } from "./fleet-identity.js";

/** The host agents the control plane talks to, and how to let go of them. */
export interface HostConnection {
  hosts: HostAgent[];
  close(): Promise<void>;
}

/**
 * Opens the host agent the config names. `local`: a LocalHostAgent in this process, called
 * directly (single-node mode, as before the split). `loopback`: the same, but served on
 * 127.0.0.1 over mutual TLS (a CA made in memory at start, a host certificate for the local
 * instance and a control plane's) and reached through HttpHostAgent, so every call crosses
 * the real wire, as between machines (the suite runs this way too). `memory`: a MemoryHostAgent in this process
 * (no QEMU: its VMs and local state kept in the data dir's memory-host.json, so a `kill -9`
 * and a new start find them as a real host's QEMUs and files would be found; its snapshots
 * go to `objects`), run as the single-node one is. `remote`: one or more `den host run`
 * elsewhere (each must answer now: a typo in the list should stop the start, not strand
 * sandboxes); this process opens no runtime and takes no lock on the VMs' data dir.
 */
/** The loopback link's certificates are not renewed: they outlive any process's run (the most pki issues). */
const LOOPBACK_CERT_HOURS = MAX_CERT_TTL_HOURS;

export async function connectHost(config: ServerConfig, objects: ObjectStore, log?: object | boolean, fleet?: FleetIdentity): Promise<HostConnection> {
  const where = config.hostAgent;
  if (where.kind === "remote") {
    const hosts: HttpHostAgent[] = [];
    try {
      // A listed host is any host of the CA at first: its id is learned from it, then its certificate must name that id.
      if (!fleet) throw new Error("remote host agents need this replica's identity (DEN_TLS_DIR or DEN_CA_DIR)");
      for (const url of where.urls) hosts.push(await HttpHostAgent.connect(url, { tls: fleet.tls, peer: { kind: "host" } }));
    } catch (e) {
      for (const h of hosts) h.close();
      throw e;
    }
    return { hosts, close: async () => hosts.forEach((h) => h.close()) };
  }
  if (where.kind === "memory") {
    const memory = await MemoryHostAgent.open({ store: objects, capacity: config.capacity, dataDir: config.dataDir });
    return { hosts: [memory], close: async () => memory.close() };
  }
  const local = await LocalHostAgent.open(config.dataDir, objects, config.capacity);
  if (where.kind === "local") return { hosts: [local], close: async () => local.close() };
  try {
    // Nothing of this CA outlives the process: the two ends trust it alone, and nobody else holds it.
    const ca = await newCa({ commonName: "Den loopback CA" });
    const [hostTls, cpTls] = await Promise.all([
      issueMachine(ca, { kind: "host", id: local.instance }, { ttlHours: LOOPBACK_CERT_HOURS }),
      issueMachine(ca, { kind: "control-plane", id: "loopback" }, { ttlHours: LOOPBACK_CERT_HOURS }),
    ]);
    const server = await startHostServer(local, { tls: hostTls, port: 0, host: "127.0.0.1", ...(log !== undefined ? { logger: log } : {}) });
    const host = await HttpHostAgent.connect(server.url, { tls: cpTls, peer: { kind: "host", id: local.instance } });
    return {
      hosts: [host],
      async close() {
        host.close();
        await server.close();
        await local.close();
      },
    };
  } catch (e) {
    local.close();
    throw e;
  }
}
