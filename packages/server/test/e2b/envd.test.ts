// needs: one VM, network namespace (open egress), the e2b client
/**
 * Den's envd driven by the real `e2b` client against a real microVM. The client's Sandbox
 * objects are built directly (its protected constructor) until the E2B REST routes exist;
 * the EnvdSandboxes seam here is backed by a real Den server's control plane.
 */
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";
import type { AddressInfo } from "node:net";
import type { FastifyInstance } from "fastify";
import { CommandExitError, FileNotFoundError, Sandbox, TimeoutError, AuthenticationError, getSignature } from "e2b";
import { buildEnvdServer, checkCredentials, EnvdDenied, EnvdUnavailable, type EnvdSandboxes, type RunningServer } from "../../src/index.js";
import { ADMIN_KEY, client, testServer, waitFor } from "../helpers.js";

/** Until the guest runs processes as the asked user (another branch), they run as root. */

const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

describe("envd with the e2b client", () => {
  let server: RunningServer;
  let envd: FastifyInstance;
  let url: string;
  let id: string;
  let sbx: Sandbox;
  const token = randomBytes(24).toString("hex");
  const gone = new Map<string, Set<() => void>>();

  const make = (sandboxId: string, envdAccessToken: string | null = token): Sandbox =>
    new (Sandbox as any)({ sandboxId, envdVersion: "0.6.4", envdAccessToken: envdAccessToken ?? undefined, sandboxUrl: url, apiKey: "x", debug: false });

  before(async () => {
    server = await testServer();
    const api = client(server.url);
    const created = await api("POST", "/v1/sandboxes", { ttl_seconds: 1800, env: { SBX_ENV: "from-create" } });
    assert.equal(created.status, 201, created.text);
    id = created.body.id;
    const cp = server.cp;
    const seam: EnvdSandboxes = {
      async open(sandboxId, creds) {
        if (!creds.accessToken && !creds.apiKey && !creds.signature) throw new EnvdDenied();
        const row = await cp.store.sandboxes.get(sandboxId);
        if (!row || row.state !== "running") throw new EnvdUnavailable(`sandbox ${sandboxId} is not running`);
        await checkCredentials(creds, sandboxId === id ? token : undefined, async (key) => (await cp.store.keys.find(key))?.owner === row.owner);
        const guest = await cp.guests.reach(sandboxId);
        return {
          guest,
          env: JSON.parse(row.env) as Record<string, string>,
          command: (call) => cp.guests.command(row, call),
          execStarted: (cmd, info) => cp.guests.execStarted(sandboxId, cmd, { surface: "envd", pid: info.pid }).catch(() => undefined),
          execEnded: (exit, info) => cp.guests.execEnded(sandboxId, exit, { surface: "envd", pid: info.pid }).catch(() => undefined),
          hold: (kind) => (kind === "watch" ? cp.guests.slots.follows : cp.guests.slots.streams).take(row.owner),
          touch: () => void cp.activity.touch(sandboxId).catch(() => undefined),
          onGone(cb) {
            const set = gone.get(sandboxId) ?? new Set();
            gone.set(sandboxId, set.add(cb));
            return () => set.delete(cb);
          },
        };
      },
    };
    envd = await buildEnvdServer(seam);
    await envd.listen({ port: 0, host: "127.0.0.1" });
    url = `http://127.0.0.1:${(envd.server.address() as AddressInfo).port}`;
    sbx = make(id);
  });

  after(async () => {
    await envd?.close();
    if (server) {
      const api = client(server.url);
      for (const s of (await api("GET", "/v1/sandboxes?limit=200")).body?.sandboxes ?? []) await api("DELETE", `/v1/sandboxes/${s.id}`);
      await server.close();
    }
  });

  it("runs a command: stdout, stderr, exit code; non-zero is a CommandExitError", async () => {
    const r = await sbx.commands.run("echo out; echo err >&2");
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, "out\n");
    assert.equal(r.stderr, "err\n");
    const e = await sbx.commands.run("echo partial; exit 3").catch((x: unknown) => x);
    assert.ok(e instanceof CommandExitError, String(e));
    assert.equal(e.exitCode, 3);
    assert.equal(e.stdout, "partial\n");
  });

  it("envs (over the sandbox's own) and cwd, absolute and relative to the user's home", async () => {
    const r = await sbx.commands.run("echo $FOO $SBX_ENV; pwd", { envs: { FOO: "bar" }, cwd: "/tmp" });
    assert.equal(r.stdout, "bar from-create\n/tmp\n");
    await sbx.files.makeDir("/root/envd-cwd");
    const rel = await sbx.commands.run("pwd", { user: "root", cwd: "envd-cwd" });
    assert.equal(rel.stdout, "/root/envd-cwd\n");
    assert.equal((await sbx.commands.run("id -un")).stdout, "user\n");
  });

  it("a command's timeout is a TimeoutError and kills it, even in the background", async () => {
    const e = await sbx.commands.run("sleep 31.5", { timeoutMs: 1500 }).catch((x: unknown) => x);
    assert.ok(e instanceof TimeoutError, String(e));
    const bg = await sbx.commands.run("sleep 32.5", { background: true, timeoutMs: 1500 });
    await bg.disconnect();
    await waitFor("timed-out processes gone", async () => {
      const r = await sbx.commands.run("pgrep -f 'sleep 3[12].5' || true");
      return r.stdout.trim() === "" ? true : undefined;
    }, 10_000, 300);
  });

  it("a background command survives its stream being dropped; connect gets its further output; kill reaps it", async () => {
    // No timeout of its own: only the kill may end it.
    const h = await sbx.commands.run("while true; do echo tick; sleep 0.2; done", { background: true, timeoutMs: 0 });
    const pid = h.pid;
    await h.disconnect();
    assert.ok((await sbx.commands.list()).some((p) => p.pid === pid), "listed while running");
    let seen = "";
    const c = await sbx.commands.connect(pid, { onStdout: (d) => void (seen += d) });
    await waitFor("output after reconnecting", async () => (seen.includes("tick") ? true : undefined), 10_000, 100);
    assert.equal(await sbx.commands.kill(pid), true);
    const end = await Promise.race([c.wait().catch((x: unknown) => x), new Promise((r) => setTimeout(() => r("still running 10 s after the kill"), 10_000))]);
    assert.ok(end instanceof CommandExitError, `a killed command ends with an error, got ${String(end)}`);
    const alive = await sbx.commands.run(`kill -0 ${pid}`).catch((x: unknown) => x);
    assert.ok(alive instanceof CommandExitError, "kill -0 fails: the process is gone and reaped");
    assert.equal(await sbx.commands.kill(pid), false, "an unknown pid is not_found -> false");
    assert.ok(!(await sbx.commands.list()).some((p) => p.pid === pid));
  });

  it("stdin: sendStdin then closeStdin", async () => {
    const h = await sbx.commands.run("cat; echo done", { background: true, stdin: true });
    await h.sendStdin("hello\n");
    await h.closeStdin();
    const r = await h.wait();
    assert.equal(r.stdout, "hello\ndone\n");
  });

  it("a PTY: input, output, resize", async () => {
    let out = "";
    const dec = new TextDecoder();
    const t = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => void (out += dec.decode(d, { stream: true })) });
    const enc = new TextEncoder();
    await sbx.pty.sendInput(t.pid, enc.encode("stty size; echo PTY_$((6*7))\n"));
    await waitFor("pty output", async () => (out.includes("PTY_42") ? true : undefined), 15_000, 100);
    assert.match(out, /24 80/);
    await sbx.pty.resize(t.pid, { cols: 100, rows: 30 });
    await sbx.pty.sendInput(t.pid, enc.encode("stty size\n"));
    await waitFor("resized", async () => (out.includes("30 100") ? true : undefined), 15_000, 100);
    await sbx.pty.sendInput(t.pid, enc.encode("exit\n"));
    const r = await t.wait();
    assert.equal(r.exitCode, 0);
  });

  it("files: text and a 20 MB binary round trip (by hash), a streamed and a gzip upload", async () => {
    const w = await sbx.files.write("/tmp/envd/a.txt", "hello");
    assert.equal(w.path, "/tmp/envd/a.txt");
    assert.equal(w.name, "a.txt");
    assert.equal(await sbx.files.read("/tmp/envd/a.txt"), "hello");
    const big = randomBytes(20 * 1024 * 1024);
    await sbx.files.write("/tmp/envd/big.bin", new Blob([big]));
    const back = await sbx.files.read("/tmp/envd/big.bin", { format: "bytes" });
    assert.equal(back.length, big.length);
    assert.equal(sha(back), sha(big));
    assert.equal((await sbx.commands.run("sha256sum /tmp/envd/big.bin")).stdout.split(" ")[0], sha(big));
    const streamed = randomBytes(300_000);
    await sbx.files.write("/tmp/envd/streamed.bin", new Blob([streamed]).stream());
    assert.equal(sha(await sbx.files.read("/tmp/envd/streamed.bin", { format: "bytes" })), sha(streamed));
    await sbx.files.write("/tmp/envd/gz.txt", "zipped".repeat(1000), { gzip: true });
    assert.equal(await sbx.files.read("/tmp/envd/gz.txt", { gzip: true }), "zipped".repeat(1000));
    await sbx.files.write("/tmp/envd/empty.txt", "");
    assert.equal(await sbx.files.read("/tmp/envd/empty.txt"), "");
  });

  it("files: several in one multipart upload; a relative path lands in the user's home", async () => {
    const r = await sbx.files.write([{ path: "/tmp/envd/m1.txt", data: "one" }, { path: "/tmp/envd/m2.txt", data: "two" }]);
    assert.deepEqual(r.map((f) => f.path), ["/tmp/envd/m1.txt", "/tmp/envd/m2.txt"]);
    assert.equal(await sbx.files.read("/tmp/envd/m2.txt"), "two");
    const rel = await sbx.files.write("rel.txt", "r", { user: "root" });
    assert.equal(rel.path, "/root/rel.txt");
    assert.equal(await sbx.files.read("/root/rel.txt"), "r");
  });

  it("files: metadata as user.e2b.* xattrs", async () => {
    // On the root filesystem: the guest's /tmp is a tmpfs, which keeps no user.* xattrs on its kernel.
    await sbx.files.write("/home/user/meta.txt", "m", { metadata: { k: "v", other: "x y" } });
    assert.deepEqual((await sbx.files.getInfo("/home/user/meta.txt")).metadata, { k: "v", other: "x y" });
    assert.equal((await sbx.commands.run("python3 -c \"import os; print(os.getxattr('/home/user/meta.txt', 'user.e2b.k').decode())\"")).stdout, "v\n", "stored as user.e2b.* in the guest");
  });

  it("files: FileNotFoundError, list with depth, makeDir, rename, remove, exists, entry fields", async () => {
    assert.ok((await sbx.files.read("/tmp/envd/nope").catch((x: unknown) => x)) instanceof FileNotFoundError);
    assert.ok((await sbx.files.getInfo("/tmp/envd/nope").catch((x: unknown) => x)) instanceof FileNotFoundError);
    assert.equal(await sbx.files.makeDir("/tmp/envd/tree/a/b"), true);
    assert.equal(await sbx.files.makeDir("/tmp/envd/tree/a/b"), false);
    await sbx.files.write("/tmp/envd/tree/a/b/c.txt", "c");
    assert.deepEqual((await sbx.files.list("/tmp/envd/tree")).map((e) => e.name), ["a"]);
    const deep = await sbx.files.list("/tmp/envd/tree", { depth: 3 });
    assert.deepEqual(deep.map((e) => e.path).sort(), ["/tmp/envd/tree/a", "/tmp/envd/tree/a/b", "/tmp/envd/tree/a/b/c.txt"]);
    const file = deep.find((e) => e.name === "c.txt")!;
    assert.equal(file.type, "file");
    assert.equal(file.size, 1);
    assert.match(file.permissions, /^-rw-r--r--$/);
    assert.equal(file.mode, 0o644);
    assert.equal(file.owner, "user");
    assert.ok(file.modifiedTime instanceof Date && Math.abs(file.modifiedTime.getTime() - Date.now()) < 600_000);
    assert.equal(deep.find((e) => e.name === "a")!.type, "dir");
    assert.match(deep.find((e) => e.name === "a")!.permissions, /^d/);
    const moved = await sbx.files.rename("/tmp/envd/tree/a/b/c.txt", "/tmp/envd/tree/moved.txt");
    assert.equal(moved.path, "/tmp/envd/tree/moved.txt");
    assert.equal(await sbx.files.exists("/tmp/envd/tree/a/b/c.txt"), false);
    assert.equal(await sbx.files.exists("/tmp/envd/tree/moved.txt"), true);
    await sbx.files.remove("/tmp/envd/tree");
    assert.equal(await sbx.files.exists("/tmp/envd/tree"), false);
    await sbx.commands.run("ln -s /etc/hostname /tmp/envd/link");
    const link = await sbx.files.getInfo("/tmp/envd/link");
    assert.equal(link.type, "file", "as envd: the type of what it leads to");
    assert.equal(link.symlinkTarget, "/etc/hostname");
  });

  it("files: symlinks as envd reports them, a listing's order and types, removing what is not there", async () => {
    await sbx.commands.run([
      "mkdir -p /tmp/envd/ln/sub /tmp/envd/ln/a && cd /tmp/envd/ln",
      "echo f > f.txt && touch B.txt sub/x a/y && chmod 750 sub",
      "ln -s f.txt rel && ln -s ../ln/sub todir && ln -s /tmp/envd/ln/rel chain && ln -s nowhere broken && mkfifo fifo",
    ].join(" && "));
    const rel = await sbx.files.getInfo("/tmp/envd/ln/rel");
    assert.equal(rel.type, "file");
    assert.equal(rel.symlinkTarget, "/tmp/envd/ln/f.txt", "a relative target, against the link's directory");
    assert.match(rel.permissions, /^L/);
    assert.equal(rel.mode, 0o644, "the target's permission bits");
    assert.equal((await sbx.files.getInfo("/tmp/envd/ln/chain")).symlinkTarget, "/tmp/envd/ln/f.txt", "a chain to its end");
    const todir = await sbx.files.getInfo("/tmp/envd/ln/todir");
    assert.equal(todir.type, "dir");
    assert.equal(todir.symlinkTarget, "/tmp/envd/ln/sub");
    assert.equal(todir.mode, 0o750);
    const broken = await sbx.files.getInfo("/tmp/envd/ln/broken");
    assert.equal(broken.type, undefined, "FILE_TYPE_UNSPECIFIED: nothing at its end");
    assert.equal(broken.symlinkTarget, "/tmp/envd/ln/broken", "envd gives a broken link's own path");

    // On the wire: every entry, depth first, by name, links not followed; a broken link and a FIFO unspecified.
    const raw = await fetch(`${url}/filesystem.Filesystem/ListDir`, { method: "POST", headers: { "content-type": "application/json", "e2b-sandbox-id": id, "x-access-token": token }, body: JSON.stringify({ path: "/tmp/envd/ln", depth: 2 }) });
    const wire = ((await raw.json()) as { entries: Array<{ path: string; type: string }> }).entries;
    assert.deepEqual(wire.map((e) => `${e.path.slice("/tmp/envd/ln/".length)} ${e.type.replace("FILE_TYPE_", "")}`), [
      "B.txt FILE", "a DIRECTORY", "a/y FILE", "broken UNSPECIFIED", "chain FILE", "f.txt FILE", "fifo UNSPECIFIED", "rel FILE", "sub DIRECTORY", "sub/x FILE", "todir DIRECTORY",
    ]);
    // The client leaves out the entries of no type it knows, as it does with E2B's envd.
    const listed = await sbx.files.list("/tmp/envd/ln", { depth: 2 });
    assert.deepEqual(listed.map((e) => e.path.slice("/tmp/envd/ln/".length)), ["B.txt", "a", "a/y", "chain", "f.txt", "rel", "sub", "sub/x", "todir"]);
    const type = (n: string) => listed.find((e) => e.name === n)!.type;
    assert.deepEqual(["B.txt", "a", "chain", "rel", "sub", "todir"].map(type), ["file", "dir", "file", "file", "dir", "dir"]);
    assert.equal(listed.find((e) => e.name === "rel")!.symlinkTarget, "/tmp/envd/ln/f.txt");
    // A link to a directory lists that directory, its entries under the path asked for.
    assert.deepEqual((await sbx.files.list("/tmp/envd/ln/todir")).map((e) => e.path), ["/tmp/envd/ln/todir/x"]);

    await sbx.files.remove("/tmp/envd/not-there");
    await sbx.files.remove("/tmp/envd/not/there/either");
    await sbx.files.remove("/tmp/envd/ln");
    assert.equal(await sbx.files.exists("/tmp/envd/ln"), false);
  });

  it("watchDir reports create, write and remove", async () => {
    await sbx.files.makeDir("/tmp/envd/w");
    const events: Array<{ name: string; type: string }> = [];
    const h = await sbx.files.watchDir("/tmp/envd/w", (e) => void events.push({ name: e.name, type: e.type }));
    try {
      await sbx.files.write("/tmp/envd/w/x.txt", "x");
      await waitFor("create + write", async () => (events.some((e) => e.name === "x.txt" && e.type === "create") && events.some((e) => e.name === "x.txt" && e.type === "write") ? true : undefined), 10_000, 100);
      await sbx.files.remove("/tmp/envd/w/x.txt");
      await waitFor("remove", async () => (events.some((e) => e.name === "x.txt" && e.type === "remove") ? true : undefined), 10_000, 100);
    } finally {
      await h.stop();
    }
  });

  it("the polling watcher (CreateWatcher, GetWatcherEvents, RemoveWatcher), as the Python client uses it", async () => {
    const rpc = async (method: string, body: unknown) => {
      const r = await fetch(`${url}/filesystem.Filesystem/${method}`, { method: "POST", headers: { "content-type": "application/json", "e2b-sandbox-id": id, "x-access-token": token }, body: JSON.stringify(body) });
      const text = await r.text();
      assert.equal(r.status, 200, `${method}: ${text}`);
      return JSON.parse(text) as Record<string, any>;
    };
    await sbx.files.makeDir("/tmp/envd/pw");
    const { watcherId } = await rpc("CreateWatcher", { path: "/tmp/envd/pw", recursive: false });
    assert.ok(typeof watcherId === "string" && watcherId.length > 0);
    await sbx.files.write("/tmp/envd/pw/p.txt", "p");
    const seen: Array<{ name: string; type: string }> = [];
    await waitFor("the polled create", async () => {
      seen.push(...((await rpc("GetWatcherEvents", { watcherId })).events ?? []));
      return seen.some((e) => e.name === "p.txt" && e.type === "EVENT_TYPE_CREATE") ? true : undefined;
    }, 10_000, 250);
    await rpc("RemoveWatcher", { watcherId });
    const after = await fetch(`${url}/filesystem.Filesystem/GetWatcherEvents`, { method: "POST", headers: { "content-type": "application/json", "e2b-sandbox-id": id, "x-access-token": token }, body: JSON.stringify({ watcherId }) });
    assert.equal(after.status, 404, "a removed watcher is gone");
    assert.equal(((await after.json()) as { code: string }).code, "not_found");
  });

  it("auth: no token is 401, a wrong one too; an unknown sandbox's health is 502", async () => {
    const list = (headers: Record<string, string>) => fetch(`${url}/process.Process/List`, { method: "POST", headers: { "content-type": "application/json", "e2b-sandbox-id": id, ...headers }, body: "{}" });
    assert.equal((await list({})).status, 401);
    assert.equal((await list({ "x-access-token": "wrong" })).status, 401);
    assert.equal((await list({ "x-access-token": token })).status, 200);
    assert.equal((await list({ "x-api-key": ADMIN_KEY })).status, 200, "the owner's Den API key also works");
    assert.equal((await list({ "x-api-key": "den_not_a_key" })).status, 401);
    const anonymous = await make(id, null).commands.list().catch((x: unknown) => x);
    assert.ok(anonymous instanceof AuthenticationError, String(anonymous));
    assert.equal((await fetch(`${url}/files?path=/etc/hostname`, { headers: { "e2b-sandbox-id": id } })).status, 401);
    assert.equal(await make("sbx_aaaaaaaaaaaaaaaa").isRunning(), false);
    assert.equal(await sbx.isRunning(), true);
  });

  it("signed URLs: a download and an upload work without the token; an expired or misused one is refused", async () => {
    const headers = { "e2b-sandbox-id": id };
    const down = await fetch(await sbx.downloadUrl("/tmp/envd/a.txt", { useSignatureExpiration: 60 }), { headers });
    assert.equal(down.status, 200);
    assert.equal(await down.text(), "hello");
    assert.equal(down.headers.get("x-content-type-options"), "nosniff");
    assert.equal(down.headers.get("content-security-policy"), "sandbox");
    assert.match(down.headers.get("content-disposition") ?? "", /^attachment/);
    const form = new FormData();
    form.append("file", new Blob(["signed upload"]), "/tmp/envd/signed.txt");
    const up = await fetch(await sbx.uploadUrl("/tmp/envd/signed.txt"), { method: "POST", body: form, headers });
    assert.equal(up.status, 200, await up.clone().text());
    assert.equal(await sbx.files.read("/tmp/envd/signed.txt"), "signed upload");
    const expired = await getSignature({ path: "/tmp/envd/a.txt", operation: "read", user: undefined, expirationInSeconds: -10, envdAccessToken: token });
    const old = await fetch(`${url}/files?path=/tmp/envd/a.txt&signature=${expired.signature}&signature_expiration=${expired.expiration}`, { headers });
    assert.equal(old.status, 401);
    const readSig = new URL(await sbx.downloadUrl("/tmp/envd/signed.txt")).searchParams.get("signature")!;
    const misuse = await fetch(`${url}/files?path=/tmp/envd/signed.txt&signature=${readSig}`, { method: "POST", body: form, headers });
    assert.equal(misuse.status, 401, "a read signature does not allow a write");
  });

  it("killing the sandbox while a command streams cuts the stream: the client says it was killed", async () => {
    const h = await sbx.commands.run("sleep 1000", { background: true });
    await client(server.url)("DELETE", `/v1/sandboxes/${id}`);
    for (const cb of gone.get(id) ?? []) cb();
    const e = await h.wait().catch((x: unknown) => x);
    assert.ok(e instanceof TimeoutError, String(e));
    assert.match((e as Error).message, /killed|end of life/);
    assert.equal(await sbx.isRunning(), false);
  });

  describe("through Den's own E2B surface (E2B_API_URL, E2B_SANDBOX_URL)", () => {
    before(() => {
      process.env.E2B_API_URL = server.url;
      process.env.E2B_API_KEY = ADMIN_KEY;
      process.env.E2B_SANDBOX_URL = server.envdUrl!;
    });
    const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

    it("a background command a pause interrupts finishes after the resume, warm and cold; its timeout counts only while the sandbox runs", { timeout: 300_000 }, async () => {
      const e2 = await Sandbox.create("base", { timeoutMs: 600_000 });
      try {
        // Warm (E2B's pause): the command sleeps on across it.
        const h = await e2.commands.run("sleep 2; echo done > /tmp/x; echo out", { background: true });
        // Its timeout (6 s) is longer than it runs, not than the pause: a pause must not count.
        const t = await e2.commands.run("sleep 4; echo late > /tmp/t", { background: true, timeoutMs: 6_000 });
        assert.equal(await e2.pause(), true);
        await pause(8_000);
        const back = await Sandbox.connect(e2.sandboxId, { timeoutMs: 600_000 });
        // (By content, not existence: `echo > file` creates the file before it writes it.)
        const written = (s: Sandbox, path: string, want: string) => async () => ((await s.files.exists(path)) && (await s.files.read(path)) === want ? true : undefined);
        await waitFor("the warm command's file", written(back, "/tmp/x", "done\n"), 30_000, 250);
        await waitFor("the timed command's file (not killed by the pause)", written(back, "/tmp/t", "late\n"), 30_000, 250);
        await waitFor("both gone from the list", async () => (!(await back.commands.list()).some((p) => p.pid === h.pid || p.pid === t.pid) ? true : undefined), 15_000, 250);

        // Still running at the wake: connect follows it to its end and its output.
        const slow = await back.commands.run("sleep 3; echo slow", { background: true });
        assert.equal(await back.pause(), true);
        const again = await Sandbox.connect(e2.sandboxId, { timeoutMs: 600_000 });
        const r = await (await again.commands.connect(slow.pid)).wait();
        assert.equal(r.exitCode, 0);
        assert.equal(r.stdout, "slow\n");

        // Cold: its VM is restored mid-sleep; the guest runs it on, reported from its buffers.
        const c = await again.commands.run("sleep 3; echo cold > /tmp/c; echo cold-out", { background: true });
        const cold = await client(server.url)("POST", `/v1/sandboxes/${e2.sandboxId}/hibernate`, { mode: "cold" });
        assert.ok(cold.status < 300, cold.text);
        await waitFor("cold", async () => ((await client(server.url)("GET", `/v1/sandboxes/${e2.sandboxId}`)).body?.hibernate_mode === "cold" ? true : undefined), 120_000, 500);
        const woken = await Sandbox.connect(e2.sandboxId, { timeoutMs: 600_000 });
        await waitFor("the cold command's file", written(woken, "/tmp/c", "cold\n"), 30_000, 250);
        await waitFor("gone from the list", async () => (!(await woken.commands.list()).some((p) => p.pid === c.pid) ? true : undefined), 15_000, 250);
      } finally {
        await Sandbox.kill(e2.sandboxId).catch(() => undefined);
      }
    });

    it("signed URLs from the shared envd origin (no sandbox named) find their sandbox; expired or wrong ones are 401", async () => {
      const e2 = await Sandbox.create("base", { timeoutMs: 600_000 });
      try {
        await e2.files.write("/tmp/signed.txt", "signed over the shared origin");
        const u = await e2.downloadUrl("/tmp/signed.txt", { useSignatureExpiration: 60 });
        assert.ok(!u.includes(e2.sandboxId), u);
        const down = await fetch(u);
        assert.equal(down.status, 200, await down.clone().text());
        assert.equal(await down.text(), "signed over the shared origin");
        const form = new FormData();
        form.append("file", new Blob(["up"]), "/tmp/up.txt");
        const up = await fetch(await e2.uploadUrl("/tmp/up.txt"), { method: "POST", body: form });
        assert.equal(up.status, 200, await up.clone().text());
        assert.equal(await e2.files.read("/tmp/up.txt"), "up");
        const token = (e2 as unknown as { envdAccessToken: string }).envdAccessToken;
        const expired = await getSignature({ path: "/tmp/signed.txt", operation: "read", user: undefined, expirationInSeconds: -10, envdAccessToken: token });
        assert.equal((await fetch(`${server.envdUrl}/files?path=/tmp/signed.txt&signature=${encodeURIComponent(expired.signature)}&signature_expiration=${expired.expiration}`)).status, 401);
        const forged = await getSignature({ path: "/tmp/signed.txt", operation: "read", user: undefined, expirationInSeconds: 60, envdAccessToken: "wrong" });
        assert.equal((await fetch(`${server.envdUrl}/files?path=/tmp/signed.txt&signature=${encodeURIComponent(forged.signature)}&signature_expiration=${forged.expiration}`)).status, 401);
      } finally {
        await Sandbox.kill(e2.sandboxId).catch(() => undefined);
      }
    });
  });
});
