// needs: nothing
import { test } from "node:test";
import assert from "node:assert/strict";
import { Channel, FrameDecoder, FrameError, FrameType, MAX_PAYLOAD, encodeCredit, encodeData, encodeJson } from "../src/index.js";
import { DenError, ERROR_STATUS, errorFromWire } from "../src/index.js";

test("frames round-trip through the decoder, split at every byte", () => {
  const wire = Buffer.concat([
    encodeJson(FrameType.Req, 7, { op: "sys.ping" }),
    encodeData(7, Channel.Stdout, Buffer.from([0, 255, 10, 13])),
    encodeCredit(7, Channel.Stderr, 65536),
  ]);
  const d = new FrameDecoder();
  const frames = [];
  for (let i = 0; i < wire.length; i++) frames.push(...d.push(wire.subarray(i, i + 1)));
  assert.equal(frames.length, 3);
  assert.deepEqual(JSON.parse(frames[0]!.payload.toString()), { op: "sys.ping" });
  assert.equal(frames[1]!.type, FrameType.Data);
  assert.deepEqual([...frames[1]!.payload], [Channel.Stdout, 0, 255, 10, 13]);
  assert.equal(frames[2]!.payload.readUInt32BE(1), 65536);
  assert.equal(d.pendingBytes, 0);
});

test("a frame claiming more than MAX_PAYLOAD is refused before it is buffered", () => {
  const d = new FrameDecoder();
  const head = Buffer.alloc(9);
  head.writeUInt32BE(1024 * 1024 * 1024, 0);
  assert.throws(() => d.push(head), FrameError);
  const ok = new FrameDecoder();
  const big = Buffer.alloc(9);
  big.writeUInt32BE(MAX_PAYLOAD + 5, 0);
  big.writeUInt8(FrameType.Data, 4);
  assert.deepEqual(ok.push(big), []);
});

test("unknown frame types and short lengths are errors", () => {
  const bad = Buffer.from([0, 0, 0, 5, 99, 0, 0, 0, 1]);
  assert.throws(() => new FrameDecoder().push(bad), FrameError);
  assert.throws(() => new FrameDecoder().push(Buffer.from([0, 0, 0, 2, 1, 0])), FrameError);
});

test("error codes map to HTTP statuses and back", () => {
  const e = new DenError("sandbox_not_found", "nope");
  assert.equal(e.status, 404);
  assert.deepEqual(e.toJSON(), { code: "sandbox_not_found", message: "nope" });
  assert.equal(errorFromWire("file_not_found", "x").status, ERROR_STATUS.file_not_found);
  assert.equal(errorFromWire("made_up", "x").code, "internal");
  assert.equal(errorFromWire("io_error", "y".repeat(10000)).message.length, 4096);
});
