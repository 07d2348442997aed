// needs: memory host, s3rver, SQLite
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import S3rver from "s3rver";
import { S3Store } from "@den/store";
import { loadConfig, startServer, type RunningServer } from "../src/index.js";
import { ADMIN_KEY, client } from "./helpers.js";

/**
 * Two deployments (two data dirs, two databases) on one bucket with the default prefix:
 * each one's garbage collector (grace 0, run at every start) must leave the other's
 * cold sandboxes and checkpoints alone. The collector is the control plane's: the
 * deployments run on the in-memory host (each keeps its VMs in its data dir across its
 * restarts, its snapshots in the bucket); cold.test and the fleet store real VMs' in S3.
 */
describe("two deployments share one S3 bucket", () => {
  let s3: S3rver;
  let s3dir = "";
  let env: Record<string, string> = {};
  const dirs = [mkdtempSync(join(tmpdir(), "den-one-")), mkdtempSync(join(tmpdir(), "den-other-"))];

  before(async () => {
    s3dir = mkdtempSync(join(tmpdir(), "den-s3-"));
    s3 = new S3rver({ port: 0, address: "127.0.0.1", silent: true, directory: s3dir, configureBuckets: [{ name: "shared" }] });
    const { port } = await s3.run();
    env = { DEN_STORE: "s3", DEN_S3_BUCKET: "shared", DEN_S3_ENDPOINT: `http://127.0.0.1:${port}`, AWS_ACCESS_KEY_ID: "S3RVER", AWS_SECRET_ACCESS_KEY: "S3RVER" };
  });
  after(async () => {
    await s3?.close();
    rmSync(s3dir, { recursive: true, force: true });
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  const start = (dir: string): Promise<RunningServer> =>
    startServer(loadConfig({ port: "0", dataDir: dir }, { ...process.env, DEN_DATABASE_URL: "", DEN_HOST_TRANSPORT: "memory", DEN_API_KEY: ADMIN_KEY, DEN_STORE_GC_GRACE_SECONDS: "0", DEN_ENVD_PORT: "0", ...env }));

  test("each restarts three times with cold sandboxes and checkpoints of its own: nothing of either is deleted", async () => {
    const made: Array<{ dir: string; cold: string; checkpoint: string; deployment: string }> = [];
    for (const [i, dir] of dirs.entries()) {
      const server = await start(dir);
      const api = client(server.url);
      try {
        const cold = (await api("POST", "/v1/sandboxes", { persistent: true })).body.id;
        await api("POST", `/v1/sandboxes/${cold}/exec`, { cmd: `echo cold-${i} > /root/mark` });
        const src = (await api("POST", "/v1/sandboxes", {})).body.id;
        await api("POST", `/v1/sandboxes/${src}/exec`, { cmd: `echo cp-${i} > /root/mark` });
        const cp = await api("POST", `/v1/sandboxes/${src}/checkpoints`, {});
        assert.equal(cp.status, 201, cp.text);
        await api("DELETE", `/v1/sandboxes/${src}`);
        assert.equal((await api("POST", `/v1/sandboxes/${cold}/hibernate`, { mode: "cold" })).status, 200);
        made.push({ dir, cold, checkpoint: cp.body.id, deployment: server.cp.deployment });
      } finally {
        await server.close();
      }
    }
    assert.notEqual(made[0]!.deployment, made[1]!.deployment, "each deployment has its own id");
    for (let round = 0; round < 3; round++) {
      for (const dir of dirs) await (await start(dir)).close();
    }
    const bucket = new S3Store({ bucket: "shared", prefix: "den/", forcePathStyle: true, endpoint: env.DEN_S3_ENDPOINT!, accessKeyId: "S3RVER", secretAccessKey: "S3RVER" });
    for (const m of made) {
      const manifests = (await bucket.list(`${m.deployment}/snapshots/`)).filter((o) => o.key.endsWith("/store-manifest.json")).map((o) => o.key);
      assert.equal(manifests.length, 2, `deployment ${m.deployment} still stores its cold sandbox and its checkpoint: ${manifests.join(", ")}`);
      assert.ok(manifests.some((k) => k.includes(`/snapshots/${m.checkpoint}/`)), "its checkpoint is among them");
    }
    bucket.close();
    for (const [i, m] of made.entries()) {
      const server = await start(m.dir);
      const api = client(server.url);
      try {
        assert.equal((await api("POST", `/v1/sandboxes/${m.cold}/exec`, { cmd: "cat /root/mark" })).body.stdout, `cold-${i}\n`);
        const restored = await api("POST", `/v1/checkpoints/${m.checkpoint}/restore`, {});
        assert.equal(restored.status, 201, restored.text);
        assert.equal((await api("POST", `/v1/sandboxes/${restored.body.id}/exec`, { cmd: "cat /root/mark" })).body.stdout, `cp-${i}\n`);
        for (const id of [m.cold, restored.body.id]) await api("DELETE", `/v1/sandboxes/${id}`);
        await api("DELETE", `/v1/checkpoints/${m.checkpoint}`);
      } finally {
        await server.close();
      }
    }
  });
});
