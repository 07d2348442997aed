// needs: nothing
import { test } from "node:test";
import assert from "node:assert/strict";
import { DenError } from "@den/protocol";
import { agentSourceKey, aptMirror, loadRecipe, validateRecipe } from "../src/index.js";

test("the base recipe loads and is valid", () => {
  const r = loadRecipe("base");
  assert.equal(r.name, "base");
  assert.equal(r.vcpus, 1);
  assert.equal(r.memoryMb, 512);
  assert.ok(r.packages.includes("python3"));
});

test("invalid recipes are refused with a clear error", () => {
  const base = { name: "x", suite: "bookworm", kernelPackage: "linux-image-cloud-amd64", packages: [], vcpus: 1, memoryMb: 512, diskMb: 4096 };
  for (const bad of [
    { ...base, name: "../etc" },
    { ...base, packages: ["ok", "rm -rf /"] },
    { ...base, vcpus: 0 },
    { ...base, memoryMb: 1.5 },
    { ...base, suite: "bookworm; reboot" },
  ]) {
    assert.throws(() => validateRecipe(bad, "test"), (e: unknown) => e instanceof DenError && e.code === "invalid_argument");
  }
  assert.throws(() => loadRecipe("no-such-recipe"), (e: unknown) => e instanceof DenError && e.code === "template_not_found");
});

test("the agent source key is stable and the mirror comes from apt's sources", () => {
  assert.equal(agentSourceKey(), agentSourceKey());
  assert.match(aptMirror(), /^(https?|file):\/\//);
});
