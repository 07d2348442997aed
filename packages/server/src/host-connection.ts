import { randomBytes } from "node:crypto";
import type { HostAgent } from "@den/protocol";
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
 * 127.0.0.1 with a random secret and reached through HttpHostAgent, so every call crosses
 * the real wire (the suite runs this way too). `memory`: a MemoryHostAgent in this process
 * (no QEMU: its VMs and local state kept in the data dir's memory-host.json, so a `kill -9`
 * and a new start find them as a real host's QEMUs and files would be found; its snapshots
 * go to `objects`), run as the single-node one is. `remote`: one or more `den host run`
 * elsewhere (each must answer now: a typo in the list should stop the start, not strand
 * sandboxes); this process opens no runtime and takes no lock on the VMs' data dir.
 */
export async function connectHost(config: ServerConfig, objects: ObjectStore, log?: object | boolean, fleet?: FleetIdentity): Promise<HostConnection> {
  const where = config.hostAgent;
  if (where.kind === "remote") {
    const hosts: HttpHostAgent[] = [];
    try {
      // Over mutual TLS a configured host is any host of the CA (its id is learned from it).
      for (const url of where.urls) hosts.push(await HttpHostAgent.connect(url, fleet ? { tls: fleet.tls, peer: { kind: "host" } } : { secret: where.secret! }));
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
    const secret = randomBytes(32).toString("base64url");
    const server = await startHostServer(local, { secret, port: 0, host: "127.0.0.1", ...(log !== undefined ? { logger: log } : {}) });
    const host = await HttpHostAgent.connect(server.url, { secret });
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
