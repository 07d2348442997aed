// needs: one VM
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { ADMIN_KEY, CLI, cliCalls, serverFixture } from "./helpers.js";

/** Every file under `dir` with its sha256 (and symlinks with their targets), by relative path. */
function tree(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.isSymbolicLink()) out[relative(dir, p)] = `-> ${readlinkSync(p)}`;
      else out[relative(dir, p)] = createHash("sha256").update(readFileSync(p)).digest("hex");
    }
  };
  walk(dir);
  return out;
}

/**
 * The den CLI against a real server and real microVMs: what goes through a guest (exec's
 * streams and exit codes, cp's tar both ways, a shell on a real PTY). Its other commands
 * (hibernate, snapshot, fork, events, keys, usage, templates, webhooks) run on the memory
 * host in cli-commands.test.ts.
 */
describe("the den CLI against a real server", () => {
  const f = serverFixture();
  const { run, ok, json } = cliCalls(() => f.server.url);

  let id = "";

  test("create, ls, exec: JSON output, filters, streamed output and the command's exit code", async () => {
    const created = await json(["create", "--template", "base", "--ttl", "1800", "--persistent", "--meta", "task=cli-test", "--meta", "who=me"]);
    id = created.id;
    assert.match(id, /^sbx_[a-z2-7]{16}$/);
    assert.equal(created.state, "running");
    assert.equal(created.persistent, true);
    assert.deepEqual(created.metadata, { task: "cli-test", who: "me" });
    const plain = await ok(["create"]);
    const other = plain.out.trim();
    assert.match(other, /^sbx_[a-z2-7]{16}$/, "without --json: the id alone");

    const listed = await json(["ls", "--meta", "task=cli-test"]);
    assert.deepEqual(listed.map((s: { id: string }) => s.id), [id]);
    assert.equal((await json(["ls", "--state", "running"])).length >= 2, true);
    const table = await ok(["ls"]);
    assert.match(table.out, /^ID\s+STATE\s+TEMPLATE/);
    assert.match(table.out, new RegExp(`${id}\\s+running\\s+base`));

    const hello = await ok(["exec", id, "--", "sh", "-c", "echo out; echo err >&2"]);
    assert.equal(hello.out, "out\n");
    assert.match(hello.err, /err\n/);
    const three = await run(["exec", id, "--", "sh", "-c", "exit 3"]);
    assert.equal(three.code, 3, "den exec exits with the command's exit code");
    assert.equal((await run(["exec", id, "--", "sh", "-c", "kill -9 $$"])).code, 137, "killed by SIGKILL: 128+9");
    const piped = await ok(["exec", "-i", id, "--", "wc", "-c"], { input: "abcdef" });
    assert.equal(piped.out.trim(), "6");
    const shell = await ok(["exec", id, "--", "echo $((6*7)) | tr 4 x"]);
    assert.equal(shell.out, "x2\n", "one argument runs in a shell");
    assert.equal((await run(["exec", id, "--timeout", "1", "--", "sleep", "30"])).code, 124);
    await ok(["rm", other]);
  });

  test("cp: a 20 MB directory in and out byte-identical; single files both ways", async () => {
    const work = mkdtempSync(join(tmpdir(), "den-cli-"));
    try {
      const src = join(work, "proj");
      mkdirSync(join(src, "nested", "deeper"), { recursive: true });
      writeFileSync(join(src, "big.bin"), randomBytes(18 * 1024 * 1024));
      for (let i = 0; i < 50; i++) writeFileSync(join(src, "nested", `f${i}.txt`), `file ${i}\n`.repeat(i * 100));
      writeFileSync(join(src, "nested", "deeper", "blob"), randomBytes(2 * 1024 * 1024 + 17));
      writeFileSync(join(src, "empty"), "");
      symlinkSync("nested/f1.txt", join(src, "link"));
      const total = Object.keys(tree(src)).length;
      assert.ok(total >= 53);

      const up = await ok(["cp", src, `${id}:/work/proj`]);
      assert.match(up.err, /proj\/ -> .*: 2\d(\.\d)? MiB in/);
      const sums = await ok(["exec", id, "--", "sh", "-c", "cd /work/proj && find . -type f | sort | xargs sha256sum"]);
      const local = tree(src);
      for (const line of sums.out.trim().split("\n")) {
        const [sum, path] = line.split(/\s+/);
        assert.equal(local[path!.slice(2)], sum, path);
      }
      assert.equal((await ok(["exec", id, "--", "readlink", "/work/proj/link"])).out.trim(), "nested/f1.txt");

      const back = join(work, "back");
      await ok(["cp", `${id}:/work/proj`, back]);
      assert.deepEqual(tree(back), tree(src), "the directory comes back byte-identical");
      assert.equal(statSync(join(back, "big.bin")).size, 18 * 1024 * 1024);

      // Into an existing directory, a file keeps its name; a file back to a new path.
      await ok(["cp", join(src, "nested", "f7.txt"), `${id}:/work`]);
      assert.equal((await ok(["exec", id, "--", "cat", "/work/f7.txt"])).out, readFileSync(join(src, "nested", "f7.txt"), "utf8"));
      await ok(["cp", `${id}:/work/proj/nested/deeper/blob`, join(work, "blob.copy")]);
      assert.ok(readFileSync(join(work, "blob.copy")).equals(readFileSync(join(src, "nested", "deeper", "blob"))));
      const missing = await run(["cp", `${id}:/nope/nothing`, join(work, "x")]);
      assert.equal(missing.code, 1);
      assert.match(missing.err, /^den: file_not_found: /);
      const both = await run(["cp", "a", "b"]);
      assert.equal(both.code, 1);
      assert.match(both.err, /^den: den cp wants exactly one side/);
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  });

  test("cp from a hostile guest: its tar's device node, FIFO, hard link, setuid bit, owner and ../ path are left out", async () => {
    const work = mkdtempSync(join(tmpdir(), "den-cli-"));
    try {
      // The guest's own tar is replaced by one that writes a crafted archive, whatever it is asked.
      const craft = [
        "import sys, tarfile, io",
        "out = sys.argv[sys.argv.index('-cf') + 1]",
        "t = tarfile.open(out, 'w')",
        "def add(name, data=b'', **kw):",
        "    i = tarfile.TarInfo(name); i.size = len(data)",
        "    for k, v in kw.items(): setattr(i, k, v)",
        "    t.addfile(i, io.BytesIO(data) if data else None)",
        "add('./ok.txt', b'fine\\n', uid=4242, gid=4242, uname='evil', gname='evil')",
        "add('./suid', b'#!/bin/sh\\n', mode=0o4755)",
        "add('./dev0', type=tarfile.CHRTYPE, devmajor=1, devminor=3)",
        "add('./fifo', type=tarfile.FIFOTYPE)",
        "add('./hard', type=tarfile.LNKTYPE, linkname='/etc/passwd')",
        "add('../escape', b'out\\n')",
        "add('./sub/../../escape2', b'out\\n')",
        "t.close()",
      ].join("\n");
      await ok(["exec", id, "--", "sh", "-c", `mkdir -p /work/hostile && cat > /root/craft.py <<'EOF'\n${craft}\nEOF\nmv /bin/tar /bin/tar.real && printf '#!/bin/sh\\nexec python3 /root/craft.py "$@"\\n' > /bin/tar && chmod +x /bin/tar`]);
      const dest = join(work, "sub", "out");
      try {
        const r = await ok(["cp", `${id}:/work/hostile`, dest]);
        assert.match(r.err, /left out/);
      } finally {
        await ok(["exec", id, "--", "mv", "/bin/tar.real", "/bin/tar"]);
      }
      assert.equal(readFileSync(join(dest, "ok.txt"), "utf8"), "fine\n");
      const st = statSync(join(dest, "ok.txt"));
      assert.equal(st.uid, process.getuid!(), "no owner from the archive");
      assert.equal(statSync(join(dest, "suid")).mode & 0o7000, 0, "no setuid bit");
      assert.deepEqual(readdirSync(dest).sort(), ["ok.txt", "suid"], "no device node, FIFO or hard link");
      assert.deepEqual(readdirSync(join(work, "sub")), ["out"], "nothing outside the target");
      assert.deepEqual(readdirSync(work), ["sub"]);
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  });

  test("den shell through a real PTY: arithmetic, resize seen by stty, Ctrl-C reaches the guest, exit code", async () => {
    // Python's pty module gives the CLI a real terminal whose size we set and change.
    const driver = String.raw`
import os, pty, select, signal, struct, sys, fcntl, termios, time
pid, fd = pty.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
def size(rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
buf = b""
def expect(pat, timeout=30):
    global buf
    end = time.time() + timeout
    while pat.encode() not in buf:
        if time.time() > end:
            sys.stderr.write("timeout waiting for %r; got %r\n" % (pat, buf[-500:])); sys.exit(90)
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try: chunk = os.read(fd, 65536)
            except OSError: break
            if not chunk: break
            buf += chunk
    i = buf.index(pat.encode()) + len(pat)
    buf = buf[i:]
size(30, 100)
time.sleep(0.5)
os.write(fd, b"stty size\n"); expect("30 100")
size(40, 120); os.kill(pid, signal.SIGWINCH); time.sleep(1)
os.write(fd, b"stty size\n"); expect("40 120")
os.write(fd, b"echo $((6*7))\n"); expect("42")
os.write(fd, b"sleep 60; echo slept\n"); time.sleep(1.5); os.write(fd, b"\x03")
os.write(fd, b"echo after-$((1+1))\n"); expect("after-2", 15)
os.write(fd, b"exit 7\n")
_, status = os.waitpid(pid, 0)
print("EXIT", os.waitstatus_to_exitcode(status))
`;
    const r = await new Promise<{ code: number; out: string; err: string }>((resolve) => {
      const c = spawn("python3", ["-c", driver, process.execPath, CLI, "shell", id], { env: { ...process.env, DEN_API_URL: f.server.url, DEN_API_KEY: ADMIN_KEY } });
      let out = "";
      let err = "";
      c.stdout.on("data", (d: Buffer) => (out += d));
      c.stderr.on("data", (d: Buffer) => (err += d));
      c.on("close", (code) => resolve({ code: code ?? -1, out, err }));
    });
    assert.equal(r.code, 0, r.err);
    assert.match(r.out, /EXIT 7/, "the shell's exit code");
    await ok(["rm", id]);
  });

});
