// needs: memory host
/**
 * A template build as the control plane holds it, on the in-memory host: its sandbox is
 * metered, held to the build's TTL and counted against its owner (templates.test builds
 * real templates on real microVMs, and sdk-e2e one more through the SDK).
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { memoryFixture } from "./helpers.js";

describe("a template build is a sandbox of its owner's: quota, TTL and metering", () => {
  const f = memoryFixture({ DEN_MAX_SANDBOXES_PER_OWNER: "1", DEN_TEMPLATE_BUILD_TTL_SECONDS: "5" });

  test("its running time is metered; it is held to the build's TTL; it counts against the owner's sandboxes", async () => {
    const { api } = f;
    const t0 = Date.now();
    // (a recipe of its own each run: a version already on the host is reused, and a reuse builds nothing)
    const built = await api("POST", "/v1/templates", { name: "slowish", setup: [`sleep 2 # ${Date.now()}`] });
    assert.equal(built.status, 201, built.text);
    const groups = (await api("GET", `/v1/usage?group_by=sandbox&from=${new Date(t0 - 1000).toISOString()}&to=${new Date(Date.now() + 1000).toISOString()}`)).body.groups as Array<{ key: string; running_seconds: number; vcpu_seconds: number }>;
    const build = groups.find((g) => g.key.startsWith("op_"));
    assert.ok(build && build.running_seconds >= 2 && build.vcpu_seconds >= 2, `the build's running time is metered: ${JSON.stringify(groups)}`);

    const t1 = Date.now();
    const long = await api("POST", "/v1/templates", { name: "forever", setup: ["sleep 600"] });
    assert.equal(long.status, 422, long.text);
    assert.equal(long.body.error.code, "setup_failed");
    assert.match(long.body.error.message, /TTL \(5 s\)/);
    assert.ok(Date.now() - t1 < 30_000, `the TTL cut it short (${Date.now() - t1} ms)`);

    const s = await api("POST", "/v1/sandboxes", {});
    assert.equal(s.status, 201, s.text);
    const over = await api("POST", "/v1/templates", { name: "onetoomany", setup: ["true"] });
    assert.equal(over.status, 429, over.text);
    assert.equal(over.body.error.code, "quota_exceeded");
    assert.match(over.body.error.message, /template build runs in one/);
  });
});
