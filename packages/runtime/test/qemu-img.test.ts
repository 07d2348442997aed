// needs: qemu-img (qemu-io)
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DenError } from "@den/protocol";
import { checkChain } from "../src/image-check.js";
import { flattenImage, rebaseImage } from "../src/image-tools.js";
import { runQemuImg } from "../src/qemu-img.js";

import { qcow2Chain, qemuImg } from "./qcow2-chain.js";
const owner = (p: string) => { const st = statSync(p); return `${st.uid}:${st.gid}:${(st.mode & 0o7777).toString(8)}`; };
const asRoot = process.getuid?.() === 0;

/** A root-only dir holding base <- mid <- top, every file root's alone (0600), as a data dir's are. */
function privateChain() {
  const dir = mkdtempSync(join(tmpdir(), "den-qemuimg-"));
  chmodSync(dir, 0o700);
  const { base, mid, top } = qcow2Chain(dir);
  execFileSync("qemu-io", ["-f", "qcow2", "-c", "write -P 7 0 64k", mid], { stdio: "ignore" });
  for (const p of [base, mid, top]) chmodSync(p, 0o600);
  return { dir, base, mid, top };
}

test("qemu-img runs as a uid of its own: a path it was not handed is out of its reach", { skip: !asRoot && "needs root" }, async () => {
  const s = privateChain();
  try {
    // Handed in, the top reads (its backing chain stated, not followed by name).
    const out = await runQemuImg([[s.top, "read"]], (n) => ["info", "--output=json", `json:{"driver":"qcow2","file":{"driver":"file","filename":"${n(s.top)}"},"backing":null}`]);
    assert.equal((JSON.parse(out) as { "virtual-size": number })["virtual-size"], 64 * 1024 * 1024);
    // A path (in a root-only dir) it must open itself: refused, as for any unprivileged user.
    await assert.rejects(runQemuImg([[s.top, "read"]], () => ["info", s.base]), (e: unknown) => e instanceof DenError && e.code === "qemu_error" && /Permission denied/.test(e.message));
    // And the chain by the names in the header: not followed past what it was handed (mid is not).
    await assert.rejects(runQemuImg([[s.top, "read"]], (n) => ["info", "--backing-chain", "-f", "qcow2", n(s.top)]), /Permission denied|Could not open/);
  } finally {
    rmSync(s.dir, { recursive: true, force: true });
  }
});

test("files a run reads or writes get their owner, group and mode back, runs sharing an input too", { skip: !asRoot && "needs root" }, async () => {
  const s = privateChain();
  try {
    const before = [s.base, s.mid, s.top].map(owner);
    // Two rebases and a flatten at once, all reading base (root's alone, 0600).
    const other = join(s.dir, "other.qcow2");
    qemuImg("create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", s.mid, other);
    chmodSync(other, 0o600);
    const flat = join(s.dir, "flat.qcow2");
    await Promise.all([rebaseImage(s.top, [s.mid, s.base], [s.base]), rebaseImage(other, [s.mid, s.base], [s.base]), flattenImage([s.mid, s.base], flat)]);
    checkChain([s.top, s.base]);
    checkChain([other, s.base]);
    assert.deepEqual([s.base, s.mid, s.top].map(owner), before);
    assert.equal(owner(other), before[2]);
    assert.equal(statSync(flat).uid, 0, "a created file is Den's after the run");
    // What the rebase kept: mid's data now in top.
    const read = (p: string) => execFileSync("qemu-io", ["-f", "qcow2", "-c", "read -P 7 0 64k", p], { encoding: "utf8" });
    assert.match(read(s.top), /read 65536\/65536/);
    assert.match(read(flat), /read 65536\/65536/);
    // A failed run leaves no file it was to create, and the others as they were.
    const bad = join(s.dir, "bad.qcow2");
    await assert.rejects(runQemuImg([[s.base, "read"], [bad, "create"]], (n) => ["convert", "-q", "-f", "raw", "-O", "no-such-format", n(s.base), n(bad)]), /qemu-img convert failed/);
    assert.equal(existsSync(bad), false);
    // One a killed run left behind is replaced.
    writeFileSync(bad, "left over");
    await runQemuImg([[bad, "create"]], (n) => ["create", "-q", "-f", "qcow2", n(bad), "1M"]);
    assert.equal(owner(bad).split(":")[0], "0");
    assert.equal(owner(s.base), before[0]);
  } finally {
    rmSync(s.dir, { recursive: true, force: true });
  }
});
