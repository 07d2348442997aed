// needs: docker-registry, skopeo, umoci
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdtemp, readFile, readdir, rm, utimes, writeFile } from "node:fs/promises";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { promisify } from "node:util";
import { DenError } from "@den/protocol";
import {
  BlobCache,
  RegistryClient,
  formatRef,
  hostPlatform,
  imageCacheBytes,
  parseImageRef,
  registryEndpoint,
  registryMirrors,
  type ResolvedImage,
} from "../src/index.js";
import { pushOciLayout, startRegistry, type TestRegistry } from "../src/testing/index.js";

const execFileP = promisify(execFile);
const HEX = "a".repeat(64);
const host = hostPlatform();
const other = host.architecture === "amd64" ? "arm64" : "amd64";

function sha256(b: Buffer | string): string {
  return `sha256:${createHash("sha256").update(b).digest("hex")}`;
}

/** An assert.rejects predicate: a DenError with this code whose message matches. */
function denError(code: string, message?: RegExp) {
  return (e: unknown) => {
    assert.ok(e instanceof DenError, `expected a DenError, got ${String(e)}`);
    assert.equal(e.code, code, e.message);
    if (message) assert.match(e.message, message);
    return true;
  };
}

describe("parseImageRef", () => {
  test("normalizes as docker does", () => {
    const d = `sha256:${HEX}`;
    const table: [string, object, { defaultRegistry?: string }?][] = [
      ["python:3.12", { registry: "docker.io", repository: "library/python", tag: "3.12" }],
      ["python", { registry: "docker.io", repository: "library/python", tag: "latest" }],
      ["foo/bar", { registry: "docker.io", repository: "foo/bar", tag: "latest" }],
      ["docker.io/python", { registry: "docker.io", repository: "library/python", tag: "latest" }],
      ["index.docker.io/foo/bar:1", { registry: "docker.io", repository: "foo/bar", tag: "1" }],
      [`127.0.0.1:5000/x/y@${d}`, { registry: "127.0.0.1:5000", repository: "x/y", digest: d }],
      [`host.tld/x:tag@${d}`, { registry: "host.tld", repository: "x", tag: "tag", digest: d }],
      ["localhost/x", { registry: "localhost", repository: "x", tag: "latest" }],
      ["localhost:5000/a/b:v1.2-rc_3", { registry: "localhost:5000", repository: "a/b", tag: "v1.2-rc_3" }],
      ["GHCR.io/org/app.name__x--y", { registry: "ghcr.io", repository: "org/app.name__x--y", tag: "latest" }],
      ["[::1]:5000/x:y", { registry: "[::1]:5000", repository: "x", tag: "y" }],
      ["python:3.12", { registry: "mirror.local:5000", repository: "library/python", tag: "3.12" }, { defaultRegistry: "mirror.local:5000" }],
      ["org/app", { registry: "mirror.local:5000", repository: "org/app", tag: "latest" }, { defaultRegistry: "mirror.local:5000" }],
    ];
    for (const [ref, want, opts] of table) assert.deepEqual(parseImageRef(ref, opts), want, ref);
    assert.equal(formatRef(parseImageRef("python:3.12")), "docker.io/library/python:3.12");
    assert.equal(formatRef(parseImageRef(`h.io/x:t@${d}`)), `h.io/x:t@${d}`);
    assert.equal(registryEndpoint("docker.io"), "registry-1.docker.io");
    assert.equal(registryEndpoint("ghcr.io"), "ghcr.io");
  });

  test("refuses what the grammar does not allow, with invalid_argument", () => {
    for (const ref of [
      "",
      "Python",
      "ghcr.io/Org/app",
      "a//b",
      "a/b:",
      "a/b:-x",
      `a/b:${"t".repeat(129)}`,
      "a/b@sha256:abc",
      `a/b@md5:${HEX}`,
      `a/b@sha256:${HEX.toUpperCase()}`,
      `a/b@sha256:${HEX}@sha256:${HEX}`,
      "https://ghcr.io/x/y",
      "a b",
      "-a/b",
      "a___b",
      "host.tld:99999/x",
      "host_x.tld/y",
      "x".repeat(600),
      `h.io/${"a".repeat(260)}`,
    ]) {
      assert.throws(() => parseImageRef(ref), denError("invalid_argument", /invalid image reference/), ref);
    }
  });

  test("DEN_REGISTRY_MIRRORS and DEN_IMAGE_CACHE_MB", () => {
    assert.deepEqual(
      [...registryMirrors("docker.io=mirror.gcr.io, docker.io=10.0.0.1:5000,ghcr.io=m.local")],
      [
        ["docker.io", ["mirror.gcr.io", "10.0.0.1:5000"]],
        ["ghcr.io", ["m.local"]],
      ],
    );
    assert.equal(registryMirrors(undefined).size, 0);
    for (const bad of ["docker.io", "docker.io=", "=m", "docker.io=https://m", "docker.io=m/path"]) {
      assert.throws(() => registryMirrors(bad), denError("invalid_argument"), bad);
    }
    assert.equal(imageCacheBytes({}), 10240 * 1024 * 1024);
    assert.equal(imageCacheBytes({ DEN_IMAGE_CACHE_MB: "5" }), 5 * 1024 * 1024);
    assert.throws(() => imageCacheBytes({ DEN_IMAGE_CACHE_MB: "-1" }), denError("invalid_argument"));
    assert.equal(RegistryClient.fromEnv({ DEN_DEFAULT_REGISTRY: "mirror.local" }).parse("python").registry, "mirror.local");
  });
});

