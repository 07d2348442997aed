// needs: memory host
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { memoryFixture } from "./helpers.js";

/** The operations log: intent first, ids chosen by the control plane, compare-and-set on a generation. */
describe("operations", () => {
  const fx = memoryFixture();

  test("a hibernate is logged with the snapshot id it produced, chosen before the host was asked; generations move on", async () => {
    const { api, server } = fx;
    const id = (await api("POST", "/v1/sandboxes", {})).body.id;
    const g0 = (await server.cp.store.sandboxes.get(id))!.generation;
    const h = await api("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "warm" });
    assert.equal(h.status, 200, h.text);
    assert.equal(h.body.operation, null, "nothing in flight once it answered");
    const row = (await server.cp.store.sandboxes.get(id))!;
    assert.equal(row.generation, g0 + 2, "one step for the intent, one for the outcome");
    const ops = await server.cp.store.db.selectFrom("operations").selectAll().where("sandbox_id", "=", id).where("kind", "=", "hibernate").execute();
    assert.equal(ops.length, 1);
    assert.equal(ops[0]!.status, "done");
    assert.equal(JSON.parse(ops[0]!.args).snapshot, row.hibernate_snapshot, "the snapshot id in the intent is the one the sandbox points at");
    // A write that expects the old generation changes nothing.
    assert.equal(await server.cp.store.sandboxes.cas(id, { generation: g0, opId: null }, { last_activity_at: 1 }), undefined);
    await api("DELETE", `/v1/sandboxes/${id}`);
  });

  test("while an operation holds a sandbox it shows in the API, another one is refused with operation_in_progress, and nothing changes", async () => {
    const { api, server } = fx;
    const { ops, store } = server.cp;
    const id = (await api("POST", "/v1/sandboxes", {})).body.id;
    await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "echo kept > /root/k" });
    const op = ops.newOp("checkpoint", id, "user", {});
    await ops.begin((await store.sandboxes.get(id))!, op);
    const shown = (await api("GET", `/v1/sandboxes/${id}`)).body;
    assert.equal(shown.state, "running", "the state stays the last settled one");
    assert.deepEqual({ id: shown.operation.id, kind: shown.operation.kind }, { id: op.id, kind: "checkpoint" });
    for (const [path, body] of [[`/v1/sandboxes/${id}/hibernate`, { mode: "cold" }], [`/v1/sandboxes/${id}/timeout`, { seconds: 60 }]] as const) {
      const r = await api("POST", path, body);
      assert.equal(r.status, 409, r.text);
      assert.equal(r.body.error.code, "operation_in_progress");
    }
    // Reads and execs go on meanwhile.
    assert.equal((await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "cat /root/k" })).body.stdout, "kept\n");
    await ops.fail(op, id, new Error("given up by the test"));
    const after = (await api("GET", `/v1/sandboxes/${id}`)).body;
    assert.equal(after.operation, null);
    const events = (await api("GET", `/v1/sandboxes/${id}/events`)).body.events as Array<{ type: string; data: { operation?: string } }>;
    assert.ok(events.some((e) => e.type === "operation.failed" && e.data.operation === op.id), "its end is in the events");
    assert.equal((await api("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "warm" })).status, 200, "free again");
    await api("DELETE", `/v1/sandboxes/${id}`);
  });
});
