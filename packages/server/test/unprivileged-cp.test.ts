// needs: many VMs
/**
 * Den keeps root only where it needs it: a control plane of registered host agents touches
 * no VM, network or cgroup, so it runs as an unprivileged user (here `nobody`) while the
 * host agent (root: namespaces, nftables, cgroups, jails) does the machine's work.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { chmodSync, chownSync, cpSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import S3rver from "s3rver";
import { ADMIN_KEY, CLI, client, sandboxCalls, spawnHostAgent, stopProcess, testCa, waitFor } from "./helpers.js";

const CP_PORT = 19255;
const HOST_PORT = 19256;
/** The control plane's hosts' listener (mutual TLS). */
const FLEET_PORT = 19257;
const NOBODY = ["--reuid=nobody", "--regid=nogroup", "--clear-groups"];
/** Whether `nobody` can run this checkout's CLI at all (a checkout under a 0700 home cannot). */
const readable = spawnSync("setpriv", [...NOBODY, "--", process.execPath, "-e", `require("fs").readFileSync(${JSON.stringify(CLI)})`]).status === 0;

describe("a control plane that runs as an unprivileged user", { skip: !readable && "this checkout is not readable by another user" }, () => {
  let cp: ChildProcess | undefined;
  let host: ChildProcess | undefined;
  let s3: S3rver | undefined;
  let root = "";
  const api = client(`http://127.0.0.1:${CP_PORT}`);
  const { create, exec } = sandboxCalls(api);

  before(async () => {
    root = mkdtempSync(join(tmpdir(), "den-unpriv-"));
    chmodSync(root, 0o711); // (mkdtemp's 0700 would keep nobody out of its own data dir below)
    s3 = new S3rver({ port: 0, address: "127.0.0.1", silent: true, directory: join(root, "s3"), configureBuckets: [{ name: "unpriv" }] });
    const { port } = await s3.run();
    const store = { DEN_STORE: "s3", DEN_S3_BUCKET: "unpriv", DEN_S3_ENDPOINT: `http://127.0.0.1:${port}`, AWS_ACCESS_KEY_ID: "S3RVER", AWS_SECRET_ACCESS_KEY: "S3RVER" };
    const cpDir = join(root, "cp");
    spawnSync("mkdir", ["-p", cpDir]);
    const nobody = spawnSync("id", ["-u", "nobody"], { encoding: "utf8" }).stdout.trim();
    const nogroup = Number(spawnSync("id", ["-g", "nobody"], { encoding: "utf8" }).stdout.trim());
    chownSync(cpDir, Number(nobody), nogroup);
    // The test CA, nobody's own (its key must be its reader's alone): the hosts' certificates come from the same one.
    const caDir = join(root, "ca");
    cpSync((await testCa()).dir, caDir, { recursive: true });
    for (const f of [caDir, ...readdirSync(caDir).map((n) => join(caDir, n))]) chownSync(f, Number(nobody), nogroup);
    cp = spawn("setpriv", [...NOBODY, "--", process.execPath, CLI, "serve", "--port", String(CP_PORT)], {
      env: { ...process.env, ...store, DEN_DATA_DIR: cpDir, DEN_API_KEY: ADMIN_KEY, DEN_CA_DIR: caDir, DEN_FLEET_PORT: String(FLEET_PORT), DEN_HOST_AGENT_URL: "registered", DEN_LOG_LEVEL: "warn", DEN_ENVD_PORT: "0" },
      stdio: ["ignore", "ignore", "inherit"],
    });
    await waitFor("the unprivileged control plane answers", async () => ((await fetch(`http://127.0.0.1:${CP_PORT}/healthz`).catch(() => undefined))?.ok ? true : undefined), 30_000);
    host = await spawnHostAgent(HOST_PORT, { ...store, DEN_CONTROL_PLANE_URL: `https://127.0.0.1:${FLEET_PORT}`, DEN_HOST_HEARTBEAT_MS: "300" });
    await waitFor("the host agent registered", async () => (((await api("GET", "/v1/hosts")).body?.hosts ?? []).some((h: { status: string }) => h.status === "up") ? true : undefined), 30_000);
  });
  after(async () => {
    for (const s of (await api("GET", "/v1/sandboxes?limit=200").catch(() => undefined))?.body?.sandboxes ?? []) await api("DELETE", `/v1/sandboxes/${s.id}`);
    // The host first: a registered host agent's SIGTERM drains through its control plane,
    // which would wait out its shutdown timeout with the control plane gone.
    await stopProcess(host, "SIGTERM");
    await stopProcess(cp, "SIGTERM");
    await s3?.close();
    rmSync(root, { recursive: true, force: true });
  });

  test("runs as nobody with no capability, and sandboxes work through it", async () => {
    const status = readFileSync(`/proc/${cp!.pid}/status`, "utf8");
    // (setpriv execs node in place: the pid is the control plane's)
    assert.match(status, /^Uid:\s+(\d+)\s+\1\s+\1\s+\1$/m);
    assert.doesNotMatch(status, /^Uid:\s+0\s/m, "not root");
    assert.match(status, /^CapEff:\s+0+$/m, "no effective capability");
    const id = await create({});
    assert.equal(await exec(id, "id -u && echo through-an-unprivileged-cp"), "0\nthrough-an-unprivileged-cp\n");
    const d = await api("DELETE", `/v1/sandboxes/${id}`);
    assert.ok(d.status === 200 || d.status === 204, d.text);
  });
});
