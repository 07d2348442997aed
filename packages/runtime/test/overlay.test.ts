// needs: qemu-img
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { OverlayMaker } from "../src/overlay.js";

const info = (path: string) => JSON.parse(execFileSync("qemu-img", ["info", "--output=json", path], { encoding: "utf8" })) as { "virtual-size": number; "backing-filename": string };

test("an overlay made from a kept copy is the one qemu-img makes; a backing disk replaced at the same path gets a new one", async () => {
  const dir = mkdtempSync(join(tmpdir(), "den-overlay-test-"));
  try {
    const base = join(dir, "base.qcow2");
    execFileSync("qemu-img", ["create", "-q", "-f", "qcow2", base, "64M"]);
    const maker = new OverlayMaker(join(dir, "kept"));
    await maker.create([base], join(dir, "a.qcow2"));
    await maker.create([base], join(dir, "b.qcow2"));
    execFileSync("qemu-img", ["create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", base, join(dir, "ref.qcow2")]);
    assert.deepEqual(readFileSync(join(dir, "b.qcow2")), readFileSync(join(dir, "ref.qcow2")));
    assert.deepEqual(readFileSync(join(dir, "a.qcow2")), readFileSync(join(dir, "ref.qcow2")));
    assert.equal(readdirSync(join(dir, "kept")).length, 1);

    // The same path, another disk (a larger one): the kept overlay must not be reused.
    rmSync(base);
    execFileSync("qemu-img", ["create", "-q", "-f", "qcow2", base, "128M"]);
    await maker.create([base], join(dir, "c.qcow2"));
    assert.equal(info(join(dir, "c.qcow2"))["virtual-size"], 128 << 20);
    assert.equal(info(join(dir, "c.qcow2"))["backing-filename"], base);
    // Writes to an overlay in use never reach the kept copy (it is copied, not linked).
    execFileSync("qemu-io", ["-c", "write -P 0x5a 0 64k", join(dir, "c.qcow2")], { stdio: "ignore" });
    await maker.create([base], join(dir, "d.qcow2"));
    assert.equal(execFileSync("qemu-io", ["-c", "read -P 0 0 64k", join(dir, "d.qcow2")], { encoding: "utf8" }).includes("Pattern verification failed"), false);

    await maker.close();
    assert.equal(existsSync(join(dir, "kept")), false);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
