// needs: memory host, the e2b client
/**
 * Den's envd on the memory host, driven by the real `e2b` client through the real server
 * (E2B_API_URL, E2B_SANDBOX_URL): where its answers must match E2B's own envd. A listing's
 * order (Go's WalkDir: depth first, by name), removing what is not there, signed file URLs
 * fetched from the shared envd origin with no sandbox named, and a background command that
 * a pause interrupts. Symlinks (the in-memory guest has none) are checked over a small fake
 * guest here and on a real VM in e2b/envd.test.ts.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { posix } from "node:path";
import { Sandbox, getSignature } from "e2b";
import { DenError, type DirEntry, type FileStat, type HostGuest } from "@den/protocol";
import { LinkResolver, statEntry } from "../src/e2b/envd/entry.js";
import { walk } from "../src/e2b/envd/walk.js";
import { ADMIN_KEY, memoryServer, waitFor, type MemoryServer } from "./helpers.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("envd on the memory host, through the e2b client", () => {
  let m: MemoryServer;
  let sbx: Sandbox;

  before(async () => {
    m = await memoryServer();
    process.env.E2B_API_URL = m.server.url;
    process.env.E2B_API_KEY = ADMIN_KEY;
    process.env.E2B_SANDBOX_URL = m.server.envdUrl!;
    sbx = await Sandbox.create("base", { timeoutMs: 600_000 });
  });

  after(async () => {
    await Sandbox.kill(sbx?.sandboxId ?? "").catch(() => undefined);
    await m?.close();
  });

  test("a listing is in envd's order: depth first, each directory's entries by name (bytewise)", async () => {
    for (const p of ["b.txt", "a/z.txt", "a/b/deep.txt", "B.txt", "c/x.txt", "a.txt"]) await sbx.files.write(`/tmp/order/${p}`, p);
    const flat = await sbx.files.list("/tmp/order");
    assert.deepEqual(flat.map((e) => e.name), ["B.txt", "a", "a.txt", "b.txt", "c"]);
    assert.deepEqual(flat.map((e) => e.type), ["file", "dir", "file", "file", "dir"]);
    const deep = await sbx.files.list("/tmp/order", { depth: 3 });
    assert.deepEqual(deep.map((e) => e.path.slice("/tmp/order/".length)), ["B.txt", "a", "a/b", "a/b/deep.txt", "a/z.txt", "a.txt", "b.txt", "c", "c/x.txt"]);
    const two = await sbx.files.list("/tmp/order", { depth: 2 });
    assert.deepEqual(two.map((e) => e.path.slice("/tmp/order/".length)), ["B.txt", "a", "a/b", "a/z.txt", "a.txt", "b.txt", "c", "c/x.txt"]);
  });

  test("removing a path that is not there succeeds (envd's RemoveAll)", async () => {
    await sbx.files.remove("/tmp/never-there");
    await sbx.files.remove("/tmp/never/there/either");
    await sbx.files.write("/tmp/rm/x.txt", "x");
    await sbx.files.remove("/tmp/rm");
    assert.equal(await sbx.files.exists("/tmp/rm"), false);
    await sbx.files.remove("/tmp/rm");
  });

  test("signed URLs fetched from the shared envd origin, no sandbox named: found by their signature; expired or wrong: 401", async () => {
    await sbx.files.write("/tmp/signed/a.txt", "signed hello");
    const bare = (u: string) => {
      // The client's own URL, on E2B_SANDBOX_URL: no E2b-Sandbox-Id, no 49983-<id>. host.
      assert.ok(u.startsWith(m.server.envdUrl!) && !u.includes(sbx.sandboxId), u);
      return u;
    };
    const down = await fetch(bare(await sbx.downloadUrl("/tmp/signed/a.txt", { useSignatureExpiration: 60 })));
    assert.equal(down.status, 200, await down.clone().text());
    assert.equal(await down.text(), "signed hello");
    // Again (remembered), and one with no expiry.
    assert.equal((await fetch(await sbx.downloadUrl("/tmp/signed/a.txt", { useSignatureExpiration: 60 }))).status, 200);
    assert.equal(await (await fetch(await sbx.downloadUrl("/tmp/signed/a.txt"))).text(), "signed hello");

    const form = new FormData();
    form.append("file", new Blob(["uploaded signed"]), "/tmp/signed/up.txt");
    const up = await fetch(bare(await sbx.uploadUrl("/tmp/signed/up.txt", { useSignatureExpiration: 60 })), { method: "POST", body: form });
    assert.equal(up.status, 200, await up.clone().text());
    assert.equal(await sbx.files.read("/tmp/signed/up.txt"), "uploaded signed");

    // A second sandbox's URLs find that one, not the first.
    const other = await Sandbox.create("base", { timeoutMs: 600_000 });
    try {
      await other.files.write("/tmp/signed/a.txt", "the other one");
      assert.equal(await (await fetch(await other.downloadUrl("/tmp/signed/a.txt", { useSignatureExpiration: 60 }))).text(), "the other one");
      assert.equal(await (await fetch(await sbx.downloadUrl("/tmp/signed/a.txt", { useSignatureExpiration: 60 }))).text(), "signed hello");
    } finally {
      await Sandbox.kill(other.sandboxId);
    }

    const token = (sbx as unknown as { envdAccessToken: string }).envdAccessToken;
    const expired = await getSignature({ path: "/tmp/signed/a.txt", operation: "read", user: undefined, expirationInSeconds: -10, envdAccessToken: token });
    const old = await fetch(`${m.server.envdUrl}/files?path=/tmp/signed/a.txt&signature=${encodeURIComponent(expired.signature)}&signature_expiration=${expired.expiration}`);
    assert.equal(old.status, 401, "expired");
    const wrong = await getSignature({ path: "/tmp/signed/a.txt", operation: "read", user: undefined, expirationInSeconds: 60, envdAccessToken: "not-the-token" });
    assert.equal((await fetch(`${m.server.envdUrl}/files?path=/tmp/signed/a.txt&signature=${encodeURIComponent(wrong.signature)}&signature_expiration=${wrong.expiration}`)).status, 401, "made with another token");
    const good = new URL(await sbx.downloadUrl("/tmp/signed/a.txt", { useSignatureExpiration: 60 }));
    good.searchParams.set("path", "/etc/passwd");
    assert.equal((await fetch(good)).status, 401, "another path than signed");
    assert.equal((await fetch(`${m.server.envdUrl}/files?path=/tmp/signed/a.txt&signature=v1_garbage`)).status, 401, "not a signature");
    const readSig = new URL(await sbx.downloadUrl("/tmp/signed/up.txt", { useSignatureExpiration: 60 }));
    assert.equal((await fetch(readSig, { method: "POST", body: form })).status, 401, "a read signature does not write");
    assert.equal((await fetch(`${m.server.envdUrl}/files?path=/tmp/signed/a.txt`)).status, 502, "no signature and no sandbox named: as before");
  });

  test("a background command interrupted by a pause finishes after the resume; list no longer shows it", async () => {
    const h = await sbx.commands.run("sleep 1; echo done > /tmp/bg.txt; echo out", { background: true });
    assert.equal(await Sandbox.pause(sbx.sandboxId), true);
    await sleep(1500);
    const back = await Sandbox.connect(sbx.sandboxId);
    await waitFor("the command's file", async () => ((await back.files.exists("/tmp/bg.txt")) ? true : undefined), 15_000, 200);
    assert.equal(await back.files.read("/tmp/bg.txt"), "done\n");
    await waitFor("the command gone from the list", async () => (!(await back.commands.list()).some((p) => p.pid === h.pid) ? true : undefined), 15_000, 200);

    // Still running at the resume: connect follows it to its end, with the output it writes after.
    const slow = await back.commands.run("sleep 2; echo late; echo late > /tmp/bg2.txt", { background: true });
    assert.equal(await Sandbox.pause(back.sandboxId), true);
    const again = await Sandbox.connect(back.sandboxId);
    const followed = await again.commands.connect(slow.pid);
    const r = await followed.wait();
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, "late\n");
    assert.equal(await again.files.read("/tmp/bg2.txt"), "late\n");
  });

  // (The attached case is in e2b/envd.test.ts: here the client's own deadline racing the
  // server's end leaves a connection the server's close waits a keep-alive timeout for.)
  test("a command's timeout ends it in the background (kept by the guest)", async () => {
    const bg = await sbx.commands.run("sleep 31", { background: true, timeoutMs: 500 });
    await bg.disconnect();
    await waitFor("the timed-out command gone", async () => (!(await sbx.commands.list()).some((p) => p.pid === bg.pid) ? true : undefined), 10_000, 200);
  });
});

/** A guest of a few paths (lstat semantics, as the guest agent's stat), for the symlink rules alone. */
function fakeGuest(tree: Record<string, { type: FileStat["type"]; target?: string; mode?: number }>): HostGuest {
  const stat = async (p: string): Promise<FileStat> => {
    const n = tree[p];
    if (!n) throw new DenError("file_not_found", `${p}: No such file or directory`);
    return { type: n.type, size: n.target?.length ?? 3, mode: n.mode ?? (n.type === "symlink" ? 0o777 : n.type === "dir" ? 0o755 : 0o644), mtime_ms: 0, uid: 1000, gid: 1000, ...(n.target !== undefined ? { target: n.target } : {}) };
  };
  const list = async (dir: string): Promise<{ entries: DirEntry[]; truncated: boolean }> => {
    const names = Object.keys(tree).filter((p) => p !== dir && posix.dirname(p) === dir).map((p) => posix.basename(p));
    return { entries: names.map((name) => ({ name, type: tree[posix.join(dir, name)]!.type, size: 0, mode: 0, mtime_ms: 0 })), truncated: false };
  };
  return { files: { stat, list, getXattrs: async () => ({}) } } as unknown as HostGuest;
}

