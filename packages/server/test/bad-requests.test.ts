// needs: one VM
import { before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { connect } from "node:net";
import { ADMIN_KEY, serverFixture } from "./helpers.js";

/**
 * Requests that once got a 500: each is the caller's doing (or, for a move across
 * filesystems, nothing wrong at all), so each gets a 4xx with a Den error code, or succeeds.
 */
describe("requests that are the caller's doing never get a 5xx", () => {
  const f = serverFixture();
  let id = "";
  const sh = async (cmd: string) => {
    const r = await f.api("POST", `/v1/sandboxes/${id}/exec`, { cmd });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.exit_code, 0, `${cmd}: ${r.body.stderr}`);
    return r.body.stdout as string;
  };
  /** A 4xx with the error body every Den error has. */
  const refused = (r: { status: number; body: any; text: string }, code: string) => {
    assert.ok(r.status >= 400 && r.status < 500, `status ${r.status}: ${r.text}`);
    assert.equal(r.body?.error?.code, code, r.text);
    assert.ok(r.body.error.message.length > 0);
  };

  before(async () => {
    const r = await f.api("POST", "/v1/sandboxes", { ttl_seconds: 900 });
    assert.equal(r.status, 201, r.text);
    id = r.body.id;
  });

  test("a file whose read fails in the guest (EIO from /proc/self/mem): unreadable", async () => {
    const r = await f.api("GET", `/v1/sandboxes/${id}/files?path=/proc/self/mem`);
    refused(r, "unreadable");
    assert.match(r.body.error.message, /Input\/output error/);
  });

  test("a symlink loop (ELOOP) on read and on list: invalid_argument", async () => {
    await sh("cd /root && ln -s loop-a loop-b && ln -s loop-b loop-a");
    const read = await f.api("GET", `/v1/sandboxes/${id}/files?path=/root/loop-a`);
    refused(read, "invalid_argument");
    assert.match(read.body.error.message, /symbolic links/);
    refused(await f.api("GET", `/v1/sandboxes/${id}/files/list?path=/root/loop-b`), "invalid_argument");
  });

  test("a move across filesystems (EXDEV: /tmp is a tmpfs, /root the disk) is done as copy + delete", async () => {
    const data = Buffer.from("moved across filesystems\n".repeat(1000));
    const up = await f.api("PUT", `/v1/sandboxes/${id}/files?path=/tmp/x.txt`, data, { "content-type": "application/octet-stream" });
    assert.equal(up.status, 200, up.text);
    await sh("chmod 0751 /tmp/x.txt");
    const mv = await f.api("POST", `/v1/sandboxes/${id}/files/rename`, { from: "/tmp/x.txt", to: "/root/x.txt" });
    assert.equal(mv.status, 204, mv.text);
    const res = await fetch(`${f.server.url}/v1/sandboxes/${id}/files?path=/root/x.txt`, { headers: { authorization: `Bearer ${ADMIN_KEY}` } });
    assert.equal(res.status, 200);
    assert.ok(Buffer.from(await res.arrayBuffer()).equals(data));
    assert.equal((await f.api("GET", `/v1/sandboxes/${id}/files/stat?path=/root/x.txt`)).body.mode, 0o751);
    refused(await f.api("GET", `/v1/sandboxes/${id}/files/stat?path=/tmp/x.txt`), "file_not_found");

    // A directory tree, back the other way: files, a symlink, an empty directory, modes.
    await sh("mkdir -p /root/tree/sub/empty && echo deep > /root/tree/sub/f && ln -s sub/f /root/tree/link && chmod 0700 /root/tree/sub");
    const mvDir = await f.api("POST", `/v1/sandboxes/${id}/files/rename`, { from: "/root/tree", to: "/tmp/tree" });
    assert.equal(mvDir.status, 204, mvDir.text);
    assert.equal(await sh("cat /tmp/tree/sub/f; readlink /tmp/tree/link; stat -c %a /tmp/tree/sub; test -d /tmp/tree/sub/empty && test ! -e /root/tree && echo gone"), "deep\nsub/f\n700\ngone\n");

    // Across filesystems rename's rules still hold: a directory never replaces a non-empty one.
    await sh("mkdir -p /tmp/full/x /root/d2 && echo keep > /root/d2/keep");
    refused(await f.api("POST", `/v1/sandboxes/${id}/files/rename`, { from: "/root/d2", to: "/tmp/full" }), "not_empty");
    assert.equal(await sh("cat /root/d2/keep; ls -A /tmp/full; ls -A /tmp | grep -c den-tmp || true"), "keep\nx\n0\n");
  });

  test("too many metadata filters: invalid_argument with the bound", async () => {
    const q = Array.from({ length: 1000 }, (_, i) => `metadata.${i.toString(36)}=v`).join("&");
    const r = await f.api("GET", `/v1/sandboxes?${q}`);
    refused(r, "invalid_argument");
    assert.match(r.body.error.message, /at most 32/);
    // At the bound it is an ordinary (empty) list.
    const ok = await f.api("GET", `/v1/sandboxes?${Array.from({ length: 32 }, (_, i) => `metadata.k${i}=v`).join("&")}`);
    assert.equal(ok.status, 200, ok.text);
    assert.deepEqual(ok.body.sandboxes, []);
  });

  test("usage periods outside the dates Den can represent: invalid_argument", async () => {
    for (const q of ["to=-271821-04-20T00:00:00Z", "from=-271821-04-20T00:00:00Z", "to=%2B275760-09-13T00:00:00Z", "from=0001-01-01T00:00:00Z"]) {
      refused(await f.api("GET", `/v1/usage?${q}`), "invalid_argument");
    }
    assert.equal((await f.api("GET", "/v1/usage?from=2020-01-01T00:00:00Z")).status, 200);
  });

  test("a signed URL asked for with a malformed Host header: invalid_argument", async () => {
    const body = JSON.stringify({ port: 8000 });
    for (const host of ["[::1", "a b", "", "a/b", "u@h"]) {
      const r = await rawPost(f.server.url, `/v1/sandboxes/${id}/urls`, host, body);
      refused(r, "invalid_argument");
    }
    const good = await rawPost(f.server.url, `/v1/sandboxes/${id}/urls`, "den.example:8443", body);
    assert.equal(good.status, 201, good.text);
    assert.ok(good.body.path_url.startsWith("http://den.example:8443/v1/"), good.body.path_url);
    assert.ok(good.body.url.startsWith(`http://8000-${id.replace("_", "-")}.localhost:8443/`), good.body.url);
  });
});

/** A POST with exactly this Host header (fetch would not send a malformed one). */
function rawPost(base: string, path: string, host: string, body: string): Promise<{ status: number; body: any; text: string }> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const s = connect(Number(port), hostname);
    let raw = "";
    s.on("data", (d) => (raw += d));
    s.on("error", reject);
    s.on("end", () => {
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(raw)?.[1] ?? 0);
      const text = raw.slice(raw.indexOf("\r\n\r\n") + 4);
      let parsed: unknown;
      try { parsed = JSON.parse(text); } catch { parsed = undefined; }
      resolve({ status, body: parsed, text: raw.slice(0, 2000) });
    });
    // write, not end: a client that half-closes before the answer may find the socket closed
    // under it (the server's answer waits on the database, which on Postgres is a round trip).
    s.write(`POST ${path} HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${ADMIN_KEY}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
  });
}
