// needs: nothing
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openDatabase } from "@den/control-plane";
import { Store } from "@den/control-plane";

/** Events of every type are bounded per sandbox: the chatty families keep their newest `cap` each, all together four times `cap`. */
test("event retention: each chatty family keeps its newest `cap`, lifecycle events outlive them up to 4x `cap` in all", async () => {
  const dir = mkdtempSync(join(tmpdir(), "den-events-"));
  const db = await openDatabase(dir);
  try {
    const s = new Store(db);
    const cap = 5;
    for (let i = 0; i < 30; i++) await s.events.add("sbx_a", "exec.finished", null, { i }, cap);
    for (let i = 0; i < 8; i++) await s.events.add("sbx_a", "transfer.progress", null, { i }, cap);
    for (let i = 0; i < 10; i++) await s.events.add("sbx_a", "state.changed", "user", { i }, cap);
    // Another sandbox's events are its own.
    for (let i = 0; i < 3; i++) await s.events.add("sbx_b", "exec.finished", null, { i }, cap);
    const a = await s.events.list("sbx_a", 0, 1000);
    const of = (prefix: string) => a.filter((e) => e.type.startsWith(prefix)).map((e) => e.data.i);
    assert.deepEqual(of("exec."), [25, 26, 27, 28, 29], "the newest 5 execs");
    assert.deepEqual(of("transfer."), [3, 4, 5, 6, 7], "the newest 5 transfers");
    assert.deepEqual(of("state."), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], "lifecycle events are all kept while within 4x cap in all");
    assert.equal(a.length, 4 * cap);
    assert.equal((await s.events.list("sbx_b", 0, 1000)).length, 3);
    // Past 4x cap in all, the oldest go whatever their type.
    for (let i = 10; i < 30; i++) await s.events.add("sbx_a", "state.changed", "user", { i }, cap);
    const after = await s.events.list("sbx_a", 0, 1000);
    assert.equal(after.length, 4 * cap);
    assert.deepEqual(after.map((e) => e.data.i), Array.from({ length: 20 }, (_, k) => k + 10), "the newest 20, the execs and transfers among the oldest gone");
  } finally {
    await db.destroy();
    rmSync(dir, { recursive: true, force: true });
  }
});
