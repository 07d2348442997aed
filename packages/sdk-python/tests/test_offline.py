"""Without a Den server: the asyncio bridge (awaitable-or-context openers, streams, callbacks on
the loop's thread, cancellation that hangs up instead of leaving a thread blocked), the
async PTY and tunnel, list pagination, the webhook signature check, and the new bodies'
parsing, against the scripted server of ``_fake_server``."""

import asyncio
import base64
import hashlib
import hmac
import io
import json
import os
import socket
import threading
import time
import unittest
from datetime import datetime, timezone
from unittest import mock

from den_sdk import (
    ApiKey,
    AsyncSandbox,
    AsyncUsage,
    AsyncVolumes,
    AsyncWebhooks,
    ConflictError,
    DenConnectionRefusedError,
    DenFileNotFoundError,
    HostInfo,
    InvalidResponseError,
    NotFoundError,
    PayloadTooLargeError,
    Sandbox,
    SandboxNotFoundError,
    Template,
    Usage,
    UsageReport,
    Volume,
    VolumeInUseError,
    VolumeMount,
    VolumeMountInfo,
    VolumeNotFoundError,
    Volumes,
    Webhook,
    WebhookDelivery,
    Webhooks,
    WebhookVerificationError,
)

from ._fake_server import SANDBOX, FakeDen
from .test_websocket import pty_server

SID = SANDBOX["id"]


def b64(s):
    return base64.b64encode(s if isinstance(s, bytes) else s.encode()).decode()


class FakeServerCase(unittest.IsolatedAsyncioTestCase):
    def setUp(self):
        self.den = FakeDen()
        self.den.__enter__()
        self.addCleanup(self.den.__exit__)
        self.den.sandbox_routes()
        env = mock.patch.dict(os.environ, {"DEN_API_URL": self.den.url, "DEN_API_KEY": "den_test"})
        env.start()
        self.addCleanup(env.stop)