describe("symlinks as envd reports them", () => {
  const guest = fakeGuest({
    "/": { type: "dir" }, "/etc": { type: "dir" }, "/etc/hostname": { type: "file" },
    "/var": { type: "dir" }, "/run": { type: "dir" }, "/run/app": { type: "dir" }, "/var/run": { type: "symlink", target: "../run" },
    "/d": { type: "dir" }, "/d/rel": { type: "symlink", target: "../etc/hostname" }, "/d/abs": { type: "symlink", target: "/etc/hostname" },
    "/d/chain": { type: "symlink", target: "rel" }, "/d/todir": { type: "symlink", target: "/var/run/app" }, "/d/broken": { type: "symlink", target: "nowhere" },
    "/d/loop": { type: "symlink", target: "loop" }, "/d/sub": { type: "dir" }, "/d/sub/f": { type: "file", mode: 0o600 },
    "/d/exe": { type: "file", mode: 0o755 }, "/d/toexe": { type: "symlink", target: "exe" }, "/d/sock": { type: "other" },
  });
  const state = { noXattrs: true } as never;

  test("a link's info: the target's type and mode, its own permissions, symlinkTarget the absolute end of its chain", async () => {
    const rel = await statEntry(guest, state, "/d/rel");
    assert.equal(rel.type, "FILE_TYPE_FILE");
    assert.equal(rel.symlinkTarget, "/etc/hostname", "relative to the link's directory");
    assert.equal(rel.permissions, "Lrwxrwxrwx");
    assert.equal(rel.mode, 0o644, "the target's permission bits");
    assert.equal(rel.path, "/d/rel");
    assert.equal((await statEntry(guest, state, "/d/abs")).symlinkTarget, "/etc/hostname");
    assert.equal((await statEntry(guest, state, "/d/chain")).symlinkTarget, "/etc/hostname", "a chain to its end");
    const todir = await statEntry(guest, state, "/d/todir");
    assert.equal(todir.type, "FILE_TYPE_DIRECTORY");
    assert.equal(todir.symlinkTarget, "/run/app", "links on the way resolved too (EvalSymlinks)");
    assert.equal((await statEntry(guest, state, "/d/toexe")).mode, 0o755);
    for (const p of ["/d/broken", "/d/loop"]) {
      const e = await statEntry(guest, state, p);
      assert.equal(e.type, "FILE_TYPE_UNSPECIFIED", `${p}: nothing at its end`);
      assert.equal(e.symlinkTarget, p, `${p}: envd gives the link's own path`);
      assert.equal(e.mode, 0);
      assert.equal(e.permissions, "Lrwxrwxrwx");
    }
    assert.equal((await statEntry(guest, state, "/d/sock")).type, "FILE_TYPE_UNSPECIFIED");
    assert.equal((await statEntry(guest, state, "/etc/hostname")).symlinkTarget, undefined);
  });

  test("resolution: missing, loops, a file on the way", async () => {
    const r = new LinkResolver(guest);
    assert.deepEqual(await r.resolve("/var/run/app"), { ok: true, path: "/run/app", stat: await guest.files.stat("/run/app") });
    assert.equal((await r.resolve("/d/loop")).ok, false);
    assert.deepEqual(await r.resolve("/d/loop"), { ok: false, why: "loop" });
    assert.deepEqual(await r.resolve("/d/nothing"), { ok: false, why: "missing" });
    assert.deepEqual(await r.resolve("/etc/hostname/x"), { ok: false, why: "missing" });
  });

  test("a walk: depth first, by name, links not followed", async () => {
    const w = await walk(guest, "/d", 3);
    assert.deepEqual(w.map((x) => x.rel), ["abs", "broken", "chain", "exe", "loop", "rel", "sock", "sub", "sub/f", "todir", "toexe"]);
  });
});
