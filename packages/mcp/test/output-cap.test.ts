// needs: nothing
import { test } from "node:test";
import assert from "node:assert/strict";
import { OutputCap } from "../src/output-cap.js";

const bytes = (s: string) => new TextEncoder().encode(s);

test("output within the cap is kept whole, a character split across chunks included", () => {
  const cap = new OutputCap(16);
  const euro = bytes("€"); // 3 bytes
  cap.push(bytes("abcdefg"));
  cap.push(euro.subarray(0, 1));
  cap.push(euro.subarray(1));
  assert.equal(cap.text(), "abcdefg€");
  assert.equal(cap.dropped, 0);
  assert.equal(cap.total, 10);
});

test("a longer output keeps its start and its end, and marks what was dropped", () => {
  const cap = new OutputCap(10);
  for (let i = 0; i < 100; i++) cap.push(bytes(String(i % 10)));
  assert.equal(cap.total, 100);
  assert.equal(cap.dropped, 90);
  const t = cap.text();
  assert.ok(t.startsWith("01234\n"), t);
  assert.ok(t.endsWith("\n56789"), t);
  assert.match(t, /\[\.\.\. 90 bytes of 100 dropped here: output over the 10-byte cap \.\.\.\]/);
});

test("one chunk far over the cap keeps only the cap", () => {
  const cap = new OutputCap(8);
  cap.push(new Uint8Array(1 << 20).fill(0x61));
  cap.push(bytes("XYZ"));
  assert.equal(cap.dropped, (1 << 20) + 3 - 8);
  assert.ok(cap.text().startsWith("aaaa\n"));
  assert.ok(cap.text().endsWith("\naXYZ"));
});