class AsyncBridgeTest(FakeServerCase):
    async def test_await_or_async_with(self):
        destroyed = []
        self.den.routes[("DELETE", f"/v1/sandboxes/{SID}")] = lambda r: (destroyed.append(1), r.json(200, dict(SANDBOX, state="destroyed")))
        sbx = await AsyncSandbox.connect(SID)
        self.assertEqual((sbx.id, sbx.state), (SID, "running"))
        async with AsyncSandbox.connect(SID) as again:
            self.assertEqual(again.info.template, "base")
        self.assertEqual((destroyed, again.state), ([1], "destroyed"))
        with self.assertRaises(RuntimeError):
            async with AsyncSandbox.connect(SID):
                raise RuntimeError("boom")  # destroyed, then the error propagates
        self.assertEqual(destroyed, [1, 1])
        self.den.routes[("GET", "/v1/sandboxes/sbx_zzzzzzzzzzzzzzzz")] = lambda r: r.error(404, "sandbox_not_found", "no such sandbox")
        with self.assertRaises(SandboxNotFoundError):
            await AsyncSandbox.connect("sbx_zzzzzzzzzzzzzzzz")

    async def test_cancelling_hangs_up_instead_of_leaving_a_thread_blocked(self):
        seen = {}

        def never_answers(req):
            seen["start"] = time.monotonic()
            req.h.connection.recv(1)  # until the client hangs up
            seen["hung_up"] = time.monotonic()

        self.den.routes[("GET", "/v1/sandboxes/sbx_cccccccccccccccc")] = never_answers
        t0 = time.monotonic()
        with self.assertRaises(asyncio.TimeoutError):
            await asyncio.wait_for(AsyncSandbox.connect("sbx_cccccccccccccccc"), 0.5)
        self.assertLess(time.monotonic() - t0, 5)
        deadline = time.monotonic() + 5
        while "hung_up" not in seen and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        self.assertIn("hung_up", seen, "the worker thread's connection stayed open")
        self.assertLess(seen["hung_up"] - seen["start"], 5)  # (the blocking read's timeout is 600 s)

    async def test_exec_stream_events_and_callbacks_on_the_loop_thread(self):
        lines = [
            {"type": "start", "pid": 42},
            {"type": "stdout", "data_b64": b64("one\n")},
            {"type": "keepalive"},
            {"type": "stderr", "data_b64": b64("warn\n")},
            {"type": "stdout", "data_b64": b64("two\n")},
            {"type": "exit", "exit_code": 3, "signal": None, "timed_out": False},
        ]
        self.den.routes[("POST", f"/v1/sandboxes/{SID}/exec/stream")] = lambda r: r.ndjson(lines)
        sbx = await AsyncSandbox.connect(SID)
        async with sbx.exec_stream("whatever") as run:
            chunks = [c async for c in run]
            ex = await run.wait()
        self.assertEqual([(c.stream, c.text) for c in chunks], [("stdout", "one\n"), ("stderr", "warn\n"), ("stdout", "two\n")])
        self.assertEqual((ex.pid, ex.exit_code, run.pid), (42, 3, 42))
        self.assertEqual((await (await sbx.exec_stream("again")).wait()).exit_code, 3)  # wait() alone drains

        loop_thread = threading.current_thread()
        calls = []
        r = await sbx.exec("x", on_stdout=lambda s: calls.append((s, threading.current_thread() is loop_thread)))
        self.assertEqual((r.stdout, r.stderr, r.exit_code), ("one\ntwo\n", "warn\n", 3))
        self.assertEqual(calls, [("one\n", True), ("two\n", True)])

        hung_up = threading.Event()

        def events(req):
            def gen():
                for i in range(1, 4):
                    yield {"seq": i, "sandbox_id": SID, "at": "2025-01-01T00:00:00Z", "type": "running", "reason": None, "data": {}}
                while True:  # then keepalives until the client goes away
                    time.sleep(0.05)
                    yield {"type": "keepalive"}

            req.ndjson(gen())
            hung_up.set()

        self.den.routes[("GET", f"/v1/sandboxes/{SID}/events")] = events
        async with sbx.events(follow=True) as evs:
            seqs = []
            async for ev in evs:
                seqs.append(ev.seq)
                if ev.seq == 2:
                    break
        self.assertEqual(seqs, [1, 2])
        self.assertTrue(await asyncio.get_running_loop().run_in_executor(None, hung_up.wait, 5), "the followed stream was not hung up")

    async def test_a_dropped_stream_hangs_up(self):
        hung_up = threading.Event()

        def events(req):
            def gen():
                i = 0
                while True:
                    i += 1
                    yield {"seq": i, "sandbox_id": SID, "at": "2025-01-01T00:00:00Z", "type": "running", "reason": None, "data": {}}
                    time.sleep(0.02)

            req.ndjson(gen())
            hung_up.set()

        self.den.routes[("GET", f"/v1/sandboxes/{SID}/events")] = events
        sbx = await AsyncSandbox.connect(SID)
        evs = sbx.events(follow=True)
        self.assertEqual((await evs.__anext__()).seq, 1)
        del evs  # never closed: collected (no cycle holds it), and that hangs up
        self.assertTrue(await asyncio.get_running_loop().run_in_executor(None, hung_up.wait, 5), "a dropped stream kept its connection")

    async def test_stream_errors_raise_where_awaited(self):
        self.den.routes[("POST", f"/v1/sandboxes/{SID}/exec/stream")] = lambda r: r.error(410, "sandbox_destroyed", "gone")
        sbx = await AsyncSandbox.connect(SID)
        from den_sdk import InvalidStateError

        with self.assertRaises(InvalidStateError):
            await sbx.exec_stream("true")
        with self.assertRaises(InvalidStateError):
            async with sbx.exec_stream("true"):
                pass

    async def test_list_follows_cursors(self):
        pages = {None: ([dict(SANDBOX, id="sbx_aaaaaaaaaaaaaaa1")], "c1"), "c1": ([dict(SANDBOX, id="sbx_aaaaaaaaaaaaaaa2")], None)}
        seen = []

        def page(req):
            seen.append(dict(req.query))
            items, nxt = pages[req.query.get("cursor")]
            req.json(200, {"sandboxes": items, "next_cursor": nxt})

        self.den.routes[("GET", "/v1/sandboxes")] = page
        ids = [s.id async for s in AsyncSandbox.list(metadata={"task_id": "t"}, page_size=1)]
        self.assertEqual(ids, ["sbx_aaaaaaaaaaaaaaa1", "sbx_aaaaaaaaaaaaaaa2"])
        self.assertEqual(seen, [{"metadata.task_id": "t", "limit": "1"}, {"metadata.task_id": "t", "limit": "1", "cursor": "c1"}])

    async def test_async_pty(self):
        seen = {}
        pty_server(self.den, seen)
        sbx = await AsyncSandbox.connect(SID)
        async with sbx.pty.create(rows=10, cols=20) as term:
            await term.write("echo $((6*7))\n")
            self.assertIn("6*7", await term.expect(r"\)\)\n", timeout=10))
            await term.resize(33, 99)
            await term.expect("size 33 99", timeout=10)
            with self.assertRaises(TimeoutError):
                await term.expect("nothing like this", timeout=0.2)
            await term.write("exit 5\n")
            rest = b"".join([c async for c in term])
            self.assertIn(b"exit 5", rest)
            self.assertEqual((await term.wait(timeout=10)).exit_code, 5)
        self.assertEqual(seen["query"], {"rows": "10", "cols": "20"})

        got = []
        term = await sbx.pty.create(on_data=lambda b: got.append((b, threading.current_thread() is threading.main_thread())))
        await term.write("exit 0\n")
        self.assertEqual((await term.wait(timeout=10)).exit_code, 0)
        await asyncio.sleep(0.05)  # (the callbacks scheduled before the exit have run)
        self.assertEqual(b"".join(b for b, _ in got), b"exit 0\n")
        self.assertTrue(all(on_loop for _, on_loop in got))

    async def test_async_connect_port(self):
        def echo(req):
            sock = req.upgrade_tcp()
            sock.sendall(b"hi ")
            data = sock.recv(100)
            sock.sendall(data.upper())
            sock.shutdown(socket.SHUT_WR)

        self.den.routes[("GET", f"/v1/sandboxes/{SID}/ports/7000")] = echo
        self.den.routes[("GET", f"/v1/sandboxes/{SID}/ports/9999")] = lambda r: r.error(502, "connection_refused", "nothing there")
        sbx = await AsyncSandbox.connect(SID)
        reader, writer = await sbx.connect_port(7000)
        writer.write(b"abc")
        await writer.drain()
        self.assertEqual(await reader.read(), b"hi ABC")
        writer.close()
        with self.assertRaises(DenConnectionRefusedError):
            await sbx.connect_port(9999)


