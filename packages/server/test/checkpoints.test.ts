// needs: one VM
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { findInstanceProcesses } from "@den/runtime";
import { client, hostDiagnostics, serverFixture, vmPid, waitFor } from "./helpers.js";

/** A process holding 128 MiB it hashes on demand: the parent's state its forks read. */
const HOLDER = "nohup python3 -c \"import hashlib, os, time; d = bytearray(os.urandom(128 << 20))\nwhile True:\n  os.path.exists('/tmp/held') or open('/tmp/held', 'w').write(hashlib.sha256(d).hexdigest()); time.sleep(0.2)\" >/dev/null 2>&1 &";

/** Resident and proportional set sizes of a process, in KiB. */
function memoryKb(pid: number): { rss: number; pss: number } {
  const t = readFileSync(`/proc/${pid}/smaps_rollup`, "utf8");
  return { rss: Number(/\nRss:\s+(\d+)/.exec(t)![1]), pss: Number(/\nPss:\s+(\d+)/.exec(t)![1]) };
}

const COUNTER = "nohup sh -c 'i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 0.2; done' >/dev/null 2>&1 & echo $!";

describe("checkpoints and forks over the API", () => {
  const fx = serverFixture();
  const api: ReturnType<typeof client> = (...args) => fx.api(...args);
  hostDiagnostics(); // (starts collecting Den's warnings)

  test("checkpoint, destroy, restore twice: two independent sandboxes; deleting the checkpoint leaves both working", async () => {
    const s = (await api("POST", "/v1/sandboxes", { metadata: { task: "cp" } })).body;
    const pid = (await api("POST", `/v1/sandboxes/${s.id}/exec`, { cmd: `echo saved > /workspace/state; ${COUNTER}` })).body.stdout.trim();
    const c = await api("POST", `/v1/sandboxes/${s.id}/checkpoints`, { name: "after-setup" });
    assert.equal(c.status, 201, c.text);
    assert.equal(c.body.name, "after-setup");
    assert.ok(c.body.pause_ms > 0 && c.body.stored_bytes > 0);
    assert.equal((await api("GET", `/v1/checkpoints?sandbox_id=${s.id}`)).body.checkpoints.length, 1);
    await api("DELETE", `/v1/sandboxes/${s.id}`);
    assert.equal((await api("GET", `/v1/checkpoints/${c.body.id}`)).status, 200, "a checkpoint outlives its sandbox");
    const a = (await api("POST", `/v1/checkpoints/${c.body.id}/restore`, {})).body;
    const b = (await api("POST", `/v1/checkpoints/${c.body.id}/restore`, { metadata: { who: "b" } })).body;
    assert.notEqual(a.id, b.id);
    assert.equal(b.metadata.restored_from, c.body.id);
    assert.equal((await api("DELETE", `/v1/checkpoints/${c.body.id}`)).status, 204);
    for (const x of [a, b]) {
      const r = await api("POST", `/v1/sandboxes/${x.id}/exec`, { cmd: `cat /workspace/state; kill -0 ${pid} && echo counting` });
      assert.equal(r.body.stdout, "saved\ncounting\n", r.text);
    }
    await api("POST", `/v1/sandboxes/${a.id}/exec`, { cmd: "echo only-a > /workspace/state" });
    assert.equal((await api("POST", `/v1/sandboxes/${b.id}/exec`, { cmd: "cat /workspace/state" })).body.stdout, "saved\n");
    assert.equal((await api("GET", `/v1/checkpoints/${c.body.id}`)).status, 404);
  });

  test("fork into 3: children diverge, inherit metadata and TTL, fork of a fork works, the parent continues", async (t) => {
    const parent = (await api("POST", "/v1/sandboxes", { ttl_seconds: 1800, metadata: { task_id: "t1" } })).body;
    await api("POST", `/v1/sandboxes/${parent.id}/exec`, { cmd: COUNTER });
    await api("POST", `/v1/sandboxes/${parent.id}/exec`, { cmd: HOLDER });
    const held = await api("POST", `/v1/sandboxes/${parent.id}/exec`, { cmd: "until [ -s /tmp/held ]; do sleep 0.2; done; cat /tmp/held", timeout_seconds: 60 });
    const f = await api("POST", `/v1/sandboxes/${parent.id}/fork`, { count: 3 });
    assert.equal(f.status, 201, `${f.text}\n${hostDiagnostics()}`);
    const kids = f.body.sandboxes as Array<{ id: string; metadata: Record<string, string>; ttl_seconds: number; state: string }>;
    assert.equal(kids.length, 3);
    for (const [i, k] of kids.entries()) {
      assert.equal(k.state, "running");
      assert.deepEqual(k.metadata, { task_id: "t1", forked_from: parent.id });
      assert.equal(k.ttl_seconds, 1800);
      await api("POST", `/v1/sandboxes/${k.id}/exec`, { cmd: `echo ${i} > /workspace/mine-${i}; echo ${i * 100} > /tmp/own` });
    }
    for (const [i, k] of kids.entries()) {
      const ls = await api("POST", `/v1/sandboxes/${k.id}/exec`, { cmd: "ls /workspace | grep mine; cat /tmp/own" });
      assert.equal(ls.body.stdout, `mine-${i}\n${i * 100}\n`);
    }
    // Each child's copy of the held data is read (hashed again) but never written: those pages stay shared.
    for (const k of kids) {
      const r = await api("POST", `/v1/sandboxes/${k.id}/exec`, { cmd: "rm /tmp/held; until [ -s /tmp/held ]; do sleep 0.2; done; cat /tmp/held", timeout_seconds: 60 });
      assert.equal(r.body.stdout, held.body.stdout, "the child's process holds the parent's data");
    }
    const qemus = findInstanceProcesses(fx.server.cp.hosts.first!.instance);
    const mem = kids.map((k) => memoryKb(qemus.get(k.id)!));
    const summedPss = mem.reduce((a, m) => a + m.pss, 0);
    t.diagnostic(`children's PSS ${mem.map((m) => m.pss >> 10).join(" + ")} MiB; one child's RSS ${mem[0]!.rss >> 10} MiB`);
    // A host where the children could not share their RAM (Den says why in a warning) forks
    // them with a copy each: that is the fallback working, and the reason goes on the record.
    const fellBack = hostDiagnostics().match(/DenForkWarning: [^|\n]*/)?.[0];
    if (fellBack) t.diagnostic(`NOT SHARED on this host: ${fellBack}\n${hostDiagnostics()}`);
    else assert.ok(summedPss < 2 * mem[0]!.rss, `children share pages: summed PSS ${summedPss >> 10} MiB vs one child's RSS ${mem[0]!.rss >> 10} MiB\n${hostDiagnostics()}`);
    const rand = await Promise.all(kids.map(async (k) => (await api("POST", `/v1/sandboxes/${k.id}/exec`, { cmd: "head -c 16 /dev/urandom | od -An -tx1" })).body.stdout));
    assert.equal(new Set(rand).size, 3, "random bytes differ");
    const grand = await api("POST", `/v1/sandboxes/${kids[0]!.id}/fork`, {});
    assert.equal(grand.status, 201, grand.text);
    assert.equal((await api("POST", `/v1/sandboxes/${grand.body.sandboxes[0].id}/exec`, { cmd: "cat /workspace/mine-0" })).body.stdout, "0\n");
    const c1 = Number((await api("POST", `/v1/sandboxes/${parent.id}/exec`, { cmd: "cat /tmp/count" })).body.stdout);
    await new Promise((r) => setTimeout(r, 600));
    assert.ok(Number((await api("POST", `/v1/sandboxes/${parent.id}/exec`, { cmd: "cat /tmp/count" })).body.stdout) > c1, "the parent continues");
    assert.equal((await api("POST", `/v1/sandboxes/${parent.id}/exec`, { cmd: "ls /workspace | grep -c mine || true" })).body.stdout, "0\n");
  });

  test("a lost sandbox (its QEMU killed) is recovered from its checkpoint under the same id", async () => {
    const made = await api("POST", "/v1/sandboxes", {});
    assert.equal(made.status, 201, made.text);
    const s = made.body;
    await api("POST", `/v1/sandboxes/${s.id}/exec`, { cmd: "echo checkpointed > /workspace/f" });
    const c = (await api("POST", `/v1/sandboxes/${s.id}/checkpoints`, {})).body;
    await api("POST", `/v1/sandboxes/${s.id}/exec`, { cmd: "echo later > /workspace/f" });
    process.kill(vmPid(fx.server, s.id), "SIGKILL");
    const lost = await waitFor("lost", async () => {
      const r = await api("GET", `/v1/sandboxes/${s.id}`);
      return r.body.state === "lost" ? r.body : undefined;
    }, 20_000, 250);
    assert.equal(lost.state_reason, "host_lost");
    const point = (await api("GET", `/v1/sandboxes/${s.id}/recovery`)).body.recovery;
    assert.equal(point.checkpoint_id, c.id);
    assert.ok(point.age_seconds >= 0);
    const r = await api("POST", `/v1/sandboxes/${s.id}/recover`, {});
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.id, s.id);
    assert.equal(r.body.state, "running");
    assert.equal((await api("POST", `/v1/sandboxes/${s.id}/exec`, { cmd: "cat /workspace/f" })).body.stdout, "checkpointed\n");
    assert.equal((await api("POST", `/v1/sandboxes/${s.id}/recover`, {})).status, 409, "only a lost sandbox is recovered");
  });
});
