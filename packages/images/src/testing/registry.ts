/**
 * A real OCI registry for tests: Debian's `docker-registry` (distribution 2.x) on loopback with
 * a throwaway store, optionally behind a small Node proxy that adds TLS (a CA made here) and
 * Basic or bearer-token auth. Images get in with `pushOciLayout` (skopeo, to the plain backing
 * registry). Everything started is stopped, and its files removed, by close().
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import http from "node:http";
import https from "node:https";
import { createServer as createNetServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";

const execFileP = promisify(execFile);

export interface TestRegistryOptions {
  /** Serve https with a certificate for 127.0.0.1 signed by a CA made for it (caFile). */
  tls?: boolean;
  /** Require Basic auth, or the bearer token flow (a /token endpoint checking these credentials). */
  auth?: { kind: "basic" | "bearer"; username: string; password: string };
}

export interface TestRegistry {
  /** `127.0.0.1:PORT` clients pull from (the proxy when tls or auth is asked, else the registry). */
  host: string;
  url: string;
  /** The CA's PEM when tls is on. */
  caFile?: string;
  /** Plain-http `host:port` of the backing registry, for skopeo pushes. */
  pushHost: string;
  /** How many requests reached /token (bearer auth). */
  tokenRequests: () => number;
  /** Requests that reached the backing registry through the proxy, as `METHOD /path` (none without a proxy). */
  proxiedRequests: () => string[];
  close(): Promise<void>;
}

const running = new Set<ChildProcess>();
// A test process that dies without close() still takes its registries with it.
process.once("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createNetServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      const port = typeof addr === "object" && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

function get(url: string, ca?: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const mod = url.startsWith("https:") ? https : http;
    const req = mod.get(url, { timeout: 1000, agent: false, ...(ca ? { ca } : {}) }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on("timeout", () => req.destroy(new Error("timeout")));
    req.on("error", reject);
  });
}

async function waitForRegistry(url: string, child: ChildProcess, output: () => string): Promise<void> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`docker-registry exited at start: ${output()}`);
    const status = await get(`${url}/v2/`).catch(() => 0);
    if (status === 200) return;
    if (Date.now() > deadline) throw new Error(`docker-registry did not answer /v2/ within 15 s: ${output()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 3000);
  await exited;
  clearTimeout(timer);
}

/** A CA and a server certificate for IP 127.0.0.1 signed by it (EC keys: quick to make). */
async function makeCertificates(dir: string): Promise<{ caFile: string; key: string; cert: string }> {
  const run = (args: string[]) => execFileP("openssl", args, { cwd: dir, timeout: 30_000 });
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  await run(["req", "-x509", ...ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=den-test-ca", "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"]);
  await run(["req", ...ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1"]);
  await writeFile(join(dir, "server.ext"), "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n");
  await run(["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "server.ext"]);
  return { caFile: join(dir, "ca.pem"), key: readFileSync(join(dir, "server.key"), "utf8"), cert: readFileSync(join(dir, "server.pem"), "utf8") };
}

/** Starts a registry (and its proxy if tls or auth is asked). */
export async function startRegistry(opts: TestRegistryOptions = {}): Promise<TestRegistry> {
  const dir = await mkdtemp(join(tmpdir(), "den-test-registry-"));
  const port = await freePort();
  const pushHost = `127.0.0.1:${port}`;
  const config = [
    "version: 0.1",
    "log:",
    "  level: error",
    "  accesslog:",
    "    disabled: true",
    "storage:",
    "  filesystem:",
    `    rootdirectory: ${join(dir, "store")}`,
    "http:",
    `  addr: ${pushHost}`,
    "",
  ].join("\n");
  await writeFile(join(dir, "config.yml"), config);
  const child = spawn("docker-registry", ["serve", join(dir, "config.yml")], { stdio: ["ignore", "pipe", "pipe"] });
  running.add(child);
  child.once("exit", () => running.delete(child));
  let output = "";
  const keep = (b: Buffer) => (output = (output + b.toString()).slice(-4096));
  child.stdout!.on("data", keep);
  child.stderr!.on("data", keep);
  let proxy: http.Server | https.Server | undefined;
  const cleanup = async () => {
    if (proxy) {
      proxy.closeAllConnections();
      await new Promise((r) => proxy!.close(() => r(undefined)));
    }
    await stop(child);
    await rm(dir, { recursive: true, force: true });
  };
  try {
    await waitForRegistry(`http://${pushHost}`, child, () => output);
    if (!opts.tls && !opts.auth) {
      return { host: pushHost, url: `http://${pushHost}`, pushHost, tokenRequests: () => 0, proxiedRequests: () => [], close: cleanup };
    }
    const certs = opts.tls ? await makeCertificates(dir) : undefined;
    const front = await startProxy(pushHost, opts, certs);
    proxy = front.server;
    return {
      host: front.host,
      url: front.url,
      ...(certs ? { caFile: certs.caFile } : {}),
      pushHost,
      tokenRequests: front.tokenRequests,
      proxiedRequests: front.proxied,
      close: cleanup,
    };
  } catch (e) {
    await cleanup();
    throw e;
  }
}