describe("BlobCache", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "den-blob-cache-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const blob = (content: string) => ({ bytes: Buffer.from(content), desc: { mediaType: "x", digest: sha256(content), size: Buffer.byteLength(content) } });

  test("put checks size and digest, leaves no temp file when they lie", async () => {
    const cache = new BlobCache(join(dir, "a"), { maxBytes: 1 << 20 });
    const b = blob("hello blob");
    const path = await cache.put(b.desc, Readable.from([b.bytes.subarray(0, 3), b.bytes.subarray(3)]));
    assert.equal(path, cache.path(b.desc.digest));
    assert.deepEqual(await readFile(path), b.bytes);
    assert.ok(cache.has(b.desc.digest));
    const c = blob("other content");
    await assert.rejects(cache.put({ ...c.desc, size: c.desc.size - 1 }, Readable.from([c.bytes])), denError("image_invalid", /longer than/));
    await assert.rejects(cache.put({ ...c.desc, size: c.desc.size + 1 }, Readable.from([c.bytes])), denError("image_invalid", /bytes, its manifest states/));
    await assert.rejects(cache.put({ ...c.desc, digest: sha256("nope") }, Readable.from([c.bytes])), denError("image_invalid", new RegExp(sha256("nope"))));
    assert.ok(!cache.has(c.desc.digest));
    assert.deepEqual((await readdir(join(dir, "a", "sha256"))).filter((n) => n.startsWith(".tmp")), []);
    assert.throws(() => cache.path("sha256:../../etc"), denError("invalid_argument"));
  });

  test("collect evicts least recently used blobs beyond maxBytes, never held ones, and stale temp files", async () => {
    const cache = new BlobCache(join(dir, "b"), { maxBytes: 25 });
    const blobs = ["aaaaaaaaaa", "bbbbbbbbbb", "cccccccccc", "dddddddddd"].map(blob);
    for (const [i, b] of blobs.entries()) {
      await cache.put(b.desc, Readable.from([b.bytes]));
      const t = new Date(Date.now() - (10 - i) * 60_000); // a is the oldest
      await utimes(cache.path(b.desc.digest), t, t);
    }
    await cache.touch(blobs[1]!.desc.digest); // b becomes the newest
    const release = cache.hold([blobs[0]!.desc.digest]); // a is held
    // A temp file of a process that is gone, and one of this (live) process.
    const dead = spawn("true");
    await new Promise((r) => dead.once("exit", r));
    await writeFile(join(dir, "b", "sha256", `.tmp-${dead.pid}-abcd`), "x");
    await writeFile(join(dir, "b", "sha256", `.tmp-${process.pid}-abcd`), "x");
    const result = await cache.collect();
    // 40 bytes held: a is held, so c then d go (oldest unheld first), b (newest) stays.
    assert.deepEqual(result.evicted, [blobs[2]!.desc.digest, blobs[3]!.desc.digest]);
    assert.equal(result.bytes, 20);
    assert.ok(cache.has(blobs[0]!.desc.digest) && cache.has(blobs[1]!.desc.digest));
    const left = await readdir(join(dir, "b", "sha256"));
    assert.ok(!left.includes(`.tmp-${dead.pid}-abcd`));
    assert.ok(left.includes(`.tmp-${process.pid}-abcd`));
    release();
    const cache2 = new BlobCache(join(dir, "b"), { maxBytes: 10 });
    assert.deepEqual((await cache2.collect()).evicted, [blobs[0]!.desc.digest]);
  });
});

