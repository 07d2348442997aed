// needs: nothing
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { ConflictError, FileNotFoundError, NotFoundError, Sandbox } from "@den/sdk";
import { FakeDen, KEY } from "./fake-api.js";

let den: FakeDen;
let sbx: Sandbox;
before(async () => {
  den = await new FakeDen().start();
  sbx = await Sandbox.create(den.opts);
});
after(async () => {
  await den.close();
});

test("write and read bytes are binary-safe (every byte value)", async () => {
  const bytes = new Uint8Array(256 * 4).map((_, i) => (i * 7) % 256);
  const st = await sbx.filesystem.write("/workspace/all.bin", bytes);
  const put = den.lastRequest("PUT", /\/files$/)!;
  assert.equal(put.query.get("path"), "/workspace/all.bin");
  assert.equal(put.headers["content-type"], "application/octet-stream");
  assert.equal(put.headers.authorization, `Bearer ${KEY}`);
  assert.deepEqual(new Uint8Array(put.body), bytes);
  assert.equal(st.size, bytes.length);
  assert.equal(st.type, "file");
  assert.ok(st.mtime instanceof Date);

  const back = await sbx.filesystem.read("/workspace/all.bin");
  assert.ok(back instanceof Uint8Array);
  assert.deepEqual(back, bytes);
  assert.equal(den.lastRequest("GET", /\/files$/)?.query.get("path"), "/workspace/all.bin");
});

test("strings are written as UTF-8 and readText decodes them", async () => {
  await sbx.filesystem.write("/workspace/t.txt", "h\u00e9llo \u20ac \u{1f600}\n");
  assert.deepEqual(den.lastRequest("PUT", /\/files$/)!.body, Buffer.from("h\u00e9llo \u20ac \u{1f600}\n"));
  assert.equal(await sbx.filesystem.readText("/workspace/t.txt"), "h\u00e9llo \u20ac \u{1f600}\n");
});

test("a ReadableStream body is streamed up", async () => {
  const parts = [new Uint8Array([1, 2, 3]), new Uint8Array([0, 255]), new TextEncoder().encode("end")];
  const stream = new ReadableStream<Uint8Array>({
    start(c) {
      for (const p of parts) c.enqueue(p);
      c.close();
    },
  });
  const st = await sbx.filesystem.write("/workspace/s.bin", stream);
  assert.equal(st.size, 8);
  assert.deepEqual(await sbx.filesystem.read("/workspace/s.bin"), new Uint8Array([1, 2, 3, 0, 255, 101, 110, 100]));
});

test("stat, list, mkdir, rename, remove, exists", async () => {
  await sbx.filesystem.mkdir("/d", { parents: true });
  assert.deepEqual(den.lastRequest("POST", /\/files\/mkdir$/)?.json, { path: "/d", parents: true });
  await sbx.filesystem.mkdir("/d2");
  assert.deepEqual(den.lastRequest("POST", /\/files\/mkdir$/)?.json, { path: "/d2" });
  await assert.rejects(sbx.filesystem.mkdir("/d2"), (e: unknown) => e instanceof ConflictError && e.code === "already_exists");
  await sbx.filesystem.write("/d/a.txt", "a");
  await sbx.filesystem.write("/d/b.txt", "bb");
  const { entries, truncated } = await sbx.filesystem.list("/d");
  assert.equal(truncated, false);
  assert.deepEqual(entries.map((e) => [e.path, e.type, e.size]).sort(), [["/d/a.txt", "file", 1], ["/d/b.txt", "file", 2]]);
  assert.equal((await sbx.filesystem.stat("/d")).type, "dir");
  assert.equal(den.lastRequest("GET", /\/files\/stat$/)?.query.get("path"), "/d");

  await sbx.filesystem.rename("/d/a.txt", "/d/c.txt");
  assert.deepEqual(den.lastRequest("POST", /\/files\/rename$/)?.json, { from: "/d/a.txt", to: "/d/c.txt" });
  assert.equal(await sbx.filesystem.exists("/d/a.txt"), false);
  assert.equal(await sbx.filesystem.exists("/d/c.txt"), true);

  await sbx.filesystem.remove("/d/c.txt");
  assert.equal(den.lastRequest("DELETE", /\/files$/)?.query.get("recursive"), null);
  await assert.rejects(sbx.filesystem.stat("/d/c.txt"), (e: unknown) => e instanceof FileNotFoundError && e instanceof NotFoundError && e.status === 404);
  await assert.rejects(sbx.filesystem.remove("/d"), ConflictError);
  await sbx.filesystem.remove("/d", { recursive: true });
  assert.equal(den.lastRequest("DELETE", /\/files$/)?.query.get("recursive"), "true");
  assert.equal(await sbx.filesystem.exists("/d/b.txt"), false);
  await assert.rejects(sbx.filesystem.read("/nope"), FileNotFoundError);
});
