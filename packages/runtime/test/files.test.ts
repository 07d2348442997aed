// needs: one VM
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { isCode, rssKb, sandboxFixture } from "./helpers.js";

describe("files", () => {
  const f = sandboxFixture();

  test("a 10 MB random file written then read back is byte-identical", async () => {
    const data = randomBytes(10 * 1024 * 1024);
    assert.equal(await f.sbx.files.write("/workspace/r.bin", data), data.length);
    const back = await f.sbx.files.read("/workspace/r.bin");
    assert.ok(back.equals(data));
    const sum = await f.sbx.exec("sha256sum /workspace/r.bin | cut -d' ' -f1");
    assert.equal(sum.stdout.toString().trim(), createHash("sha256").update(data).digest("hex"));
  });

  test("100 MB streams through without holding it in host memory", async () => {
    const total = 100 * 1024 * 1024;
    const chunk = randomBytes(1024 * 1024);
    global.gc?.();
    const before = rssKb();
    let peak = before;
    const sample = setInterval(() => (peak = Math.max(peak, rssKb())), 50);
    try {
      async function* source() {
        for (let i = 0; i < total / chunk.length; i++) yield chunk;
      }
      assert.equal(await f.sbx.files.write("/workspace/big.bin", source()), total);
      const h = createHash("sha256");
      let n = 0;
      for await (const c of f.sbx.files.readStream("/workspace/big.bin")) {
        h.update(c);
        n += c.length;
      }
      assert.equal(n, total);
      const want = createHash("sha256");
      for (let i = 0; i < total / chunk.length; i++) want.update(chunk);
      assert.equal(h.digest("hex"), want.digest("hex"));
    } finally {
      clearInterval(sample);
    }
    peak = Math.max(peak, rssKb());
    assert.ok(peak - before < 64 * 1024, `host RSS grew by ${((peak - before) / 1024).toFixed(1)} MiB`);
    await f.sbx.files.remove("/workspace/big.bin");
  });

  test("stat, list, mkdir, rename, remove", async () => {
    await f.sbx.files.mkdir("/workspace/d/e/f", { parents: true });
    await f.sbx.files.write("/workspace/d/e/f/x.txt", "hello");
    const st = await f.sbx.files.stat("/workspace/d/e/f/x.txt");
    assert.equal(st.type, "file");
    assert.equal(st.size, 5);
    assert.equal(st.mode & 0o777, 0o644);
    const ls = await f.sbx.files.list("/workspace/d/e/f");
    assert.deepEqual(ls.entries.map((e) => [e.name, e.type, e.size]), [["x.txt", "file", 5]]);
    await f.sbx.files.rename("/workspace/d/e/f/x.txt", "/workspace/d/y.txt");
    assert.equal((await f.sbx.files.read("/workspace/d/y.txt")).toString(), "hello");
    await assert.rejects(f.sbx.files.stat("/workspace/d/e/f/x.txt"), isCode("file_not_found"));
    await assert.rejects(f.sbx.files.remove("/workspace/d"), isCode("not_empty"));
    await f.sbx.files.remove("/workspace/d", { recursive: true });
    await assert.rejects(f.sbx.files.list("/workspace/d"), isCode("file_not_found"));
    assert.equal((await f.sbx.files.stat("/workspace")).type, "dir");
  });

  test("file errors are typed and leave nothing half-written", async () => {
    await assert.rejects(f.sbx.files.read("/no/such/file"), isCode("file_not_found"));
    await assert.rejects(f.sbx.files.read("/workspace"), isCode("is_a_directory"));
    await assert.rejects(f.sbx.files.read("relative/path"), isCode("invalid_argument"));
    await assert.rejects(f.sbx.files.write("/etc/hostname/x", "y", { parents: false }), isCode("not_a_directory"));
    await assert.rejects(f.sbx.files.remove("/"), isCode("invalid_argument"));
    await f.sbx.files.write("/workspace/keep.txt", "original");
    const failing = (async function* () {
      yield Buffer.from("partial");
      throw new Error("source failed");
    })();
    await assert.rejects(f.sbx.files.write("/workspace/keep.txt", failing), /source failed/);
    assert.equal((await f.sbx.files.read("/workspace/keep.txt")).toString(), "original");
    // The agent removes the temp file once the host gives up on the stream.
    const leftovers = await f.sbx.exec("sleep 0.5; ls -A /workspace | grep den-tmp || true");
    assert.equal(leftovers.stdout.toString(), "");
  });

  test("partial reads by offset and length", async () => {
    await f.sbx.files.write("/workspace/abc.txt", "0123456789");
    const parts: Buffer[] = [];
    for await (const c of f.sbx.files.readStream("/workspace/abc.txt", { offset: 3, length: 4 })) parts.push(c);
    assert.equal(Buffer.concat(parts).toString(), "3456");
  });
});
