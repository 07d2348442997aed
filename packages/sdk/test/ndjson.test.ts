// needs: nothing
import assert from "node:assert/strict";
import { test } from "node:test";
import { InvalidResponseError, readNdjson } from "@den/sdk";

function streamOf(chunks: (string | Uint8Array)[]): { stream: ReadableStream<Uint8Array>; cancelled: () => boolean } {
  let cancelled = false;
  const enc = new TextEncoder();
  const queue = [...chunks];
  const stream = new ReadableStream<Uint8Array>({
    pull(c) {
      const next = queue.shift();
      if (next === undefined) c.close();
      else c.enqueue(typeof next === "string" ? enc.encode(next) : next);
    },
    cancel() {
      cancelled = true;
    },
  });
  return { stream, cancelled: () => cancelled };
}

async function collect(it: AsyncIterable<unknown>): Promise<unknown[]> {
  const out = [];
  for await (const v of it) out.push(v);
  return out;
}

test("lines split anywhere across chunks, blank lines, CRLF and a last line without newline", async () => {
  const { stream } = streamOf(['{"a":', "1}\n\n", '{"b":"\u00e9', '"}\r\n{"c":[1,', "2]}\n", '{"d":true}']);
  assert.deepEqual(await collect(readNdjson(stream)), [{ a: 1 }, { b: "\u00e9" }, { c: [1, 2] }, { d: true }]);
});

test("a multi-byte character split between chunks survives", async () => {
  const bytes = new TextEncoder().encode('{"s":"\u20ac"}\n');
  const { stream } = streamOf([bytes.subarray(0, 7), bytes.subarray(7)]);
  assert.deepEqual(await collect(readNdjson(stream)), [{ s: "\u20ac" }]);
});

test("a line over the cap is an InvalidResponseError and cancels the stream", async () => {
  const { stream, cancelled } = streamOf(['{"ok":1}\n', "x".repeat(60), "y".repeat(60), "\n"]);
  const got: unknown[] = [];
  await assert.rejects(
    (async () => {
      for await (const v of readNdjson(stream, { maxLineBytes: 100 })) got.push(v);
    })(),
    (e: unknown) => e instanceof InvalidResponseError && /longer than 100/.test(e.message),
  );
  assert.deepEqual(got, [{ ok: 1 }]);
  assert.ok(cancelled());
  // A line of exactly the cap is fine.
  const ok = streamOf([`"${"z".repeat(98)}"\n`]);
  assert.equal((await collect(readNdjson(ok.stream, { maxLineBytes: 100 }))).length, 1);
});

test("invalid JSON is an InvalidResponseError; breaking early cancels the stream", async () => {
  await assert.rejects(collect(readNdjson(streamOf(["{nope}\n"]).stream)), InvalidResponseError);
  const s = streamOf(["1\n", "2\n", "3\n"]);
  for await (const v of readNdjson(s.stream)) {
    assert.equal(v, 1);
    break;
  }
  assert.ok(s.cancelled());
});