class WebhookVerifyTest(unittest.TestCase):
    SECRET = "whsec_" + base64.b64encode(b"k" * 24).decode()

    def sign(self, msg_id, ts, body, secret=None):
        key = base64.b64decode((secret or self.SECRET)[len("whsec_"):])
        return "v1," + base64.b64encode(hmac.new(key, f"{msg_id}.{ts}.{body}".encode(), hashlib.sha256).digest()).decode()

    def test_verify(self):
        body = json.dumps({"type": "sandbox.destroyed", "timestamp": "2025-01-02T03:04:05.000Z", "data": {"sandbox_id": SID, "reason": "ttl"}})
        ts = str(int(time.time()))
        headers = {"Webhook-Id": "msg_1", "Webhook-Timestamp": ts, "Webhook-Signature": "v1,bogus " + self.sign("msg_1", ts, body)}
        p = Webhooks.verify(body, headers, self.SECRET)
        self.assertEqual((p.type, p.data["sandbox_id"], p.timestamp.year), ("sandbox.destroyed", SID, 2025))
        self.assertEqual(AsyncWebhooks.verify(body.encode(), headers, self.SECRET), p)  # bytes too; the same function
        for name, args in [
            ("tampered", (body.replace("ttl", "user"), headers, self.SECRET)),
            ("other secret", (body, headers, "whsec_" + base64.b64encode(b"x" * 24).decode())),
            ("missing header", (body, {"webhook-id": "msg_1"}, self.SECRET)),
            ("stale", (body, dict(headers, **{"Webhook-Timestamp": str(int(ts) - 600)}), self.SECRET)),
        ]:
            with self.subTest(name), self.assertRaises(WebhookVerificationError):
                Webhooks.verify(*args)
        old = {"webhook-id": "m", "webhook-timestamp": "1000", "webhook-signature": self.sign("m", "1000", body)}
        self.assertEqual(Webhooks.verify(body, old, self.SECRET, now=1100).type, "sandbox.destroyed")


