// needs: memory host
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { memoryFixture } from "./helpers.js";

/** Quotas are checked in the transaction that inserts, so concurrent requests cannot overshoot. */
describe("quotas under concurrency", () => {
  const m = memoryFixture({ DEN_MAX_SANDBOXES_PER_OWNER: "2" });

  test("five creates at once with room for two: two are made, three are 429 quota_exceeded, none is left behind", async () => {
    const { api } = m;
    const rs = await Promise.all(Array.from({ length: 5 }, () => api("POST", "/v1/sandboxes", {})));
    const made = rs.filter((r) => r.status === 201);
    const refused = rs.filter((r) => r.status === 429);
    assert.equal(made.length, 2, rs.map((r) => `${r.status} ${r.text.slice(0, 120)}`).join("\n"));
    assert.equal(refused.length, 3);
    for (const r of refused) assert.equal(r.body.error.code, "quota_exceeded");
    const live = (await api("GET", "/v1/sandboxes?limit=200")).body.sandboxes.filter((s: { state: string }) => s.state !== "destroyed");
    assert.deepEqual(live.map((s: { id: string }) => s.id).sort(), made.map((r) => r.body.id).sort());
    // A fork of two from one of them is refused whole: it would make four.
    const f = await api("POST", `/v1/sandboxes/${made[0]!.body.id}/fork`, { count: 2 });
    assert.equal(f.status, 429, f.text);
  });
});
