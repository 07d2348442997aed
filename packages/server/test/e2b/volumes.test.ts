// needs: one VM, network namespace (open egress), the e2b client
/**
 * E2B's volumes onto Den's, driven by the real `e2b` client (E2B_API_URL, E2B_API_KEY,
 * E2B_SANDBOX_URL and E2B_VOLUME_API_URL) against a real server and real microVMs: a
 * volume is made, listed and looked up; files are written, read, listed, made, changed and
 * removed through `Volume` (each call a helper VM); a sandbox mounting it sees them and
 * writes its own; a second read-write mount and the volume's content API are refused while
 * it holds it; the volume goes after the sandbox. Tokens open one volume only, and another
 * owner sees none of it. Its sandboxes have no network (egress none), so no namespace.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { AuthenticationError, Sandbox, SandboxError, Volume, VolumeError, VolumeNotFoundError, VolumePathNotFoundError } from "e2b";
import type { RunningServer } from "../../src/index.js";
import { volumeStore } from "@den/control-plane";
import { E2bTokens } from "../../src/e2b/tokens.js";
import { ADMIN_KEY, client, testServer } from "../helpers.js";

const OTHER_OWNER = "e2b-volumes-other";

/** The status E2B's errors carry ("409: ..."), for those the client does not type. */
const statusOf = (e: unknown) => (e instanceof SandboxError && e.statusCode) || Number(/^(\d{3}):/.exec((e as Error).message)?.[1]);