class BodiesTest(unittest.TestCase):
    """The new bodies parse as the protocol's zod schemas give them."""

    def test_parsing(self):
        t = Template.from_wire({"name": "base", "version": "0123456789ab", "current": True, "owner": None, "vcpus": 1, "memory_mb": 512, "disk_mb": 2048, "created_at": "2025-01-01T00:00:00Z"})
        self.assertEqual((t.name, t.owner, t.created_at.tzinfo), ("base", None, timezone.utc))
        k = ApiKey.from_wire({"id": "key_1", "owner": "ci", "admin": False, "created_at": "2025-01-01T00:00:00Z", "revoked_at": None, "key": "den_secret"})
        self.assertEqual((k.key, k.revoked_at), ("den_secret", None))
        self.assertNotIn("den_secret", repr(k))
        group = {"key": None, "sandboxes": 2, "running_seconds": 10.5, "warm_hibernated_seconds": 1, "cold_hibernated_seconds": 2, "vcpu_seconds": 10.5,
                 "memory_gib_seconds": 5.25, "host_cpu_seconds": 3, "den_cpu_seconds": 0.5, "stored_byte_seconds": 100, "stored_gb_months": 0.0, "cost": None}
        r = UsageReport.from_wire({"from": "2025-01-01T00:00:00.000Z", "to": "2025-01-02T00:00:00.000Z", "group_by": "sandbox", "prices": None, "groups": [group]})
        self.assertEqual((r.from_.day, r.to.day, r.groups[0].running_seconds, r.groups[0].cost), (1, 2, 10.5, None))
        h = HostInfo.from_wire({"id": "den_x", "url": "local", "status": "up", "error": None, "state": "up", "managed": "config", "lease_until": None, "lost_at": None,
                                "kind": {"qemuVersion": "8.2", "accelerator": "kvm", "cpuModel": "host", "arch": "x86_64"},
                                "capacity": {"memory_mb": 1000, "vcpus": 2, "disk_reserve_mb": 10}, "used": {"memory_mb": 0, "vcpus": 0, "sandboxes": 0}, "sandboxes": 0})
        self.assertEqual((h.kind.accelerator, h.capacity.disk_reserve_mb, h.used.sandboxes), ("kvm", 10, 0))
        w = Webhook.from_wire({"id": "wh_aaaaaaaaaaaaaaaa", "url": "http://198.51.100.7:9/hook", "events": ["sandbox.lost"], "description": None, "created_at": "2025-01-01T00:00:00Z", "secret": "whsec_x"})
        self.assertEqual((w.events, w.secret), (["sandbox.lost"], "whsec_x"))
        self.assertNotIn("whsec_x", repr(w))
        d = WebhookDelivery.from_wire({"id": "whd_aaaaaaaaaaaaaaaa", "message_id": "msg_1", "webhook_id": w.id, "type": "sandbox.lost", "sandbox_id": None, "status": "pending",
                                       "attempts": 0, "created_at": "2025-01-01T00:00:00Z", "last_attempt_at": None, "next_attempt_at": "2025-01-01T00:00:01Z",
                                       "delivered_at": None, "response_status": None, "error": None,
                                       "payload": {"type": "sandbox.lost", "timestamp": "2025-01-01T00:00:00Z", "data": {}}})
        self.assertEqual((d.status, d.next_attempt_at.second, d.payload.type), ("pending", 1, "sandbox.lost"))


