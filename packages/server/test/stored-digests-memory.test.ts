// needs: memory host
/**
 * Stored snapshots checked against what their upload recorded before anything reads them
 * (issue #37: the digests live in the database with the snapshot's row, the store's manifest
 * is a copy), through the API on the in-memory host: the row records what the host put; a
 * wake or a restore from a copy tampered with in the store is refused with 422
 * `snapshot_corrupt` and changes nothing (the sandbox stays hibernated, its row and its stored
 * objects as they were), and works once the copy is whole again; a row from before digests
 * were recorded goes by the store's manifest, whose every field is still checked. A template
 * version shared through the store (registered hosts) is pulled by a host only as the digests
 * its publish recorded say. (The real host's path, QEMU included: the host contract suite,
 * test/contract in @den/host-agent.)
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { join } from "node:path";
import { gunzipSync, gzipSync } from "node:zlib";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { MemoryHostAgent, Registrar, startHostServer, type RunningHostServer } from "@den/host-agent";
import { issueMachine } from "@den/pki";
import { LocalDirStore, STORE_MANIFEST } from "@den/store";
import { loadConfig, startServer, type RunningServer } from "../src/index.js";
import { ADMIN_KEY, client, fleetEnv, freePort, memoryFixture, ownDatabase, sandboxCalls, testCa, waitFor } from "./helpers.js";

const sha256 = (b: Buffer) => createHash("sha256").update(b).digest("hex");

describe("stored snapshots are checked against the digests their rows record", () => {
  const m = memoryFixture();
  const store = () => new LocalDirStore(join(m.dataDir, "store"));
  const calls = () => sandboxCalls(m.api);

  /** Every object of a stored copy, to compare with later and to put back. */
  async function objectsOf(key: string): Promise<Map<string, Buffer>> {
    const s = store();
    return new Map(await Promise.all((await s.list(`${key}/`)).map(async (o) => [o.key, await s.getBytes(o.key)] as const)));
  }
  async function putBack(objects: Map<string, Buffer>): Promise<void> {
    for (const [k, b] of objects) await store().putBytes(k, b);
  }
  async function flipStateByte(key: string): Promise<void> {
    const manifest = JSON.parse((await store().getBytes(`${key}/${STORE_MANIFEST}`)).toString()) as { files: Record<string, { key: string }> };
    const obj = Object.values(manifest.files)[0]!.key;
    const b = await store().getBytes(obj);
    b[b.length >> 1] = b[b.length >> 1]! ^ 0x01;
    await store().putBytes(obj, b);
  }
  async function nameTemplate(key: string, name: string): Promise<void> {
    const manifest = JSON.parse((await store().getBytes(`${key}/${STORE_MANIFEST}`)).toString()) as { snapshot: { template: { name: string } } };
    manifest.snapshot.template.name = name;
    await store().putBytes(`${key}/${STORE_MANIFEST}`, Buffer.from(JSON.stringify(manifest, null, 2)));
  }
  /** Its (gzip) object compressed again: the same content, other bytes, the manifest made to match. Only the row's record tells. */
  async function recompress(key: string): Promise<void> {
    const manifest = JSON.parse((await store().getBytes(`${key}/${STORE_MANIFEST}`)).toString()) as { files: Record<string, { key: string; size: number; sha256: string }> };
    const obj = Object.values(manifest.files)[0]!;
    const again = gzipSync(gunzipSync(await store().getBytes(obj.key)), { level: 9 });
    await store().putBytes(obj.key, again);
    Object.assign(obj, { size: again.length, sha256: sha256(again) });
    await store().putBytes(`${key}/${STORE_MANIFEST}`, Buffer.from(JSON.stringify(manifest, null, 2)));
  }
  /** A cold sandbox holding a file, and its stored copy's row. */
  async function coldSandbox() {
    const { create, exec } = calls();
    const id = await create();
    await exec(id, "echo kept > /workspace/f");
    const h = await m.api("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "cold" });
    assert.equal(h.status, 200, h.text);
    const snapshot = (await m.server.cp.store.sandboxes.get(id))!.hibernate_snapshot!;
    return { id, row: (await m.server.cp.store.snapshots.get(snapshot))! };
  }
  /** A wake (by an exec) refused as corrupt, and the sandbox, its row and its stored copy left as they were. */
  async function wakeRefused(id: string, why: string): Promise<void> {
    const before = await m.server.cp.store.sandboxes.get(id);
    const snap = await m.server.cp.store.snapshots.get(before!.hibernate_snapshot!);
    const objects = await objectsOf(snap!.key);
    const r = await m.api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "cat /workspace/f" });
    assert.equal(r.status, 422, `${why}: ${r.text}`);
    assert.equal(r.body.error.code, "snapshot_corrupt", why);
    const s = (await m.api("GET", `/v1/sandboxes/${id}`)).body;
    assert.deepEqual([s.state, s.hibernate_mode], ["hibernated", "cold"], `${why}: it stays hibernated`);
    const after = (await m.server.cp.store.sandboxes.get(id))!;
    assert.equal(after.hibernate_snapshot, before!.hibernate_snapshot, why);
    assert.deepEqual(await m.server.cp.store.snapshots.get(snap!.id), snap, `${why}: its stored copy's row as it was`);
    assert.deepEqual(await objectsOf(snap!.key), objects, `${why}: nothing of its stored copy lost`);
    assert.ok(!m.host.sandboxes().some((v) => v.id === id && (v.state === "running" || v.state === "paused")), `${why}: no VM of the try`);
  }

  test("a cold sandbox's row records what its host put; a wake from a tampered copy is refused and changes nothing; whole again, it wakes", async () => {
    const { id, row } = await coldSandbox();
    // The record is of the bytes in the store (the host hashed them on their way up).
    assert.ok(row.digests, "digests recorded with the row");
    const digests = JSON.parse(row.digests) as { manifest: { size: number; sha256: string }; files: Record<string, { size: number; sha256: string }> };
    const manifest = await store().getBytes(`${row.key}/${STORE_MANIFEST}`);
    assert.deepEqual(digests.manifest, { size: manifest.length, sha256: sha256(manifest) });
    for (const [name, o] of Object.entries((JSON.parse(manifest.toString()) as { files: Record<string, { key: string }> }).files)) {
      const b = await store().getBytes(o.key);
      assert.deepEqual(digests.files[name], { size: b.length, sha256: sha256(b) });
    }
    const whole = await objectsOf(row.key);

    await flipStateByte(row.key);
    await wakeRefused(id, "one byte of its state");
    await putBack(whole);
    await nameTemplate(row.key, "../snapshots");
    await wakeRefused(id, "its manifest naming ../snapshots");
    await putBack(whole);
    await recompress(row.key);
    await wakeRefused(id, "a copy whole in itself but not the one put");
    await putBack(whole);
    assert.equal(await calls().exec(id, "cat /workspace/f"), "kept\n", "whole again, it wakes with its files");
  });

  test("a row from before digests were recorded wakes by the store's manifest, every field of it checked", async () => {
    const { id, row } = await coldSandbox();
    await m.server.cp.store.db.updateTable("stored_snapshots").set({ digests: null }).where("id", "=", row.id).execute();
    const whole = await objectsOf(row.key);
    await nameTemplate(row.key, "../snapshots");
    await wakeRefused(id, "its manifest naming ../snapshots, no digests recorded");
    await putBack(whole);
    assert.equal(await calls().exec(id, "cat /workspace/f"), "kept\n");
  });

  test("a checkpoint's restore from a tampered copy is refused, no sandbox made; whole again, it restores", async () => {
    const { create, exec } = calls();
    const src = await create();
    await exec(src, "echo checkpointed > /workspace/f");
    const cp = await m.api("POST", `/v1/sandboxes/${src}/checkpoints`, {});
    assert.equal(cp.status, 201, cp.text);
    const row = (await m.server.cp.store.snapshots.get(cp.body.id))!;
    assert.ok(row.digests, "digests recorded with the checkpoint's row");
    const whole = await objectsOf(row.key);
    // (A refused restore is recorded as a sandbox in `error`, with no VM.)
    const live = async () => ((await m.api("GET", "/v1/sandboxes?limit=200")).body.sandboxes as Array<{ id: string; state: string }>).filter((s) => s.state !== "error").map((s) => s.id).sort();
    const vms = () => m.host.sandboxes().filter((v) => v.state === "running" || v.state === "paused").map((v) => v.id).sort();
    const before = { live: await live(), vms: vms() };
    await recompress(row.key);
    const refused = await m.api("POST", `/v1/checkpoints/${cp.body.id}/restore`, {});
    assert.equal(refused.status, 422, refused.text);
    assert.equal(refused.body.error.code, "snapshot_corrupt");
    assert.deepEqual({ live: await live(), vms: vms() }, before, "no sandbox or VM of the try");
    assert.deepEqual(await m.server.cp.store.snapshots.get(row.id), row, "the checkpoint's row as it was");
    await putBack(whole);
    const restored = await m.api("POST", `/v1/checkpoints/${cp.body.id}/restore`, {});
    assert.equal(restored.status, 201, restored.text);
    assert.equal(await exec(restored.body.id, "cat /workspace/f"), "checkpointed\n");
  });
});

