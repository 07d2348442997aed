// needs: one VM
/**
 * Volumes against a real server and real microVMs: a volume written by one sandbox (a
 * 50 MB file and a SQLite database) is read by the next once the first is destroyed; one
 * writer or many readers, a conflicting mount a 409; a cold-hibernated sandbox lets go of
 * its volume (written meanwhile through the volume file API, and grown) and sees it all at
 * its wake, while one whose process keeps files open on it keeps holding it; a checkpoint
 * does not carry it; bad paths, quotas and other owners' volumes are refused.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ConflictError, NotFoundError, Sandbox, Volumes } from "@den/sdk";
import type { RunningServer } from "../src/server.js";
import { ADMIN_KEY, client, runCli, testServer } from "./helpers.js";

const OTHER_OWNER = "volume-test-other";

describe("volumes", () => {
  let server: RunningServer;
  let api: ReturnType<typeof client>;
  let other: ReturnType<typeof client>;

  /** Leaves an owner with no sandbox and no volume (the suite's database outlives one run). */
  const clean = async (c: ReturnType<typeof client>) => {
    for (const s of (await c("GET", "/v1/sandboxes?limit=200")).body?.sandboxes ?? []) await c("DELETE", `/v1/sandboxes/${s.id}`);
    for (const v of (await c("GET", "/v1/volumes")).body?.volumes ?? []) {
      const r = await c("DELETE", `/v1/volumes/${v.name}`);
      assert.equal(r.status, 204, `leftover volume ${v.name}: ${r.text}`);
    }
  };

  const sh = async (id: string, cmd: string) => {
    const r = await api("POST", `/v1/sandboxes/${id}/exec`, { cmd });
    assert.equal(r.status, 200, `${cmd}: ${r.text}`);
    return { code: r.body.exit_code as number, out: (r.body.stdout as string).trim(), err: r.body.stderr as string };
  };
  const ok = async (id: string, cmd: string) => {
    const r = await sh(id, cmd);
    assert.equal(r.code, 0, `${cmd}: ${r.err}`);
    return r.out;
  };
  const create = async (volumes: unknown[]) => {
    const r = await api("POST", "/v1/sandboxes", { persistent: true, volumes });
    assert.equal(r.status, 201, r.text);
    return r.body.id as string;
  };
  const refused = async (r: { status: number; body: any; text: string }, status: number, code: string) => {
    assert.equal(r.status, status, r.text);
    assert.equal(r.body.error.code, code, r.text);
  };
  const mounts = async (name: string) => ((await api("GET", `/v1/volumes/${name}`)).body.mounts as Array<{ sandbox_id: string; path: string; read_only: boolean; held: boolean }>);
  const put = (name: string, path: string, data: string | Uint8Array) => api("PUT", `/v1/volumes/${name}/files?path=${encodeURIComponent(path)}`, data, { "content-type": "application/octet-stream" });

  before(async () => {
    server = await testServer({ DEN_MAX_VOLUMES_PER_OWNER: "3", DEN_MAX_VOLUME_MB_PER_OWNER: "2048", DEN_MAX_SANDBOXES_PER_OWNER: "6" });
    api = client(server.url);
    const key = await api("POST", "/v1/keys", { owner: OTHER_OWNER });
    assert.equal(key.status, 201, key.text);
    other = client(server.url, key.body.key);
    await clean(api);
    await clean(other);
  });
  after(async () => {
    if (!server) return;
    await clean(api).catch(() => undefined);
    await clean(other).catch(() => undefined);
    await server.close();
  });

  test("bad names, sizes and mount paths are 400s; unknown volumes 404; quotas 429; another owner's volume does not exist for them", async () => {
    await refused(await api("POST", "/v1/volumes", { name: "Bad_Name", size_mb: 64 }), 400, "invalid_argument");
    await refused(await api("POST", "/v1/volumes", { name: "-x", size_mb: 64 }), 400, "invalid_argument");
    await refused(await api("POST", "/v1/volumes", { name: "tiny", size_mb: 8 }), 400, "invalid_argument");
    await refused(await api("POST", "/v1/volumes", { name: "huge", size_mb: 4096 }), 429, "quota_exceeded");
    assert.equal((await api("POST", "/v1/volumes", { name: "q1", size_mb: 1024 })).status, 201);
    await refused(await api("POST", "/v1/volumes", { name: "q1", size_mb: 16 }), 409, "already_exists");
    assert.equal((await api("POST", "/v1/volumes", { name: "q2", size_mb: 1000 })).status, 201);
    await refused(await api("POST", "/v1/volumes", { name: "q3", size_mb: 64 }), 429, "quota_exceeded");
    await refused(await api("POST", "/v1/volumes/q2/grow", { size_mb: 1500 }), 429, "quota_exceeded");
    await refused(await api("POST", "/v1/volumes/q2/grow", { size_mb: 500 }), 400, "invalid_argument");
    assert.equal((await api("POST", "/v1/volumes", { name: "q3", size_mb: 16 })).status, 201);
    await refused(await api("POST", "/v1/volumes", { name: "q4", size_mb: 16 }), 429, "quota_exceeded");
    for (const path of ["/", "/etc", "/usr/local", "/proc/x", "relative", "/a/../b", "/a/./b", "/trailing/", `/${"x".repeat(300)}`]) {
      await refused(await api("POST", "/v1/sandboxes", { volumes: [{ name: "q1", path }] }), 400, "invalid_argument");
    }
    await refused(await api("POST", "/v1/sandboxes", { volumes: [{ name: "q1", path: "/a" }, { name: "q2", path: "/a" }] }), 400, "invalid_argument");
    await refused(await api("POST", "/v1/sandboxes", { volumes: [{ name: "q1", path: "/a" }, { name: "q2", path: "/a/b" }] }), 400, "invalid_argument");
    await refused(await api("POST", "/v1/sandboxes", { volumes: [{ name: "q1", path: "/a" }, { name: "q1", path: "/b" }] }), 400, "invalid_argument");
    await refused(await api("POST", "/v1/sandboxes", { volumes: [{ name: "nope", path: "/a" }] }), 404, "volume_not_found");
    await refused(await api("PUT", "/v1/volumes/q1/files?path=/a/../../etc/passwd", "x", { "content-type": "application/octet-stream" }), 400, "invalid_argument");
    // Another owner: none of it is theirs, and their own name space is their own.
    await refused(await other("GET", "/v1/volumes/q1"), 404, "volume_not_found");
    await refused(await other("DELETE", "/v1/volumes/q1"), 404, "volume_not_found");
    await refused(await other("POST", "/v1/volumes/q1/grow", { size_mb: 2000 }), 404, "volume_not_found");
    await refused(await other("GET", "/v1/volumes/q1/files?path=/x"), 404, "volume_not_found");
    await refused(await other("POST", "/v1/sandboxes", { volumes: [{ name: "q1", path: "/a" }] }), 404, "volume_not_found");
    assert.deepEqual((await other("GET", "/v1/volumes")).body.volumes, []);
    assert.equal((await other("POST", "/v1/volumes", { name: "q1", size_mb: 16 })).status, 201);
    assert.equal((await other("DELETE", "/v1/volumes/q1")).status, 204);
    assert.deepEqual(((await api("GET", "/v1/volumes")).body.volumes as Array<{ name: string }>).map((v) => v.name), ["q1", "q2", "q3"]);
    for (const n of ["q1", "q2", "q3"]) assert.equal((await api("DELETE", `/v1/volumes/${n}`)).status, 204);
    await refused(await api("GET", "/v1/volumes/q1"), 404, "volume_not_found");
  });

  let sum = "";

  test("written by A (50 MB and a SQLite database), A destroyed: B reads the same bytes; one writer or many readers, never both", async () => {
    const made = await api("POST", "/v1/volumes", { name: "data", size_mb: 256 });
    assert.equal(made.status, 201, made.text);
    assert.match(made.body.id, /^vol_[a-z2-7]{16}$/);
    assert.deepEqual(made.body.mounts, []);
    // Two creates racing for the writer's hold: one gets it.
    const racing = await Promise.all([0, 1].map(() => api("POST", "/v1/sandboxes", { persistent: true, volumes: [{ name: "data", path: "/data" }] })));
    assert.deepEqual(racing.map((r) => r.status).sort(), [201, 409], racing.map((r) => r.text).join("\n"));
    assert.equal(racing.find((r) => r.status === 409)!.body.error.code, "volume_in_use");
    const a = racing.find((r) => r.status === 201)!.body.id as string;
    await ok(a, "head -c 50000000 /dev/urandom > /data/blob && sha256sum /data/blob | cut -d' ' -f1 > /root/sum");
    sum = await ok(a, "cat /root/sum");
    await ok(a, `python3 -c "import sqlite3; c=sqlite3.connect('/data/db.sqlite'); c.execute('create table t(v)'); c.executemany('insert into t values(?)', [(i,) for i in range(1000)]); c.commit()"`);
    assert.deepEqual(await mounts("data"), [{ sandbox_id: a, path: "/data", read_only: false, held: true }]);
    // A second writer, a reader, a delete and a file write are all refused while A holds it.
    const second = await api("POST", "/v1/sandboxes", { volumes: [{ name: "data", path: "/v" }] });
    await refused(second, 409, "volume_in_use");
    assert.equal(second.body.error.details.sandbox_id, a);
    await refused(await api("POST", "/v1/sandboxes", { volumes: [{ name: "data", path: "/v", read_only: true }] }), 409, "volume_in_use");
    await refused(await api("DELETE", "/v1/volumes/data"), 409, "volume_in_use");
    await refused(await put("data", "/x", "no"), 409, "volume_in_use");
    await refused(await api("GET", "/v1/volumes/data/files?path=/db.sqlite"), 409, "volume_in_use");
    // The refused creates left no sandbox behind.
    assert.equal(((await api("GET", "/v1/sandboxes")).body.sandboxes as unknown[]).length, 1);
    assert.equal((await api("DELETE", `/v1/sandboxes/${a}`)).status, 200);
    assert.deepEqual(await mounts("data"), []);

    // Two readers at once; a writer waits for them.
    const [b, c] = await Promise.all([create([{ name: "data", path: "/mnt/in", read_only: true }]), create([{ name: "data", path: "/ro", read_only: true }])]);
    assert.equal(await ok(b, "sha256sum /mnt/in/blob | cut -d' ' -f1"), sum);
    assert.equal(await ok(b, `python3 -c "import sqlite3; print(sqlite3.connect('file:/mnt/in/db.sqlite?mode=ro', uri=True).execute('select count(*), sum(v) from t').fetchone())"`), "(1000, 499500)");
    assert.equal(await ok(c, "stat -c %s /ro/blob"), "50000000");
    assert.notEqual((await sh(b, "touch /mnt/in/x")).code, 0, "a read-only mount takes no writes");
    await refused(await api("POST", "/v1/sandboxes", { volumes: [{ name: "data", path: "/v" }] }), 409, "volume_in_use");
    await refused(await put("data", "/x", "no"), 409, "volume_in_use");
    // A reader may read through the file API beside them.
    const db = await api("GET", "/v1/volumes/data/files?path=/db.sqlite");
    assert.equal(db.status, 200);
    assert.equal(db.text.slice(0, 15), "SQLite format 3");
    assert.equal((await mounts("data")).length, 2);
    await api("DELETE", `/v1/sandboxes/${b}`);
    await api("DELETE", `/v1/sandboxes/${c}`);
  });

  test("cold hibernation lets go of the volume: written and grown meanwhile through the volume API, all of it seen after the wake", async () => {
    const s = await create([{ name: "data", path: "/work" }]);
    await ok(s, "echo before > /work/mark; echo in-memory > /root/state; nohup sleep 100000 >/dev/null 2>&1 &");
    const fork = await api("POST", `/v1/sandboxes/${s}/fork`, { count: 2, volumes: [{ name: "data", path: "/w" }] });
    await refused(fork, 409, "volume_in_use");

    assert.equal((await api("POST", `/v1/sandboxes/${s}/hibernate`, {})).status, 200);
    assert.deepEqual((await mounts("data")).map((m) => m.held), [true], "warm: still held");
    await refused(await put("data", "/meanwhile", "no"), 409, "volume_in_use");
    const cold = await api("POST", `/v1/sandboxes/${s}/hibernate`, { mode: "cold" });
    assert.equal(cold.status, 200, cold.text);
    assert.equal(cold.body.hibernate_mode, "cold");
    assert.deepEqual(await mounts("data"), [{ sandbox_id: s, path: "/work", read_only: false, held: false }], "cold: mounted, not held");
    await refused(await api("DELETE", "/v1/volumes/data"), 409, "volume_in_use");

    const w = await put("data", "/dir/added.txt", "written while it slept\n");
    assert.equal(w.status, 200, w.text);
    assert.equal(w.body.path, "/dir/added.txt");
    assert.equal(w.body.size, 23);
    const back = await api("GET", "/v1/volumes/data/files?path=/dir/added.txt");
    assert.equal(back.status, 200);
    assert.equal(back.text, "written while it slept\n");
    await refused(await api("GET", "/v1/volumes/data/files?path=/no/such"), 404, "file_not_found");
    // The 50 MB file, streamed out of the volume: the bytes A wrote.
    const res = await fetch(`${server.url}/v1/volumes/data/files?path=/blob`, { headers: { authorization: `Bearer ${ADMIN_KEY}` } });
    assert.equal(res.status, 200);
    const h = createHash("sha256");
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) h.update(chunk);
    assert.equal(h.digest("hex"), sum);
    const grown = await api("POST", "/v1/volumes/data/grow", { size_mb: 512 });
    assert.equal(grown.status, 200, grown.text);
    assert.equal(grown.body.size_mb, 512);

    // The wake (by an exec) mounts it again: its own memory, and the volume as it is now.
    assert.equal(await ok(s, "cat /work/mark /work/dir/added.txt /root/state; pgrep -c -x sleep"), "before\nwritten while it slept\nin-memory\n1");
    assert.equal(await ok(s, "sha256sum /work/blob | cut -d' ' -f1"), sum);
    assert.ok(Number(await ok(s, "df -m /work | tail -1 | awk '{print $2}'")) > 400, "the filesystem grew");
    assert.deepEqual((await mounts("data")).map((m) => m.held), [true]);
    await refused(await put("data", "/x", "no"), 409, "volume_in_use");

    // A process holding a file open on it at the next cold hibernation: it stays held through the sleep.
    await ok(s, "nohup sh -c 'exec 3</work/mark; sleep 100000' >/dev/null 2>&1 & sleep 0.3");
    assert.equal((await api("POST", `/v1/sandboxes/${s}/hibernate`, { mode: "cold" })).status, 200);
    assert.deepEqual((await mounts("data")).map((m) => m.held), [true], "held by the hibernated sandbox");
    await refused(await put("data", "/x", "no"), 409, "volume_in_use");
    await refused(await api("POST", "/v1/sandboxes", { volumes: [{ name: "data", path: "/v", read_only: true }] }), 409, "volume_in_use");
    assert.equal(await ok(s, "echo more >> /work/mark; sync; cat /work/mark"), "before\nmore");
    assert.equal((await api("DELETE", `/v1/sandboxes/${s}`)).status, 200);
    assert.deepEqual(await mounts("data"), []);
  });

  test("a checkpoint does not carry its volume; a restore mounts what it names", async () => {
    const s = await create([{ name: "data", path: "/data" }]);
    await ok(s, "echo at-checkpoint > /data/cp; echo disk > /root/cp");
    const cp = await api("POST", `/v1/sandboxes/${s}/checkpoints`, {});
    assert.equal(cp.status, 201, cp.text);
    // The source still holds it read-write: a restore asking for it waits.
    await refused(await api("POST", `/v1/checkpoints/${cp.body.id}/restore`, { volumes: [{ name: "data", path: "/elsewhere" }] }), 409, "volume_in_use");
    await api("DELETE", `/v1/sandboxes/${s}`);
    const bare = await api("POST", `/v1/checkpoints/${cp.body.id}/restore`, {});
    assert.equal(bare.status, 201, bare.text);
    assert.equal(await ok(bare.body.id, "cat /root/cp; grep -c ' /data ' /proc/mounts || true"), "disk\n0");
    assert.deepEqual(await mounts("data"), [], "the restored sandbox holds nothing");
    const withVol = await api("POST", `/v1/checkpoints/${cp.body.id}/restore`, { volumes: [{ name: "data", path: "/elsewhere", read_only: true }] });
    assert.equal(withVol.status, 201, withVol.text);
    assert.equal(await ok(withVol.body.id, "cat /elsewhere/cp; grep -c ' /data ' /proc/mounts || true"), "at-checkpoint\n0");
    await api("DELETE", `/v1/sandboxes/${bare.body.id}`);
    await api("DELETE", `/v1/sandboxes/${withVol.body.id}`);
    await api("DELETE", `/v1/checkpoints/${cp.body.id}`);
    // Nothing mounts it now: it can go.
    assert.equal((await api("DELETE", "/v1/volumes/data")).status, 204);
    await refused(await api("GET", "/v1/volumes/data"), 404, "volume_not_found");
  });

  test("the SDK and the CLI: create, write, mount, read, conflict, copy, delete", async () => {
    const opts = { apiUrl: server.url, apiKey: ADMIN_KEY };
    const env = { DEN_API_URL: server.url, DEN_API_KEY: ADMIN_KEY };
    const v = await Volumes.create({ name: "sdk-vol", sizeMb: 64, ...opts });
    assert.equal(v.sizeMb, 64);
    assert.equal((await Volumes.writeFile("sdk-vol", "/in/hello.txt", "hello from the SDK\n", opts)).size, 19);
    await assert.rejects(Volumes.get("sdk-vol", { ...opts, signal: AbortSignal.abort() }), (e: unknown) => (e as Error).name === "AbortError");
    const sbx = await Sandbox.create({ persistent: true, volumes: [{ name: "sdk-vol", path: "/v" }], ...opts });
    assert.equal((await sbx.exec("cat /v/in/hello.txt && echo from-sandbox > /v/out.txt")).stdout, "hello from the SDK\n");
    await assert.rejects(Sandbox.create({ volumes: [{ name: "sdk-vol", path: "/v" }], ...opts }), (e: unknown) => e instanceof ConflictError && e.code === "volume_in_use");
    assert.deepEqual((await Volumes.list(opts)).map((x) => [x.name, x.mounts.map((m) => m.sandboxId)]), [["sdk-vol", [sbx.id]]]);
    const inUse = await runCli(["volume", "rm", "sdk-vol"], env);
    assert.notEqual(inUse.code, 0);
    assert.match(inUse.err, /volume_in_use|mounted by sandbox/);
    await sbx.destroy();
    assert.equal(await Volumes.readText("sdk-vol", "/out.txt", opts), "from-sandbox\n");

    const dir = mkdtempSync(join(tmpdir(), "den-volume-cp-"));
    try {
      writeFileSync(join(dir, "up.bin"), Buffer.alloc(300_000, 7));
      const up = await runCli(["volume", "cp", join(dir, "up.bin"), "sdk-vol:/up.bin"], env);
      assert.equal(up.code, 0, up.err);
      const down = await runCli(["volume", "cp", "sdk-vol:/out.txt", dir], env);
      assert.equal(down.code, 0, down.err);
      assert.equal(readFileSync(join(dir, "out.txt"), "utf8"), "from-sandbox\n");
      const made = await runCli(["create", "--persistent", "--volume", "sdk-vol:/ro:ro"], env);
      assert.equal(made.code, 0, made.err);
      const id = made.out.trim();
      assert.equal(await ok(id, "stat -c %s /ro/up.bin; touch /ro/x 2>/dev/null || echo read-only"), "300000\nread-only");
      const ls = JSON.parse((await runCli(["volume", "ls", "--json"], env)).out) as Array<{ name: string; mounts: Array<{ sandboxId: string; readOnly: boolean }> }>;
      assert.deepEqual(ls.map((x) => [x.name, x.mounts]), [["sdk-vol", [{ sandboxId: id, path: "/ro", readOnly: true, held: true }]]]);
      await api("DELETE", `/v1/sandboxes/${id}`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    assert.equal((await runCli(["volume", "rm", "sdk-vol"], env)).out, "sdk-vol deleted\n");
    await assert.rejects(Volumes.get("sdk-vol", opts), (e: unknown) => e instanceof NotFoundError && e.code === "volume_not_found");
  });
});
