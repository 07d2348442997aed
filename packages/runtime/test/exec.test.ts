// needs: one VM
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { isCode, sandboxFixture } from "./helpers.js";

describe("exec", () => {
  const f = sandboxFixture();

  test("returns stdout, stderr and the exit code exactly", async () => {
    const r = await f.sbx.exec("echo out; echo err >&2; exit 42");
    assert.equal(r.stdout.toString(), "out\n");
    assert.equal(r.stderr.toString(), "err\n");
    assert.equal(r.exitCode, 42);
    assert.equal(r.signal, null);
    assert.equal(r.timedOut, false);
  });

  test("argv form, cwd, env and stdin", async () => {
    const r = await f.sbx.exec(["/bin/sh", "-c", 'pwd; echo "$GREETING"; cat'], { cwd: "/tmp", env: { GREETING: "hi there" }, stdin: "from stdin" });
    assert.equal(r.stdout.toString(), "/tmp\nhi there\nfrom stdin");
    assert.equal(r.exitCode, 0);
  });

  test("binary output is byte-exact", async () => {
    const r = await f.sbx.exec("printf '\\000\\001\\377\\376\\n\\r'");
    assert.deepEqual([...r.stdout], [0, 1, 255, 254, 10, 13]);
  });

  test("5 MB of output arrives whole", async () => {
    const r = await f.sbx.exec("head -c 5242880 /dev/urandom | tee /tmp/five | sha256sum | cut -d' ' -f1; cat /tmp/five");
    const [sumLine, ...rest] = splitFirstLine(r.stdout);
    assert.equal(rest[0]!.length, 5 * 1024 * 1024);
    assert.equal(createHash("sha256").update(rest[0]!).digest("hex"), sumLine);
  });

  test("a timeout kills the whole tree, setsid grandchildren included", async () => {
    const r = await f.sbx.exec("setsid sleep 1000 & echo started; sleep 1000", { timeoutMs: 1500 });
    assert.equal(r.timedOut, true);
    assert.equal(r.signal, 9);
    assert.equal(r.stdout.toString(), "started\n");
    const ps = await f.sbx.exec("pgrep -x sleep || true");
    assert.equal(ps.stdout.toString().trim(), "", "no sleep process survives the timeout");
  });

  test("a nohup server started by an exec that returned keeps running", async () => {
    const r = await f.sbx.exec("nohup python3 -m http.server 8123 --bind 127.0.0.1 >/tmp/srv.log 2>&1 & echo $!");
    assert.equal(r.exitCode, 0);
    const pid = r.stdout.toString().trim();
    // Python's start under TCG on a busy host can take seconds: the server must stay up until it answers.
    const check = await f.sbx.exec(`for i in $(seq 100); do kill -0 ${pid} || exit 1; c=$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8123/); [ "$c" = 200 ] && break; sleep 0.2; done; printf %s "$c"`);
    assert.equal(check.stdout.toString(), "200");
    await f.sbx.exec(`kill ${pid}`);
  });

  test("a detached child that keeps stdout open does not hold the exec", async () => {
    const t0 = Date.now();
    const r = await f.sbx.exec("sleep 30 & echo done");
    assert.equal(r.stdout.toString(), "done\n");
    assert.ok(Date.now() - t0 < 20_000);
    await f.sbx.exec("pkill -x sleep || true");
  });

  test("a missing binary is an error, not an exit code", async () => {
    await assert.rejects(f.sbx.exec(["/no/such/binary"]), isCode("not_found"));
    await assert.rejects(f.sbx.exec("true", { cwd: "/no/such/dir" }), isCode("cwd_not_found"));
  });

  test("streamed output arrives as chunks while the command runs, with backpressure", async () => {
    const p = await f.sbx.execStream("for i in 1 2 3; do echo line$i; sleep 0.2; done; head -c 2000000 /dev/zero");
    let text = "";
    let bytes = 0;
    for await (const c of p) {
      bytes += c.data.length;
      if (bytes < 100) text += c.data.toString();
      // A slow reader: the guest must wait for credit instead of flooding the host.
      if (bytes > 100) await new Promise((r) => setTimeout(r, 1));
    }
    assert.match(text, /^line1\n/);
    assert.equal(bytes, "line1\nline2\nline3\n".length + 2_000_000);
    assert.equal((await p.wait()).exitCode, 0);
  });

  test("output that arrives before the reader starts is kept", async () => {
    const p = await f.sbx.execStream("echo early; echo late >&2");
    await new Promise((r) => setTimeout(r, 1000));
    let out = "";
    for await (const c of p) out += `${c.stream}:${c.data}`;
    assert.equal(out, "stdout:early\nstderr:late\n");
  });

  test("interactive stdin streams both ways", async () => {
    const p = await f.sbx.execStream("while read -r l; do echo \"got $l\"; done", { interactive: true });
    await p.write("a\nb\n");
    p.closeStdin();
    const chunks: Buffer[] = [];
    for await (const c of p) chunks.push(c.data);
    assert.equal(Buffer.concat(chunks).toString(), "got a\ngot b\n");
  });

  test("PTY: resize is seen by stty, Ctrl-C interrupts a sleep", async () => {
    const p = await f.sbx.execStream("bash --norc -i", { pty: { rows: 24, cols: 80 }, env: { PS1: "$ " } });
    let out = "";
    const reader = (async () => {
      for await (const c of p) out += c.data.toString();
    })();
    const waitFor = async (re: RegExp, ms = 20_000) => {
      const t0 = Date.now();
      while (!re.test(out)) {
        if (Date.now() - t0 > ms) throw new Error(`timed out waiting for ${re}; got ${JSON.stringify(out.slice(-300))}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    await p.resize(40, 123);
    await p.write("stty size\n");
    await waitFor(/40 123/);
    await p.write("sleep 1000; echo after-sleep $?\n");
    // Ctrl-C must reach the sleep, not the shell's line editor: wait until it runs.
    // (Under TCG on a loaded machine a fixed pause was not always long enough.)
    const sleeping = async () => (await f.sbx.exec("pgrep -x sleep")).exitCode === 0;
    for (const t0 = Date.now(); !(await sleeping()); ) {
      if (Date.now() - t0 > 20_000) throw new Error("the sleep never started");
      await new Promise((r) => setTimeout(r, 100));
    }
    await p.write("\x03");
    await waitFor(/after-sleep 130|\^C/);
    for (const t0 = Date.now(); await sleeping(); ) {
      if (Date.now() - t0 > 10_000) throw new Error("Ctrl-C did not end the sleep");
      await new Promise((r) => setTimeout(r, 100));
    }
    await p.write("echo alive-$((6*7))\n");
    await waitFor(/alive-42/);
    await p.write("exit 3\n");
    await reader;
    const exit = await p.wait();
    assert.equal(exit.exitCode, 3);
  });

  test("background processes: list, read output since an offset, stdin, wait, kill", async () => {
    const bg = await f.sbx.spawn("i=0; while read -r l; do i=$((i+1)); echo \"$i:$l\"; done; echo end", { interactive: true });
    await f.sbx.processes.write(bg.proc, "x\ny\n");
    const list = await f.sbx.processes.list();
    assert.ok(list.some((p) => p.proc === bg.proc && p.running));
    await f.sbx.processes.write(bg.proc, "", true);
    const w = await f.sbx.processes.wait(bg.proc, 10_000);
    assert.equal(w.running, false);
    const all = await f.sbx.processes.read(bg.proc, "stdout", 0);
    assert.equal(Buffer.from(all.data, "base64").toString(), "1:x\n2:y\nend\n");
    const tail = await f.sbx.processes.read(bg.proc, "stdout", 4);
    assert.equal(Buffer.from(tail.data, "base64").toString(), "2:y\nend\n");

    const long = await f.sbx.spawn("setsid sleep 1000 & sleep 1000");
    assert.equal((await f.sbx.processes.wait(long.proc, 0)).running, true);
    await f.sbx.processes.kill(long.proc);
    const killed = await f.sbx.processes.wait(long.proc, 10_000);
    assert.equal(killed.running, false);
    assert.equal((await f.sbx.exec("pgrep -x sleep || true")).stdout.toString(), "");
  });

  test("bad input throws typed errors", async () => {
    await assert.rejects(f.sbx.exec("true", { timeoutMs: -1 }), isCode("invalid_argument"));
    await assert.rejects(f.sbx.exec(""), isCode("invalid_argument"));
    await assert.rejects(f.sbx.exec("true", { cwd: "relative" }), isCode("invalid_argument"));
    await assert.rejects(f.sbx.processes.wait(999_999, 0), isCode("proc_not_found"));
    assert.throws(() => f.rt.get("sbx_doesnotexist0000"), isCode("sandbox_not_found"));
    const other = await f.rt.create({ template: "base" });
    await other.destroy();
    await assert.rejects(other.exec("true"), isCode("sandbox_destroyed"));
    await other.destroy(); // idempotent
  });

  test("random data survives a round trip through stdin and stdout", async () => {
    const data = randomBytes(300_000);
    const r = await f.sbx.exec("cat", { stdin: data });
    assert.ok(r.stdout.equals(data));
  });
});

function splitFirstLine(b: Buffer): [string, Buffer] {
  const nl = b.indexOf(10);
  return [b.subarray(0, nl).toString(), b.subarray(nl + 1)];
}
