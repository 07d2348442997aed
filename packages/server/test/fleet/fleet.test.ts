// needs: many VMs, Postgres, s3rver
/**
 * Den on many machines, on one: one Postgres (DEN_DATABASE_URL, from scripts/with-postgres.sh),
 * one S3-compatible store (s3rver), two control-plane replicas and three host agents, each
 * with its own data dir and address pool, registered with both replicas.
 *
 * Host capacities differ on purpose (A small), so placement spreads and a fork can find its
 * parent's host full.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import type { ChildProcess } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cp as copy, mkdir, mkdtemp, rm } from "node:fs/promises";
import { join } from "node:path";
import pg from "pg";
import S3rver from "s3rver";
import WebSocket from "ws";
import { findInstanceProcesses } from "@den/runtime";
import { ADMIN_KEY, client, dataDir, fleetEnv, spawnHostAgent, spawnServer, stopProcess as stop, waitFor } from "../helpers.js";

const HOST_PORTS = { a: 19401, b: 19402, c: 19403 } as const;
const CP_PORTS = [19404, 19405] as const;
const CP_URLS = CP_PORTS.map((p) => `http://127.0.0.1:${p}`);
/** The replicas' hosts' listeners (mutual TLS, one CA): where the hosts register. */
const CP_FLEET_PORTS = [19406, 19407] as const;
const CP_FLEET_URLS = CP_FLEET_PORTS.map((p) => `https://127.0.0.1:${p}`);
type Name = keyof typeof HOST_PORTS;
interface HostEntry { id: string; url: string; status: string; lost_at: string | null; capacity: { memory_mb: number } | null; used: { memory_mb: number } | null }

