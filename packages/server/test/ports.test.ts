// needs: one VM
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { spawn } from "node:child_process";
import WebSocket from "ws";
import { ADMIN_KEY, CLI, client, runCli, serverFixture, testServer, waitFor } from "./helpers.js";

/** A WebSocket echo server and a POST echo in Python's standard library, for port 8001. */
const ECHO_SERVER = String.raw`
import base64, hashlib, http.server, struct
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200); self.send_header("Content-Length", str(len(body) + 5)); self.end_headers()
        self.wfile.write(b"echo:" + body)
    def do_GET(self):
        if self.headers.get("Upgrade", "").lower() != "websocket":
            msg = ("path=" + self.path + " auth=" + str(self.headers.get("Authorization")) + " cookie=" + str(self.headers.get("Cookie"))).encode()
            self.send_response(200); self.send_header("Content-Length", str(len(msg)))
            # What a hostile page would send to take the API's origin: Den drops these there.
            self.send_header("Set-Cookie", "guest=1; Path=/"); self.send_header("Service-Worker-Allowed", "/")
            self.end_headers(); self.wfile.write(msg); return
        key = self.headers["Sec-WebSocket-Key"]
        accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
        self.send_response(101); self.send_header("Upgrade", "websocket"); self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept); self.end_headers(); self.wfile.flush()
        while True:
            hdr = self.rfile.read(2)
            if len(hdr) < 2:
                self.close_connection = True; return
            op, n = hdr[0] & 15, hdr[1] & 127
            if n == 126: n = struct.unpack(">H", self.rfile.read(2))[0]
            elif n == 127: n = struct.unpack(">Q", self.rfile.read(8))[0]
            mask = self.rfile.read(4)
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(n)))
            if op == 8:
                self.wfile.write(b"\x88\x00"); self.close_connection = True; return
            out = b"echo:" + data
            head = bytes([0x80 | op]) + (bytes([len(out)]) if len(out) < 126 else bytes([126]) + struct.pack(">H", len(out)))
            self.wfile.write(head + out); self.wfile.flush()
http.server.ThreadingHTTPServer(("0.0.0.0", 8001), H).serve_forever()
`;

