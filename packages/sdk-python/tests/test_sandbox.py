"""Every verb of the SDK against a real Den server and real microVMs (``DEN_API_URL`` and
``DEN_API_KEY``; run by ``packages/server/test/python-sdk.test.ts``). One shared sandbox
carries most tests; restore, fork, the error cases and the context manager make a few more."""

import io
import os
import time
import unittest
import urllib.request
from datetime import datetime, timedelta, timezone

from den_sdk import (
    AuthenticationError,
    Client,
    Checkpoint,
    CheckpointNotFoundError,
    Checkpoints,
    ConflictError,
    DenConnectionRefusedError,
    DenError,
    DenFileNotFoundError,
    ExecResult,
    InvalidArgumentError,
    InvalidStateError,
    NetworkPolicy,
    Process,
    ProcessNotFoundError,
    PtyExit,
    Sandbox,
    SandboxInfo,
    SandboxNotFoundError,
    TemplateNotFoundError,
)

from ._support import RUN_TAG, require_server

MiB = 1024 * 1024


def _info(sandbox_id):
    """The info of a sandbox that need not exist (to address one the server does not know)."""
    now = "2025-01-01T00:00:00Z"
    return SandboxInfo.from_wire({
        "id": sandbox_id, "state": "running", "template": "base", "template_version": "x", "persistent": False, "idle_timeout_seconds": 1,
        "on_idle": "destroy", "metadata": {}, "vcpus": 1, "memory_mb": 1, "disk_mb": 1, "created_at": now, "last_activity_at": now,
    })