// ---------------------------------------------------------------------------------------------
// Against real registries: images made with umoci, pushed with skopeo.

async function umoci(args: string[]): Promise<void> {
  await execFileP("umoci", args, { timeout: 60_000 });
}

interface Layout {
  dir: string;
  /** Host-arch image, two layers, config set: tag "t". */
  hostDigest: string;
  /** Same layers, the other architecture: tag "other". */
  otherDigest: string;
  /** An index of both: tag "multi". */
  indexDigest: string;
}

async function buildLayout(work: string): Promise<Layout> {
  const dir = join(work, "layout");
  const bundle = join(work, "bundle");
  await umoci(["init", "--layout", dir]);
  await umoci(["new", "--image", `${dir}:t`]);
  for (const [file, content] of [
    ["hello.txt", Buffer.from("hello\n")],
    ["data.bin", randomBytes(64 * 1024)],
  ] as const) {
    await umoci(["unpack", "--rootless", "--image", `${dir}:t`, bundle]);
    await writeFile(join(bundle, "rootfs", file), content);
    await umoci(["repack", "--image", `${dir}:t`, bundle]);
    await rm(bundle, { recursive: true, force: true });
  }
  await umoci(["config", "--image", `${dir}:t`, "--config.env=A=1", "--config.workingdir=/srv", "--config.user=1000", "--config.cmd=/bin/x"]);
  await umoci(["config", "--image", `${dir}:t`, `--architecture=${other}`, "--tag", "other"]);
  const indexPath = join(dir, "index.json");
  const index = JSON.parse(await readFile(indexPath, "utf8")) as { manifests: { mediaType: string; digest: string; size: number; annotations: Record<string, string> }[] };
  const byTag = (tag: string) => index.manifests.find((m) => m.annotations["org.opencontainers.image.ref.name"] === tag)!;
  const entry = (tag: string, architecture: string) => {
    const { mediaType, digest, size } = byTag(tag);
    return { mediaType, digest, size, platform: { architecture, os: "linux" } };
  };
  // Other arch first: picking must not just take the first entry.
  const multi = Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json", manifests: [entry("other", other), entry("t", host.architecture)] }));
  const indexDigest = sha256(multi);
  await writeFile(join(dir, "blobs", "sha256", indexDigest.slice(7)), multi);
  index.manifests.push({ mediaType: "application/vnd.oci.image.index.v1+json", digest: indexDigest, size: multi.length, annotations: { "org.opencontainers.image.ref.name": "multi" } });
  await writeFile(indexPath, JSON.stringify(index));
  return { dir, hostDigest: byTag("t").digest, otherDigest: byTag("other").digest, indexDigest };
}

