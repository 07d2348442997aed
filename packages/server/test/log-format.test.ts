// needs: nothing
/** `den serve`'s readable log lines (a terminal's), from the JSON lines pino writes. */
import { test } from "node:test";
import assert from "node:assert/strict";
import { PassThrough } from "node:stream";
import { formatLogLine, logFormat, readableLogStream } from "../src/log-format.js";

test("one readable line per event: time, level, message, then the ids that tie lines together", () => {
  const at = new Date(2026, 11, 4, 9, 5, 7, 42).getTime();
  const line = formatLogLine(JSON.stringify({ level: 30, time: at, pid: 1, hostname: "h", reqId: "req-7", op: "op_x", sandbox: "sbx_abc", kind: "hibernate", reason: "idle", msg: "sandbox sbx_abc: hibernate cold -> hibernated (idle)" }));
  assert.equal(line, "09:05:07.042 INFO  sandbox sbx_abc: hibernate cold -> hibernated (idle)  sandbox=sbx_abc op=op_x req=req-7 kind=hibernate reason=idle");
  const err = formatLogLine(JSON.stringify({ level: 50, time: at, msg: "unhandled error", err: { type: "Error", message: "boom", code: "ENOSPC", stack: "Error: boom\n    at f (x.js:1:1)" } }));
  assert.equal(err, "09:05:07.042 ERROR unhandled error\n    Error (ENOSPC): boom\n      at f (x.js:1:1)");
  // Values with spaces are quoted; long ones are cut; a line that is not JSON passes as it is.
  assert.match(formatLogLine(JSON.stringify({ level: 40, time: at, msg: "m", note: "two words", big: "x".repeat(500) })), /note="two words" big=x{200}\.\.\.$/);
  assert.equal(formatLogLine("not json"), "not json");
});

test("pretty on a terminal, JSON lines otherwise, unless told; a wrong format is refused", () => {
  assert.equal(logFormat(undefined, {}, true), "pretty");
  assert.equal(logFormat(undefined, {}, false), "json");
  assert.equal(logFormat("json", {}, true), "json");
  assert.equal(logFormat(undefined, { DEN_LOG_FORMAT: "pretty" }, false), "pretty");
  assert.throws(() => logFormat("xml", {}, true), /json or pretty/);
});

test("the stream reassembles lines split across writes", async () => {
  const out = new PassThrough();
  let text = "";
  out.on("data", (d: Buffer) => (text += d.toString()));
  const s = readableLogStream(out);
  const l = JSON.stringify({ level: 30, time: 0, msg: "hello" });
  s.write(l.slice(0, 10));
  s.write(`${l.slice(10)}\n${l}`);
  await new Promise<void>((r) => s.end(r));
  assert.equal(text.split("\n").filter(Boolean).map((x) => x.slice(13)).join("|"), "INFO  hello|INFO  hello");
});