class UsageQueryTest(FakeServerCase):
    async def test_period_bounds_are_sent_as_utc_iso(self):
        seen = []
        report = {"from": "2025-01-01T00:00:00.000Z", "to": "2025-01-02T00:00:00.000Z", "group_by": "owner", "prices": None, "groups": []}
        self.den.routes[("GET", "/v1/usage")] = lambda r: (seen.append(r.query), r.json(200, report))
        start = datetime(2025, 1, 1, 1, 0, 0, 123456, tzinfo=timezone.utc)
        r = await AsyncUsage.get(from_=start, to="2025-01-02T00:00:00Z", group_by="owner")
        self.assertEqual(r.group_by, "owner")
        Usage.get()
        self.assertEqual(seen, [{"from": "2025-01-01T01:00:00.123Z", "to": "2025-01-02T00:00:00Z", "group_by": "owner"}, {}])


VOLUME = {"id": "vol_abcdefghijklmnop", "name": "work", "size_mb": 64, "created_at": "2025-01-01T00:00:00.000Z",
          "mounts": [{"sandbox_id": SID, "path": "/work", "read_only": False, "held": True}]}
FILE_STAT = {"path": "/in/a.txt", "type": "file", "size": 5, "mode": 420, "mtime": "2025-01-01T00:00:00Z"}


