// needs: many VMs, docker-registry, skopeo, umoci
/**
 * Template builds killed mid-way: `den serve` (its host agent in-process) killed -9 at
 * seeded random points of an image build with a RUN step and a start command, then a host
 * agent of its own (`den host run`, the control plane apart) killed -9 the same way. After
 * each restart the build is either finished (its template works) or cleanly failed (the
 * build says so, no template of that name appears), and nothing is left behind: no VM of
 * the instance, no build work dir, no half-fetched blob, no half-installed template version.
 *   DEN_BUILD_CRASH_SEED=<n>  replay a run (the seed is in the test names)
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import type { ChildProcess } from "node:child_process";
import { mkdtemp, readFile, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { makeBusyboxImage, pushOciLayout, startRegistry } from "@den/images/testing";
import { findInstanceProcesses, mulberry32 } from "@den/runtime";
import { client, dataDir, fleetEnv, freePort, spawnHostAgent, spawnServer, stopProcess, waitFor } from "./helpers.js";

const PORT = 19411;
const HOST_PORT = 19412;
const SEED = Number(process.env.DEN_BUILD_CRASH_SEED ?? 4242) >>> 0;
/** A kill lands somewhere in a build's first seconds (pull, unpack, boot, the RUN, the start, the bake). */
const MAX_KILL_MS = 9_000;

const api = client(`http://127.0.0.1:${PORT}`);
/** Template names of this run (a data dir keeps the host's templates across runs). */
const RUN = Date.now().toString(36);

/** What a failed or interrupted build may not leave in a data dir. */
async function leftovers(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const d of await readdir(dir)) if (d.startsWith("image-build-") || d.startsWith("build-context-")) out.push(d);
  for (const f of await readdir(join(dir, "image-cache", "sha256")).catch(() => [] as string[])) if (f.startsWith(".tmp")) out.push(`image-cache/${f}`);
  for (const name of await readdir(join(dir, "templates")).catch(() => [] as string[])) {
    for (const v of await readdir(join(dir, "templates", name)).catch(() => [] as string[])) if (v.startsWith(".build-")) out.push(`templates/${name}/${v}`);
  }
  return out;
}

describe(`template builds killed mid-way (DEN_BUILD_CRASH_SEED=${SEED})`, () => {
  let registry: Awaited<ReturnType<typeof startRegistry>>;
  let work: string;
  let cp: ChildProcess | undefined;
  let hostAgent: ChildProcess | undefined;
  let env: Record<string, string>;
  const rng = mulberry32(SEED);

  before(async () => {
    work = await mkdtemp(join(tmpdir(), "den-build-crash-"));
    registry = await startRegistry();
    const bb = await makeBusyboxImage(join(work, "bb"));
    await pushOciLayout(bb.layout, bb.tag, registry.pushHost, "crash/busybox:1");
    env = { DEN_INSECURE_REGISTRIES: registry.host, DEN_BUILD_EGRESS: "none" };
  });

  after(async () => {
    await stopProcess(cp, "SIGTERM");
    await stopProcess(hostAgent, "SIGTERM");
    await registry?.close();
    await rm(work, { recursive: true, force: true });
  });

  /** Starts a build (a new version each time: `force`), kills `victim()` after a random delay, restarts, and checks. */
  async function round(label: string, victim: () => ChildProcess, restart: () => Promise<void>, hostDir: string): Promise<void> {
    const name = `crash-${label}-${RUN}`;
    const r = await api("POST", "/v1/templates", {
      name, from_image: `${registry.host}/crash/busybox:1`, wait: false, force: true, setup: ["echo from-the-step > /www/step.txt"],
      start_cmd: "/bin/httpd -f -p 8080 -h /www", ready_cmd: "wget -qO- http://127.0.0.1:8080/index.html",
    });
    assert.equal(r.status, 202, r.text);
    const id = r.body.build.id as string;
    const delay = Math.floor(rng() * MAX_KILL_MS);
    await new Promise((res) => setTimeout(res, delay));
    const before = (await api("GET", `/v1/templates/builds/${id}`)).body?.state;
    await stopProcess(victim(), "SIGKILL");
    await restart();
    // The build ends: ready (its host finished it, or a restart found it done) or failed.
    const b = await waitFor(`build ${id} to end`, async () => {
      const x = (await api("GET", `/v1/templates/builds/${id}`)).body;
      return x && x.state !== "building" ? x : undefined;
    }, 180_000, 500);
    console.log(`[build-crash] ${label}: killed at ${delay} ms (build was ${before}); after the restart: ${b.state}${b.error ? ` (${b.error.message})` : ""}`);
    const names = ((await api("GET", "/v1/templates")).body.templates as Array<{ name: string; current: boolean }>).filter((t) => t.name === name);
    if (b.state === "ready") {
      assert.ok(names.some((t) => t.current), `a ready build's template ${name} is there`);
      const s = await api("POST", "/v1/sandboxes", { template: name });
      assert.equal(s.status, 201, s.text);
      const e = await api("POST", `/v1/sandboxes/${s.body.id}/exec`, { cmd: "wget -qO- http://127.0.0.1:8080/step.txt" });
      assert.equal(e.body.stdout, "from-the-step\n", "the template's server runs in a create, with the step's file");
      assert.equal((await api("DELETE", `/v1/sandboxes/${s.body.id}`)).status, 200);
      assert.equal((await api("DELETE", `/v1/templates/${name}`)).status, 204);
    } else {
      assert.ok(["error", "cancelled"].includes(b.state), JSON.stringify(b));
      assert.deepEqual(names, [], `a failed build leaves no template ${name}`);
    }
    // No VM but the sandboxes the API knows (none), nothing half-made on disk.
    const instance = (await readFile(join(hostDir, "instance-id"), "utf8")).trim();
    await waitFor("no VM of a build left", async () => (findInstanceProcesses(instance).size === 0 ? true : undefined), 60_000, 500);
    assert.deepEqual(await leftovers(hostDir), []);
  }

  test("den serve killed -9 mid-build, twice", async () => {
    const start = async () => {
      cp = await spawnServer(PORT, env);
    };
    await start();
    for (const n of [1, 2]) await round(`serve-${n}`, () => cp!, start, dataDir());
    await stopProcess(cp, "SIGTERM");
    cp = undefined;
  });

  test("a host agent of its own killed -9 mid-build", async () => {
    const cpDir = await mkdtemp(join(tmpdir(), "den-build-crash-cp-"));
    const hostEnv = { ...env, DEN_STORE_DIR: join(cpDir, "store") };
    const startHost = async () => {
      hostAgent = await spawnHostAgent(HOST_PORT, hostEnv);
    };
    await startHost();
    // The host listed by URL, over mutual TLS: the control plane's certificate from the test CA.
    cp = await spawnServer(PORT, { ...hostEnv, ...(await fleetEnv(await freePort())), DEN_DATA_DIR: cpDir, DEN_HOST_AGENT_URL: `https://127.0.0.1:${HOST_PORT}` });
    try {
      await round("host", () => hostAgent!, startHost, dataDir());
    } finally {
      await stopProcess(cp, "SIGTERM");
      cp = undefined;
      await rm(cpDir, { recursive: true, force: true });
    }
  });
});
