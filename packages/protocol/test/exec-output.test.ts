// needs: nothing
import { test } from "node:test";
import assert from "node:assert/strict";
import { DenError, ExecOutput, type GuestChunk } from "../src/index.js";

const chunk = (n: number, stream: "stdout" | "stderr" = "stdout"): GuestChunk => ({ stream, data: Buffer.alloc(n, 0x61) });

test("the reader gets every chunk in order, then the exit; each chunk's room is given back only once the reader asks for more", async () => {
  const released: number[] = [];
  const out = new ExecOutput({ release: (c) => released.push(c.data.length) });
  out.push(chunk(1));
  out.push(chunk(2, "stderr"));
  const it = out[Symbol.asyncIterator]();
  assert.equal((await it.next()).value?.data.length, 1);
  assert.deepEqual(released, []);
  assert.equal((await it.next()).value?.stream, "stderr");
  assert.deepEqual(released, [1]);
  const later = it.next();
  out.push(chunk(3));
  assert.equal((await later).value?.data.length, 3);
  assert.equal(out.finish({ exitCode: 0, signal: null, timedOut: false }), true);
  assert.equal((await it.next()).done, true);
  assert.deepEqual(released, [1, 2, 3]);
  assert.deepEqual(await out.wait(), { exitCode: 0, signal: null, timedOut: false });
});

test("past the high watermark the source pauses, below the low one it resumes; an end resumes it too", async () => {
  const calls: string[] = [];
  const out = new ExecOutput({ high: 10, low: 5, pause: () => calls.push("pause"), resume: () => calls.push("resume") });
  out.push(chunk(6));
  out.push(chunk(6));
  out.push(chunk(6));
  assert.deepEqual(calls, ["pause"]);
  const it = out[Symbol.asyncIterator]();
  await it.next(); // 12 queued
  assert.deepEqual(calls, ["pause"]);
  await it.next(); // 6
  assert.deepEqual(calls, ["pause"]);
  await it.next(); // 0
  assert.deepEqual(calls, ["pause", "resume"]);
  out.push(chunk(11));
  out.finish(undefined, new Error("gone"));
  assert.deepEqual(calls, ["pause", "resume", "pause", "resume"]);
  await it.next();
  await assert.rejects(it.next(), /gone/);
});

test("wait() without a reader drops what is queued and what comes, giving its room back; a reader after that is refused", async () => {
  const released: number[] = [];
  const out = new ExecOutput({ release: (c) => released.push(c.data.length) });
  out.push(chunk(4));
  const exited = out.wait();
  assert.deepEqual(released, [4]);
  out.push(chunk(5));
  assert.deepEqual(released, [4, 5]);
  out.finish({ exitCode: 3, signal: null, timedOut: false });
  assert.equal((await exited).exitCode, 3);
  await assert.rejects(out[Symbol.asyncIterator]().next(), (e: unknown) => e instanceof DenError && e.code === "invalid_state");
});

test("the first end wins; an error rejects the waiters", async () => {
  const out = new ExecOutput();
  const waiting = out.wait();
  assert.equal(out.finish(undefined, new Error("cut")), true);
  assert.equal(out.finish({ exitCode: 0, signal: null, timedOut: false }), false);
  await assert.rejects(waiting, /cut/);
  assert.equal(out.ended, true);
  assert.equal(out.exit, undefined);
});