@require_server
class SandboxTest(unittest.TestCase):
    """The verbs on one long-lived sandbox (created once for the class)."""

    sbx: Sandbox

    @classmethod
    def setUpClass(cls):
        cls.sbx = Sandbox.create(
            template="base",
            persistent=True,
            ttl_seconds=900,
            metadata={"suite": RUN_TAG, "task_id": "py-sdk"},
            env={"GREETING": "hello"},
        )
        cls.extra = []

    @classmethod
    def tearDownClass(cls):
        for s in cls.extra + [cls.sbx]:
            try:
                s.destroy()
            except DenError:
                pass
        for c in Checkpoints.list(sandbox_id=cls.sbx.id):
            c.delete()

    # -------------------------------------------------------------- create / connect / list

    def test_create_connect_list_refresh(self):
        sbx = self.sbx
        self.assertTrue(sbx.id.startswith("sbx_"))
        self.assertEqual(sbx.state, "running")
        info = sbx.info
        self.assertIsInstance(info, SandboxInfo)
        self.assertEqual(info.template, "base")
        self.assertTrue(info.persistent)
        self.assertEqual(info.ttl_seconds, 900)
        self.assertEqual(info.metadata, {"suite": RUN_TAG, "task_id": "py-sdk"})
        self.assertIsInstance(info.created_at, datetime)
        self.assertIsNotNone(info.expires_at)
        self.assertEqual(info.network.egress, "none")

        again = Sandbox.connect(sbx.id)
        self.assertEqual((again.id, again.state, again.info.metadata), (sbx.id, "running", info.metadata))
        self.assertEqual(sbx.refresh().id, sbx.id)

        mine = [s.id for s in Sandbox.list(metadata={"suite": RUN_TAG, "task_id": "py-sdk"})]
        self.assertIn(sbx.id, mine)
        self.assertIn(sbx.id, [s.id for s in Sandbox.list(state="running", metadata={"suite": RUN_TAG})])
        self.assertNotIn(sbx.id, [s.id for s in Sandbox.list(state="hibernated", metadata={"suite": RUN_TAG})])
        self.assertEqual(list(Sandbox.list(metadata={"suite": "no-such-run"})), [])

        # env given at create reaches every command
        self.assertEqual(sbx.exec("echo $GREETING").stdout, "hello\n")

    # -------------------------------------------------------------- exec

    def test_exec_exit_codes_output_and_options(self):
        sbx = self.sbx
        r = sbx.exec("echo out; echo err >&2; exit 3")  # streamed (no timeout)
        self.assertIsInstance(r, ExecResult)
        self.assertEqual((r.stdout, r.stderr, r.exit_code, r.signal, r.timed_out), ("out\n", "err\n", 3, None, False))
        self.assertFalse(r.ok)
        self.assertGreater(r.duration_ms, 0)

        b = sbx.exec("echo buffered; exit 5", timeout_seconds=30)  # buffered route
        self.assertEqual((b.stdout, b.exit_code), ("buffered\n", 5))
        self.assertTrue(sbx.exec("true", timeout_seconds=30).ok)

        argv = sbx.exec(["python3", "-c", "import sys; print(sys.argv[1:])", "a b", "c"], timeout_seconds=60)
        self.assertEqual(argv.stdout, "['a b', 'c']\n")
        wd = sbx.exec("pwd; echo $FOO", cwd="/tmp", env={"FOO": "bar"}, timeout_seconds=30)
        self.assertEqual(wd.stdout, "/tmp\nbar\n")
        up = sbx.exec(["python3", "-c", "import sys; print(sys.stdin.read().upper())"], stdin="hi", timeout_seconds=60)
        self.assertEqual(up.stdout, "HI\n")

        for t in (30, None):  # binary output on both routes
            raw = sbx.exec("printf '\\377\\000A'", timeout_seconds=t)
            self.assertEqual(raw.stdout_bytes, b"\xff\x00A", f"timeout {t}")

        slow = sbx.exec("sleep 30", timeout_seconds=1)
        self.assertTrue(slow.timed_out)
        self.assertEqual((slow.exit_code, slow.signal), (None, 9))
        self.assertLess(slow.duration_ms, 20_000)

        chunks, errs = [], []
        r = sbx.exec("for i in 1 2 3; do echo line$i; sleep 0.05; done; echo warn >&2", on_stdout=chunks.append, on_stderr=errs.append)
        self.assertEqual("".join(chunks), "line1\nline2\nline3\n")
        self.assertEqual("".join(errs), "warn\n")
        self.assertEqual(r.stdout, "line1\nline2\nline3\n")

    def test_exec_stream(self):
        with self.sbx.exec_stream("for i in 1 2 3; do echo $i; sleep 0.05; done; echo oops >&2; exit 7") as run:
            chunks = list(run)
            ex = run.wait()
        self.assertEqual("".join(c.text for c in chunks if c.stream == "stdout"), "1\n2\n3\n")
        self.assertEqual(b"".join(c.data for c in chunks if c.stream == "stderr"), b"oops\n")
        self.assertEqual((ex.exit_code, ex.signal, ex.timed_out), (7, None, False))
        self.assertIsInstance(ex.pid, int)
        # wait() alone drains the output; a timeout is reported, not raised
        self.assertTrue(self.sbx.exec_stream("sleep 30", timeout_seconds=1).wait().timed_out)
        # hanging up early kills the command
        run = self.sbx.exec_stream("echo started; sleep 60")
        first = next(iter(run))
        self.assertEqual(first.text, "started\n")
        run.close()

    # -------------------------------------------------------------- files

    def test_files(self):
        fs = self.sbx.filesystem
        every_byte = bytes(range(256)) * 4
        big = os.urandom(MiB)
        st = fs.write("/work/files/bin/every.bin", every_byte)  # parents are made
        self.assertEqual((st.type, st.size), ("file", 1024))
        fs.write("/work/files/bin/big.bin", big)
        self.assertEqual(fs.read("/work/files/bin/every.bin"), every_byte)
        self.assertEqual(fs.read("/work/files/bin/big.bin"), big)
        # a file object is streamed up (chunked), and a file can be read back in chunks
        self.assertEqual(fs.write("/work/files/bin/streamed.bin", io.BytesIO(big)).size, MiB)
        chunks = list(fs.read_stream("/work/files/bin/streamed.bin", chunk_bytes=100_000))
        self.assertEqual(b"".join(chunks), big)
        self.assertGreater(len(chunks), 5)
        self.assertEqual(fs.write("/work/files/bin/parts.bin", (b"ab" for _ in range(3))).size, 6)
        fs.remove("/work/files/bin/streamed.bin")
        fs.remove("/work/files/bin/parts.bin")
        fs.write("/work/files/text.txt", "héllo wörld ✓\n")
        self.assertEqual(fs.read_text("/work/files/text.txt"), "héllo wörld ✓\n")
        self.assertEqual(self.sbx.exec("sha256sum /work/files/bin/big.bin | cut -c1-64").stdout.strip(), __import__("hashlib").sha256(big).hexdigest())

        fs.mkdir("/work/files/a/b/c")
        self.assertEqual(fs.stat("/work/files/a/b/c").type, "dir")
        with self.assertRaises(ConflictError):
            fs.mkdir("/work/files/a", parents=False)
        listing = fs.list("/work/files")
        self.assertEqual(sorted(listing.names), ["a", "bin", "text.txt"])
        self.assertFalse(listing.truncated)
        self.assertEqual({e.path: e.type for e in listing}["/work/files/text.txt"], "file")

        fs.rename("/work/files/text.txt", "/work/files/a/moved.txt")
        self.assertTrue(fs.exists("/work/files/a/moved.txt"))
        self.assertFalse(fs.exists("/work/files/text.txt"))
        fs.remove("/work/files/a/moved.txt")
        fs.remove("/work/files/a", recursive=True)
        self.assertFalse(fs.exists("/work/files/a"))
        with self.assertRaises(DenFileNotFoundError) as cm:
            fs.read("/work/files/nope")
        self.assertEqual((cm.exception.code, cm.exception.status), ("file_not_found", 404))
        with self.assertRaises(FileNotFoundError):  # also the builtin
            fs.stat("/work/files/nope")
        with self.assertRaises(InvalidArgumentError):
            fs.list("/work/files/bin/every.bin")

    # -------------------------------------------------------------- background processes

    def test_background_processes(self):
        sbx = self.sbx
        p = sbx.exec("sleep 0.2; echo done; echo to-stderr >&2; exit 4", background=True)
        self.assertIsInstance(p, Process)
        st = p.wait(timeout_seconds=60)
        self.assertFalse(st.running)
        self.assertEqual(st.exit_code, 4)
        out = p.logs()
        self.assertEqual(out.text, "done\n")
        self.assertTrue(out.eof)
        self.assertEqual(p.logs(stream="stderr").text, "to-stderr\n")
        self.assertEqual(p.logs(offset=2).text, "ne\n")

        sleeper = sbx.processes.start("sleep 300")
        self.assertTrue(sleeper.status.running)
        self.assertIn(sleeper.proc, [q.proc for q in sbx.processes.list()])
        self.assertTrue(sbx.processes.get(sleeper.proc).refresh().running)
        self.assertTrue(sleeper.wait(timeout_seconds=1).running)
        sleeper.kill()
        done = sleeper.wait(timeout_seconds=30)
        self.assertFalse(done.running)
        self.assertEqual(done.signal, 9)

        cat = sbx.processes.start("cat > /tmp/stdin.txt")
        cat.write("from ")
        cat.write(b"stdin")
        cat.close_stdin()
        self.assertEqual(cat.wait(timeout_seconds=30).exit_code, 0)
        self.assertEqual(sbx.filesystem.read_text("/tmp/stdin.txt"), "from stdin")

        with self.assertRaises(ProcessNotFoundError):
            sbx.processes.get(99999)

    # -------------------------------------------------------------- an agent loop

    def test_agent_loop_across_turns(self):
        # A coding agent's turns: each one reconnects by id, runs commands and edits files; what
        # earlier turns left (files, a git history, a running process) is there for the next.
        sid = self.sbx.id
        setup = (
            "mkdir -p /work/agent && cd /work/agent && git init -q && "
            # the watcher's files are not the agent's work: a `git add -A` racing its rename fails (128)
            "printf '.tmp\\n.alive\\n' >> .git/info/exclude && "
            "printf 'def add(a, b):\\n    return a - b\\n' > calc.py && "
            "printf 'from calc import add\\nassert add(2, 3) == 5, add(2, 3)\\nprint(\"pass\")\\n' > test_calc.py && "
            "git add -A && git -c user.email=a@den -c user.name=agent commit -qm start && echo ready"
        )
        turn1 = Sandbox.connect(sid)
        self.assertEqual(turn1.exec(setup, timeout_seconds=60).stdout, "ready\n")
        # (written then renamed: a reader never sees the file empty)
        watcher = turn1.exec("while true; do date +%s%N > /work/agent/.tmp && mv /work/agent/.tmp /work/agent/.alive; sleep 0.2; done", background=True)

        turn2 = Sandbox.connect(sid)  # the tests fail
        r = turn2.exec("python3 test_calc.py", cwd="/work/agent", timeout_seconds=60)
        self.assertNotEqual(r.exit_code, 0)
        self.assertIn("AssertionError: -1", r.stderr)

        turn3 = Sandbox.connect(sid)  # the model's edit, through the file API
        src = turn3.filesystem.read_text("/work/agent/calc.py")
        # (a size of its own: Python's bytecode cache knows a source by its size and mtime in
        # whole seconds, and on a fast host all of this can fall in the second of the setup)
        turn3.filesystem.write("/work/agent/calc.py", src.replace("a - b", "b + a  # fixed"))

        turn4 = Sandbox.connect(sid)  # the tests pass; commit
        r = turn4.exec(
            "python3 test_calc.py && git add -A && git -c user.email=a@den -c user.name=agent commit -qm fix && git log --oneline | wc -l",
            cwd="/work/agent", timeout_seconds=60,
        )
        self.assertEqual((r.exit_code, r.stdout), (0, "pass\n2\n"))
        self.assertTrue(watcher.refresh().running)  # the process of turn 1 still runs
        first = int(turn4.filesystem.read_text("/work/agent/.alive"))
        deadline = time.monotonic() + 60
        while int(turn4.filesystem.read_text("/work/agent/.alive")) <= first:  # it still ticks
            self.assertLess(time.monotonic(), deadline, "the process of turn 1 stopped writing")
            time.sleep(0.2)
        watcher.kill()
        self.assertFalse(watcher.wait(timeout_seconds=30).running)

    # -------------------------------------------------------------- an interactive terminal

    def test_pty_shell_resize_ctrl_c_exit_code(self):
        with self.sbx.pty.create(rows=24, cols=80) as term:
            term.write("echo $((6*7))\n")
            term.expect(rb"\b42\b", timeout=30)  # the typed line echoes "$((6*7))", not 42
            term.write("stty size\n")
            term.expect(r"24 80", timeout=30)
            term.resize(33, 99)
            term.write("stty size; echo $GREETING\n")  # the sandbox's env reaches the terminal
            term.expect(r"33 99\s+hello", timeout=30)
            term.write("sleep 1000\n")
            time.sleep(1)
            term.write("\x03")  # Ctrl-C: SIGINT for the foreground sleep
            term.write("echo back-$((40+2))\n")
            term.expect(r"back-42", timeout=30)
            term.write("exit 9\n")
            self.assertEqual(term.wait(timeout=60), PtyExit(exit_code=9, signal=None))
            self.assertTrue(term.done)
        # a command of our own, in a cwd; iterate its output to the end
        with self.sbx.pty.create(cmd="pwd; tty; exit 4", cwd="/tmp", rows=10, cols=40) as term:
            out = b"".join(term).decode()
        self.assertIn("/tmp", out)
        self.assertIn("/dev/pts/", out)
        self.assertEqual(term.exit.exit_code, 4)

    # -------------------------------------------------------------- a tunnel to a port

    def test_forward_and_raw_port_connections(self):
        sbx = self.sbx
        sbx.filesystem.write("/srv/fwd/index.html", "forwarded page\n")
        server = sbx.exec(["python3", "-m", "http.server", "8001", "--directory", "/srv/fwd"], background=True)
        try:
            deadline = time.monotonic() + 30
            while not any(p.port == 8001 for p in sbx.ports()):
                self.assertLess(time.monotonic(), deadline, "http.server never listened")
                time.sleep(0.2)
            with sbx.forward(8001) as fwd:  # a local port, one tunnel per connection
                for _ in range(3):
                    with urllib.request.urlopen(f"http://127.0.0.1:{fwd.local_port}/index.html", timeout=60) as res:
                        self.assertEqual(res.read(), b"forwarded page\n")
                self.assertEqual((fwd.connections, fwd.errors), (3, []))
            with sbx.connect_port(8001) as sock:  # raw TCP: speak HTTP by hand
                sock.sendall(b"GET /index.html HTTP/1.0\r\nHost: x\r\n\r\n")
                data = b""
                while True:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            self.assertTrue(data.startswith(b"HTTP/1.0 200"), data[:100])
            self.assertTrue(data.endswith(b"\r\n\r\nforwarded page\n"), data[-100:])
        finally:
            server.kill()
        with self.assertRaises(DenConnectionRefusedError):
            sbx.connect_port(9998)

    # -------------------------------------------------------------- hibernate / wake

    def test_hibernate_and_wake_warm_and_cold_keep_state(self):
        sbx = self.sbx
        sbx.filesystem.write("/work/state/disk.txt", "on disk")
        sbx.exec("echo in memory > /dev/shm/mem.txt")  # tmpfs: only memory keeps it
        holder = sbx.exec("sleep 3000", background=True)

        def kept():
            r = sbx.exec(f"cat /work/state/disk.txt /dev/shm/mem.txt && kill -0 {holder.pid} && echo alive", timeout_seconds=60)
            self.assertEqual((r.exit_code, r.stdout), (0, "on diskin memory\nalive\n"))

        info = sbx.hibernate()  # warm is the default
        self.assertEqual((info.state, info.hibernate_mode), ("hibernated", "warm"))
        self.assertEqual(sbx.state, "hibernated")
        self.assertEqual(Sandbox.connect(sbx.id).state, "hibernated")
        self.assertEqual(sbx.ports(), [])  # listing never wakes it
        self.assertEqual(sbx.wake().state, "running")
        self.assertIsNone(sbx.info.hibernate_mode)
        kept()

        info = sbx.hibernate(mode="cold")
        self.assertEqual((info.state, info.hibernate_mode), ("hibernated", "cold"))
        self.assertGreater(info.stored_bytes, 0)
        self.assertLess(info.stored_bytes, info.memory_mb * MiB)
        kept()  # an exec wakes it from the store
        self.assertEqual(sbx.refresh().state, "running")

        sbx.hibernate(mode="warm")
        sbx.hibernate(mode="cold")  # a warm hibernation turned cold
        self.assertEqual(sbx.info.hibernate_mode, "cold")
        sbx.wake()
        kept()
        holder.kill()
        types = [e.type for e in sbx.events()]
        self.assertGreaterEqual(types.count("hibernated"), 3)

    # -------------------------------------------------------------- snapshot / restore / fork

    def test_snapshot_restore_and_fork(self):
        sbx = self.sbx
        sbx.filesystem.write("/work/milestone.txt", "v1")
        cp = sbx.snapshot(name="milestone-1")
        self.assertIsInstance(cp, Checkpoint)
        self.assertTrue(cp.id.startswith("snap_"))
        self.assertEqual((cp.name, cp.sandbox_id, cp.template), ("milestone-1", sbx.id, "base"))
        self.assertGreater(cp.stored_bytes, 0)
        self.assertEqual(sbx.refresh().state, "running")  # the sandbox keeps running
        self.assertIn(cp.id, [c.id for c in Checkpoints.list(sandbox_id=sbx.id)])
        self.assertEqual(Checkpoints.get(cp.id).name, "milestone-1")
        sbx.filesystem.write("/work/milestone.txt", "v2")

        restored = Sandbox.restore(cp, ttl_seconds=600, metadata={"suite": RUN_TAG})
        self.extra.append(restored)
        self.assertNotEqual(restored.id, sbx.id)
        self.assertEqual(restored.info.metadata.get("restored_from"), cp.id)
        self.assertEqual(restored.filesystem.read_text("/work/milestone.txt"), "v1")
        by_id = Sandbox.restore(cp.id, ttl_seconds=600, metadata={"suite": RUN_TAG})
        self.extra.append(by_id)
        self.assertEqual(by_id.exec("cat /work/milestone.txt").stdout, "v1")

        children = sbx.fork(count=2)
        self.extra.extend(children)
        self.assertEqual(len(children), 2)
        for child in children:
            self.assertIsInstance(child, Sandbox)
            self.assertEqual(child.info.metadata.get("forked_from"), sbx.id)
            self.assertEqual(child.info.metadata.get("suite"), RUN_TAG)
            self.assertEqual(child.filesystem.read_text("/work/milestone.txt"), "v2")
        children[0].filesystem.write("/work/milestone.txt", "branch-a")
        self.assertEqual(children[1].filesystem.read_text("/work/milestone.txt"), "v2")
        self.assertEqual(sbx.filesystem.read_text("/work/milestone.txt"), "v2")
        (one,) = sbx.fork()
        self.extra.append(one)
        self.assertEqual(one.exec("cat /work/milestone.txt").stdout, "v2")

        # list follows next_cursor: one sandbox per page
        paged = [s.id for s in Sandbox.list(metadata={"suite": RUN_TAG}, page_size=1)]
        self.assertEqual(len(paged), len(set(paged)))
        for s in [sbx, restored, by_id, one] + children:
            self.assertIn(s.id, paged)

        for s in [restored, by_id, one] + children:
            self.assertEqual(s.destroy().state, "destroyed")
        cp.delete()
        with self.assertRaises(CheckpointNotFoundError):
            Checkpoints.get(cp.id)

    # -------------------------------------------------------------- timeout, events, network, ports

    def test_timeout_events_network_and_ports(self):
        sbx = self.sbx
        info = sbx.set_timeout(1200)
        left = info.expires_at - datetime.now(timezone.utc)
        self.assertTrue(timedelta(seconds=1100) < left < timedelta(seconds=1300), left)

        events = sbx.events()
        self.assertIn("running", [e.type for e in events])
        self.assertTrue(all(e.sandbox_id == sbx.id for e in events))
        # Anchor on a lifecycle event: the server keeps all of those (exec.* and transfer.*
        # events are capped per sandbox, and transfer progress may land a little late).
        anchor = [e for e in events if not e.type.startswith(("exec.", "transfer."))][-1]
        later = sbx.events(after=anchor.seq - 1)
        self.assertEqual((later[0].seq, later[0].type), (anchor.seq, anchor.type))
        self.assertTrue(all(e.seq >= anchor.seq for e in later))
        follow = sbx.events(after=anchor.seq - 1, follow=True)
        self.assertEqual(next(follow).seq, anchor.seq)  # the past first, then new ones as they happen
        follow.close()

        self.assertEqual(sbx.set_network(egress="none").network.egress, "none")
        # A policy set while hibernated is only recorded (applied at the wake): this suite runs
        # outside the network test namespace, so it must not bring a network up on the host.
        sbx.hibernate()
        sbx.set_network(NetworkPolicy(egress="allowlist", allow=["example.com"]))
        st = sbx.network_status()
        self.assertEqual((st.policy.egress, st.policy.allow, st.active), ("allowlist", ["example.com"], False))
        self.assertEqual(sbx.set_network({"egress": "none"}).network.egress, "none")
        sbx.wake()
        with self.assertRaises(InvalidArgumentError):
            sbx.set_network(egress="sideways")

        sbx.filesystem.write("/srv/www/index.html", "<h1>den</h1>")
        server = sbx.exec(["python3", "-m", "http.server", "8000", "--directory", "/srv/www"], background=True)
        try:
            deadline = time.monotonic() + 30
            while not any(p.port == 8000 for p in sbx.ports()):
                self.assertLess(time.monotonic(), deadline, "http.server never listened")
                time.sleep(0.2)
            port = next(p for p in sbx.ports() if p.port == 8000)
            self.assertEqual(port.process, "python3")
            url = sbx.get_url(8000)
            self.assertIn(f"/v1/sandboxes/{sbx.id}/ports/8000/", url)
            with urllib.request.urlopen(url, timeout=60) as res:  # a signed URL: no key needed
                self.assertEqual(res.read(), b"<h1>den</h1>")
            u = sbx.create_port_url(8000, expires_in_seconds=60)
            self.assertTrue(u.token and u.vhost_url == u.url and u.url.startswith("http://8000-") and "/v1/sandboxes/" in u.path_url)
        finally:
            server.kill()
        with self.assertRaises(DenConnectionRefusedError) as cm:  # nothing listens there
            sbx._client.raw("GET", f"/v1/sandboxes/{sbx.id}/ports/9999/")
        self.assertEqual(cm.exception.status, 502)
        self.assertIsInstance(cm.exception, ConnectionRefusedError)