describe("a fleet: two control planes, three hosts, one Postgres, one bucket", () => {
  const DB = process.env.DEN_DATABASE_URL;
  let s3: S3rver;
  let root: string;
  let env: Record<string, string>;
  const dirs = {} as Record<Name, string>;
  const procs = {} as Record<Name, ChildProcess | undefined>;
  const ids = {} as Record<Name, string>;
  const cps: Array<ChildProcess | undefined> = [undefined, undefined];
  const apis = CP_URLS.map((u) => client(u));
  let db: pg.Pool;
  let turn = 0;
  /** Alternates between the replicas that run: any one answers any request. */
  const api = (...a: Parameters<(typeof apis)[0]>) => {
    const i = turn++ % 2;
    return apis[cps[i] ? i : 1 - i]!(...a);
  };

  const hostEnv = (n: Name): Record<string, string> => ({
    ...env, DEN_DATA_DIR: dirs[n], DEN_NET_POOL: { a: "100.96.0.0/16", b: "100.97.0.0/16", c: "100.98.0.0/16" }[n],
    DEN_CONTROL_PLANE_URL: CP_FLEET_URLS.join(","), DEN_HOST_HEARTBEAT_MS: "300",
    // A is small: placement spreads by free memory, and a fork of one of its sandboxes finds it full.
    DEN_CAPACITY_MEMORY_MB: n === "a" ? "1536" : "5120",
  });
  const startHost = (n: Name) => spawnHostAgent(HOST_PORTS[n], hostEnv(n));
  const startCp = async (i: number) => spawnServer(CP_PORTS[i]!, {
    ...env, ...(await fleetEnv(CP_FLEET_PORTS[i]!)), DEN_DATA_DIR: join(root, `cp${i}`), DEN_HOST_AGENT_URL: "registered",
    DEN_HOST_LEASE_SECONDS: "2", DEN_HOST_LOST_GRACE_SECONDS: "2", DEN_STORE_GC_INTERVAL_SECONDS: "1", DEN_MAX_SANDBOXES_PER_OWNER: "100",
    // Unarmed until a test writes a point's name there.
    DEN_FAULT_POINT_FILE: faultFile(i),
  });
  const faultFile = (i: number) => join(root, `fault-cp${i}`);
  const hosts = async () => (await apis[0]!("GET", "/v1/hosts")).body.hosts as HostEntry[];
  const where = (id: string): Name | undefined => (Object.keys(ids) as Name[]).find((n) => findInstanceProcesses(ids[n]).has(id));
  const runsOn = (id: string, n: Name) => findInstanceProcesses(ids[n]).has(id);
  const state = async (id: string) => (await api("GET", `/v1/sandboxes/${id}`)).body as { state: string; state_reason: string; hibernate_mode: string | null };
  const exec = async (id: string, cmd: string) => {
    const r = await api("POST", `/v1/sandboxes/${id}/exec`, { cmd });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.exit_code, 0, `${cmd}: ${r.body.stderr}`);
    return r.body.stdout as string;
  };
  const create = async (body: Record<string, unknown> = {}) => {
    const r = await api("POST", "/v1/sandboxes", { persistent: true, ...body });
    assert.equal(r.status, 201, r.text);
    return r.body.id as string;
  };
  const destroyAll = async () => {
    for (const s of (await api("GET", "/v1/sandboxes?limit=200")).body.sandboxes ?? []) await api("DELETE", `/v1/sandboxes/${s.id}`);
  };

  before(async () => {
    if (!DB?.startsWith("postgres")) throw new Error("the fleet runs on Postgres: run it under scripts/with-postgres.sh (npm test does)");
    root = await mkdtemp("/tmp/den-fleet-");
    const s3dir = join(root, "s3");
    await mkdir(s3dir);
    s3 = new S3rver({ port: 0, address: "127.0.0.1", silent: true, directory: s3dir, configureBuckets: [{ name: "fleet" }] });
    const { port } = await s3.run();
    env = { DEN_STORE: "s3", DEN_S3_BUCKET: "fleet", DEN_S3_ENDPOINT: `http://127.0.0.1:${port}`, AWS_ACCESS_KEY_ID: "S3RVER", AWS_SECRET_ACCESS_KEY: "S3RVER" };
    dirs.a = dataDir();
    for (const n of ["b", "c"] as const) {
      dirs[n] = join(root, n);
      await copy(join(dataDir(), "templates", "base"), join(dirs[n], "templates", "base"), { recursive: true });
    }
    db = new pg.Pool({ connectionString: DB, max: 2 });
    cps[0] = await startCp(0);
    cps[1] = await startCp(1);
    [procs.a, procs.b, procs.c] = await Promise.all([startHost("a"), startHost("b"), startHost("c")]);
    const listed = await waitFor("three hosts registered", async () => {
      const l = (await hosts()).filter((h) => Object.values(HOST_PORTS).some((p) => h.url.endsWith(`:${p}`)));
      return l.length === 3 && l.every((h) => h.status === "up") ? l : undefined;
    }, 30_000);
    for (const n of ["a", "b", "c"] as const) ids[n] = listed.find((h) => h.url.endsWith(`:${HOST_PORTS[n]}`))!.id;
  });

  after(async () => {
    try {
      if (cps[1] || cps[0]) {
        await destroyAll();
        for (const c of (await api("GET", "/v1/checkpoints")).body?.checkpoints ?? []) await api("DELETE", `/v1/checkpoints/${c.id}`);
        for (const n of ["a", "b", "c"] as const) if (ids[n]) await api("DELETE", `/v1/hosts/${ids[n]}`);
      }
    } catch {
      /* the processes below go either way */
    }
    await Promise.all(cps.map((c) => stop(c, "SIGTERM")));
    await Promise.all((["a", "b", "c"] as const).map((n) => stop(procs[n], "SIGKILL")));
    for (const n of ["a", "b", "c"] as const) for (const pid of (ids[n] ? findInstanceProcesses(ids[n], { pooled: true }) : new Map()).values()) process.kill(pid, "SIGKILL");
    await db?.end();
    await s3?.close();
    await rm(root, { recursive: true, force: true });
  });

  test("18 sandboxes through both replicas spread over three hosts; cold, host A stopped for good: A's wake elsewhere with their process and files", async () => {
    const made: string[] = [];
    for (let i = 0; i < 18; i++) made.push(await create());
    const per = { a: 0, b: 0, c: 0 };
    for (const id of made) per[where(id)!]++;
    assert.ok(per.a > 0 && per.b > 0 && per.c > 0, `spread over three: ${JSON.stringify(per)}`);
    for (const id of made) await exec(id, `echo canary-${id} > /root/canary && (setsid sleep 100000 > /dev/null 2>&1 &) && echo ok`);

    // A fork whose parent's host has no room for its children (the fullest host, asked for
    // one child more than it has room for): they are placed on the others, through the store.
    const list = (await hosts()).filter((h) => Object.values(ids).includes(h.id));
    const free = (h: HostEntry) => h.capacity!.memory_mb - h.used!.memory_mb;
    const full = list.reduce((x, y) => (free(y) < free(x) ? y : x));
    const name = (Object.keys(ids) as Name[]).find((n) => ids[n] === full.id)!;
    const parent = made.find((id) => where(id) === name)!;
    const count = Math.floor(free(full) / 512) + 1;
    assert.ok(list.filter((h) => h !== full).reduce((n, h) => n + free(h), 0) >= count * 512, "the other hosts have room for the children");
    const fork = await api("POST", `/v1/sandboxes/${parent}/fork`, { count });
    assert.equal(fork.status, 201, fork.text);
    for (const child of fork.body.sandboxes as Array<{ id: string }>) {
      assert.notEqual(where(child.id), name, "the child lives on another host than its parent");
      assert.equal(await exec(child.id, "cat /root/canary; pgrep -x sleep > /dev/null && echo sleeping"), `canary-${parent}\nsleeping\n`);
      await api("DELETE", `/v1/sandboxes/${child.id}`);
    }

    for (const id of made) {
      const r = await api("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "cold" });
      assert.equal(r.status, 200, r.text);
    }
    assert.deepEqual(made.filter((id) => where(id) !== undefined), [], "no VM is left once all are cold");
    await stop(procs.a, "SIGTERM");
    procs.a = undefined;
    await waitFor("A's lease runs out", async () => ((await hosts()).find((h) => h.id === ids.a)?.status === "unreachable" ? true : undefined), 10_000);
    for (const id of made) {
      assert.equal(await exec(id, "cat /root/canary; pgrep -x sleep > /dev/null && echo sleeping"), `canary-${id}\nsleeping\n`);
      assert.ok(["b", "c"].includes(where(id)!), `${id} woke on B or C`);
    }
    await destroyAll();
  });

  test("kill -9 of host B with running sandboxes: lost after lease + grace, each recovered from its newest checkpoint on a live host; B back destroys its stale VMs", async () => {
    procs.a = await startHost("a");
    await waitFor("A is up again", async () => ((await hosts()).find((h) => h.id === ids.a)?.status === "up" ? true : undefined), 20_000);
    const made: string[] = [];
    for (let i = 0; i < 6; i++) made.push(await create());
    const onB = made.filter((id) => where(id) === "b");
    assert.ok(onB.length >= 1, `some on B: ${made.map(where).join(",")}`);
    for (const id of onB) {
      await exec(id, `echo saved-${id} > /root/saved`);
      assert.equal((await api("POST", `/v1/sandboxes/${id}/checkpoints`, {})).status, 201);
      await exec(id, "echo after-checkpoint > /root/later");
    }
    procs.b!.kill("SIGKILL");
    await new Promise((r) => procs.b!.once("exit", r));
    procs.b = undefined;
    const stale = [...findInstanceProcesses(ids.b).keys()];
    assert.deepEqual(stale.sort(), [...onB].sort(), "B's VMs outlive its agent");
    await waitFor("B's sandboxes are lost", async () => ((await Promise.all(onB.map(state))).every((s) => s.state === "lost" && s.state_reason === "host_lost") ? true : undefined), 20_000);
    for (const id of made.filter((x) => !onB.includes(x))) assert.equal((await state(id)).state, "running", "the other hosts' sandboxes are untouched");
    for (const id of onB) {
      const r = await api("POST", `/v1/sandboxes/${id}/recover`, {});
      assert.equal(r.status, 200, r.text);
      assert.ok(runsOn(id, "a") || runsOn(id, "c"), `${id} recovered on A or C`);
      // From its newest checkpoint: what came after it is not there.
      assert.equal(await exec(id, "cat /root/saved; test -e /root/later || echo no-later"), `saved-${id}\nno-later\n`);
    }
    procs.b = await startHost("b");
    await waitFor("B destroyed its stale VMs", async () => (findInstanceProcesses(ids.b).size === 0 ? true : undefined), 30_000);
    for (const id of onB) assert.ok((runsOn(id, "a") || runsOn(id, "c")) && !runsOn(id, "b"), "the recovered copy still runs, once");
    await destroyAll();
  });

  test("a sandbox on host C through either replica: exec, files, PTY and a port; a URL signed by one replica opens through the other", async () => {
    let id = "";
    for (let i = 0; i < 8 && !id; i++) {
      const x = await create();
      if (where(x) === "c") id = x;
    }
    assert.ok(id, "a sandbox landed on C");
    for (const [i, call] of apis.entries()) {
      const up = await call("PUT", `/v1/sandboxes/${id}/files?path=/root/via-${i}`, `written through replica ${i}`, { "content-type": "application/octet-stream" });
      assert.ok(up.status < 300, up.text);
    }
    for (const [i, call] of apis.entries()) {
      const r = await call("POST", `/v1/sandboxes/${id}/exec`, { cmd: "cat /root/via-0 /root/via-1" });
      assert.equal(r.body.stdout, "written through replica 0written through replica 1", `replica ${i}`);
    }
    // A PTY through replica 1.
    const ws = new WebSocket(`${CP_URLS[1]!.replace("http", "ws")}/v1/sandboxes/${id}/pty?rows=24&cols=80`, { headers: { authorization: `Bearer ${ADMIN_KEY}` } });
    let out = "";
    ws.on("message", (d: Buffer, binary: boolean) => { if (binary) out += d.toString(); });
    await new Promise((r, j) => { ws.once("open", r); ws.once("error", j); });
    ws.send(Buffer.from("echo pty-$((6*7))\n"));
    await waitFor("the PTY answers", async () => (/pty-42/.test(out) ? true : undefined), 20_000, 50);
    ws.close();
    // A port: signed by replica 0, opened through replica 1.
    await exec(id, "mkdir -p /srv && echo served > /srv/x.txt && (cd /srv && setsid python3 -m http.server 8000 > /dev/null 2>&1 &) && echo ok");
    await waitFor("the server listens", async () => ((await apis[0]!("GET", `/v1/sandboxes/${id}/ports`)).body.ports?.some((p: { port: number }) => p.port === 8000) ? true : undefined), 20_000);
    const signed = await apis[0]!("POST", `/v1/sandboxes/${id}/urls`, { port: 8000 });
    assert.equal(signed.status, 201, signed.text);
    const u = new URL(signed.body.path_url as string);
    const got = await fetch(`${CP_URLS[1]}${u.pathname}x.txt${u.search}`);
    assert.equal(got.status, 200);
    assert.equal(await got.text(), "served\n");
    const keyed = await fetch(`${CP_URLS[0]}/v1/sandboxes/${id}/ports/8000/x.txt`, { headers: { authorization: `Bearer ${ADMIN_KEY}` } });
    assert.equal(await keyed.text(), "served\n");
    await destroyAll();
  });

  test("kill -9 of a replica while reapers, GC and ten operations run: the other settles every operation; nothing is reaped or metered twice, nothing lost", async () => {
    // Which replica does the deployment's once-only work now: that is the one to kill.
    const holder = (await db.query("SELECT holder FROM leases WHERE name = 'reaper' AND until > $1", [Date.now()])).rows[0]?.holder as string | undefined;
    const replicaIds = (await db.query("SELECT id FROM replicas WHERE lease_until > $1 ORDER BY started_at", [Date.now()])).rows.map((r) => r.id as string);
    assert.equal(replicaIds.length, 2);
    const victim = holder ? replicaIds.indexOf(holder) : 0;
    const survivor = apis[1 - victim]!;
    const via = apis[victim]!;
    const made: string[] = [];
    for (let i = 0; i < 10; i++) {
      const r = await survivor("POST", "/v1/sandboxes", { persistent: i >= 3, ttl_seconds: i < 3 ? 8 : 3600 });
      assert.equal(r.status, 201, r.text);
      made.push(r.body.id);
      await survivor("POST", `/v1/sandboxes/${r.body.id}/exec`, { cmd: `echo keep-${r.body.id} > /root/keep` });
    }
    // Ten operations through the replica about to die: cold hibernates, checkpoints and a fork.
    const inFlight = made.slice(3).map((id, i) => via("POST", i % 3 === 0 ? `/v1/sandboxes/${id}/checkpoints` : i % 3 === 1 ? `/v1/sandboxes/${id}/hibernate` : `/v1/sandboxes/${id}/fork`, i % 3 === 1 ? { mode: "cold" } : i % 3 === 2 ? { count: 1 } : {}).catch(() => undefined));
    inFlight.push(...made.slice(0, 3).map((id) => via("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "cold" }).catch(() => undefined)));
    await waitFor("operations under way", async () => ((await db.query("SELECT count(*)::int AS n FROM operations WHERE status = 'pending'")).rows[0].n >= 3 ? true : undefined), 20_000, 20);
    cps[victim]!.kill("SIGKILL");
    await new Promise((r) => cps[victim]!.once("exit", r));
    cps[victim] = undefined;
    // What the dead replica left half done: its pending operations, as of its death.
    const orphans = (await db.query("SELECT id FROM operations WHERE status = 'pending' AND owner = $1", [replicaIds[victim]])).rows.map((r) => r.id as string);
    assert.ok(orphans.length >= 1, "the kill left operations of the dead replica pending");
    await Promise.all(inFlight);

    // Within its lease (10 s) plus a pass, the survivor has settled every operation of the dead one.
    await waitFor("no operation is left pending", async () => ((await db.query("SELECT count(*)::int AS n FROM operations WHERE status = 'pending'")).rows[0].n === 0 ? true : undefined), 60_000, 250);
    const settled = await db.query("SELECT id, owner, status FROM operations WHERE id = ANY($1)", [orphans]);
    for (const r of settled.rows) assert.equal(r.owner, replicaIds[1 - victim], `${r.id} (${r.status}) was taken over by the survivor`);
    // The three with an 8 s TTL are reaped once each, by whichever replica held the reaper then.
    await waitFor("the TTL reaper ran", async () => ((await Promise.all(made.slice(0, 3).map(state))).every((s) => s.state === "destroyed") ? true : undefined), 60_000);
    const reaps = await db.query("SELECT sandbox_id, count(*)::int AS n FROM operations WHERE kind = 'destroy' AND reason = 'ttl' AND status = 'done' GROUP BY sandbox_id");
    for (const r of reaps.rows) assert.equal(r.n, 1, `${r.sandbox_id} reaped once`);
    assert.equal(reaps.rows.filter((r) => made.includes(r.sandbox_id)).length, 3);
    // No stretch of any sandbox's life is billed twice: its segments never overlap.
    const segs = await db.query("SELECT sandbox_id, state, start_ms, end_ms FROM usage_segments WHERE sandbox_id = ANY($1) ORDER BY sandbox_id, start_ms", [made]);
    for (let i = 1; i < segs.rows.length; i++) {
      const [p, q] = [segs.rows[i - 1], segs.rows[i]];
      if (p.sandbox_id === q.sandbox_id) assert.ok(Number(q.start_ms) >= Number(p.end_ms), `overlapping segments of ${q.sandbox_id}: ${JSON.stringify([p, q])}`);
    }
    // Nothing lost: every one that was not reaped runs (or wakes) with its file.
    for (const id of made.slice(3)) {
      const r = await survivor("POST", `/v1/sandboxes/${id}/exec`, { cmd: "cat /root/keep" });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.body.stdout, `keep-${id}\n`);
    }
    cps[victim] = await startCp(victim);
  });

  test("a volume moving through one replica: a restart of the other leaves the move alone; the mover killed mid-move: the other undoes it once its lease runs out, every byte kept", async () => {
    await destroyAll();
    const made = await apis[0]!("POST", "/v1/volumes", { name: "fleet-vol", size_mb: 64 });
    assert.equal(made.status, 201, made.text);
    const id = made.body.id as string;
    const data = randomBytes(2 << 20);
    const put = await apis[0]!("PUT", "/v1/volumes/fleet-vol/files?path=/blob", data, { "content-type": "application/octet-stream" });
    assert.equal(put.status, 200, put.text);
    const row = async () => (await db.query("SELECT state, host_id, snapshot_id, move_owner FROM volumes WHERE id = $1", [id])).rows[0];
    const home = (await row()).host_id as string;
    const mover = readFileSync(join(root, "cp0", "replica-id"), "utf8").trim();

    // Replica 0 drains the volume's host, which parks the volume: it dies once the upload is done, before that commits.
    writeFileSync(faultFile(0), "volume-move-after-upload");
    const gone = new Promise((r) => cps[0]!.once("exit", r));
    await apis[0]!("POST", `/v1/hosts/${home}/drain`, {}).catch(() => undefined);
    await Promise.race([gone, new Promise((_, rej) => setTimeout(() => rej(new Error("replica 0 did not reach the fault point")), 60_000))]);
    cps[0] = undefined;
    rmSync(faultFile(0), { force: true });
    const left = await row();
    assert.deepEqual([left.state, left.move_owner], ["moving", mover], "the dead replica's move is left half done");

    // Replica 1 restarts while replica 0's lease still holds: that move is not its to undo.
    await stop(cps[1], "SIGKILL");
    cps[1] = await startCp(1);
    const leaseUntil = Number((await db.query("SELECT lease_until FROM replicas WHERE id = $1", [mover])).rows[0].lease_until);
    const during = await row();
    assert.ok(Date.now() < leaseUntil, "the restart ended within the dead replica's lease (else this test cannot tell)");
    assert.deepEqual([during.state, during.move_owner], ["moving", mover], "a restart of another replica left the move alone");

    // Once that lease has run out, the survivor ends the move where its last commit left it: the host's image is the volume.
    await waitFor("the survivor undid the move", async () => ((await row()).state === "ready" ? true : undefined), 60_000, 250);
    const after = await row();
    assert.deepEqual([after.host_id, after.snapshot_id, after.move_owner], [home, null, null]);
    const copyRow = (await db.query("SELECT state, released_at FROM stored_snapshots WHERE id = $1", [left.snapshot_id])).rows[0];
    assert.ok(!copyRow || copyRow.released_at !== null, `the upload that never committed is released: ${JSON.stringify(copyRow)}`);
    assert.equal((await apis[1]!("POST", `/v1/hosts/${home}/undrain`, {})).status, 204);
    const back = await fetch(`${CP_URLS[1]}/v1/volumes/fleet-vol/files?path=/blob`, { headers: { authorization: `Bearer ${ADMIN_KEY}` } });
    assert.equal(back.status, 200);
    const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");
    assert.equal(sha(new Uint8Array(await back.arrayBuffer())), sha(data), "every byte");
    cps[0] = await startCp(0);
    assert.equal((await apis[0]!("DELETE", "/v1/volumes/fleet-vol")).status, 204);
  });

  test("volumes whose host is full move straight to the host their sandbox goes to: every byte, one image left, the store's copy released; the mover killed once the new host has it: undone, then mounted elsewhere", async () => {
    // One replica for the setup: it sees its own drains at once.
    const one = apis[0]!;
    for (const s of (await one("GET", "/v1/sandboxes?limit=200")).body.sandboxes ?? []) await one("DELETE", `/v1/sandboxes/${s.id}`);
    await waitFor("three hosts up", async () => ((await hosts()).filter((h) => Object.values(ids).includes(h.id) && h.status === "up").length === 3 ? true : undefined), 30_000);
    // Only A takes new things while B and C drain (they hold nothing): the volumes are made on A, and A is filled.
    for (const n of ["b", "c"] as const) assert.equal((await one("POST", `/v1/hosts/${ids[n]}/drain`, {})).status, 202);
    const startedAt = Date.now();
    const vols = [];
    for (const name of ["direct-vol", "direct-vol-2"]) {
      const made = await one("POST", "/v1/volumes", { name, size_mb: 64 });
      assert.equal(made.status, 201, made.text);
      const data = randomBytes(3 << 20);
      assert.equal((await one("PUT", `/v1/volumes/${name}/files?path=/blob`, data, { "content-type": "application/octet-stream" })).status, 200);
      vols.push({ name, id: made.body.id as string, sha: createHash("sha256").update(data).digest("hex") });
    }
    const [v1, v2] = vols as [typeof vols[0], typeof vols[0]];
    const row = async (id: string) => (await db.query("SELECT state, host_id, snapshot_id FROM volumes WHERE id = $1", [id])).rows[0];
    for (const v of vols) assert.equal((await row(v.id)).host_id, ids.a);
    const fillers: string[] = [];
    for (;;) {
      const r = await one("POST", "/v1/sandboxes", { persistent: true });
      if (r.status === 503) break;
      assert.equal(r.status, 201, r.text);
      fillers.push(r.body.id as string);
      assert.ok(fillers.length <= 4, "host A (1536 MiB) fills up after a few sandboxes");
    }
    for (const n of ["b", "c"] as const) assert.equal((await one("POST", `/v1/hosts/${ids[n]}/undrain`, {})).status, 204);
    const image = (n: Name, id: string) => existsSync(join(dirs[n], "volumes", id, "volume.qcow2"));
    const imagesOf = (id: string) => (["a", "b", "c"] as const).filter((n) => image(n, id));
    const mount = async (via: typeof one, v: typeof v1) => {
      const r = await via("POST", "/v1/sandboxes", { persistent: true, volumes: [{ name: v.name, path: "/data" }] });
      assert.equal(r.status, 201, r.text);
      const id = r.body.id as string;
      const at = where(id);
      assert.ok(at === "b" || at === "c", `placed on a host with room, not the full one: ${at}`);
      const sum = await via("POST", `/v1/sandboxes/${id}/exec`, { cmd: "sha256sum /data/blob | cut -c1-64" });
      assert.equal(sum.body.stdout, `${v.sha}\n`, "every byte");
      assert.deepEqual(await row(v.id), { state: "ready", host_id: ids[at], snapshot_id: null });
      assert.deepEqual(imagesOf(v.id), [at], "its image is on its new host only");
      return id;
    };

    const sbx = await mount(one, v1);
    const copies = (await db.query("SELECT id, state, released_at FROM stored_snapshots WHERE kind = 'volume' AND created_at >= $1", [startedAt])).rows;
    // (The store's collector, every second here, may have removed its row already.)
    assert.ok(copies.length <= 1 && copies.every((c) => c.released_at !== null), `the store's copy, a step of the move, is released: ${JSON.stringify(copies)}`);

    // The second: its mover dies once the new host has the image, before that commits.
    writeFileSync(faultFile(0), "volume-move-after-fetch");
    const gone = new Promise((r) => cps[0]!.once("exit", r));
    void one("POST", "/v1/sandboxes", { persistent: true, volumes: [{ name: v2.name, path: "/data" }] }).catch(() => undefined);
    await Promise.race([gone, new Promise((_, rej) => setTimeout(() => rej(new Error("replica 0 did not reach the fault point")), 60_000))]);
    cps[0] = undefined;
    rmSync(faultFile(0), { force: true });
    assert.equal((await row(v2.id)).state, "moving");
    // The survivor, once the dead one's lease ran out, ends it where its last commit left it:
    // in the store (A's image went once the upload committed), and the new host's copy goes.
    await waitFor("the survivor undid the move", async () => ((await row(v2.id)).state === "ready" ? true : undefined), 60_000, 250);
    assert.notEqual((await row(v2.id)).snapshot_id, null, "parked: its stored copy is the volume");
    await waitFor("no host keeps an image of it", async () => (imagesOf(v2.id).length === 0 ? true : undefined), 30_000, 250);
    const sbx2 = await mount(apis[1]!, v2);

    cps[0] = await startCp(0);
    for (const s of (await one("GET", "/v1/sandboxes?limit=200")).body.sandboxes ?? []) await one("DELETE", `/v1/sandboxes/${s.id}`);
    for (const s of [sbx, sbx2, ...fillers]) assert.equal((await one("GET", `/v1/sandboxes/${s}`)).body.state, "destroyed");
    for (const v of vols) assert.equal((await one("DELETE", `/v1/volumes/${v.name}`)).status, 204);
  });
});