/** The proxy in front of the registry: TLS and auth, then every request passed through as is. */
async function startProxy(backend: string, opts: TestRegistryOptions, certs?: { key: string; cert: string }) {
  const tokens = new Set<string>();
  let tokenRequests = 0;
  const proxied: string[] = [];
  const auth = opts.auth;
  const basicOk = (header: string | undefined) => !!auth && header === `Basic ${Buffer.from(`${auth.username}:${auth.password}`).toString("base64")}`;
  let selfUrl = "";

  const handler = (req: http.IncomingMessage, res: http.ServerResponse) => {
    const path = req.url ?? "/";
    if (auth?.kind === "bearer" && path.startsWith("/token")) {
      tokenRequests++;
      if (!basicOk(req.headers.authorization)) {
        res.writeHead(401, { "www-authenticate": 'Basic realm="den-test-token"', "content-type": "application/json" });
        res.end('{"errors":[{"code":"UNAUTHORIZED"}]}');
        return;
      }
      const token = randomBytes(16).toString("hex");
      tokens.add(token);
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ token, expires_in: 300 }));
      return;
    }
    if (auth) {
      const header = req.headers.authorization;
      const ok = auth.kind === "basic" ? basicOk(header) : !!header?.startsWith("Bearer ") && tokens.has(header.slice("Bearer ".length));
      if (!ok) {
        const name = /^\/v2\/(.+?)\/(?:manifests|blobs|tags)\//.exec(path)?.[1];
        const challenge =
          auth.kind === "basic" ? 'Basic realm="den-test"' : `Bearer realm="${selfUrl}/token",service="den-test"${name ? `,scope="repository:${name}:pull"` : ""}`;
        res.writeHead(401, { "www-authenticate": challenge, "content-type": "application/json" });
        res.end('{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}');
        return;
      }
    }
    proxied.push(`${req.method} ${path}`);
    const headers = Object.fromEntries(Object.entries(req.headers).filter(([k]) => k !== "authorization" && k !== "host"));
    const up = http.request({ host: "127.0.0.1", port: Number(backend.split(":")[1]), method: req.method, path, headers: { ...headers, host: backend } }, (upRes) => {
      res.writeHead(upRes.statusCode ?? 502, upRes.headers);
      upRes.pipe(res);
    });
    up.on("error", () => res.destroy());
    req.pipe(up);
  };

  const server = certs ? https.createServer({ key: certs.key, cert: certs.cert }, handler) : http.createServer(handler);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const addr = server.address();
  const host = `127.0.0.1:${typeof addr === "object" && addr ? addr.port : 0}`;
  selfUrl = `${certs ? "https" : "http"}://${host}`;
  return { server, host, url: selfUrl, tokenRequests: () => tokenRequests, proxied: () => [...proxied] };
}

/**
 * Pushes the image (or index) tagged `tag` in an OCI layout to `pushHost/dest` (`repo:tag`) with
 * skopeo, keeping its digests; returns the digest of what was pushed (the layout's, unchanged).
 */
export async function pushOciLayout(layoutDir: string, tag: string, pushHost: string, dest: string): Promise<string> {
  await execFileP(
    "skopeo",
    ["copy", "--quiet", "--insecure-policy", "--all", "--preserve-digests", "--dest-tls-verify=false", `oci:${layoutDir}:${tag}`, `docker://${pushHost}/${dest}`],
    { timeout: 60_000 },
  );
  const index = JSON.parse(await readFile(join(layoutDir, "index.json"), "utf8")) as { manifests?: { digest: string; annotations?: Record<string, string> }[] };
  const entry = index.manifests?.find((m) => m.annotations?.["org.opencontainers.image.ref.name"] === tag);
  if (!entry) throw new Error(`no tag ${tag} in the OCI layout ${layoutDir}`);
  return entry.digest;
}