class VolumesOfflineTest(FakeServerCase):
    """The volume calls' requests and answers, against the scripted server."""

    def test_volume_body_parsing(self):
        v = Volume.from_wire(VOLUME)
        self.assertEqual((v.id, v.name, v.size_mb, v.created_at, v.raw), ("vol_abcdefghijklmnop", "work", 64, datetime(2025, 1, 1, tzinfo=timezone.utc), VOLUME))
        self.assertEqual(v.mounts, [VolumeMountInfo(sandbox_id=SID, path="/work", read_only=False, held=True)])
        self.assertEqual(Volume.from_wire(dict(VOLUME, mounts=[])).mounts, [])
        self.den.routes[("GET", "/v1/volumes/work")] = lambda r: r.json(200, dict(VOLUME, mounts=None))
        with self.assertRaises(InvalidResponseError):
            Volumes.get("work")
        self.den.routes[("GET", "/v1/volumes/work")] = lambda r: r.json(200, {k: x for k, x in VOLUME.items() if k != "size_mb"})
        with self.assertRaises(InvalidResponseError):
            Volumes.get("work")

    def test_calls_send_what_the_api_takes(self):
        seen = []

        def route(method, path, answer):
            self.den.routes[(method, path)] = lambda r: (seen.append((r.method, r.path, r.query, r.body)), answer(r))

        route("POST", "/v1/volumes", lambda r: r.json(201, dict(VOLUME, mounts=[])))
        route("GET", "/v1/volumes", lambda r: r.json(200, {"volumes": [VOLUME, dict(VOLUME, name="b", id="vol_bbbbbbbbbbbbbbbb", mounts=[])]}))
        route("GET", "/v1/volumes/work", lambda r: r.json(200, VOLUME))
        route("POST", "/v1/volumes/work/grow", lambda r: r.json(200, dict(VOLUME, size_mb=128)))
        route("DELETE", "/v1/volumes/work", lambda r: r.raw(204, b""))
        self.assertEqual(Volumes.create("work", size_mb=64).mounts, [])
        self.assertEqual([v.name for v in Volumes.list()], ["work", "b"])
        self.assertEqual(Volumes.get("work").mounts[0].sandbox_id, SID)
        self.assertEqual(Volumes.grow("work", 128).size_mb, 128)
        self.assertIsNone(Volumes.delete("work"))
        self.assertEqual([(m, p, json.loads(b) if b else None) for m, p, _, b in seen], [
            ("POST", "/v1/volumes", {"name": "work", "size_mb": 64}),
            ("GET", "/v1/volumes", None),
            ("GET", "/v1/volumes/work", None),
            ("POST", "/v1/volumes/work/grow", {"size_mb": 128}),
            ("DELETE", "/v1/volumes/work", None),
        ])
        # A name is one path segment, whatever it holds.
        route("GET", "/v1/volumes/a%2Fb", lambda r: r.error(404, "volume_not_found", "no volume a/b"))
        self.den.routes[("GET", "/v1/volumes/a/b")] = lambda r: self.fail("the name was not escaped")
        with self.assertRaises(VolumeNotFoundError) as cm:
            Volumes.get("a/b")
        self.assertIsInstance(cm.exception, NotFoundError)
        self.assertEqual((cm.exception.status, cm.exception.code), (404, "volume_not_found"))

    def test_files_written_streamed_and_read_bounded(self):
        writes = []
        self.den.routes[("PUT", "/v1/volumes/work/files")] = lambda r: (
            writes.append((r.query, r.body, r.chunked, r.headers.get("content-type"))), r.json(200, dict(FILE_STAT, path=r.query["path"], size=len(r.body))))
        self.assertEqual(Volumes.write_file("work", "/in/a.txt", "héllo").size, 6)
        self.assertEqual(Volumes.write_file("work", "/in/b.bin", bytearray(b"\x00\xff")).size, 2)
        big = os.urandom(700_000)
        info = Volumes.write_file("work", "/in/big.bin", io.BytesIO(big))
        self.assertEqual((info.path, info.size), ("/in/big.bin", 700_000))
        Volumes.write_file("work", "/in/parts", iter([b"ab", b"cd"]))
        self.assertEqual([(q["path"], b[:6], c, t) for q, b, c, t in writes], [
            ("/in/a.txt", "héllo".encode(), False, "application/octet-stream"),
            ("/in/b.bin", b"\x00\xff", False, "application/octet-stream"),
            ("/in/big.bin", big[:6], True, "application/octet-stream"),   # streamed, chunked
            ("/in/parts", b"abcd", True, "application/octet-stream"),
        ])
        self.assertEqual(writes[2][1], big)
        with self.assertRaises(TypeError):
            Volumes.write_file("work", "/t", io.StringIO("text mode"))

        data = bytes(range(256)) * 2000  # 512000 bytes
        self.den.routes[("GET", "/v1/volumes/work/files")] = lambda r: (
            r.raw(200, data) if r.query["path"] == "/big" else r.error(404, "file_not_found", "no such file"))
        chunks = list(Volumes.read_stream("work", "/big", chunk_bytes=100_000))
        self.assertEqual(b"".join(chunks), data)
        self.assertTrue(all(len(c) <= 100_000 for c in chunks), [len(c) for c in chunks])
        self.assertGreaterEqual(len(chunks), 6)
        self.assertEqual(Volumes.read_file("work", "/big"), data)
        self.assertEqual(Volumes.read_file("work", "/big", max_bytes=len(data)), data)
        with self.assertRaises(PayloadTooLargeError):
            Volumes.read_file("work", "/big", max_bytes=len(data) - 1)
        with self.assertRaises(DenFileNotFoundError):
            Volumes.read_stream("work", "/nope")  # raises before the first chunk
        with self.assertRaises(ValueError):
            Volumes.read_stream("work", "/big", chunk_bytes=0)

    def test_mounts_on_create_restore_fork(self):
        bodies = []
        child = dict(SANDBOX, id="sbx_cccccccccccccccc")
        self.den.routes[("POST", "/v1/sandboxes")] = lambda r: (bodies.append(json.loads(r.body)), r.json(201, SANDBOX))
        self.den.routes[("POST", "/v1/checkpoints/snap_aaaaaaaaaaaaaaaa/restore")] = lambda r: (bodies.append(json.loads(r.body)), r.json(201, child))
        self.den.routes[("POST", f"/v1/sandboxes/{SID}/fork")] = lambda r: (bodies.append(json.loads(r.body)), r.json(201, {"sandboxes": [child]}))
        sbx = Sandbox.create(volumes=[VolumeMount("work", "/work"), {"name": "data", "path": "/data", "read_only": True}])
        Sandbox.restore("snap_aaaaaaaaaaaaaaaa", volumes=[VolumeMount("data", "/d", read_only=True)])
        sbx.fork(count=2, volumes=[])
        sbx.fork()
        Sandbox.create()
        self.assertEqual(bodies, [
            {"volumes": [{"name": "work", "path": "/work"}, {"name": "data", "path": "/data", "read_only": True}]},
            {"volumes": [{"name": "data", "path": "/d", "read_only": True}]},
            {"count": 2, "volumes": []},
            {"count": 1},
            {},
        ])
        for bad in (VolumeMount("a", "/a"), [{"name": "a"}], [{"name": "a", "path": "/a", "readOnly": True}], [("a", "/a")], [{"name": "a", "path": "/a", "read_only": "yes"}]):
            with self.subTest(bad=bad), self.assertRaises(TypeError):
                Sandbox.create(volumes=bad)  # type: ignore[arg-type]
        self.assertEqual(len(bodies), 5, "a bad mount sends nothing")
        self.den.routes[("POST", "/v1/sandboxes")] = lambda r: r.error(409, "volume_in_use", "volume work is mounted by sandbox x", {"volume": "work", "sandbox_id": SID})
        with self.assertRaises(VolumeInUseError) as cm:
            Sandbox.create(volumes=[VolumeMount("work", "/w")])
        self.assertIsInstance(cm.exception, ConflictError)
        self.assertEqual((cm.exception.status, cm.exception.details), (409, {"volume": "work", "sandbox_id": SID}))

    async def test_async_volumes(self):
        seen = []
        self.den.routes[("POST", "/v1/volumes")] = lambda r: (seen.append(json.loads(r.body)), r.json(201, dict(VOLUME, mounts=[])))
        self.den.routes[("GET", "/v1/volumes/work/files")] = lambda r: r.raw(200, b"x" * 300_000) if r.query["path"] == "/f" else r.error(409, "volume_in_use", "held")
        self.den.routes[("POST", "/v1/sandboxes")] = lambda r: (seen.append(json.loads(r.body)), r.json(201, SANDBOX))
        v = await AsyncVolumes.create("work", 64)
        self.assertEqual((v.name, seen[0]), ("work", {"name": "work", "size_mb": 64}))
        self.assertEqual(await AsyncVolumes.read_file("work", "/f"), b"x" * 300_000)
        with self.assertRaises(PayloadTooLargeError):
            await AsyncVolumes.read_text("work", "/f", max_bytes=10)
        got = []
        async with AsyncVolumes.read_stream("work", "/f", chunk_bytes=65536) as chunks:
            async for c in chunks:
                got.append(c)
        self.assertEqual((b"".join(got), max(map(len, got)) <= 65536), (b"x" * 300_000, True))
        with self.assertRaises(VolumeInUseError):
            async for _ in AsyncVolumes.read_stream("work", "/held"):
                pass
        sbx = await AsyncSandbox.create(volumes=[VolumeMount("work", "/w", read_only=True)])
        self.assertEqual((sbx.id, seen[1]), (SID, {"volumes": [{"name": "work", "path": "/w", "read_only": True}]}))


if __name__ == "__main__":
    unittest.main()
