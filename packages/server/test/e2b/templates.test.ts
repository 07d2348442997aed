// needs: one VM, network namespace (open egress), the e2b client, docker-registry, skopeo, umoci
/**
 * E2B's template builder, unchanged (`e2b` 2.51), against Den on real microVMs: a template
 * from an image in a registry the test runs on loopback (busybox: no bash, no `ss`), with a
 * RUN, COPYs of local files (uploaded through Den's signed links), ENV, WORKDIR, a start
 * command and `waitForPort`, and one from a Dockerfile the client parses itself; each built
 * with `Template.build`, its log followed, then made into a sandbox whose commands (envd)
 * see the files, the env, the workdir and the running server. The REST mapping without a
 * build (checks, aliases, uploads' tokens): e2b-templates.test.ts, on the memory host.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { chmod, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { Sandbox, Template, waitForPort, type LogEntry } from "e2b";
import { makeBusyboxImage, pushOciLayout, startRegistry } from "@den/images/testing";
import type { RunningServer } from "../../src/index.js";
import { ADMIN_KEY, client, testServer } from "../helpers.js";

/** envd's commands run `/bin/bash -l -c`: busybox has no bash, so the template brings one (its sh). */
const BASH_SHIM = "#!/bin/sh\nexec /bin/sh \"$@\"\n";
const nonce = randomBytes(6).toString("hex");