describe("a template version shared through the store is installed by a host only as its publish recorded", () => {
  const dir = mkdtempSync(join(tmpdir(), "den-digests-fleet-"));
  const objects = new LocalDirStore(join(dir, "store"));
  const hosts: Array<{ agent: MemoryHostAgent; server: RunningHostServer; registrar: Registrar }> = [];
  let server: RunningServer;
  let api: ReturnType<typeof client>;
  let db: Awaited<ReturnType<typeof ownDatabase>>;

  /** A memory host of the fleet: its /host/v1 over mutual TLS, registered with the control plane. */
  async function join_(): Promise<MemoryHostAgent> {
    const agent = await MemoryHostAgent.open({ store: objects });
    const tls = await issueMachine((await testCa()).ca, { kind: "host", id: agent.instance }, { ttlHours: 1 });
    const hs = await startHostServer(agent, { tls, port: 0, host: "127.0.0.1" });
    const registrar = new Registrar(agent, { controlPlanes: [server.fleetUrl!], link: { tls, peer: { kind: "control-plane" } }, address: hs.url, intervalMs: 200 });
    hosts.push({ agent, server: hs, registrar });
    await registrar.start();
    await waitFor(`host ${agent.instance} up`, async () => (((await api("GET", "/v1/hosts")).body.hosts as Array<{ id: string; status: string }>).some((h) => h.id === agent.instance && h.status === "up") ? true : undefined));
    return agent;
  }

  test("its row records what the publishing host put; a host that lacks it refuses a tampered copy (422, nothing installed) and installs it whole", async () => {
    db = await ownDatabase();
    server = await startServer(loadConfig({ port: "0", dataDir: dir }, {
      DEN_API_KEY: ADMIN_KEY, DEN_HOST_AGENT_URL: "registered", DEN_STORE_DIR: join(dir, "store"), DEN_ENVD_PORT: "0", DEN_REAPER_INTERVAL_MS: "200",
      ...(await fleetEnv(await freePort())), ...(db ? { DEN_DATABASE_URL: db.url } : {}),
    }));
    api = client(server.url);
    try {
      const a = await join_();
      // (Its versions go up when it registers; one built meanwhile would wait for its next reconcile.)
      await waitFor("A's base in the store", async () => ((await server.cp.store.templates.versions()).some((r) => r.name === "base" && r.state === "complete") ? true : undefined));
      const built = await api("POST", "/v1/templates", { name: "shared", setup: ["echo from-a > /root/made"] });
      assert.equal(built.status, 201, built.text);
      const row = await waitFor("the version in the store", async () => (await server.cp.store.templates.versions()).find((r) => r.name === "shared" && r.state === "complete"));
      assert.ok(row.digests, "digests recorded with the version's row");
      const manifest = await objects.getBytes(`${row.key}/${STORE_MANIFEST}`);
      assert.equal((JSON.parse(row.digests) as { manifest: { sha256: string } }).manifest.sha256, sha256(manifest), "of the bytes in the store");
      const whole = new Map(await Promise.all((await objects.list(`${row.key}/`)).map(async (o) => [o.key, await objects.getBytes(o.key)] as const)));

      // B lacks it; A takes nothing new: a sandbox of it goes to B, which pulls it first.
      const b = await join_();
      assert.equal((await api("POST", `/v1/hosts/${a.instance}/drain`, {})).status, 202);
      const has = async () => (await b.templates.list()).some((t) => t.name === "shared");
      // The same content compressed again, the store's manifest made to match: whole in itself, not what was put.
      const m = JSON.parse(manifest.toString()) as { files: Record<string, { key: string; size: number; sha256: string }> };
      const obj = Object.values(m.files)[0]!;
      const again = gzipSync(gunzipSync(whole.get(obj.key)!), { level: 9 });
      await objects.putBytes(obj.key, again);
      Object.assign(obj, { size: again.length, sha256: sha256(again) });
      await objects.putBytes(`${row.key}/${STORE_MANIFEST}`, Buffer.from(JSON.stringify(m, null, 2)));
      const refused = await api("POST", "/v1/sandboxes", { template: "shared" });
      assert.equal(refused.status, 422, refused.text);
      assert.equal(refused.body.error.code, "snapshot_corrupt");
      assert.equal(await has(), false, "nothing installed");
      for (const [k, v] of whole) await objects.putBytes(k, v);
      const made = await api("POST", "/v1/sandboxes", { template: "shared" });
      assert.equal(made.status, 201, made.text);
      assert.equal((await server.cp.store.sandboxes.get(made.body.id))!.host_id, b.instance);
      assert.ok(await has(), "installed as its digests say");
      const out = await api("POST", `/v1/sandboxes/${made.body.id}/exec`, { cmd: "cat /root/made" });
      assert.equal(out.body.stdout, "from-a\n", out.text);
    } finally {
      for (const h of hosts) {
        h.registrar.stop();
        await h.server.close();
        h.agent.close();
      }
      await server.close();
      await db?.drop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