describe("E2B volumes through the e2b client", () => {
  let server: RunningServer;
  let api: ReturnType<typeof client>;
  let otherKey: string;
  let vol: Volume;
  const made: string[] = [];

  /** Leaves an owner with no sandbox and no volume (the suite's database outlives one run). */
  const clean = async (c: ReturnType<typeof client>) => {
    for (const s of (await c("GET", "/v1/sandboxes?limit=200")).body?.sandboxes ?? []) await c("DELETE", `/v1/sandboxes/${s.id}`);
    for (const v of (await c("GET", "/v1/volumes")).body?.volumes ?? []) await c("DELETE", `/v1/volumes/${v.name}`);
  };
  const content = (id: string, path: string, token: string) =>
    fetch(`${server.envdUrl}/volumecontent/${id}/path?path=${encodeURIComponent(path)}`, { headers: { authorization: `Bearer ${token}` } });

  before(async () => {
    // Small volumes: E2B names no size, and the images are made per test run.
    server = await testServer({ DEN_E2B_VOLUME_MB: "64", DEN_MAX_VOLUMES_PER_OWNER: "3", DEN_MAX_UPLOAD_BYTES: String(1024 * 1024) });
    api = client(server.url);
    const key = await api("POST", "/v1/keys", { owner: OTHER_OWNER });
    assert.equal(key.status, 201, key.text);
    otherKey = key.body.key;
    await clean(api);
    await clean(client(server.url, otherKey));
    process.env.E2B_API_URL = server.url;
    process.env.E2B_API_KEY = ADMIN_KEY;
    process.env.E2B_SANDBOX_URL = server.envdUrl!;
    process.env.E2B_VOLUME_API_URL = server.envdUrl!;
  });

  after(async () => {
    for (const id of made) await Sandbox.kill(id).catch(() => undefined);
    if (!server) return;
    await clean(api).catch(() => undefined);
    await clean(client(server.url, otherKey)).catch(() => undefined);
    await server.close();
  });

  test("create, list, getInfo and connect; bad names are 400s and unknown ids not found", async () => {
    vol = await Volume.create("E2b-Data");
    assert.match(vol.volumeId, /^vol_[a-z2-7]{16}$/);
    assert.equal(vol.name, "e2b-data", "Den's names are lower-case");
    assert.match(vol.token, /^denvol\.\d+\./);
    assert.ok(vol.domain && !vol.domain.includes("e2b.app"), `the content domain is Den's, never E2B's: ${vol.domain}`);
    assert.deepEqual((await Volume.list()).filter((v) => v.volumeId === vol.volumeId), [{ volumeId: vol.volumeId, name: "e2b-data" }]);
    const info = await Volume.getInfo(vol.volumeId);
    assert.equal(info.name, "e2b-data");
    assert.equal((await Volume.connect(vol.volumeId)).name, "e2b-data");
    // The same volume through /v1.
    assert.equal((await api("GET", "/v1/volumes/e2b-data")).body.id, vol.volumeId);

    await assert.rejects(Volume.create("e2b-data"), (e: unknown) => e instanceof VolumeError && statusOf(e) === 409);
    await assert.rejects(Volume.create("bad_name!"), (e: unknown) => e instanceof VolumeError && statusOf(e) === 400);
    await assert.rejects(Volume.create("x".repeat(64)), (e: unknown) => e instanceof VolumeError && statusOf(e) === 400);
    await assert.rejects(Volume.getInfo("vol_aaaaaaaaaaaaaaaa"), VolumeNotFoundError);
    await assert.rejects(Volume.getInfo("e2b-data"), VolumeNotFoundError, "ids, not names");
    assert.equal(await Volume.destroy("vol_aaaaaaaaaaaaaaaa"), false);
    await assert.rejects(Volume.list({ apiKey: "den_wrong_key" }), AuthenticationError);
  });

  test("files through Volume: write, read, list, makeDir, getInfo, updateMetadata, remove", async () => {
    const t0 = Date.now();
    const w = await vol.writeFile("/docs/hello.txt", "hi from e2b");
    assert.equal(w.type, "file");
    assert.equal(w.path, "/docs/hello.txt");
    assert.equal(w.name, "hello.txt");
    assert.equal(w.size, 11);
    assert.ok(w.mtime instanceof Date && Math.abs(w.mtime.getTime() - Date.now()) < 120_000, String(w.mtime));
    assert.equal(await vol.readFile("/docs/hello.txt"), "hi from e2b");
    assert.deepEqual(Buffer.from(await vol.readFile("docs/hello.txt", { format: "bytes" })).toString(), "hi from e2b", "a relative path is from the root");

    const d = await vol.makeDir("/a/b/c", { force: true, mode: 0o750, uid: 1000, gid: 1000 });
    assert.equal(d.type, "directory");
    assert.equal(d.mode, 0o750);
    assert.equal(d.uid, 1000);
    const listed = await vol.list("/", { depth: 3 });
    const paths = listed.map((e) => `${e.type} ${e.path}`).sort();
    for (const want of ["directory /a", "directory /a/b", "directory /a/b/c", "directory /docs", "file /docs/hello.txt"]) assert.ok(paths.includes(want), `${want} in ${paths.join(", ")}`);

    const m = await vol.updateMetadata("/docs/hello.txt", { mode: 0o600 });
    assert.equal(m.mode, 0o600);
    assert.equal((await vol.getInfo("/docs/hello.txt")).mode, 0o600);
    await vol.remove("/a");
    assert.equal(await vol.exists("/a"), false);
    await assert.rejects(vol.readFile("/no/such/file"), VolumePathNotFoundError);
    await assert.rejects(vol.makeDir("/docs"), (e: unknown) => e instanceof VolumeError && statusOf(e) === 409, "an existing directory without force");
    console.log(`# 10 content calls (a helper VM each) took ${Date.now() - t0} ms`);

    // A name longer than the guest's filesystem takes: the caller's error, through the helper.
    await assert.rejects(vol.writeFile(`/${"n".repeat(300)}`, "x"), (e: unknown) => e instanceof VolumeError && statusOf(e) === 400);

    // Refused before any helper VM: bad paths, queries and bodies, and tokens of nothing or of another volume.
    const q = (route: string, query: string, init: RequestInit = {}) =>
      fetch(`${server.envdUrl}/volumecontent/${vol.volumeId}/${route}?${query}`, { ...init, headers: { authorization: `Bearer ${vol.token}`, ...(init.headers as Record<string, string>) } });
    for (const [route, query, init, status] of [
      ["path", "path=/../etc", {}, 400],
      ["path", `path=/${"p".repeat(4000)}`, {}, 400],
      ["path", `path=/${"p".repeat(5000)}`, {}, 400],
      ["path", "", {}, 400],
      ["dir", "path=/&depth=0", {}, 400],
      ["dir", "path=/&depth=x", {}, 400],
      ["dir", "path=/a&mode=99999", { method: "POST" }, 400],
      ["dir", "path=/a&force=maybe", { method: "POST" }, 400],
      ["path", "path=/docs", { method: "PATCH", body: "{not json", headers: { "content-type": "application/json" } }, 400],
      ["path", "path=/docs", { method: "PATCH", body: JSON.stringify({ mode: "x".repeat(5000) }), headers: { "content-type": "application/json" } }, 413],
      ["path", "path=/docs", { method: "PATCH", body: JSON.stringify({ uid: -1 }), headers: { "content-type": "application/json" } }, 400],
      ["file", "path=/big", { method: "PUT", body: new Uint8Array(2 * 1024 * 1024), headers: { "content-type": "application/octet-stream" } }, 413],
      ["nothing", "path=/", {}, 404],
    ] as Array<[string, string, RequestInit, number]>) {
      const r = await q(route, query, init);
      const body = (await r.json()) as { code: unknown; message: unknown };
      assert.equal(r.status, status, `${init.method ?? "GET"} ${route}?${query.slice(0, 40)}: ${JSON.stringify(body).slice(0, 200)}`);
      assert.ok(typeof body.code === "string" || typeof body.code === "number", JSON.stringify(body));
    }
    const bad = await content(vol.volumeId, "/../etc", vol.token);
    assert.equal(bad.status, 400, await bad.text());
    assert.equal((await content(vol.volumeId, "/", "denvol.9999999999.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")).status, 401);
    const none = await fetch(`${server.envdUrl}/volumecontent/${vol.volumeId}/path?path=/`);
    assert.equal(none.status, 401);
    assert.equal(((await none.json()) as { code: string }).code, "unauthorized");
    await assert.rejects(new Volume(vol.volumeId, vol.name, "denvol.1.x", vol.domain).readFile("/docs/hello.txt"), AuthenticationError);
    // Tokens signed with the server's own secret: an expired one, and one naming another owner, open nothing.
    const tokens = await E2bTokens.open(server.cp.store);
    const owner = (await volumeStore(server.cp.store).byId(vol.volumeId))!.owner;
    assert.equal((await content(vol.volumeId, "/docs", tokens.volume(vol.volumeId, owner, Date.now() + 60_000))).status, 200, "a fresh token of the same secret opens it");
    assert.equal((await content(vol.volumeId, "/docs", tokens.volume(vol.volumeId, owner, Date.now() - 1000))).status, 401, "expired");
    assert.equal((await content(vol.volumeId, "/docs", tokens.volume(vol.volumeId, OTHER_OWNER, Date.now() + 60_000))).status, 401, "another owner's");
  });

  test("another owner sees none of it, and its tokens open only its own volume", async () => {
    const as = { apiKey: otherKey };
    assert.deepEqual((await Volume.list(as)).filter((v) => v.volumeId === vol.volumeId), []);
    await assert.rejects(Volume.getInfo(vol.volumeId, as), VolumeNotFoundError);
    assert.equal(await Volume.destroy(vol.volumeId, as), false);
    await assert.rejects(Sandbox.create("base", { ...as, volumeMounts: { "/data": "e2b-data" }, allowInternetAccess: false }), (e: unknown) => statusOf(e) === 404);
    // Its own volume's token, presented for ours: 401 (the token names the volume and its owner).
    const theirs = await Volume.create("theirs", as);
    assert.equal((await content(vol.volumeId, "/", theirs.token)).status, 401);
    assert.equal((await content(theirs.volumeId, "/", vol.token)).status, 401);
    assert.equal(await Volume.destroy(theirs.volumeId, as), true);
  });

  test("volumeMounts Den cannot take are 400s", async () => {
    const refused = (volumeMounts: Record<string, string>) =>
      assert.rejects(Sandbox.create("base", { volumeMounts, allowInternetAccess: false }), (e: unknown) => e instanceof SandboxError && statusOf(e) === 400, JSON.stringify(volumeMounts));
    await refused({ "/etc/data": "e2b-data" });
    await refused({ "data": "e2b-data" });
    await refused({ "/data": "Bad_Name" });
    await refused({ "/a": "e2b-data", "/a/b": "theirs" });
    await refused({ "/a": "v1", "/b": "v2", "/c": "v3", "/d": "v4", "/e": "v5" });
  });

  test("a sandbox mounts it and sees its files; a second read-write mount and the content API are 409s meanwhile; destroy after kill", async () => {
    const t0 = Date.now();
    const sbx = await Sandbox.create("base", { volumeMounts: { "/data": vol }, allowInternetAccess: false, timeoutMs: 300_000 });
    made.push(sbx.sandboxId);
    console.log(`# create with a volume took ${Date.now() - t0} ms`);
    assert.equal(await sbx.files.read("/data/docs/hello.txt"), "hi from e2b");
    await sbx.files.write("/data/from-sandbox.txt", "written in the sandbox");
    assert.deepEqual((await Sandbox.getInfo(sbx.sandboxId)).volumeMounts, [{ name: "e2b-data", path: "/data" }]);
    const r = await sbx.commands.run("mount | grep ' /data '");
    assert.match(r.stdout, /\/data type ext4 \(rw/);

    // One writer: a second read-write mount is the client's error for a 409, and so is the content API.
    await assert.rejects(Sandbox.create("base", { volumeMounts: { "/other": "e2b-data" }, allowInternetAccess: false }), (e: unknown) => e instanceof SandboxError && statusOf(e) === 409);
    await assert.rejects(vol.readFile("/docs/hello.txt"), (e: unknown) => e instanceof VolumeError && statusOf(e) === 409);
    await assert.rejects(Volume.destroy(vol.volumeId), (e: unknown) => e instanceof VolumeError && statusOf(e) === 409);

    assert.equal(await sbx.kill(), true);
    assert.equal(await vol.readFile("/from-sandbox.txt"), "written in the sandbox", "what the sandbox wrote outlives it");
    assert.equal(await Volume.destroy(vol.volumeId), true);
    assert.equal(await Volume.destroy(vol.volumeId), false);
    await assert.rejects(Volume.getInfo(vol.volumeId), VolumeNotFoundError);
    const gone = (await content(vol.volumeId, "/", vol.token)).status;
    assert.ok(gone === 401 || gone === 404, `a destroyed volume's token opens nothing (${gone})`);
    assert.equal((await api("GET", "/v1/volumes")).body.volumes.length, 0);
  });
});