/** A stand-in registry: `handle` answers each request; `requests` lists `METHOD path`. */
async function fakeServer(handle: (req: http.IncomingMessage, res: http.ServerResponse) => void) {
  const requests: string[] = [];
  const server = http.createServer((req, res) => {
    requests.push(`${req.method} ${req.url}`);
    handle(req, res);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  const hostPort = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    host: hostPort,
    requests,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/** A one-layer image's documents, with the layer's descriptor as `lie` rewrites it. */
function fakeImage(opts: { layerType?: string; lie?: (d: { mediaType: string; digest: string; size: number }) => object; manifest?: (m: Record<string, unknown>) => object } = {}) {
  const layer = randomBytes(3000);
  const config = Buffer.from(
    JSON.stringify({ architecture: host.architecture, os: "linux", config: { Env: ["A=1"] }, rootfs: { type: "layers", diff_ids: [sha256("uncompressed")] } }),
  );
  const layerDesc = { mediaType: opts.layerType ?? "application/vnd.oci.image.layer.v1.tar+gzip", digest: sha256(layer), size: layer.length };
  const stated = (opts.lie ? opts.lie(layerDesc) : layerDesc) as { digest?: unknown };
  const doc = {
    schemaVersion: 2,
    mediaType: "application/vnd.oci.image.manifest.v1+json",
    config: { mediaType: "application/vnd.oci.image.config.v1+json", digest: sha256(config), size: config.length },
    layers: [stated],
  };
  const manifest = Buffer.from(JSON.stringify(opts.manifest ? opts.manifest(doc) : doc));
  // The layer's bytes are served under whatever digest the manifest states for it.
  const blobs = new Map([
    [String(stated.digest), layer],
    [sha256(config), config],
  ]);
  /** Serves it: the manifest for any tag, blobs chunked (no Content-Length, so only the bytes can tell). */
  const handle = (req: http.IncomingMessage, res: http.ServerResponse) => {
    const url = req.url ?? "";
    if (/\/manifests\//.test(url)) {
      res.writeHead(200, { "content-type": "application/vnd.oci.image.manifest.v1+json" });
      return res.end(manifest);
    }
    const b = blobs.get(url.split("/blobs/")[1] ?? "");
    if (!b) {
      res.writeHead(404);
      return res.end();
    }
    res.writeHead(200, { "content-type": "application/octet-stream" });
    res.write(b.subarray(0, 1000));
    res.end(b.subarray(1000));
  };
  return { layer, layerDesc, manifest, handle };
}

async function tempFiles(cacheDir: string): Promise<string[]> {
  const dir = join(cacheDir, "sha256");
  return existsSync(dir) ? (await readdir(dir)).filter((n) => n.startsWith(".tmp")) : [];
}

describe("RegistryClient", () => {
  let work: string;
  let layout: Layout;
  let plain: TestRegistry;
  let tlsBasic: TestRegistry;
  let bearer: TestRegistry;
  const login = { username: "den", password: "s3cret-Pa55word" };
  let cacheN = 0;
  const newCache = (maxBytes = 1 << 30) => new BlobCache(join(work, `cache-${++cacheN}`), { maxBytes });

  before(async () => {
    work = await mkdtemp(join(tmpdir(), "den-registry-test-"));
    [layout, plain, tlsBasic, bearer] = await Promise.all([
      buildLayout(work),
      startRegistry(),
      startRegistry({ tls: true, auth: { kind: "basic", ...login } }),
      startRegistry({ auth: { kind: "bearer", ...login } }),
    ]);
    await pushOciLayout(layout.dir, "t", plain.pushHost, "den/app:1");
    await pushOciLayout(layout.dir, "other", plain.pushHost, "den/other:1");
    await pushOciLayout(layout.dir, "multi", plain.pushHost, "den/multi:1");
    await pushOciLayout(layout.dir, "t", tlsBasic.pushHost, "den/private:1");
    await pushOciLayout(layout.dir, "t", bearer.pushHost, "den/private:1");
  });
  after(async () => {
    await Promise.all([plain?.close(), tlsBasic?.close(), bearer?.close()]);
    await rm(work, { recursive: true, force: true });
  });

  function checkApp(image: ResolvedImage, registry: string, repository: string) {
    assert.equal(image.manifestDigest, layout.hostDigest);
    assert.equal(image.source, `${registry}/${repository}@${layout.hostDigest}`);
    assert.equal(image.layers.length, 2);
    assert.equal(image.diffIds.length, 2);
    assert.equal(image.platform, `linux/${host.architecture}`);
    assert.deepEqual(image.run, { env: ["A=1"], entrypoint: null, cmd: ["/bin/x"], workingDir: "/srv", user: "1000" });
  }

  test("an anonymous pull by tag fills the cache; a second pull fetches no blob", async () => {
    const client = new RegistryClient({ insecureRegistries: [plain.host] });
    const cache = newCache();
    const lines: string[] = [];
    const image = await client.pull(`${plain.host}/den/app:1`, cache, { onProgress: (l) => lines.push(l) });
    checkApp(image, plain.host, "den/app");
    for (const d of [image.config, ...image.layers]) assert.ok(cache.has(d.digest), d.digest);
    assert.equal(lines.filter((l) => l.startsWith("pulling sha256:")).length, 2, lines.join("\n"));
    assert.match(lines.at(-1)!, /^pulled .*2 layers/);
    const again: string[] = [];
    await client.pull(`${plain.host}/den/app:1`, cache, { onProgress: (l) => again.push(l) });
    assert.deepEqual(
      again.filter((l) => !l.startsWith("pulled ")),
      image.layers.map((l) => `layer ${l.digest.slice(0, 19)}… cached`),
    );
  });

  test("a pull by digest checks the manifest against it", async () => {
    const client = new RegistryClient({ insecureRegistries: [plain.host] });
    const image = await client.resolve(`${plain.host}/den/app:ignored@${layout.hostDigest}`);
    checkApp(image, plain.host, "den/app");
    await assert.rejects(client.resolve(`${plain.host}/den/app@sha256:${HEX}`), denError("image_not_found"));
  });

  test("an index resolves to this host's platform (or the one asked)", async () => {
    const client = new RegistryClient({ insecureRegistries: [plain.host] });
    const mine = await client.resolve(`${plain.host}/den/multi:1`);
    assert.equal(mine.manifestDigest, layout.hostDigest);
    const theirs = await client.resolve(`${plain.host}/den/multi@${layout.indexDigest}`, { platform: { os: "linux", architecture: other } });
    assert.equal(theirs.manifestDigest, layout.otherDigest);
    assert.equal(theirs.platform, `linux/${other}`);
    await assert.rejects(client.resolve(`${plain.host}/den/multi:1`, { platform: { os: "linux", architecture: "s390x" } }), denError("image_not_found", /no linux\/s390x image/));
    // A single-platform image for another architecture is no image for this host.
    await assert.rejects(client.resolve(`${plain.host}/den/other:1`), denError("image_not_found", new RegExp(`linux/${other} image`)));
  });

  test("unknown manifests and repositories are image_not_found", async () => {
    const client = new RegistryClient({ insecureRegistries: [plain.host] });
    await assert.rejects(client.resolve(`${plain.host}/den/app:nope`), denError("image_not_found", /den\/app:nope/));
    await assert.rejects(client.resolve(`${plain.host}/den/no-such-repo`), denError("image_not_found"));
  });

  test("Basic auth over TLS with the CA; without the CA, without or with wrong credentials it fails naming the host, never the password", async () => {
    const ref = `${tlsBasic.host}/den/private:1`;
    const client = new RegistryClient({ caFile: tlsBasic.caFile! });
    checkApp(await client.pull(ref, newCache(), { auth: login }), tlsBasic.host, "den/private");

    await assert.rejects(new RegistryClient().resolve(ref, { auth: login }), denError("image_pull_failed", new RegExp(`${tlsBasic.host}.*certificate`)));
    await assert.rejects(client.resolve(ref), denError("image_pull_failed", new RegExp(`${tlsBasic.host} needs credentials`)));
    const wrong = { username: "den", password: "wr0ng-Pa55word-xyz" };
    const err = await client.resolve(ref, { auth: wrong }).then(
      () => assert.fail("a wrong password was accepted"),
      (e: unknown) => e,
    );
    denError("image_pull_failed", new RegExp(`${tlsBasic.host} refused the credentials`))(err);
    const basic = Buffer.from(`den:${wrong.password}`).toString("base64");
    for (const text of [(err as Error).message, JSON.stringify(err), String((err as Error).stack), JSON.stringify(Object.entries(err as object))]) {
      assert.ok(!text.includes(wrong.password) && !text.includes(basic), `credentials leaked: ${text}`);
    }
  });

  test("the bearer flow: one token per pull, sent on every request of it", async () => {
    const ref = `${bearer.host}/den/private:1`;
    const client = new RegistryClient({ insecureRegistries: [bearer.host] });
    const cache = newCache();
    const before = bearer.tokenRequests();
    checkApp(await client.pull(ref, cache, { auth: login }), bearer.host, "den/private");
    assert.equal(bearer.tokenRequests() - before, 1);
    const blobGets = () => bearer.proxiedRequests().filter((r) => r.startsWith("GET /v2/den/private/blobs/")).length;
    const blobsBefore = blobGets();
    await client.pull(ref, cache, { auth: login });
    assert.equal(blobGets(), blobsBefore, "the second pull fetched blobs again");
    assert.equal(bearer.tokenRequests() - before, 2);

    const err = await client.resolve(ref, { auth: { username: "den", password: "Wr0ng-bearer-pw" } }).then(
      () => assert.fail("a wrong password was accepted"),
      (e: unknown) => e,
    );
    denError("image_pull_failed", /refused the credentials/)(err);
    assert.ok(!JSON.stringify({ m: (err as Error).message, e: err }).includes("Wr0ng-bearer-pw"));
    await assert.rejects(client.resolve(ref, { auth: { token: "not-a-token" } }), denError("image_pull_failed", /refused the credentials/));
    await assert.rejects(client.resolve(ref), denError("image_pull_failed", /needs credentials/));
  });

  test("a plain-http registry is refused unless listed as insecure", async () => {
    await assert.rejects(new RegistryClient().resolve(`${plain.host}/den/app:1`), denError("image_pull_failed", new RegExp(`${plain.host}.*DEN_INSECURE_REGISTRIES`)));
  });

  test("mirrors are tried first; a failing mirror falls through to the next, then the registry", async () => {
    const closed = await fakeServer(() => {});
    await closed.close();
    const registry = parseImageRef(`${plain.host}/den/app:1`).registry;
    const viaRegistry = new RegistryClient({ insecureRegistries: [plain.host, closed.host], mirrors: new Map([[registry, [closed.host]]]) });
    checkApp(await viaRegistry.resolve(`${plain.host}/den/app:1`), plain.host, "den/app");
    // The registry itself is down; its mirror serves.
    const viaMirror = new RegistryClient({ insecureRegistries: [plain.host, closed.host], mirrors: new Map([[closed.host, [plain.host]]]) });
    const image = await viaMirror.pull(`${closed.host}/den/app:1`, newCache());
    assert.equal(image.manifestDigest, layout.hostDigest);
    assert.equal(image.source, `${closed.host}/den/app@${layout.hostDigest}`);
  });

  test("unreachable, silent and stalling registries fail with image_pull_failed naming them, within their deadlines", async () => {
    const closed = await fakeServer(() => {});
    await closed.close();
    await assert.rejects(
      new RegistryClient({ insecureRegistries: [closed.host] }).resolve(`${closed.host}/x/y:1`),
      denError("image_pull_failed", new RegExp(`${closed.host} is unreachable`)),
    );

    const silent = await fakeServer(() => {}); // accepts, never answers
    const stalling = await fakeServer((_req, res) => {
      res.writeHead(200, { "content-type": "application/vnd.oci.image.manifest.v1+json", "content-length": "1000" });
      res.write("{");
    });
    try {
      const client = new RegistryClient({ insecureRegistries: [silent.host, stalling.host], requestTimeoutMs: 800, stallTimeoutMs: 1000 });
      let t0 = Date.now();
      await assert.rejects(client.resolve(`${silent.host}/x/y:1`), denError("image_pull_failed", new RegExp(`${silent.host} did not answer`)));
      assert.ok(Date.now() - t0 < 3000, `took ${Date.now() - t0} ms`);
      t0 = Date.now();
      await assert.rejects(client.resolve(`${stalling.host}/x/y:1`), denError("image_pull_failed", new RegExp(`${stalling.host} stalled`)));
      const took = Date.now() - t0;
      assert.ok(took >= 900 && took < 3000, `took ${took} ms`);
      // The caller's signal ends a stalled pull at once.
      const ac = new AbortController();
      setTimeout(() => ac.abort(), 100);
      t0 = Date.now();
      await assert.rejects(client.resolve(`${stalling.host}/x/y:1`, { signal: ac.signal }), denError("aborted"));
      assert.ok(Date.now() - t0 < 2000); // (the code says it was the abort, not the 1 s stall)
    } finally {
      await Promise.all([silent.close(), stalling.close()]);
    }
  });

  test("blobs whose bytes lie about their size or digest are image_invalid and leave no temp file", async () => {
    const cases = [
      { name: "longer than stated", image: fakeImage({ lie: (d) => ({ ...d, size: d.size - 5 }) }), message: /longer than/ },
      { name: "wrong digest", image: fakeImage({ lie: (d) => ({ ...d, digest: sha256("something else") }) }), message: new RegExp(`${sha256("something else")} does not match`) },
    ];
    for (const c of cases) {
      const server = await fakeServer(c.image.handle);
      try {
        const cache = newCache();
        const client = new RegistryClient({ insecureRegistries: [server.host] });
        await assert.rejects(client.pull(`${server.host}/x/y:1`, cache), denError("image_invalid", c.message), c.name);
        assert.deepEqual(await tempFiles(cache.dir), [], c.name);
      } finally {
        await server.close();
      }
    }
  });

  test("manifests Den cannot use are image_invalid: schema1, foreign layers, over the limits, bad sizes, unknown media types", async () => {
    const schema1 = {
      handle: (_req: http.IncomingMessage, res: http.ServerResponse) => {
        res.writeHead(200, { "content-type": "application/vnd.docker.distribution.manifest.v1+prettyjws" });
        res.end(JSON.stringify({ schemaVersion: 1, name: "x/y", tag: "1", fsLayers: [] }));
      },
    };
    const cases: [string, { handle: (req: http.IncomingMessage, res: http.ServerResponse) => void }, RegExp, object?][] = [
      ["schema1", schema1, /schema1/],
      ["foreign layer", fakeImage({ layerType: "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip" }), /not a \(gzip\/zstd\) tar/],
      ["non-distributable layer", fakeImage({ layerType: "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip" }), /not a \(gzip\/zstd\) tar/],
      ["negative size", fakeImage({ lie: (d) => ({ ...d, size: -1 }) }), /malformed image manifest/],
      ["fractional size", fakeImage({ lie: (d) => ({ ...d, size: 1.5 }) }), /malformed image manifest/],
      ["artifact", fakeImage({ manifest: (m) => ({ ...m, mediaType: "application/vnd.oci.artifact.manifest.v1+json" }) }), /not a container image/],
      ["helm config", fakeImage({ manifest: (m) => ({ ...m, config: { ...(m.config as object), mediaType: "application/vnd.cncf.helm.config.v1+json" } }) }), /not a container image config/],
      ["too many layers", fakeImage(), /over the limit of 0/, { maxLayers: 0 }],
      ["too many bytes", fakeImage(), /over the 100-byte limit/, { maxImageBytes: 100 }],
      ["manifest too big", fakeImage(), /over 50 bytes/, { maxManifestBytes: 50 }],
    ];
    for (const [name, image, message, limits] of cases) {
      const server = await fakeServer(image.handle);
      try {
        const client = new RegistryClient({ insecureRegistries: [server.host], ...(limits ? { limits } : {}) });
        await assert.rejects(client.resolve(`${server.host}/x/y:1`), denError("image_invalid", message), name);
      } finally {
        await server.close();
      }
    }
  });

  test("a blob redirected to another origin gets no Authorization; an http redirect target must be insecure-listed", async () => {
    const image = fakeImage();
    const seen: (string | undefined)[] = [];
    const store = await fakeServer((req, res) => {
      seen.push(req.headers.authorization);
      image.handle({ ...req, url: `/v2/x/blobs/${new URL(req.url!, "http://s").searchParams.get("d")}` } as http.IncomingMessage, res);
    });
    const registry = await fakeServer((req, res) => {
      const basic = `Basic ${Buffer.from(`${login.username}:${login.password}`).toString("base64")}`;
      if (req.headers.authorization !== basic) {
        res.writeHead(401, { "www-authenticate": 'Basic realm="fake"' });
        return res.end();
      }
      const blob = req.url?.split("/blobs/")[1];
      if (blob === image.layerDesc.digest) {
        res.writeHead(307, { location: `http://${store.host}/object?d=${blob}&X-Signature=abc` });
        return res.end();
      }
      image.handle(req, res);
    });
    try {
      const ref = `${registry.host}/x/y:1`;
      const client = new RegistryClient({ insecureRegistries: [registry.host, store.host] });
      const image2 = await client.pull(ref, newCache(), { auth: login });
      assert.equal(image2.layers[0]!.digest, image.layerDesc.digest);
      assert.deepEqual(seen, [undefined]);
      const strict = new RegistryClient({ insecureRegistries: [registry.host] });
      const err = await strict.pull(ref, newCache(), { auth: login }).then(
        () => assert.fail("an http redirect to an unlisted host was followed"),
        (e: unknown) => e as DenError,
      );
      denError("image_pull_failed", new RegExp(`refusing plain http to ${store.host}`))(err);
      assert.ok(!err.message.includes("X-Signature"), err.message);
    } finally {
      await Promise.all([store.close(), registry.close()]);
    }
  });

  test("fetchBlob brings one blob in, and is a no-op when the cache has it", async () => {
    const client = new RegistryClient({ insecureRegistries: [plain.host] });
    const image = await client.resolve(`${plain.host}/den/app:1`);
    const cache = newCache();
    const lines: string[] = [];
    const path = await client.fetchBlob(`${plain.host}/den/app`, image.layers[1]!, cache, { onProgress: (l) => lines.push(l) });
    assert.equal(sha256(await readFile(path)), image.layers[1]!.digest);
    await client.fetchBlob(`${plain.host}/den/app`, image.layers[1]!, cache, { onProgress: (l) => lines.push(l) });
    assert.match(lines[0]!, /^pulling sha256:[0-9a-f]{12}… \(\d+(\.\d)? kB\)$/);
    assert.match(lines[1]!, /^blob sha256:[0-9a-f]{12}… cached$/);
  });
});
