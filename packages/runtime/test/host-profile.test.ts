// needs: nothing
import { test } from "node:test";
import assert from "node:assert/strict";
import { checkQemuVersion } from "../src/host.js";

test("a QEMU older than 10.0 is refused, saying where a newer one comes from; 10.0 and later pass", () => {
  for (const old of ["7.2.22", "9.2.0", "8.2.2"]) {
    assert.throws(() => checkQemuVersion("qemu-system-x86_64", old), (e: Error & { code?: string }) => e.code === "qemu_error" && /needs 10\.0 or newer.*bookworm-backports/.test(e.message));
  }
  for (const ok of ["10.0.2", "10.1.0", "11.0.0"]) checkQemuVersion("qemu-system-x86_64", ok);
});
