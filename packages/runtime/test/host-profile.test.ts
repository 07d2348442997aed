// needs: nothing
import { test } from "node:test";
import assert from "node:assert/strict";
import { checkQemuVersion } from "../src/host.js";
import { loadsInto } from "../src/snapshot.js";

test("a QEMU older than 10.0 is refused, saying where a newer one comes from; 10.0 and later pass", () => {
  for (const old of ["7.2.22", "9.2.0", "8.2.2"]) {
    assert.throws(() => checkQemuVersion("qemu-system-x86_64", old), (e: Error & { code?: string }) => e.code === "qemu_error" && /needs 10\.0 or newer.*bookworm-backports/.test(e.message));
  }
  for (const ok of ["10.0.2", "10.1.0", "11.0.0"]) checkQemuVersion("qemu-system-x86_64", ok);
});

test("a snapshot loads into the QEMU release that wrote it, and one of Debian 12's 7.2 into 10.0; nothing else", () => {
  assert.ok(loadsInto("10.0.2", "10.0.2"));
  assert.ok(loadsInto("10.0.2", "10.0.3"), "a stable update");
  assert.ok(loadsInto("7.2.22", "10.0.2"), "hibernated before the move to QEMU 10, woken after it");
  assert.ok(!loadsInto("10.0.2", "7.2.22"), "never back");
  assert.ok(!loadsInto("7.2.22", "10.1.0"), "a pair not measured");
  assert.ok(!loadsInto("9.2.0", "10.0.2"));
});
