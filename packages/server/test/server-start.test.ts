// needs: memory host
/**
 * Starting `den serve`. Control-plane replicas started together, as the README promises they may be: on one
 * fresh Postgres database with one DEN_API_KEY, both come up and both take the key (the
 * key's insert raced: one replica died on the unique hash about one start in five). Each
 * round is a new database, so each is a deployment's first start. Postgres only (the
 * suite's Postgres pass): SQLite is one replica's database.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { MemoryHostAgent } from "@den/host-agent";
import { createServer } from "node:net";
import { checkUrls, loadConfig, openStore, startServer, urlList } from "../src/index.js";
import { ADMIN_KEY, client, ownDatabase } from "./helpers.js";

const ROUNDS = 20;
const postgres = process.env.DEN_DATABASE_URL?.startsWith("postgres");

describe("replicas started together", { skip: !postgres && "Postgres only (DEN_DATABASE_URL): SQLite is one replica's database" }, () => {
  test(`${ROUNDS} rounds of two replicas started at once on a new database with one DEN_API_KEY: both up, the key works through both`, async () => {
    for (let round = 1; round <= ROUNDS; round++) {
      const db = (await ownDatabase())!;
      const dirs = [0, 1].map(() => mkdtempSync(join(tmpdir(), "den-replica-")));
      const configs = dirs.map((dir) => loadConfig({ port: "0", dataDir: dir }, {
        DEN_API_KEY: ADMIN_KEY, DEN_DATABASE_URL: db.url, DEN_HOST_TRANSPORT: "memory", DEN_ENVD_PORT: "off", DEN_STORE_DIR: join(dirs[0]!, "store"),
      }));
      const hosts = await Promise.all(configs.map((c) => MemoryHostAgent.open({ store: openStore(c), capacity: c.capacity })));
      const started = await Promise.allSettled(configs.map((c, i) => startServer(c, { host: hosts[i]! })));
      try {
        const failed = started.flatMap((s) => (s.status === "rejected" ? [String((s.reason as Error).stack ?? s.reason)] : []));
        assert.deepEqual(failed, [], `round ${round}: a replica failed to start`);
        for (const s of started) {
          const r = await client((s as PromiseFulfilledResult<Awaited<ReturnType<typeof startServer>>>).value.url)("GET", "/v1/sandboxes");
          assert.equal(r.status, 200, `round ${round}: the key through ${(s as PromiseFulfilledResult<{ url: string }>).value.url}`);
        }
      } finally {
        for (const s of started) if (s.status === "fulfilled") await s.value.close();
        for (const h of hosts) await h.close();
        await db.drop();
        for (const d of dirs) rmSync(d, { recursive: true, force: true });
      }
    }
  });
});

describe("a start that cannot be", () => {
  test("envd's port taken (a second den serve on one machine): the start fails naming DEN_ENVD_PORT and --envd-port, and lets go of everything", async () => {
    const taken = createServer();
    await new Promise<void>((r) => taken.listen(0, "127.0.0.1", r));
    const port = (taken.address() as { port: number }).port;
    const dir = mkdtempSync(join(tmpdir(), "den-start-"));
    const config = loadConfig({ port: "0", dataDir: dir }, { DEN_API_KEY: ADMIN_KEY, DEN_HOST_TRANSPORT: "memory", DEN_ENVD_PORT: String(port) });
    const host = await MemoryHostAgent.open({ store: openStore(config), capacity: config.capacity });
    try {
      await assert.rejects(startServer(config, { host }), (e: Error) => {
        assert.match(e.message, new RegExp(`envd's port 127\\.0\\.0\\.1:${port} is in use`));
        assert.match(e.message, /DEN_ENVD_PORT or --envd-port/);
        return true;
      });
      // Nothing of the failed start holds on: the next start on the same data dir and database comes up.
      const ok = await startServer({ ...config, e2b: { ...config.e2b, envdPort: 0 } }, { host });
      await ok.close();
    } finally {
      await host.close();
      taken.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("the API's port taken: the start fails naming DEN_PORT and --port", async () => {
    const taken = createServer();
    await new Promise<void>((r) => taken.listen(0, "127.0.0.1", r));
    const port = (taken.address() as { port: number }).port;
    const dir = mkdtempSync(join(tmpdir(), "den-start-"));
    const config = loadConfig({ port: String(port), host: "127.0.0.1", dataDir: dir }, { DEN_API_KEY: ADMIN_KEY, DEN_HOST_TRANSPORT: "memory", DEN_ENVD_PORT: "off" });
    const host = await MemoryHostAgent.open({ store: openStore(config), capacity: config.capacity });
    try {
      await assert.rejects(startServer(config, { host }), /the API's port 127\.0\.0\.1:\d+ is in use .*DEN_PORT or --port/);
    } finally {
      await host.close();
      taken.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("lists of URLs (--host-agent, --control-plane and their variables)", () => {
  test("commas, spaces and repeated flags are all accepted; trailing slashes go; duplicates and non-URLs are refused", () => {
    assert.deepEqual(urlList("http://a:8787,http://b:8787/"), ["http://a:8787", "http://b:8787"]);
    assert.deepEqual(urlList("http://a:8787 http://b:8787"), ["http://a:8787", "http://b:8787"]);
    assert.deepEqual(urlList(["http://a:8787, http://b:8787", "http://c:8787"]), ["http://a:8787", "http://b:8787", "http://c:8787"]);
    assert.deepEqual(urlList(undefined), []);
    assert.throws(() => checkUrls(["http://a", "http://a"], "a control plane"), /a control plane is given twice/);
    assert.throws(() => checkUrls(["a:8787"], "a control plane"), /a control plane URL must be http\(s\)/);
    // --host-agent too: two URLs separated by a space are two hosts.
    const cfg = loadConfig({ hostAgent: "https://10.0.0.1:8788 https://10.0.0.2:8788", dataDir: "/tmp" }, { DEN_TLS_DIR: "/etc/den/tls" });
    assert.deepEqual(cfg.hostAgent.kind === "remote" && cfg.hostAgent.urls, ["https://10.0.0.1:8788", "https://10.0.0.2:8788"]);
  });
});
