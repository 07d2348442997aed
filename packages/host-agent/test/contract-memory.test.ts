// needs: memory host, no database
/**
 * The host contract (test/contract/suite.ts) on the in-memory host: the same steps the
 * real hosts pass in contract-real.test.ts, in well under a second.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LocalDirStore } from "@den/store";
import { MemoryHostAgent } from "../src/index.js";
import { hostContract } from "./contract/suite.js";

hostContract("memory", async () => {
  const dir = mkdtempSync(join(tmpdir(), "den-contract-store-"));
  const store = new LocalDirStore(dir);
  const host = await MemoryHostAgent.open({ store });
  return {
    host,
    store,
    registered: () => host,
    async restart() {
      await host.restart();
      return host;
    },
    async close() {
      host.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
});
