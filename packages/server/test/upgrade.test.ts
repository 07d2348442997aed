// needs: one VM (a template built in a data dir of its own)
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { loadConfig, startServer, type RunningServer } from "../src/index.js";
import { migrations } from "@den/control-plane";
import { ADMIN_KEY, CLI, client } from "./helpers.js";

const UNDONE = ["009_operations", "010_sandbox_hosts", "011_deadlines", "012_hosts", "013_replicas", "014_template_versions", "015_stored_templates", "016_webhooks", "017_volumes", "018_volume_moves", "019_volume_move_owner", "020_volume_used_at", "021_template_run", "022_template_builds", "023_machine_identity", "024_stored_digests"];

/**
 * A data dir as the version before operations and deployment ids left it: its database
 * at migration 008 (no operations, no catalog of stored snapshots, no deployment id, no host per sandbox) and
 * its stored snapshots at `snapshots/<id>/`. The snapshot formats did not change, so this
 * version writes them and the test moves them back to where the earlier one kept them.
 */
function downgrade(dir: string): void {
  const later = Object.keys(migrations("sqlite")).filter((m) => m > "008~");
  assert.deepEqual(later, UNDONE, "downgrade() undoes every migration after 008: add the new one's undo here");
  const store = join(dir, "store");
  const db = new Database(join(dir, "den.db"));
  try {
    for (const r of db.prepare("SELECT id, key FROM stored_snapshots WHERE state = 'complete'").all() as Array<{ id: string; key: string }>) {
      const legacy = `snapshots/${r.id}`;
      mkdirSync(join(store, "snapshots"), { recursive: true });
      renameSync(join(store, r.key), join(store, legacy));
      const manifest = join(store, legacy, "store-manifest.json");
      const m = JSON.parse(readFileSync(manifest, "utf8")) as { files: Record<string, { key: string }> };
      for (const f of Object.values(m.files)) f.key = f.key.replace(`${r.key}/`, `${legacy}/`);
      writeFileSync(manifest, JSON.stringify(m, null, 2));
    }
    db.exec(`
      DROP TABLE operations; DROP TABLE stored_snapshots; DROP TABLE settings;
      DROP TABLE hosts; DROP TABLE replicas; DROP TABLE leases; DROP TABLE template_versions;
      DROP TABLE webhooks; DROP TABLE webhook_deliveries;
      DROP TABLE volumes; DROP TABLE volume_mounts; -- and 018-020's columns with them
      ALTER TABLE sandboxes DROP COLUMN generation; ALTER TABLE sandboxes DROP COLUMN op_id;
      ALTER TABLE sandboxes DROP COLUMN op_kind; ALTER TABLE sandboxes DROP COLUMN op_since;
      ALTER TABLE sandboxes DROP COLUMN host_id;
      DROP INDEX sandboxes_owner_created;
      ALTER TABLE sandboxes DROP COLUMN deadline_mode; ALTER TABLE sandboxes DROP COLUMN on_deadline;
      ALTER TABLE sandboxes DROP COLUMN run_timeout_seconds; ALTER TABLE sandboxes DROP COLUMN auto_resume;
      ALTER TABLE sandboxes DROP COLUMN surface; ALTER TABLE sandboxes DROP COLUMN public_ports;
      ALTER TABLE sandboxes DROP COLUMN defaults; ALTER TABLE templates DROP COLUMN run;
      DROP TABLE template_builds; DROP TABLE template_build_logs;
      DROP TABLE join_tokens; DROP TABLE machine_certs;
      DELETE FROM kysely_migration WHERE name IN (${UNDONE.map((m) => `'${m}'`).join(", ")});`);
  } finally {
    db.close();
  }
}

describe("a data dir of the version before durable operations", () => {
  const dir = mkdtempSync(join(tmpdir(), "den-upgrade-"));
  const start = (): Promise<RunningServer> => startServer(loadConfig({ port: "0", dataDir: dir }, { ...process.env, DEN_API_KEY: ADMIN_KEY, DEN_STORE_GC_GRACE_SECONDS: "0", DEN_ENVD_PORT: "0" }));
  before(() => {
    execFileSync(process.execPath, [CLI, "template", "build", "base"], { env: { ...process.env, DEN_DATA_DIR: dir }, stdio: "ignore" });
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  test("its cold sandboxes wake and its checkpoints restore after the upgrade; its objects are deleted only when released", async () => {
    let server = await start();
    let api = client(server.url);
    const cold = (await api("POST", "/v1/sandboxes", { persistent: true })).body.id;
    await api("POST", `/v1/sandboxes/${cold}/exec`, { cmd: "echo old-cold > /root/mark; nohup sleep 100000 >/dev/null 2>&1 &" });
    assert.equal((await api("POST", `/v1/sandboxes/${cold}/hibernate`, { mode: "cold" })).status, 200);
    const src = (await api("POST", "/v1/sandboxes", {})).body.id;
    await api("POST", `/v1/sandboxes/${src}/exec`, { cmd: "echo old-cp > /root/mark" });
    const cp = (await api("POST", `/v1/sandboxes/${src}/checkpoints`, {})).body.id;
    await api("DELETE", `/v1/sandboxes/${src}`);
    const oldDeployment = server.cp.deployment;
    await server.close();
    downgrade(dir);
    // Someone else's snapshot in the old shared layout: never ours to sweep.
    const foreign = join(dir, "store", "snapshots", "snap_aaaaaaaaaaaaaaaa");
    mkdirSync(foreign, { recursive: true });
    writeFileSync(join(foreign, "state.bin.gz"), "not ours");

    server = await start();
    api = client(server.url);
    try {
      assert.notEqual(server.cp.deployment, oldDeployment, "the upgraded database got a deployment id of its own");
      const row = (await api("GET", `/v1/sandboxes/${cold}`)).body;
      assert.equal(row.hibernate_mode, "cold");
      const woke = await api("POST", `/v1/sandboxes/${cold}/exec`, { cmd: "cat /root/mark; pgrep -c sleep" });
      assert.equal(woke.body.stdout, "old-cold\n1\n", woke.text);
      const restored = await api("POST", `/v1/checkpoints/${cp}/restore`, {});
      assert.equal(restored.status, 201, restored.text);
      assert.equal((await api("POST", `/v1/sandboxes/${restored.body.id}/exec`, { cmd: "cat /root/mark" })).body.stdout, "old-cp\n");
      // Released (the wake released the cold copy; now the checkpoint), then collected.
      assert.equal((await api("DELETE", `/v1/checkpoints/${cp}`)).status, 204);
      await server.cp.gc.collect();
      const snapshots = join(dir, "store", "snapshots");
      const left = readdirSync(snapshots).filter((d) => readdirSync(join(snapshots, d)).length > 0);
      assert.deepEqual(left, ["snap_aaaaaaaaaaaaaaaa"], "only the foreign snapshot is left in the old layout");
      assert.ok(existsSync(join(foreign, "state.bin.gz")));
      for (const id of [cold, restored.body.id]) await api("DELETE", `/v1/sandboxes/${id}`);
    } finally {
      await server.close();
    }
  });
});