@require_server
class ErrorsTest(unittest.TestCase):
    """API errors arrive as typed exceptions."""

    def test_missing_sandbox(self):
        with self.assertRaises(SandboxNotFoundError) as cm:
            Sandbox.connect("sbx_aaaaaaaaaaaaaaaa")
        e = cm.exception
        self.assertEqual((e.code, e.status), ("sandbox_not_found", 404))
        self.assertIn("sbx_aaaaaaaaaaaaaaaa", e.message)

    def test_bad_key(self):
        with self.assertRaises(AuthenticationError) as cm:
            Sandbox.create(api_key="den_wrong_key")
        self.assertEqual((cm.exception.code, cm.exception.status), ("unauthorized", 401))
        with self.assertRaises(AuthenticationError):
            list(Sandbox.list(api_key="den_wrong_key"))
        with self.assertRaises(AuthenticationError):  # the PTY's WebSocket handshake too
            Sandbox(Client(api_key="den_wrong_key"), _info("sbx_aaaaaaaaaaaaaaaa")).pty.create()

    def test_pty_and_port_of_a_missing_sandbox(self):
        ghost = Sandbox(Client(), _info("sbx_aaaaaaaaaaaaaaaa"))
        term = ghost.pty.create()
        with self.assertRaises(SandboxNotFoundError) as cm:
            term.wait(timeout=60)
        self.assertEqual(cm.exception.status, 404)
        term.close()
        with self.assertRaises(SandboxNotFoundError):
            ghost.connect_port(8000)

    def test_invalid_arguments_and_missing_things(self):
        with self.assertRaises(InvalidArgumentError) as cm:
            Sandbox.create(ttl_seconds=0)
        self.assertEqual(cm.exception.status, 400)
        with self.assertRaises(InvalidArgumentError):
            Sandbox.create(metadata={"bad key!": "x"})
        with self.assertRaises(TemplateNotFoundError):
            Sandbox.create(template="no-such-template")
        with self.assertRaises(CheckpointNotFoundError):
            Sandbox.restore("snap_aaaaaaaaaaaaaaaa")

    def test_a_destroyed_sandbox(self):
        sbx = Sandbox.create(ttl_seconds=300, metadata={"suite": RUN_TAG})
        self.assertEqual(sbx.destroy().state, "destroyed")
        self.assertEqual(sbx.delete().state, "destroyed")  # idempotent alias
        with self.assertRaises(InvalidStateError) as cm:
            sbx.exec("true")
        self.assertEqual(cm.exception.code, "sandbox_destroyed")
        with self.assertRaises(InvalidStateError):
            sbx.exec_stream("true")
        with self.assertRaises(InvalidStateError):
            sbx.filesystem.read("/etc/hostname")


@require_server
class ContextManagerTest(unittest.TestCase):
    def test_with_destroys_the_sandbox(self):
        with Sandbox.create(ttl_seconds=300, metadata={"suite": RUN_TAG}) as sbx:
            self.assertEqual(sbx.exec("echo scoped").stdout, "scoped\n")
            sid = sbx.id
        self.assertEqual(Sandbox.connect(sid).state, "destroyed")
        self.assertEqual(sbx.state, "destroyed")

    def test_with_destroys_on_exception_and_reraises(self):
        sid = None
        with self.assertRaises(RuntimeError):
            with Sandbox.create(ttl_seconds=300, metadata={"suite": RUN_TAG}) as sbx:
                sid = sbx.id
                sbx.destroy()  # already gone at exit: not an error
                raise RuntimeError("the agent crashed")
        self.assertEqual(Sandbox.connect(sid).state, "destroyed")


if __name__ == "__main__":
    unittest.main()
