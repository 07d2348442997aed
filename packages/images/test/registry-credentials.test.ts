// needs: nothing
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DenError } from "@den/protocol";
import { deploymentAuth } from "../src/index.js";

let dir: string;
before(async () => {
  dir = await mkdtemp(join(tmpdir(), "den-regauth-"));
});
after(() => rm(dir, { recursive: true, force: true }));

const b64 = (s: string) => Buffer.from(s).toString("base64");

test("the deployment's credentials: Docker-style auths by registry, each form", async () => {
  const file = join(dir, "auth.json");
  await writeFile(file, JSON.stringify({
    auths: {
      "127.0.0.1:5000": { auth: b64("den:pa:ss") },
      "https://index.docker.io/v1/": { username: "hub", password: "hubpass" },
      "ghcr.io": { registrytoken: "tok" },
      "empty.example": {},
    },
  }));
  const env = { DEN_REGISTRY_AUTH_FILE: file };
  assert.deepEqual(await deploymentAuth("127.0.0.1:5000", env), { username: "den", password: "pa:ss" }, "a password may hold a colon");
  assert.deepEqual(await deploymentAuth("docker.io", env), { username: "hub", password: "hubpass" }, "Docker Hub's key names docker.io");
  assert.deepEqual(await deploymentAuth("ghcr.io", env), { token: "tok" });
  assert.equal(await deploymentAuth("empty.example", env), undefined);
  assert.equal(await deploymentAuth("other.example", env), undefined);
  assert.equal(await deploymentAuth("127.0.0.1:5000", {}), undefined, "no file: none");
});

test("a malformed or missing auth file is a clear error that quotes none of it", async () => {
  const bad = join(dir, "bad.json");
  await writeFile(bad, '{"auths": {"x": {"auth": 42, "password": "do-not-print-me"}}}');
  await assert.rejects(deploymentAuth("x", { DEN_REGISTRY_AUTH_FILE: bad }), (e: DenError) =>
    e.code === "image_pull_failed" && /not a Docker-style auth file/.test(e.message) && !e.message.includes("do-not-print-me"));
  await assert.rejects(deploymentAuth("x", { DEN_REGISTRY_AUTH_FILE: join(dir, "missing.json") }), (e: DenError) => e.code === "image_pull_failed" && /not a readable file/.test(e.message));
});
