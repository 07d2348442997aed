// needs: nothing
import { test } from "node:test";
import assert from "node:assert/strict";
import { ndjsonStream } from "../src/ndjson.js";

test("a quiet NDJSON stream sends keepalive lines between real ones, then ends", async () => {
  async function* slow() {
    yield '{"type":"start"}\n';
    await new Promise((r) => setTimeout(r, 400));
    yield '{"type":"exit"}\n';
  }
  let text = "";
  for await (const chunk of ndjsonStream(slow(), 100)) text += chunk.toString();
  const types = text.trim().split("\n").map((l) => JSON.parse(l).type);
  assert.equal(types[0], "start");
  assert.equal(types.at(-1), "exit");
  assert.ok(types.filter((t) => t === "keepalive").length >= 2, `keepalives: ${types}`);
});

test("a client that goes away stops the source", async () => {
  let pulled = 0;
  async function* endless() {
    for (;;) {
      pulled++;
      yield "x\n";
      await new Promise((r) => setTimeout(r, 5));
    }
  }
  const s = ndjsonStream(endless(), 1000);
  s.once("data", () => s.destroy());
  await new Promise((r) => setTimeout(r, 200));
  const seen = pulled;
  await new Promise((r) => setTimeout(r, 200));
  assert.ok(pulled <= seen + 1, "no more pulls after close");
});
