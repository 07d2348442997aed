// needs: many VMs, docker-registry, skopeo, umoci
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { gzipSync } from "node:zlib";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import http from "node:http";
import { findInstanceProcesses } from "@den/runtime";
import { findBaseRootfs, makeBusyboxImage, makeDockerSaveArchive, makeHostileArchive, makeLayeredImage, makeNoShellImage, makePythonHttpImage, pushOciLayout, startRegistry } from "@den/images/testing";
import type { RunningServer } from "../src/index.js";
import { ADMIN_KEY, client, dataDir, testServer } from "./helpers.js";

/** An OCI layout (tag `bomb`) whose one layer is a file of 64 MiB of zeros: tiny gzipped, big unpacked. */
async function makeBombImage(dir: string): Promise<string> {
  const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");
  const size = 64 * 1024 * 1024;
  const header = Buffer.alloc(512);
  header.write("zeros", 0);
  header.write("0000644\0", 100);
  header.write("0000000\0", 108);
  header.write("0000000\0", 116);
  header.write(size.toString(8).padStart(11, "0") + "\0", 124);
  header.write("00000000000\0", 136);
  header.write("0", 156);
  header.write("ustar\0", 257);
  header.write("00", 263);
  header.fill(" ", 148, 156);
  let sum = 0;
  for (const b of header) sum += b;
  header.write(sum.toString(8).padStart(6, "0") + "\0 ", 148);
  const tar = Buffer.concat([header, Buffer.alloc(size), Buffer.alloc(1024)]);
  const layer = gzipSync(tar);
  const config = Buffer.from(JSON.stringify({ architecture: "amd64", os: "linux", config: {}, rootfs: { type: "layers", diff_ids: [`sha256:${sha(tar)}`] } }));
  const manifest = Buffer.from(JSON.stringify({
    schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
    config: { mediaType: "application/vnd.oci.image.config.v1+json", digest: `sha256:${sha(config)}`, size: config.length },
    layers: [{ mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", digest: `sha256:${sha(layer)}`, size: layer.length }],
  }));
  await mkdir(join(dir, "blobs", "sha256"), { recursive: true });
  for (const b of [layer, config, manifest]) await writeFile(join(dir, "blobs", "sha256", sha(b)), b);
  await writeFile(join(dir, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }));
  await writeFile(join(dir, "index.json"), JSON.stringify({
    schemaVersion: 2,
    manifests: [{ mediaType: "application/vnd.oci.image.manifest.v1+json", digest: `sha256:${sha(manifest)}`, size: manifest.length, annotations: { "org.opencontainers.image.ref.name": "bomb" } }],
  }));
  return dir;
}

/**
 * Templates from OCI images, end to end on real VMs: images the test makes (umoci) pushed to
 * Debian's distribution registry on loopback, pulled and built by Den, then created, exec'd,
 * served through the port proxy, cold-hibernated and woken, forked.
 */
describe("templates from OCI images", () => {
  let work: string;
  let registry: Awaited<ReturnType<typeof startRegistry>>;
  let secure: Awaited<ReturnType<typeof startRegistry>>;
  let server: RunningServer;
  let api: ReturnType<typeof client>;
  let busybox: { layout: string; tag: string };
  const ref = (name: string, r = registry) => `${r.host}/${name}`;

  before(async () => {
    work = await mkdtemp(join(tmpdir(), "den-image-tpl-"));
    registry = await startRegistry();
    secure = await startRegistry({ tls: true, auth: { kind: "basic", username: "den", password: "s3cret-registry-pass" } });
    const rootfs = findBaseRootfs();
    if (!rootfs) throw new Error("no debootstrapped base tree in the build cache: run `den template build base` first");
    const images = await Promise.all([
      makePythonHttpImage(join(work, "py"), { rootfs }), makeBusyboxImage(join(work, "bb")), makeNoShellImage(join(work, "noshell")), makeLayeredImage(join(work, "layered")),
    ]);
    const [py, bb, noshell, layered] = images;
    busybox = bb!;
    await pushOciLayout(py!.layout, py!.tag, registry.pushHost, "py:1");
    await pushOciLayout(bb!.layout, bb!.tag, registry.pushHost, "tools/busybox:1");
    await pushOciLayout(noshell!.layout, noshell!.tag, registry.pushHost, "noshell:1");
    await pushOciLayout(layered!.layout, layered!.tag, registry.pushHost, "layered:1");
    await pushOciLayout(bb!.layout, bb!.tag, secure.pushHost, "private/busybox:1");
    // The host agent reads its registry settings from the environment (as `den serve` does).
    process.env.DEN_INSECURE_REGISTRIES = registry.host;
    process.env.DEN_REGISTRY_CA_FILE = secure.caFile!;
    server = await testServer();
    api = client(server.url);
  });

  after(async () => {
    if (api) for (const s of (await api("GET", "/v1/sandboxes?limit=200")).body?.sandboxes ?? []) await api("DELETE", `/v1/sandboxes/${s.id}`);
    await server?.close();
    delete process.env.DEN_INSECURE_REGISTRIES;
    delete process.env.DEN_REGISTRY_CA_FILE;
    await registry?.close();
    await secure?.close();
    await rm(work, { recursive: true, force: true });
  });

  const exec = async (id: string, body: Record<string, unknown>) => {
    const r = await api("POST", `/v1/sandboxes/${id}/exec`, body);
    assert.equal(r.status, 200, r.text);
    return r.body as { stdout: string; stderr: string; exit_code: number };
  };
  /**
   * What every image's sandbox must do as any sandbox does: a file written through the API
   * read back, kept across a cold hibernate and wake, and in a fork; and, where the image
   * serves HTTP on 8080, its server answering through the port proxy before and after.
   */
  const lifecycle = async (id: string, serves?: { path: string; body: string }) => {
    const file = `/tmp/den-lifecycle-${id}`;
    const w = await api("PUT", `/v1/sandboxes/${id}/files?path=${file}`, Buffer.from("kept\n"), { "content-type": "application/octet-stream" });
    assert.ok(w.status < 300, w.text);
    const read = async (sid: string) => (await api("GET", `/v1/sandboxes/${sid}/files?path=${file}`)).text;
    assert.equal(await read(id), "kept\n");
    if (serves) assert.equal((await viaProxy(id, 8080, serves.path)).body, serves.body);
    const cold = await api("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "cold" });
    assert.equal(cold.status, 200, cold.text);
    assert.equal((await api("POST", `/v1/sandboxes/${id}/wake`, {})).status, 200);
    assert.equal(await read(id), "kept\n", "the file is there after a cold hibernate and wake");
    if (serves) assert.equal((await viaProxy(id, 8080, serves.path)).body, serves.body, "the same server answers after the wake");
    const f = await api("POST", `/v1/sandboxes/${id}/fork`, {});
    assert.equal(f.status, 201, f.text);
    const child = (f.body.sandboxes as Array<{ id: string }>)[0]!.id;
    assert.equal(await read(child), "kept\n", "a fork has the file");
    await api("DELETE", `/v1/sandboxes/${child}`);
  };

  /** A build's log, as its lines' messages joined. */
  const buildLog = async (id: string): Promise<string> => {
    assert.match(id ?? "", /^op_/, "the build's id is in the answer's den-build-id header");
    const r = await api("GET", `/v1/templates/builds/${id}/logs`);
    assert.equal(r.status, 200, r.text);
    return r.text.trim().split("\n").map((l) => (JSON.parse(l) as { message: string }).message).join("\n");
  };
  const viaProxy = (id: string, port: number, path: string) => new Promise<{ status: number; body: string }>((resolve, reject) => {
    const u = new URL(server.url);
    http.get({ host: u.hostname, port: u.port, path: `/v1/sandboxes/${id}/ports/${port}${path}`, headers: { authorization: `Bearer ${ADMIN_KEY}` } }, (res) => {
      let body = "";
      res.on("data", (d: Buffer) => (body += d.toString()));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    }).on("error", reject);
  });

  test("a Debian image with Python: its server is up in every create, through the port proxy, a cold hibernate and a fork", async () => {
    const ready = "python3 -c 'import urllib.request; urllib.request.urlopen(\"http://127.0.0.1:8080/\")'";
    const t = await api("POST", "/v1/templates", { name: "py", from_image: ref("py:1"), ready_cmd: ready });
    assert.equal(t.status, 201, t.text);
    assert.match(t.body.source, new RegExp(`^image ${registry.host}/py@sha256:[0-9a-f]{64}$`));
    assert.equal(t.body.run.workdir, "/srv/www");
    assert.equal(t.body.run.env.APP_MODE, "image");
    assert.match(t.body.run.start_cmd, /http\.server 8080/);

    const s = (await api("POST", "/v1/sandboxes", { template: "py" })).body;
    // The image's WORKDIR and ENV are every command's defaults; its server was running before the snapshot.
    assert.deepEqual((await exec(s.id, { cmd: "pwd; echo $APP_MODE; id -u user; grep -c PRETTY_NAME /etc/os-release" })).stdout, "/srv/www\nimage\n1000\n1\n");
    const page = await viaProxy(s.id, 8080, "/index.html");
    assert.equal(page.status, 200);
    assert.equal(page.body, "hello from the image\n");
    const w = await api("PUT", `/v1/sandboxes/${s.id}/files?path=/srv/www/mine.txt`, Buffer.from("written after create\n"), { "content-type": "application/octet-stream" });
    assert.ok(w.status < 300, w.text);

    const cold = await api("POST", `/v1/sandboxes/${s.id}/hibernate`, { mode: "cold" });
    assert.equal(cold.status, 200, cold.text);
    assert.equal((await api("POST", `/v1/sandboxes/${s.id}/wake`, {})).status, 200);
    assert.equal((await viaProxy(s.id, 8080, "/mine.txt")).body, "written after create\n", "the same server serves the file written before the cold hibernate");

    const f = await api("POST", `/v1/sandboxes/${s.id}/fork`, {});
    assert.equal(f.status, 201, f.text);
    const child = (f.body.sandboxes as Array<{ id: string }>)[0]!.id;
    assert.equal((await exec(child, { cmd: "cat mine.txt" })).stdout, "written after create\n");
    assert.equal((await viaProxy(child, 8080, "/index.html")).body, "hello from the image\n");

    const again = await api("POST", "/v1/templates", { name: "py", from_image: ref("py:1"), ready_cmd: ready });
    assert.equal(again.body.version, t.body.version, "the same image and start are the same version");
  });

  test("busybox without bash: commands run with /bin/sh, the `user` account is added", async () => {
    const t = await api("POST", "/v1/templates", { name: "bb", from_image: ref("tools/busybox:1") });
    assert.equal(t.status, 201, t.text);
    const s = (await api("POST", "/v1/sandboxes", { template: "bb" })).body;
    const r = await exec(s.id, { cmd: "echo $0; id -u user; ls -d /home/user; wget -qO- http://127.0.0.1:8080/index.html" });
    assert.equal(r.stdout, "/bin/sh\n1000\n/home/user\nbusybox here\n", r.stderr);
    await lifecycle(s.id, { path: "/index.html", body: "busybox here\n" });
  });

  test("an image with no shell runs its own binaries; a shell command is a clear error", async () => {
    const t = await api("POST", "/v1/templates", { name: "noshell", from_image: ref("noshell:1") });
    assert.equal(t.status, 201, t.text);
    const s = (await api("POST", "/v1/sandboxes", { template: "noshell" })).body;
    assert.equal((await exec(s.id, { argv: ["/bin/busybox", "echo", "no shell needed"] })).stdout, "no shell needed\n");
    const sh = await api("POST", `/v1/sandboxes/${s.id}/exec`, { cmd: "echo hi" });
    assert.ok(sh.status >= 400 && sh.status < 500, `${sh.status} ${sh.text}`);
    assert.match(sh.text, /no shell|\/bin\/sh/);
    assert.equal((await exec(s.id, { argv: ["/bin/busybox", "grep", "-c", "^user:", "/etc/passwd"] })).stdout, "1\n");
  });

  test("layers apply in order: whiteouts, opaque dirs, owners, modes, hard links and xattrs kept", async () => {
    const t = await api("POST", "/v1/templates", { name: "layered", from_image: ref("layered:1") });
    assert.equal(t.status, 201, t.text);
    const s = (await api("POST", "/v1/sandboxes", { template: "layered" })).body;
    // (Only some of busybox's applets are linked in this image: the rest are run through it.)
    const bb = "/bin/busybox";
    const r = await exec(s.id, { cmd: `ls /data | ${bb} tr '\\n' ' '; echo; ls -A /opaque; ${bb} stat -c '%a %u %g' /data/owned; ${bb} stat -c '%i' /data/a /data/b | ${bb} uniq | ${bb} wc -l` });
    assert.match(r.stdout, /^a b keep\.txt owned/m, r.stdout);
    assert.doesNotMatch(r.stdout, /gone\.txt/);
    const lines = r.stdout.trim().split("\n");
    assert.equal(lines[1], "new", "the opaque dir kept only the upper layer's file");
    assert.equal(lines[2], "640 1234 5678");
    assert.equal(lines[3], "1", "a hard link is one inode");
    await lifecycle(s.id);
    assert.deepEqual(await server.cp.hosts.first!.guest(s.id).files.getXattrs("/data/xattr.txt"), { "user.den": "yes" });
  });

  test("a private registry over TLS with basic auth: credentials work, and are written nowhere", async () => {
    const password = "s3cret-registry-pass";
    const bad = await api("POST", "/v1/templates", { name: "private", from_image: { ref: ref("private/busybox:1", secure), credentials: { username: "den", password: "wrong-password" } } });
    assert.equal(bad.status, 422, bad.text);
    assert.equal(bad.body.error.code, "image_pull_failed");
    assert.doesNotMatch(bad.text, /wrong-password/);
    const t = await api("POST", "/v1/templates", { name: "private", from_image: { ref: ref("private/busybox:1", secure), credentials: { username: "den", password } } });
    assert.equal(t.status, 201, t.text);
    const s = (await api("POST", "/v1/sandboxes", { template: "private" })).body;
    assert.equal((await exec(s.id, { cmd: "cat /www/index.html" })).stdout, "busybox here\n");
    await lifecycle(s.id, { path: "/index.html", body: "busybox here\n" });
    // The deployment's credentials (a Docker-style auth file) stand in for a build's own.
    const authFile = join(work, "registry-auth.json");
    await writeFile(authFile, JSON.stringify({ auths: { [secure.host]: { auth: Buffer.from(`den:${password}`).toString("base64") } } }));
    process.env.DEN_REGISTRY_AUTH_FILE = authFile;
    try {
      const viaFile = await api("POST", "/v1/templates", { name: "private2", from_image: ref("private/busybox:1", secure) });
      assert.equal(viaFile.status, 201, viaFile.text);
    } finally {
      delete process.env.DEN_REGISTRY_AUTH_FILE;
    }
    const ops = JSON.stringify((await api("GET", "/v1/operations?limit=200")).body);
    const events = JSON.stringify((await api("GET", "/v1/events?limit=500")).body);
    for (const text of [ops, events]) {
      assert.doesNotMatch(text, new RegExp(password));
      assert.doesNotMatch(text, /wrong-password/);
    }
  });

  test("a registry behind a bearer-token endpoint: a token is fetched with the credentials, and the image builds", async () => {
    const tokens = await startRegistry({ auth: { kind: "bearer", username: "den", password: "token-pass" } });
    try {
      await pushOciLayout(busybox.layout, busybox.tag, tokens.pushHost, "bearer/busybox:1");
      process.env.DEN_INSECURE_REGISTRIES = `${registry.host},${tokens.host}`;
      const anonymous = await api("POST", "/v1/templates", { name: "bearer", from_image: ref("bearer/busybox:1", tokens) });
      assert.equal(anonymous.status, 422, anonymous.text);
      assert.equal(anonymous.body.error.code, "image_pull_failed");
      const t = await api("POST", "/v1/templates", { name: "bearer", from_image: { ref: ref("bearer/busybox:1", tokens), credentials: { username: "den", password: "token-pass" } } });
      assert.equal(t.status, 201, t.text);
      assert.ok(tokens.tokenRequests() >= 1, "the build asked the token endpoint");
      const s = (await api("POST", "/v1/sandboxes", { template: "bearer" })).body;
      assert.equal((await exec(s.id, { cmd: "cat /www/index.html" })).stdout, "busybox here\n");
    } finally {
      process.env.DEN_INSECURE_REGISTRIES = registry.host;
      await tokens.close();
    }
  });

  /** Uploads a tar of `files` as a build context; returns its digest. */
  const uploadContext = async (files: Record<string, string>): Promise<string> => {
    const dir = await mkdtemp(join(work, "ctx-"));
    for (const [name, body] of Object.entries(files)) {
      await mkdir(join(dir, dirname(name)), { recursive: true });
      await writeFile(join(dir, name), body);
    }
    const tar = execFileSync("tar", ["-C", dir, "-cf", "-", "."]);
    const digest = `sha256:${createHash("sha256").update(tar).digest("hex")}`;
    const up = await api("PUT", `/v1/templates/contexts/${digest}`, tar, { "content-type": "application/octet-stream" });
    assert.equal(up.status, 201, up.text);
    assert.deepEqual(up.body, { context: digest, size: tar.length });
    return digest;
  };

  const dockerfile = (lastRun: string) => [
    `FROM ${ref("tools/busybox:1")}`,
    "ARG GREETING=hello",
    "ENV APP_HOME=/app",
    "WORKDIR /app",
    "COPY site/ ./",
    'RUN echo "$GREETING from the first RUN" > first.txt',
    `RUN ${lastRun}`,
    'CMD ["/bin/httpd", "-f", "-p", "8080", "-h", "/app"]',
    "",
  ].join("\n");

  test("a Dockerfile: COPY from a context, RUN in a build VM, its CMD serving; editing the last RUN reuses the earlier steps", async () => {
    const context = await uploadContext({ "site/index.html": "from the context\n", "site/sub/deep.txt": "deep\n" });
    const t = await api("POST", "/v1/templates", { name: "df", dockerfile: dockerfile("echo two > second.txt"), context, build_args: { GREETING: "hi" } });
    assert.equal(t.status, 201, t.text);
    assert.equal(t.body.run.workdir, "/app");
    assert.equal(t.body.run.env.APP_HOME, "/app");
    const s = (await api("POST", "/v1/sandboxes", { template: "df" })).body;
    assert.equal((await exec(s.id, { cmd: "pwd; cat first.txt second.txt index.html sub/deep.txt; echo $APP_HOME" })).stdout, "/app\nhi from the first RUN\ntwo\nfrom the context\ndeep\n/app\n");
    assert.equal((await viaProxy(s.id, 8080, "/index.html")).body, "from the context\n", "the Dockerfile's CMD was running when the template was baked");

    const edited = await api("POST", "/v1/templates", { name: "df", dockerfile: dockerfile("echo edited > second.txt"), context, build_args: { GREETING: "hi" } });
    assert.equal(edited.status, 201, edited.text);
    assert.notEqual(edited.body.version, t.body.version);
    const log = await buildLog(edited.headers["den-build-id"] as string);
    assert.match(log, /step 3\/5 COPY site \/app\/: cached/);
    assert.match(log, /step 4\/5 RUN echo "\$GREETING from the first RUN" > first\.txt: cached/);
    assert.match(log, /step 5\/5 RUN echo edited > second\.txt\n/);
    assert.doesNotMatch(log, /step 5\/5 RUN echo edited > second\.txt: cached/);
    const s2 = (await api("POST", "/v1/sandboxes", { template: "df" })).body;
    assert.equal((await exec(s2.id, { cmd: "cat second.txt" })).stdout, "edited\n");
  });

  test("a failing RUN fails the build with its output, and no template appears", async () => {
    const r = await api("POST", "/v1/templates", { name: "dfbad", dockerfile: dockerfile("echo about to fail >&2; exit 7") });
    assert.equal(r.status, 400, "COPY without a context is refused before anything runs");
    assert.match(r.body.error.message, /line 5: COPY needs a build context/);
    const context = await uploadContext({ "site/index.html": "x\n" });
    const bad = await api("POST", "/v1/templates", { name: "dfbad", dockerfile: dockerfile("echo about to fail >&2; exit 7"), context });
    assert.equal(bad.status, 422, bad.text);
    assert.equal(bad.body.error.code, "setup_failed");
    assert.match(bad.body.error.message, /step 5\/5 exited with 7/);
    assert.equal(bad.body.error.details.stderr, "about to fail\n");
    assert.ok(!((await api("GET", "/v1/templates")).body.templates as Array<{ name: string }>).some((x) => x.name === "dfbad"));
    const unknown = await api("POST", "/v1/templates", { name: "dfbad", dockerfile: "FROM base\nONBUILD RUN echo\n" });
    assert.equal(unknown.status, 400);
    assert.match(unknown.body.error.message, /line 2/);
    assert.match(unknown.body.error.message, /ONBUILD/);
  });

  test("a build in the background: 202 at once, its log followed while it runs, a cancel that leaves nothing", async () => {
    const vms = () => findInstanceProcesses(server.cp.hosts.first!.instance).size;
    const before = vms();
    const started = await api("POST", "/v1/templates", { name: "slowbuild", dockerfile: `FROM base\nRUN echo started-the-long-step; sleep 600\n`, wait: false });
    assert.equal(started.status, 202, started.text);
    const id = started.body.build.id as string;
    assert.equal(started.body.build.state, "building");
    assert.deepEqual(started.body.build.source, { kind: "dockerfile", from: "base", steps: "1" });
    // The log follows the build: the step's own output arrives while it runs.
    const res = await fetch(`${server.url}/v1/templates/builds/${id}/logs?follow=true`, { headers: { authorization: `Bearer ${ADMIN_KEY}` } });
    const reader = res.body!.getReader();
    let seen = "";
    while (!seen.includes("started-the-long-step")) {
      const { value, done } = await reader.read();
      assert.ok(!done, `the log ended before the step's output: ${seen}`);
      seen += Buffer.from(value).toString("utf8");
    }
    const cancel = await api("POST", `/v1/templates/builds/${id}/cancel`, {});
    assert.equal(cancel.status, 200, cancel.text);
    // The followed log ends with the build.
    for (;;) {
      const { done } = await reader.read();
      if (done) break;
    }
    const b = (await api("GET", `/v1/templates/builds/${id}`)).body;
    assert.equal(b.state, "cancelled", JSON.stringify(b));
    assert.equal(b.error.code, "aborted");
    assert.equal(vms(), before, "the build's VM is gone");
    assert.ok(!((await api("GET", "/v1/templates")).body.templates as Array<{ name: string }>).some((x) => x.name === "slowbuild"));
    const listed = (await api("GET", "/v1/templates/builds?name=slowbuild")).body.builds as Array<{ id: string }>;
    assert.equal(listed[0]?.id, id, "the newest build of that name first (a data dir kept from an earlier run may hold older ones)");
  });

  /** Uploads a file's bytes as an upload (an archive); returns its digest. */
  const upload = async (bytes: Buffer): Promise<string> => {
    const digest = `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
    const up = await api("PUT", `/v1/templates/contexts/${digest}`, bytes, { "content-type": "application/octet-stream" });
    assert.equal(up.status, 201, up.text);
    return digest;
  };

  /** Nothing a failed build may leave: a VM, a work dir, a half-fetched blob, a half-installed template version. */
  const nothingLeft = async (vmsBefore: number, name: string) => {
    assert.equal(findInstanceProcesses(server.cp.hosts.first!.instance).size, vmsBefore, "no building VM is left");
    assert.deepEqual((await readdir(dataDir())).filter((d) => d.startsWith("image-build-") || d.startsWith("build-context-")), [], "no work dir is left");
    assert.deepEqual((await readdir(join(dataDir(), "image-cache", "sha256")).catch(() => [])).filter((f) => f.startsWith(".tmp")), [], "no half-fetched blob is left");
    const versions = await readdir(join(dataDir(), "templates", name)).catch(() => [] as string[]);
    assert.deepEqual(versions.filter((v) => v.startsWith(".build-")), [], "no half-built template version is left");
    assert.ok(!((await api("GET", "/v1/templates")).body.templates as Array<{ name: string }>).some((x) => x.name === name), `no template ${name}`);
  };

  test("an image archive (docker save) uploaded through the API", async () => {
    const archive = await makeDockerSaveArchive(busybox.layout, busybox.tag, join(work, "bb-save.tar"));
    const t = await api("POST", "/v1/templates", { name: "fromarchive", from_archive: await upload(await readFile(archive)) });
    assert.equal(t.status, 201, t.text);
    assert.match(t.body.source, /^archive sha256:[0-9a-f]{64}$/);
    const s = (await api("POST", "/v1/sandboxes", { template: "fromarchive" })).body;
    assert.equal((await exec(s.id, { cmd: "cat /www/index.html" })).stdout, "busybox here\n");
  });

  test("hostile input: an archive entry that climbs out, a decompression bomb; each refused, nothing left behind", async () => {
    const vms = findInstanceProcesses(server.cp.hosts.first!.instance).size;
    const dotdot = await makeHostileArchive("dotdot", join(work, "dotdot.tar"));
    const r = await api("POST", "/v1/templates", { name: "hostile", from_archive: await upload(await readFile(dotdot)) });
    assert.equal(r.status, 422, r.text);
    assert.equal(r.body.error.code, "image_invalid");
    await nothingLeft(vms, "hostile");
    // A layer of 64 MiB of zeros (64 KiB gzipped) against a 16 MiB limit.
    const bomb = await makeBombImage(join(work, "bomb"));
    await pushOciLayout(bomb, "bomb", registry.pushHost, "bomb:1");
    process.env.DEN_IMAGE_MAX_UNPACKED_MB = "16";
    try {
      const b = await api("POST", "/v1/templates", { name: "hostile", from_image: ref("bomb:1") });
      assert.equal(b.status, 422, b.text);
      assert.equal(b.body.error.code, "image_invalid");
      assert.match(b.body.error.message, /larger than 16 MiB once decompressed/);
    } finally {
      delete process.env.DEN_IMAGE_MAX_UNPACKED_MB;
    }
    await nothingLeft(vms, "hostile");
  });

  test("an unreachable registry or a missing image fails the build by name, leaving nothing", async () => {
    const before = findInstanceProcesses(server.cp.hosts.first!.instance).size;
    const gone = await api("POST", "/v1/templates", { name: "gone", from_image: "127.0.0.1:9/nothing:1" });
    assert.equal(gone.status, 422, gone.text);
    assert.equal(gone.body.error.code, "image_pull_failed");
    assert.match(gone.body.error.message, /127\.0\.0\.1:9/);
    const missing = await api("POST", "/v1/templates", { name: "missing", from_image: ref("no/such-image:1") });
    assert.equal(missing.status, 404, missing.text);
    assert.equal(missing.body.error.code, "image_not_found");
    const names = ((await api("GET", "/v1/templates")).body.templates as Array<{ name: string }>).map((x) => x.name);
    assert.ok(!names.includes("gone") && !names.includes("missing"));
    assert.equal(findInstanceProcesses(server.cp.hosts.first!.instance).size, before, "no building VM is left");
    assert.deepEqual((await readdir(dataDir())).filter((d) => d.startsWith("image-build-")), [], "no work dir is left");
    assert.equal((await readdir(join(dataDir(), "image-cache", "sha256")).catch(() => [])).filter((f) => f.startsWith(".tmp")).length, 0, "no half-fetched blob is left");
  });
});
