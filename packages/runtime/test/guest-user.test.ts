// needs: one VM
/**
 * What E2B-style code expects of the base template, on a real VM: the account `user` (sudo,
 * home, umask), exec and files as a user in every mode, `user.*` xattrs on the root
 * filesystem, and metrics read inside the guest. Root stays the default.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { isCode, sandboxFixture } from "./helpers.js";

const owner = (st: { uid: number; gid: number; mode: number }) => `${st.uid}:${st.gid} ${(st.mode & 0o7777).toString(8)}`;

describe("the guest user, xattrs and metrics", () => {
  const f = sandboxFixture();
  const sh = async (cmd: string, opts: { user?: string; env?: Record<string, string> } = {}) => {
    const r = await f.sbx.exec(cmd, opts);
    assert.equal(r.exitCode, 0, `${cmd}: ${r.stderr.toString()}`);
    return r.stdout.toString();
  };

  test("as user: uid 1000, passwordless sudo, home as cwd and HOME, umask 022", async () => {
    assert.match(await sh("id", { user: "user" }), /^uid=1000\(user\) gid=1000\(user\) groups=1000\(user\)\n$/);
    assert.equal(await sh("sudo -n id -u", { user: "user" }), "0\n");
    assert.equal(await sh('pwd; echo "$HOME $USER $LOGNAME"; umask', { user: "user" }), "/home/user\n/home/user user user\n0022\n");
    // Relative paths resolve in the home; what it makes is its own, 0644 / 0755.
    await sh("echo hi > rel.txt && mkdir -p reldir", { user: "user" });
    assert.equal(owner(await f.sbx.files.stat("/home/user/rel.txt")), "1000:1000 644");
    assert.equal(owner(await f.sbx.files.stat("/home/user/reldir")), "1000:1000 755");
    assert.equal(owner(await f.sbx.files.stat("/home/user")), "1000:1000 755");
    // Root by name has root's home; no user is root in / exactly as /v1 always had it.
    assert.equal(await sh("id -u; pwd", { user: "root" }), "0\n/root\n");
    assert.equal(await sh('id -u; pwd; echo "$HOME ${LOGNAME-unset}"'), "0\n/\n/root unset\n");
  });

  test("as user in a pty, in the background and streamed", async () => {
    // (The terminal is gone once it exits: its owner is read from inside.)
    const p = await f.sbx.execStream('id -un; stat -c %u "$(tty)"', { user: "user", pty: { rows: 24, cols: 80 } });
    let out = "";
    for await (const c of p) out += c.data.toString();
    assert.equal((await p.wait()).exitCode, 0);
    assert.equal(out.replace(/\r/g, ""), "user\n1000\n", "the user, on a terminal of its own");
    const bg = await f.sbx.spawn(["id", "-u"], { user: "user" });
    assert.equal((await f.sbx.processes.wait(bg.proc, 10_000)).running, false);
    assert.equal(Buffer.from((await f.sbx.processes.read(bg.proc, "stdout")).data, "base64").toString(), "1000\n");
  });

  test("an unknown user or a bad name is invalid_argument, and nothing runs or is made", async () => {
    await assert.rejects(f.sbx.exec("touch /tmp/ran", { user: "nosuch" }), (e: unknown) => isCode("invalid_argument")(e) && /no user "nosuch"/.test(String(e)));
    await assert.rejects(f.sbx.exec("true", { user: "../root" }), isCode("invalid_argument"));
    await assert.rejects(f.sbx.spawn("touch /tmp/ran", { user: "nosuch" }), isCode("invalid_argument"));
    await assert.rejects(f.sbx.files.write("/home/user/x/y.txt", "z", { user: "nosuch" }), isCode("invalid_argument"));
    await assert.rejects(f.sbx.files.mkdir("/home/user/nd", { user: "nosuch" }), isCode("invalid_argument"));
    assert.equal(await sh("ls /tmp/ran /home/user/x /home/user/nd 2>/dev/null | wc -l"), "0\n");
  });

  test("files written and directories made with user are 1000:1000, 0644 / 0755 by default", async () => {
    assert.equal(await f.sbx.files.write("/home/user/w.txt", "data", { user: "user" }), 4);
    assert.equal(owner(await f.sbx.files.stat("/home/user/w.txt")), "1000:1000 644");
    await f.sbx.files.write("/home/user/a/b/c.txt", "deep", { user: "user", mode: 0o600 });
    assert.deepEqual(
      [owner(await f.sbx.files.stat("/home/user/a")), owner(await f.sbx.files.stat("/home/user/a/b")), owner(await f.sbx.files.stat("/home/user/a/b/c.txt"))],
      ["1000:1000 755", "1000:1000 755", "1000:1000 600"],
    );
    await f.sbx.files.mkdir("/home/user/m/n", { user: "user" });
    assert.equal(owner(await f.sbx.files.stat("/home/user/m/n")), "1000:1000 755");
    // The user can change what it was given; without user, files stay root's.
    assert.equal(await sh("echo more >> a/b/c.txt && cat a/b/c.txt", { user: "user" }), "deepmore\n");
    await f.sbx.files.write("/workspace/root.txt", "r");
    assert.equal(owner(await f.sbx.files.stat("/workspace/root.txt")), "0:0 644");
  });

  test("the tools E2B code runs are there: bash, python3, curl, tput", async () => {
    const out = await sh("bash --version | head -1; python3 -c 'print(6*7)'; curl --version | head -1; TERM=xterm tput cols", { user: "user" });
    const [bash, py, curl, cols] = out.trim().split("\n");
    assert.match(bash!, /GNU bash/);
    assert.equal(py, "42");
    assert.match(curl!, /^curl \d/);
    assert.match(cols!, /^\d+$/);
  });

  test("user.* xattrs round-trip on the root filesystem, and agree with the guest's own view", async () => {
    const path = "/home/user/w.txt";
    await f.sbx.files.setXattrs(path, { "user.e2b.owner": "agent-7", "user.e2b.note": "ünïcode ✓" });
    assert.deepEqual(await f.sbx.files.getXattrs(path), { "user.e2b.owner": "agent-7", "user.e2b.note": "ünïcode ✓" });
    assert.equal(await sh(`python3 -c "import os; print(os.getxattr('${path}', 'user.e2b.note').decode())"`), "ünïcode ✓\n");
    // Set by the user inside the guest, seen by the op; a file with none has {}.
    await sh(`python3 -c "import os; os.setxattr('${path}', 'user.e2b.inner', b'v')"`, { user: "user" });
    assert.equal((await f.sbx.files.getXattrs(path))["user.e2b.inner"], "v");
    assert.deepEqual(await f.sbx.files.getXattrs("/home/user/rel.txt"), {});
    await assert.rejects(f.sbx.files.setXattrs(path, { "trusted.x": "v" }), isCode("invalid_argument"));
    await assert.rejects(f.sbx.files.setXattrs(path, { "user.ok": "v", "security.x": "v" }), isCode("invalid_argument"));
    assert.equal((await f.sbx.files.getXattrs(path))["user.ok"], undefined, "a refused set sets nothing");
    await assert.rejects(f.sbx.files.getXattrs("/home/user/none"), isCode("file_not_found"));
    // /tmp is a tmpfs: on a guest kernel before 6.6 it keeps no user.* attributes, which is a clear error.
    await f.sbx.files.write("/tmp/x", "");
    await f.sbx.files.setXattrs("/tmp/x", { "user.k": "v" }).then(
      async () => assert.deepEqual(await f.sbx.files.getXattrs("/tmp/x"), { "user.k": "v" }),
      (e: unknown) => assert.ok(isCode("invalid_argument")(e) && /keeps no user/.test(String(e)), String(e)),
    );
  });

  test("metrics: the VM's own memory and disk, CPU busy since the previous reading", async () => {
    const m1 = await f.sbx.metrics();
    const MiB = 1024 * 1024;
    assert.equal(m1.cpuCount, f.sbx.info.vcpus);
    assert.ok(m1.memTotalBytes > 300 * MiB && m1.memTotalBytes <= f.sbx.info.memoryMb * MiB, `memTotal ${m1.memTotalBytes}`);
    assert.ok(m1.memUsedBytes > 0 && m1.memUsedBytes < m1.memTotalBytes);
    assert.ok(m1.memCacheBytes > 0 && m1.memCacheBytes < m1.memTotalBytes);
    assert.ok(m1.diskTotalBytes > 0.8 * f.sbx.info.diskMb * MiB && m1.diskTotalBytes <= f.sbx.info.diskMb * MiB, `diskTotal ${m1.diskTotalBytes}`);
    assert.ok(m1.diskUsedBytes > 100 * MiB && m1.diskUsedBytes < m1.diskTotalBytes);
    assert.ok(Math.abs(m1.timestampMs - Date.now()) < 10_000);
    assert.ok(m1.cpuUsedPct >= 0 && m1.cpuUsedPct <= 100);
    // A 64 MiB file on disk shows as disk used.
    await sh("head -c 67108864 /dev/zero > /workspace/fill && sync");
    const m2 = await f.sbx.metrics();
    assert.ok(m2.diskUsedBytes - m1.diskUsedBytes > 60 * MiB, `disk used grew by ${m2.diskUsedBytes - m1.diskUsedBytes}`);
    await sh("rm /workspace/fill");
    // Busy for 2 s, then idle for 2 s: each reading covers only its own interval.
    await f.sbx.metrics();
    await sh("timeout 2 sh -c 'while :; do :; done' || true");
    const busy = await f.sbx.metrics();
    await new Promise((r) => setTimeout(r, 2000));
    const idle = await f.sbx.metrics();
    assert.ok(busy.cpuUsedPct > 60, `busy reading ${busy.cpuUsedPct}%`);
    assert.ok(idle.cpuUsedPct < 30, `idle reading ${idle.cpuUsedPct}%`);
  });
});