describe("E2B's Template builder against Den", () => {
  let work: string;
  let files: string;
  let registry: Awaited<ReturnType<typeof startRegistry>>;
  let server: RunningServer;
  let image: string;
  let den: ReturnType<typeof client>;
  const made: string[] = [];

  before(async () => {
    work = await mkdtemp(join(tmpdir(), "den-e2b-tpl-"));
    files = join(work, "files");
    await mkdir(files);
    await writeFile(join(files, "bash"), BASH_SHIM);
    await chmod(join(files, "bash"), 0o755);
    // New content each run: its files hash is new, so the client uploads it (a data dir keeps contexts a week).
    await writeFile(join(files, "hello.txt"), `hello from copy ${nonce}\n`);
    registry = await startRegistry();
    const bb = await makeBusyboxImage(join(work, "bb"));
    await pushOciLayout(bb.layout, bb.tag, registry.pushHost, "tools/busybox:1");
    image = `${registry.host}/tools/busybox:1`;
    // The host agent reads its registry settings from the environment (as `den serve` does).
    process.env.DEN_INSECURE_REGISTRIES = registry.host;
    server = await testServer();
    den = client(server.url);
    process.env.E2B_API_URL = server.url;
    process.env.E2B_API_KEY = ADMIN_KEY;
    process.env.E2B_SANDBOX_URL = server.envdUrl!;
  });

  after(async () => {
    for (const id of made) await Sandbox.kill(id).catch(() => undefined);
    for (const name of ["e2b-bb", "e2b-df"]) await fetch(`${server?.url}/templates/${name}`, { method: "DELETE", headers: { "x-api-key": ADMIN_KEY } }).catch(() => undefined);
    await server?.close();
    delete process.env.DEN_INSECURE_REGISTRIES;
    await registry?.close();
    await rm(work, { recursive: true, force: true });
  });

  const build = async (t: Parameters<typeof Template.build>[0], alias: string, opts: { memoryMB?: number } = {}) => {
    const logs: string[] = [];
    const t0 = Date.now();
    const info = await Template.build(t, { alias, ...opts, onBuildLogs: (l: LogEntry) => void logs.push(l.message) });
    return { info, logs, seconds: (Date.now() - t0) / 1000 };
  };

  test("from an image: RUN, COPY, ENV, WORKDIR and a start command with waitForPort; the sandbox has them all", async () => {
    const t = Template({ fileContextPath: files })
      .fromImage(image)
      .copy("bash", "/bin/bash", { user: "root" })
      .runCmd("/bin/busybox mkdir -p /srv/app && echo built-by-run > /srv/app/run.txt && /bin/busybox chown user /srv/app", { user: "root" })
      .copy("hello.txt", "/srv/app/")
      .setEnvs({ GREETING: "hi there", MODE: "e2b" })
      .setWorkdir("/srv/app")
      .runCmd("echo in-workdir > rel.txt")
      .setStartCmd("/bin/httpd -f -p 8080 -h /srv/app", waitForPort(8080));
    const { info, logs, seconds } = await build(t, "e2b-bb", { memoryMB: 768 });
    assert.equal(info.templateId, "e2b-bb");
    const log = logs.join("\n");
    assert.match(log, /Uploaded 'hello\.txt'/, "the client uploaded the files through Den's link");
    assert.match(log, /resolving 127\.0\.0\.1:\d+\/tools\/busybox:1/, "the host's log reached the client");
    assert.match(log, /COPY hello\.txt \/srv\/app\//);
    assert.match(log, /waiting for: .*\/proc\/net\/tcp/, "waitForPort checks the socket tables (busybox has no ss)");
    console.log(`e2b-bb built in ${seconds.toFixed(1)} s`);

    const sbx = await Sandbox.create("e2b-bb", { timeoutMs: 600_000 });
    made.push(sbx.sandboxId);
    const r = await sbx.commands.run("echo $GREETING; echo $MODE; cd /srv/app; cat hello.txt run.txt rel.txt; id -un; ls -ln hello.txt; wget -qO- http://127.0.0.1:8080/hello.txt");
    const [greeting, mode, hello, run, rel, user, ls, served] = r.stdout.split("\n");
    assert.deepEqual([greeting, mode, hello, run, rel, user, served], ["hi there", "e2b", `hello from copy ${nonce}`, "built-by-run", "in-workdir", "user", `hello from copy ${nonce}`], r.stdout + r.stderr);
    assert.match(ls!, /^\S+\s+\d+\s+1000\s+1000\s/, "a COPY without a user belongs to the user the steps run as (E2B's `user`)");
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).memoryMB, 768, "memoryMB is the template's shape");
    // The template's workdir is its sandboxes' (a /v1 exec starts there).
    const tpl = (await den("GET", "/v1/templates")).body.templates.find((x: { name: string }) => x.name === "e2b-bb");
    assert.deepEqual([tpl.run.workdir, tpl.run.user, tpl.run.env.GREETING], ["/srv/app", "user", "hi there"]);
    assert.equal((await den("POST", `/v1/sandboxes/${sbx.sandboxId}/exec`, { cmd: "pwd" })).body.stdout, "/srv/app\n");
  });

  test("from a Dockerfile the client parses: its steps, USER and WORKDIR as E2B sets them; files it uploaded before are not sent again", async () => {
    const dockerfile = [
      `FROM ${image}`,
      "COPY bash /bin/bash",
      "RUN /bin/busybox mkdir -p /opt/df && echo from-dockerfile > /opt/df/marker",
      "ENV DF_VAR=dockerfile",
      "WORKDIR /opt/df",
    ].join("\n");
    const t = Template({ fileContextPath: files }).fromDockerfile(dockerfile);
    const { logs, seconds } = await build(t, "e2b-df");
    assert.match(logs.join("\n"), /Skipping upload of 'bash', already cached/);
    console.log(`e2b-df built in ${seconds.toFixed(1)} s`);

    const sbx = await Sandbox.create("e2b-df", { timeoutMs: 600_000 });
    made.push(sbx.sandboxId);
    const r = await sbx.commands.run("echo $DF_VAR; cat /opt/df/marker; id -un");
    assert.equal(r.stdout, "dockerfile\nfrom-dockerfile\nuser\n", r.stderr);
    assert.equal((await den("POST", `/v1/sandboxes/${sbx.sandboxId}/exec`, { cmd: "pwd" })).body.stdout, "/opt/df\n");
  });
});