describe("exposed ports", () => {
  const f = serverFixture();

  const create = async () => {
    const r = await f.api("POST", "/v1/sandboxes", { template: "base" });
    assert.equal(r.status, 201, r.text);
    return r.body.id as string;
  };
  const sh = async (id: string, cmd: string) => {
    const r = await f.api("POST", `/v1/sandboxes/${id}/exec`, { cmd, timeout_seconds: 60 });
    assert.equal(r.status, 200, r.text);
    return r.body as { stdout: string; exit_code: number };
  };
  const startServer = async (id: string, cmd: string, port: number) => {
    assert.equal((await f.api("POST", `/v1/sandboxes/${id}/processes`, { cmd })).status, 201);
    await waitFor(`port ${port} listening`, async () => {
      const r = await f.api("GET", `/v1/sandboxes/${id}/ports`);
      return r.body.ports.some((p: { port: number }) => p.port === port) ? true : undefined;
    });
  };
  /** A raw GET through the server (fetch cannot set Host). */
  const get = (path: string, headers: Record<string, string> = {}) =>
    new Promise<{ status: number; body: string; headers: http.IncomingHttpHeaders }>((resolve, reject) => {
      const u = new URL(f.server.url);
      http.get({ host: u.hostname, port: u.port, path, headers }, (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (body += c));
        res.on("end", () => resolve({ status: res.statusCode!, body, headers: res.headers }));
      }).on("error", reject);
    });
  const auth = () => ({ authorization: `Bearer ${ADMIN_KEY}` });

  test("python3 -m http.server: the owner's key or a signed URL gets through; no key, another owner's key, a bad or expired URL do not", async () => {
    const id = await create();
    await sh(id, "mkdir -p /srv && echo 'hello from the sandbox' > /srv/hello.txt");
    await startServer(id, "cd /srv && python3 -m http.server 8000", 8000);
    const listed = (await f.api("GET", `/v1/sandboxes/${id}/ports`)).body;
    assert.equal(listed.state, "running");
    assert.ok(listed.ports.find((p: { port: number; process?: string }) => p.port === 8000 && /python/.test(p.process ?? "")), JSON.stringify(listed));

    const base = `/v1/sandboxes/${id}/ports/8000`;
    const ok = await get(`${base}/hello.txt`, auth());
    assert.equal(ok.status, 200);
    assert.equal(ok.body, "hello from the sandbox\n");
    const bare = await get(base, auth());
    assert.equal(bare.status, 308);
    assert.equal(bare.headers.location, `${base}/`);

    const none = await get(`${base}/hello.txt`);
    assert.equal(none.status, 401);
    assert.equal(JSON.parse(none.body).error.code, "unauthorized");
    const other = await f.api("POST", "/v1/keys", { owner: "someone-else" });
    assert.equal(other.status, 201, other.text);
    const foreign = await get(`${base}/hello.txt`, { authorization: `Bearer ${other.body.key}` });
    assert.equal(foreign.status, 404, "another owner's sandbox does not exist for them");
    const theirUrl = await f.api("POST", `/v1/sandboxes/${id}/urls`, { port: 8000 }, {});
    assert.equal(theirUrl.status, 201);
    const foreignUrl = await fetch(`${f.server.url}/v1/sandboxes/${id}/urls`, { method: "POST", headers: { authorization: `Bearer ${other.body.key}`, "content-type": "application/json" }, body: JSON.stringify({ port: 8000 }) });
    assert.equal(foreignUrl.status, 404, "no signed URL for another owner's sandbox");

    // A signed URL is the port's own origin; on the API's path it sends the browser there.
    const signed = theirUrl.body as { url: string; vhost_url: string; path_url: string; token: string; expires_at: string };
    const vhost = `8000-${id.replace("_", "-")}.localhost`;
    const hostPort = `${vhost}:${new URL(f.server.url).port}`;
    const u = new URL(signed.url);
    assert.equal(u.host, hostPort);
    assert.equal(u.pathname, "/");
    assert.equal(u.searchParams.get("den_token"), signed.token);
    assert.equal(signed.vhost_url, signed.url);
    assert.equal(new URL(signed.path_url).pathname, `${base}/`);
    // (a browser says it navigates; anything else is answered on the path, sandboxed)
    const plain = await get(`${base}/hello.txt?den_token=${signed.token}`);
    assert.equal(plain.status, 200);
    assert.equal(plain.body, "hello from the sandbox\n");
    assert.equal(plain.headers["content-security-policy"], "sandbox");
    assert.equal(plain.headers["set-cookie"], undefined, "no cookie on the API's origin");
    const redirected = await get(`${base}/hello.txt?den_token=${signed.token}`, { "sec-fetch-mode": "navigate" });
    assert.equal(redirected.status, 307);
    const to = new URL(String(redirected.headers.location));
    assert.equal(to.host, hostPort);
    assert.equal(to.pathname, "/hello.txt");
    assert.equal(to.searchParams.get("den_token"), signed.token);
    assert.equal(redirected.headers["set-cookie"], undefined, "no cookie on the API's origin");
    const viaUrl = await get(`/hello.txt?den_token=${signed.token}`, { host: hostPort });
    assert.equal(viaUrl.status, 200);
    assert.equal(viaUrl.body, "hello from the sandbox\n");
    assert.equal(viaUrl.headers["referrer-policy"], "same-origin", "the token in the URL does not leak through Referer");
    const cookie = String(viaUrl.headers["set-cookie"]);
    // Host-only by the browser's own rule (__Host-: Secure, Path=/, no Domain), and never sent from another site.
    assert.match(cookie, new RegExp(`^__Host-den_token=${signed.token.replace(".", "\\.")}; Path=/; Expires=[^;]+; HttpOnly; SameSite=Strict; Secure$`));
    assert.equal((await get("/hello.txt", { cookie: `__Host-den_token=${signed.token}`, host: hostPort })).status, 200, "the cookie alone");
    assert.equal((await get(`${base}/hello.txt`, { cookie: `den_token=${signed.token}` })).status, 401, "a cookie opens nothing on the API's path");
    assert.equal((await get(`/v1/sandboxes/${id}/ports/8001/?den_token=${signed.token}`)).status, 401, "a URL for one port opens no other");
    const tampered = signed.token.slice(0, -2) + (signed.token.endsWith("AA") ? "BB" : "AA");
    assert.equal((await get(`${base}/hello.txt?den_token=${tampered}`)).status, 401);
    const short = await f.api("POST", `/v1/sandboxes/${id}/urls`, { port: 8000, expires_in_seconds: 1 });
    await new Promise((r) => setTimeout(r, 2100));
    const expired = await get(`${base}/hello.txt?den_token=${short.body.token}`);
    assert.equal(expired.status, 401);
    assert.match(JSON.parse(expired.body).error.message, /expired/);
    assert.equal((await f.api("POST", `/v1/sandboxes/${id}/urls`, { port: 8000, expires_in_seconds: 999_999_999 })).status, 400);

    // The virtual host: the app sits at "/".
    const atRoot = await get("/hello.txt", { ...auth(), host: `${vhost}:${new URL(f.server.url).port}` });
    assert.equal(atRoot.status, 200);
    assert.equal(atRoot.body, "hello from the sandbox\n");
    assert.equal((await get(`/hello.txt?den_token=${signed.token}`, { host: vhost })).status, 200);
    assert.equal((await get("/hello.txt", { host: vhost })).status, 401);

    const refused = await get(`/v1/sandboxes/${id}/ports/9/`, auth());
    assert.equal(refused.status, 502);
    assert.equal(JSON.parse(refused.body).error.code, "connection_refused");
    await f.api("DELETE", `/v1/sandboxes/${id}`);
  });

  test("request bodies, WebSockets and raw TCP reach the guest's server; Den's key never does", async () => {
    const id = await create();
    await sh(id, `cat > /root/echo.py <<'EOF'\n${ECHO_SERVER}\nEOF`);
    await startServer(id, "python3 /root/echo.py", 8001);
    const base = `${f.server.url}/v1/sandboxes/${id}/ports/8001`;
    const post = await fetch(`${base}/x`, { method: "POST", headers: auth(), body: "a".repeat(100_000) });
    assert.equal(post.status, 200);
    assert.equal(await post.text(), "echo:" + "a".repeat(100_000));
    const seen = await (await fetch(`${base}/p?q=1&den_token=zzz`, { headers: { ...auth(), cookie: "app=1; den_token=x" } })).text();
    // (den_token=zzz is not valid, but the key is: the parameter is Den's and is taken out either way)
    assert.equal(seen, "path=/p?q=1 auth=None cookie=app=1");
    // On the API's origin a guest's response is sandboxed and sets no cookie, widens no worker's scope.
    const onApi = await fetch(`${base}/h`, { headers: auth() });
    assert.equal(onApi.headers.get("content-security-policy"), "sandbox");
    assert.equal(onApi.headers.get("x-content-type-options"), "nosniff");
    assert.equal(onApi.headers.get("set-cookie"), null);
    assert.equal(onApi.headers.get("service-worker-allowed"), null);
    // On the port's own host the guest's headers are its own business.
    const vhost = `8001-${id.replace("_", "-")}.localhost:${new URL(f.server.url).port}`;
    const own = await new Promise<http.IncomingMessage>((resolve, reject) => http.get({ host: "127.0.0.1", port: new URL(f.server.url).port, path: "/h", headers: { ...auth(), host: vhost } }, resolve).on("error", reject));
    own.resume();
    assert.equal(own.statusCode, 200);
    assert.deepEqual(own.headers["set-cookie"], ["guest=1; Path=/"]);
    assert.equal(own.headers["service-worker-allowed"], "/");
    // A browser's WebSocket to a port host must come from a page of that host.
    const wsStatus = (origin: string) => new Promise<number>((resolve, reject) => {
      const w = new WebSocket(`ws://127.0.0.1:${new URL(f.server.url).port}/socket`, { headers: { ...auth(), host: vhost }, origin });
      w.on("open", () => (w.close(), resolve(101)));
      w.on("unexpected-response", (_req, res) => resolve(res.statusCode!));
      w.on("error", reject);
    });
    assert.equal(await wsStatus(`http://8001-sbx-aaaaaaaaaaaaaaaa.localhost:${new URL(f.server.url).port}`), 403, "another sandbox's page");
    assert.equal(await wsStatus(f.server.url), 403, "the API's origin");
    assert.equal(await wsStatus(`http://${vhost}`), 101, "its own page");

    const ws = new WebSocket(`${base.replace("http", "ws")}/socket`, { headers: auth() });
    const replies: string[] = [];
    await new Promise<void>((resolve, reject) => {
      ws.on("open", () => ws.send("one"));
      ws.on("message", (d) => {
        replies.push(d.toString());
        if (replies.length === 1) ws.send("two");
        else ws.close();
      });
      ws.on("close", () => resolve());
      ws.on("error", reject);
    });
    assert.deepEqual(replies, ["echo:one", "echo:two"]);
    const noKey = new WebSocket(`${base.replace("http", "ws")}/socket`);
    const status = await new Promise<number>((resolve) => noKey.on("unexpected-response", (_req, res) => resolve(res.statusCode!)));
    assert.equal(status, 401);

    // Raw TCP (what `den forward` uses): the bytes of an HTTP request, spliced to the port.
    const u = new URL(f.server.url);
    const raw = await new Promise<string>((resolve, reject) => {
      const req = http.request({ host: u.hostname, port: u.port, path: `/v1/sandboxes/${id}/ports/8001`, headers: { ...auth(), connection: "Upgrade", upgrade: "den-tcp" } });
      req.on("upgrade", (res, socket) => {
        assert.equal(res.statusCode, 101);
        let out = "";
        socket.on("data", (d: Buffer) => (out += d.toString()));
        socket.on("end", () => resolve(out));
        socket.end("GET /raw HTTP/1.0\r\n\r\n");
      });
      req.on("error", reject);
      req.end();
    });
    assert.match(raw, /^HTTP\/1\.[01] 200/);
    assert.match(raw, /path=\/raw/);
    await f.api("DELETE", `/v1/sandboxes/${id}`);
  });

  test("a request to a cold-hibernated sandbox's port wakes it, and the same server answers", async () => {
    const id = await create();
    await sh(id, "mkdir -p /srv && echo \"pid $$\" > /srv/who.txt");
    await startServer(id, "cd /srv && python3 -m http.server 8000", 8000);
    const before = await get(`/v1/sandboxes/${id}/ports/8000/who.txt`, auth());
    assert.equal(before.status, 200);
    const pid = (await f.api("GET", `/v1/sandboxes/${id}/ports`)).body.ports.find((p: { port: number }) => p.port === 8000).pid;
    assert.equal((await f.api("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "cold" })).status, 200);
    assert.deepEqual((await f.api("GET", `/v1/sandboxes/${id}/ports`)).body, { ports: [], state: "hibernated" }, "listing does not wake it");
    const after = await get(`/v1/sandboxes/${id}/ports/8000/who.txt`, auth());
    assert.equal(after.status, 200);
    assert.equal(after.body, before.body);
    assert.equal((await f.api("GET", `/v1/sandboxes/${id}`)).body.state, "running");
    const again = (await f.api("GET", `/v1/sandboxes/${id}/ports`)).body.ports.find((p: { port: number }) => p.port === 8000);
    assert.equal(again.pid, pid, "the same server process, not a new one");
    await f.api("DELETE", `/v1/sandboxes/${id}`);
  });

  test("two forks each serve their own page on port 8000", async () => {
    const id = await create();
    await sh(id, "mkdir -p /srv && cd /srv && nohup python3 -m http.server 8000 >/dev/null 2>&1 &");
    await waitFor("port 8000", async () => ((await f.api("GET", `/v1/sandboxes/${id}/ports`)).body.ports.some((p: { port: number }) => p.port === 8000) ? true : undefined));
    const forked = await f.api("POST", `/v1/sandboxes/${id}/fork`, { count: 2 });
    assert.equal(forked.status, 201, forked.text);
    const kids = (forked.body.sandboxes as Array<{ id: string }>).map((k) => k.id);
    for (const k of kids) await sh(k, `echo ${k} > /srv/me.txt`);
    for (const k of kids) {
      const r = await get(`/v1/sandboxes/${k}/ports/8000/me.txt`, auth());
      assert.equal(r.status, 200);
      assert.equal(r.body.trim(), k);
    }
    for (const s of [id, ...kids]) await f.api("DELETE", `/v1/sandboxes/${s}`);
  });

  test("the CLI: `den port` lists and signs, `den forward ID 8000 LOCALPORT` serves the guest's page on a local port", async () => {
    const id = await create();
    await sh(id, "mkdir -p /srv && echo 'forwarded page' > /srv/index.html");
    await startServer(id, "cd /srv && python3 -m http.server 8000", 8000);
    const env = { DEN_API_URL: f.server.url, DEN_API_KEY: ADMIN_KEY };
    const run = (args: string[]) => runCli(args, env);
    const ls = await run(["port", id, "--json"]);
    assert.equal(ls.code, 0, ls.err);
    assert.ok((JSON.parse(ls.out) as Array<{ port: number }>).some((p) => p.port === 8000));
    const url = await run(["port", id, "8000", "--json"]);
    assert.equal(url.code, 0, url.err);
    const signed = JSON.parse(url.out) as { url: string; pathUrl: string };
    // (this machine's resolver knows no *.localhost names, browsers do: the Host header stands in)
    const page = await new Promise<string>((resolve, reject) => {
      const at = new URL(signed.url);
      http.get({ host: "127.0.0.1", port: at.port, path: at.pathname + at.search, headers: { host: at.host } }, (res) => {
        let b = "";
        res.on("data", (d: Buffer) => (b += d));
        res.on("end", () => resolve(b));
      }).on("error", reject);
    });
    assert.equal(page, "forwarded page\n", "the signed URL the CLI printed");
    assert.equal(await (await fetch(signed.pathUrl)).text(), "forwarded page\n", "its path form, for clients that are not browsers");
    // (fetch sets Sec-Fetch-Mode itself; a browser's navigation says "navigate")
    const nav = new URL(signed.pathUrl);
    const navigated = await get(nav.pathname + nav.search, { "sec-fetch-mode": "navigate" });
    assert.equal(navigated.status, 307, "a browser is sent to the port's own host");
    assert.equal(new URL(String(navigated.headers.location)).host, new URL(signed.url).host);
    const missing = await run(["port", "sbx_aaaaaaaaaaaaaaaa"]);
    assert.equal(missing.code, 1);
    assert.match(missing.err, /^den: sandbox_not_found: /);

    const local = 20000 + Math.floor(Math.random() * 20000);
    const fwd = spawn(process.execPath, [CLI, "forward", id, "8000", String(local)], { env: { ...process.env, ...env } });
    try {
      await new Promise<void>((resolve, reject) => {
        let err = "";
        fwd.stderr.on("data", (d: Buffer) => {
          err += d;
          if (err.includes("forwarding")) resolve();
        });
        fwd.on("close", () => reject(new Error(`den forward exited: ${err}`)));
      });
      for (let i = 0; i < 3; i++) assert.equal(await (await fetch(`http://127.0.0.1:${local}/index.html`)).text(), "forwarded page\n");
    } finally {
      fwd.kill("SIGINT");
      await new Promise((r) => fwd.once("close", r));
    }
    assert.equal(fwd.exitCode, 0, "Ctrl-C ends it cleanly");
    await f.api("DELETE", `/v1/sandboxes/${id}`);
  });
});

describe("port connections per owner are limited", () => {
  test("with a limit of 2, a third connection is a 429 until one closes", async () => {
    const server = await testServer({ DEN_MAX_PORT_CONNECTIONS_PER_OWNER: "2" });
    const api = client(server.url);
    try {
      const id = (await api("POST", "/v1/sandboxes", { template: "base" })).body.id as string;
      assert.equal((await api("POST", `/v1/sandboxes/${id}/processes`, { cmd: "python3 -m http.server 8000" })).status, 201);
      await waitFor("port 8000", async () => ((await api("GET", `/v1/sandboxes/${id}/ports`)).body.ports.some((p: { port: number }) => p.port === 8000) ? true : undefined));
      const u = new URL(server.url);
      const open = () => new Promise<{ status: number; socket?: import("node:stream").Duplex; body?: string }>((resolve, reject) => {
        const req = http.request({ host: u.hostname, port: u.port, path: `/v1/sandboxes/${id}/ports/8000`, headers: { authorization: `Bearer ${ADMIN_KEY}`, connection: "Upgrade", upgrade: "den-tcp" } });
        req.on("upgrade", (res, socket) => resolve({ status: res.statusCode!, socket }));
        req.on("response", (res) => {
          let body = "";
          res.on("data", (d: Buffer) => (body += d));
          res.on("end", () => resolve({ status: res.statusCode!, body }));
        });
        req.on("error", reject);
        req.end();
      });
      const a = await open();
      const b = await open();
      assert.equal(a.status, 101);
      assert.equal(b.status, 101);
      const c = await open();
      assert.equal(c.status, 429);
      assert.equal(JSON.parse(c.body!).error.code, "limit_exceeded");
      a.socket!.destroy();
      const d = await waitFor("a freed slot", async () => {
        const r = await open();
        if (r.status === 101) return r;
        return undefined;
      }, 10_000);
      b.socket!.destroy();
      d.socket!.destroy();
      await api("DELETE", `/v1/sandboxes/${id}`);
    } finally {
      await server.close();
    }
  });
});
