// needs: one VM (two sandboxes), on the local host and on the HTTP host over loopback
/**
 * The host contract (test/contract/suite.ts) on the real hosts: LocalHostAgent over QEMU,
 * and the same behind its /host/v1 server through HttpHostAgent. The memory host runs the
 * same suite in contract-memory.test.ts.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { issueMachine, newCa } from "@den/pki";
import { LocalDirStore } from "@den/store";
import { HttpHostAgent, LocalHostAgent, defaultCapacity, startHostServer } from "../src/index.js";
import { hostContract, type ContractHost } from "./contract/suite.js";

function dataDir(): string {
  const d = process.env.DEN_DATA_DIR;
  if (!d) throw new Error("DEN_DATA_DIR is not set: run the suite with `npm test`");
  return d;
}

function storeDir(): { store: LocalDirStore; remove: () => void } {
  const dir = mkdtempSync(join(tmpdir(), "den-contract-store-"));
  return { store: new LocalDirStore(dir), remove: () => rmSync(dir, { recursive: true, force: true }) };
}

hostContract("local (QEMU)", async (): Promise<ContractHost> => {
  const { store, remove } = storeDir();
  let local = await LocalHostAgent.open(dataDir(), store, defaultCapacity());
  return {
    get host() {
      return local;
    },
    store,
    registered: () => local,
    async restart() {
      local.close();
      local = await LocalHostAgent.open(dataDir(), store, defaultCapacity());
      return local;
    },
    async close() {
      local.close();
      remove();
    },
  };
});

hostContract("HTTP over loopback (QEMU behind /host/v1)", async (): Promise<ContractHost> => {
  const { store, remove } = storeDir();
  // Mutual TLS as between machines: a CA made in memory, the host's certificate and a control plane's.
  const ca = await newCa();
  const cpTls = await issueMachine(ca, { kind: "control-plane", id: "rep_contract" }, { ttlHours: 1 });
  const up = async () => {
    const local = await LocalHostAgent.open(dataDir(), store, defaultCapacity());
    const tls = await issueMachine(ca, { kind: "host", id: local.instance }, { ttlHours: 1 });
    const server = await startHostServer(local, { tls, port: 0, host: "127.0.0.1" });
    return { local, server, client: await HttpHostAgent.connect(server.url, { tls: cpTls, peer: { kind: "host", id: local.instance } }) };
  };
  let hop = await up();
  const down = async () => {
    hop.client.close();
    await hop.server.close();
    hop.local.close();
  };
  return {
    get host() {
      return hop.client;
    },
    store,
    // The registrar runs beside the host agent: it registers the local agent.
    registered: () => hop.local,
    async restart() {
      await down();
      hop = await up();
      return hop.client;
    },
    async close() {
      await down();
      remove();
    },
  };
});
