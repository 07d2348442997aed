// needs: memory host, the e2b client
/**
 * E2B's template API on the memory host (which builds from a template with setup commands
 * only, never an image or steps): the unchanged `e2b` client's `Template.build` from a
 * template through ready, its tags and `Sandbox.create("name:tag")`, a build that fails
 * (its reason), alias lookups (200, 403, 404), a template with its builds, request and step
 * checks (400s naming what is wrong), a waiting build's status, and file uploads through the
 * signed links (present, forged, expired, oversize). Image and Dockerfile builds on real VMs:
 * e2b/templates.test.ts.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { BuildError, Sandbox, Template, type LogEntry } from "e2b";
import { UploadLinks } from "../src/e2b/templates/uploads.js";
import { client, memoryServer, type MemoryServer } from "./helpers.js";

const HASH = "ab".repeat(32);

describe("E2B's template API on the memory host", () => {
  let m: MemoryServer;
  let base: string;
  /** Non-admin owners: alice is the e2b client's, bob owns a template alice cannot use, carol fills her quota. */
  const keys: Record<string, string> = {};
  const made: string[] = [];

  before(async () => {
    m = await memoryServer({ DEN_MAX_TEMPLATES_PER_OWNER: "3", DEN_MAX_CONTEXT_MB: "1" });
    base = m.server.url;
    for (const owner of ["alice", "bob", "carol"]) {
      const r = await m.api("POST", "/v1/keys", { owner });
      assert.equal(r.status, 201, r.text);
      keys[owner] = r.body.key as string;
    }
    process.env.E2B_API_URL = base;
    process.env.E2B_API_KEY = keys.alice;
    // Sources the memory host can build from: a template of alice's, one of bob's.
    for (const [owner, name] of [["alice", "alice-src"], ["bob", "bobs"]] as const) {
      const r = await client(base, keys[owner])("POST", "/v1/templates", { name, setup: ["echo ready > /etc/src"] });
      assert.equal(r.status, 201, r.text);
    }
  });

  after(async () => {
    for (const id of made) await Sandbox.kill(id).catch(() => undefined);
    await m?.close();
  });

  /** A raw E2B call as `owner` (X-API-KEY), JSON in and out. */
  const e2b = async (method: string, path: string, body?: unknown, owner = "alice") => {
    const res = await fetch(base + path, {
      method, headers: { "x-api-key": keys[owner]!, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined, headers: res.headers };
  };
  const announce = async (name: string, extra: Record<string, unknown> = {}) => {
    const r = await e2b("POST", "/v3/templates", { name, ...extra });
    assert.equal(r.status, 202, JSON.stringify(r.body));
    return r.body as { templateID: string; buildID: string; tags: string[] };
  };

  test("Template.build from a template: ready with its log, tagged, made into sandboxes by name and by tag", async () => {
    const logs: LogEntry[] = [];
    const t = Template().fromTemplate("alice-src");
    const info = await Template.build(t, "e2b-mem:v1", { onBuildLogs: (l) => logs.push(l) });
    assert.equal(info.templateId, "e2b-mem");
    assert.deepEqual(info.tags, ["v1"]);
    assert.match(info.buildId, /^op_/);
    assert.ok(logs.some((l) => /template e2b-mem@/.test(l.message)), `the host's log reached the client: ${logs.map((l) => l.message).join(" | ")}`);

    const status = await Template.getBuildStatus({ templateId: "e2b-mem", buildId: info.buildId });
    assert.equal(status.status, "ready");
    assert.ok(status.logEntries.length > 0);
    const den = await client(base, keys.alice)("GET", `/v1/templates/builds/${info.buildId}`);
    assert.equal(den.status, 200, den.text);
    assert.equal(den.body.source.kind, "e2b");
    assert.equal(den.body.source.tags, "v1");
    assert.equal(den.body.source.template, "alice-src");

    const tags = await Template.getTags("e2b-mem");
    assert.deepEqual(tags.map((x) => [x.tag, x.buildId]), [["v1", info.buildId]]);
    const listed = await e2b("GET", "/templates/e2b-mem");
    assert.equal(listed.status, 200);
    assert.equal(listed.body.templateID, "e2b-mem");
    assert.deepEqual(listed.body.builds.map((b: { buildID: string; status: string }) => [b.buildID, b.status]), [[info.buildId, "ready"]]);

    // A plain name is the current version; name:tag the tagged build's.
    const plain = await Sandbox.create("e2b-mem");
    made.push(plain.sandboxId);
    const tagged = await Sandbox.create("e2b-mem:v1");
    made.push(tagged.sandboxId);
    const version = (await client(base, keys.alice)("GET", `/v1/sandboxes/${tagged.sandboxId}`)).body.template_version;
    assert.equal(version, den.body.version);
    await assert.rejects(Sandbox.create("e2b-mem:nope"), /no build tagged nope/);

    assert.equal(await Template.exists("e2b-mem"), true);
    assert.equal(await Template.exists("no-such-template"), false);
    assert.equal(await Template.exists("bobs"), true, "another owner's template exists (403)");
    assert.deepEqual((await e2b("GET", "/templates/aliases/bobs")).status, 403);
    assert.deepEqual((await e2b("GET", "/templates/aliases/base")).body, { templateID: "base", public: true });
    assert.deepEqual((await e2b("GET", "/templates/aliases/e2b-mem")).body, { templateID: "e2b-mem", public: false });
    assert.equal((await e2b("GET", "/templates/bobs")).status, 404, "another owner's template has no builds to show");

    assert.equal((await e2b("POST", "/templates/tags", { target: "e2b-mem:v1", tags: ["prod"] })).status, 400);
    assert.equal((await e2b("DELETE", "/templates/e2b-mem")).status, 204);
    assert.equal(await Template.exists("e2b-mem"), false);
  });

  test("a build that fails ends in error with its reason; the client throws BuildError", async () => {
    // (The memory host builds no steps: the failure is the host's, reported as E2B's reason.)
    const t = Template().fromTemplate("alice-src").runCmd("echo hi");
    await assert.rejects(Template.build(t, "e2b-fails"), (e: unknown) => e instanceof BuildError && /in-memory host does not build/.test(e.message));
  });

  test("requests and steps are checked before anything starts, each 400 naming what is wrong", async () => {
    const bad = async (path: string, body: unknown, pattern: RegExp, status = 400) => {
      const r = await e2b("POST", path, body);
      assert.equal(r.status, status, JSON.stringify(r.body));
      assert.equal(r.body.code, status);
      assert.match(r.body.message, pattern);
    };
    await bad("/v3/templates", { name: "Team/App" }, /lowercase letters, digits, _ and -/);
    await bad("/v3/templates", { name: "app:bad tag" }, /a tag is/);
    await bad("/v3/templates", { name: "app", minFreeDiskMb: 2048 }, /minFreeDiskMb/);
    await bad("/v3/templates", { name: "app", cpuCount: 99 }, /cpuCount/);
    await bad("/v3/templates", {}, /name is required/);
    await bad("/v3/templates", { name: "bobs" }, /belongs to another owner/, 409);
    await bad("/v3/templates", { name: "base" }, /host's own/, 409);

    const start = async (body: unknown, pattern: RegExp, status = 400) => {
      const a = await announce("e2b-steps");
      await bad(`/v2/templates/e2b-steps/builds/${a.buildID}`, body, pattern, status);
      // A start that was refused ends the build: its status says why.
      const s = await e2b("GET", `/templates/e2b-steps/builds/${a.buildID}/status`);
      assert.equal(s.body.status, "error");
      assert.match(s.body.reason.message, pattern);
    };
    await start({ fromTemplate: "alice-src", steps: [{ type: "ADD", args: ["x", "/x"] }] }, /step 1: "ADD" is not a step Den builds/);
    await start({ fromImage: "busybox:1", fromTemplate: "alice-src" }, /exactly one of fromImage and fromTemplate/);
    await start({ fromImage: "busybox:1", fromImageRegistry: { type: "aws", awsAccessKeyId: "AKIA", awsSecretAccessKey: "s3cret", awsRegion: "x" } }, /"aws" registries are not supported/);
    await start({ fromTemplate: "alice-src", steps: [{ type: "ENV", args: ["A", "1", "B"] }] }, /step 1: ENV takes/);
    await start({ fromTemplate: "alice-src", steps: [{ type: "RUN", args: ["true"] }, { type: "COPY", args: ["a.txt", "/a.txt", "", ""], filesHash: HASH }] }, /step 2: the files of COPY a\.txt .* were not uploaded/);
    await start({ fromTemplate: "alice-src", steps: [{ type: "COPY", args: ["a", "/a", "", "9"], filesHash: HASH }] }, /not octal/);
    await start({ fromTemplate: "bobs" }, /no such template/, 404);
    // A template source has its own shape: another is refused.
    const shaped = await announce("e2b-shape", { cpuCount: 4 });
    await bad(`/v2/templates/e2b-shape/builds/${shaped.buildID}`, { fromTemplate: "alice-src" }, /cpuCount\/memoryMB: a template built from template alice-src has its shape/);
    // No credentials in what the build rows keep or say.
    const rows = await m.server.cp.store.db.selectFrom("template_builds").selectAll().execute();
    assert.ok(rows.length > 5);
    assert.doesNotMatch(JSON.stringify(rows), /s3cret|AKIA/);
  });

  test("an announced build waits; its start is one only; one never started is given up after an hour", async () => {
    const a = await announce("e2b-wait", { tags: ["x", "y"], memoryMB: 1024 });
    assert.deepEqual(a.tags, ["x", "y"]);
    const s = await e2b("GET", `/templates/e2b-wait/builds/${a.buildID}/status?logsOffset=0`);
    assert.equal(s.status, 200);
    assert.deepEqual(s.body, { buildID: a.buildID, templateID: "e2b-wait", status: "waiting", logEntries: [], logs: [] });
    assert.equal((await e2b("GET", `/templates/other-name/builds/${a.buildID}/status`)).status, 404);
    assert.equal((await e2b("GET", `/templates/e2b-wait/builds/${a.buildID}/status`, undefined, "bob")).status, 404, "another owner's build does not exist");
    const listed = await e2b("GET", "/templates/e2b-wait");
    assert.equal(listed.body.builds[0].status, "waiting");
    assert.equal(listed.body.builds[0].memoryMB, 1024);

    const b = await announce("e2b-once");
    const first = await e2b("POST", `/v2/templates/e2b-once/builds/${b.buildID}`, { fromTemplate: "alice-src" });
    assert.equal(first.status, 202, JSON.stringify(first.body));
    assert.equal((await e2b("POST", `/v2/templates/e2b-once/builds/${b.buildID}`, { fromTemplate: "alice-src" })).status, 409);

    // An hour later (the row's clock moved back), the next request gives the waiting one up.
    await m.server.cp.store.db.updateTable("template_builds").set({ created_at: Date.now() - 2 * 3600_000 }).where("id", "=", a.buildID).execute();
    await announce("e2b-wait2");
    const gone = await e2b("GET", `/templates/e2b-wait/builds/${a.buildID}/status`);
    assert.equal(gone.body.status, "error");
    assert.match(gone.body.reason.message, /never started/);
  });

  test("the quota of templates per owner holds at the request", async () => {
    const carol = client(base, keys.carol);
    for (const name of ["c1", "c2", "c3"]) assert.equal((await carol("POST", "/v1/templates", { name })).status, 201);
    const r = await e2b("POST", "/v3/templates", { name: "c4" }, "carol");
    assert.equal(r.status, 429, JSON.stringify(r.body));
    assert.match(r.body.message, /at most 3 templates/);
  });

  test("file links: absent then present; the upload needs the link's token, not a key; forged, expired and oversize uploads are refused", async () => {
    const link = await e2b("GET", `/templates/e2b-files/files/${HASH}`);
    assert.equal(link.status, 201);
    assert.equal(link.body.present, false);
    const url = new URL(link.body.url as string);
    assert.equal(url.origin, new URL(base).origin, "the link is on the API's origin");
    const tar = Buffer.alloc(1024);
    const put = (u: string | URL, body: Buffer, headers: Record<string, string> = {}) => fetch(u, { method: "PUT", body, headers, duplex: "half" } as RequestInit);

    const forged = new URL(url);
    forged.searchParams.set("token", url.searchParams.get("token")!.replace(/.$/, (c) => (c === "A" ? "B" : "A")));
    assert.equal((await put(forged, tar)).status, 403);
    const otherHash = new URL(url.toString().replace(HASH, "cd".repeat(32)));
    assert.equal((await put(otherHash, tar)).status, 403, "a token opens its own files only");
    const bare = new URL(url);
    bare.search = "";
    const missing = await put(bare, tar);
    assert.equal(missing.status, 401);
    assert.equal((await missing.json() as { code: number }).code, 401, "E2B's error body");
    const expired = new URL(url);
    expired.searchParams.set("token", (await UploadLinks.open(m.server.cp.store)).token("alice", HASH, Date.now() - 1000));
    assert.equal((await put(expired, tar)).status, 401);
    assert.equal((await put(url, Buffer.alloc(2 * 1024 * 1024))).status, 413, "over DEN_MAX_CONTEXT_MB");
    assert.equal((await e2b("GET", `/templates/e2b-files/files/${HASH}`)).body.present, false, "nothing was kept of the refused uploads");

    const ok = await put(url, tar);
    assert.equal(ok.status, 200, await ok.text());
    const again = await e2b("GET", `/templates/e2b-files/files/${HASH}`);
    assert.equal(again.body.present, true);
    assert.equal((await e2b("GET", `/templates/e2b-files/files/${HASH}`, undefined, "bob")).body.present, false, "another owner's files are not theirs");
    assert.equal((await e2b("GET", "/templates/e2b-files/files/not-a-hash")).status, 400);
    const noKey = await fetch(`${base}/templates/e2b-files/files/${HASH}`);
    assert.equal(noKey.status, 401);
  });
});
