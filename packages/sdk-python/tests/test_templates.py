"""Template builds without a Den server, against the scripted server of ``_fake_server``: context
uploads (the digest the SDK computes; a directory tarred; a file streamed), builds created
with a Dockerfile, started with ``wait=False``, read, listed and cancelled, and their logs
(followed as they come, keepalives skipped), with the blocking and the asyncio client."""

import hashlib
import io
import json
import os
import tarfile
import tempfile
import threading
import time
import unittest
from datetime import datetime, timezone
from unittest import mock

from den_sdk import (
    AsyncTemplates,
    BuildContext,
    ImageError,
    InvalidArgumentError,
    InvalidResponseError,
    NotFoundError,
    QuotaExceededError,
    SetupFailedError,
    Template,
    TemplateBuild,
    TemplateBuildLogLine,
    Templates,
)

from ._fake_server import FakeDen

BUILD = {
    "id": "op_aaaaaaaaaaaaaaaa", "name": "web", "state": "building", "source": {"kind": "dockerfile", "from": "python:3.12"},
    "version": None, "error": None, "created_at": "2026-01-02T03:04:05.000Z", "finished_at": None,
}
TEMPLATE = {"name": "web", "version": "0123456789ab", "current": True, "owner": "alice", "vcpus": 1, "memory_mb": 512, "disk_mb": 4096,
            "created_at": "2026-01-02T03:04:05.000Z", "source": "dockerfile", "run": None}
CONTEXTS = "/v1/templates/contexts/"


def line(seq, message, level="info"):
    return {"seq": seq, "at": "2026-01-02T03:04:05.000Z", "level": level, "message": message}


class _Routes(dict):
    """Exact routes, plus one for every context digest (``PUT /v1/templates/contexts/*``)."""

    def get(self, key, default=None):
        method, path = key
        if method == "PUT" and path.startswith(CONTEXTS):
            key = ("PUT", CONTEXTS + "*")
        return super().get(key, default)


class TemplatesCase(unittest.IsolatedAsyncioTestCase):
    def setUp(self):
        self.den = FakeDen()
        self.den.routes = _Routes()
        self.den.__enter__()
        self.addCleanup(self.den.__exit__)
        env = mock.patch.dict(os.environ, {"DEN_API_URL": self.den.url, "DEN_API_KEY": "den_test"})
        env.start()
        self.addCleanup(env.stop)
        self.uploads = []

        def put_context(r):
            want = r.path[len(CONTEXTS):]
            got = "sha256:" + hashlib.sha256(r.body).hexdigest()
            self.uploads.append((want, r.body, r.chunked, r.headers.get("content-type")))
            if want != got:
                return r.error(400, "invalid_argument", f"the context's sha256 is {got}, not {want}")
            r.json(201, {"context": got, "size": len(r.body)})

        self.den.routes[("PUT", CONTEXTS + "*")] = put_context


class UploadContextTest(TemplatesCase):
    def test_bytes_files_and_directories(self):
        tar = b"pretend this is a tar\n" * 1000
        digest = "sha256:" + hashlib.sha256(tar).hexdigest()
        ctx = Templates.upload_context(tar)
        self.assertEqual(ctx, BuildContext(context=digest, size=len(tar)))
        self.assertEqual(self.uploads[-1], (digest, tar, False, "application/octet-stream"))
        self.assertEqual(Templates.upload_context(bytearray(tar)).context, digest)

        with tempfile.TemporaryDirectory() as d:
            # A tar file by its path: hashed, then streamed from the file.
            path = os.path.join(d, "ctx.tar")
            with open(path, "wb") as f:
                f.write(tar)
            self.assertEqual(Templates.upload_context(path).context, digest)
            self.assertEqual(self.uploads[-1][1:3], (tar, True))
            # A binary file object: hashed from where it stands, then sent from there.
            with open(path, "rb") as f:
                f.read(10)
                part = Templates.upload_context(f)
            self.assertEqual((part.size, part.context), (len(tar) - 10, "sha256:" + hashlib.sha256(tar[10:]).hexdigest()))
            # Given the digest, a stream is sent as it is; a wrong one is the server's refusal.
            self.assertEqual(Templates.upload_context(io.BytesIO(tar), digest=digest).size, len(tar))
            with self.assertRaises(InvalidArgumentError):
                Templates.upload_context(io.BytesIO(tar), digest="sha256:" + "0" * 64)

            # A directory: its contents tarred at the archive's root.
            src = os.path.join(d, "app")
            os.makedirs(os.path.join(src, "pkg"))
            with open(os.path.join(src, "pkg", "main.py"), "w") as f:
                f.write("print(42)\n")
            with open(os.path.join(src, "requirements.txt"), "w") as f:
                f.write("flask\n")
            ctx = Templates.upload_context(src)
            want, body, chunked, _ = self.uploads[-1]
            self.assertEqual((ctx.context, want, ctx.size, chunked), ("sha256:" + hashlib.sha256(body).hexdigest(), ctx.context, len(body), True))
            with tarfile.open(fileobj=io.BytesIO(body)) as t:
                names = sorted(os.path.normpath(n) for n in t.getnames())
                self.assertEqual(names, [".", "pkg", "pkg/main.py", "requirements.txt"])
                self.assertEqual(t.extractfile("./pkg/main.py").read(), b"print(42)\n")

            n = len(self.uploads)
            with self.assertRaises(InvalidArgumentError):
                Templates.upload_context(tar, digest="sha256:XYZ")
            with open(path) as text, self.assertRaises(TypeError):
                Templates.upload_context(text)  # type: ignore[arg-type]
            with self.assertRaises(TypeError):
                Templates.upload_context(12345)  # type: ignore[arg-type]
            self.assertEqual(len(self.uploads), n, "nothing sent for a bad digest or body")

    async def test_async_upload(self):
        ctx = await AsyncTemplates.upload_context(b"tar bytes")
        self.assertEqual(ctx.context, "sha256:" + hashlib.sha256(b"tar bytes").hexdigest())


class BuildsTest(TemplatesCase):
    def test_create_and_start_build_send_what_the_api_takes(self):
        bodies = []

        def post(r):
            body = json.loads(r.body)
            bodies.append(body)
            if body.get("wait") is False:
                return r.json(202, {"build": BUILD})
            r.json(201, TEMPLATE)

        self.den.routes[("POST", "/v1/templates")] = post
        context = "sha256:" + "a" * 64
        t = Templates.create("web", dockerfile="FROM python:3.12\nARG V\nRUN echo $V\n", context=context, build_args={"V": "1"}, ready_cmd="true", memory_mb=1024)
        self.assertIsInstance(t, Template)
        self.assertEqual(bodies[-1], {"name": "web", "dockerfile": "FROM python:3.12\nARG V\nRUN echo $V\n", "context": context, "build_args": {"V": "1"},
                                      "ready_cmd": "true", "memory_mb": 1024})
        b = Templates.create("web", dockerfile="FROM base\n", wait=False)
        self.assertIsInstance(b, TemplateBuild)
        self.assertEqual(bodies[-1], {"name": "web", "dockerfile": "FROM base\n", "wait": False})
        b = Templates.start_build("img", from_image={"ref": "registry.example:5000/web:1", "credentials": {"token": "t"}}, force=True)
        self.assertEqual(bodies[-1], {"name": "img", "from_image": {"ref": "registry.example:5000/web:1", "credentials": {"token": "t"}}, "force": True, "wait": False})
        self.assertEqual(b, TemplateBuild(
            id=BUILD["id"], name="web", state="building", source={"kind": "dockerfile", "from": "python:3.12"}, version=None, error=None,
            created_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc), finished_at=None,
        ))
        self.assertFalse(b.done)
        Templates.start_build("arc", from_archive=context, start_cmd="nginx")
        self.assertEqual(bodies[-1], {"name": "arc", "from_archive": context, "start_cmd": "nginx", "wait": False})
        with self.assertRaises(TypeError):
            Templates.start_build("web", dockerfile="FROM base\n", build_args=["A=1"])  # type: ignore[arg-type]

        # The build's errors, typed as the API's.
        self.den.routes[("POST", "/v1/templates")] = lambda r: r.error(429, "limit_exceeded", "2 template builds are running")
        with self.assertRaises(QuotaExceededError):
            Templates.start_build("web", dockerfile="FROM base\n")
        self.den.routes[("POST", "/v1/templates")] = lambda r: r.error(422, "setup_failed", "step 2 RUN exited with 1: false", {"stdout": "", "stderr": "boom\n"})
        with self.assertRaises(SetupFailedError) as cm:
            Templates.create("web", dockerfile="FROM base\nRUN false\n")
        self.assertEqual(cm.exception.details["stderr"], "boom\n")
        self.den.routes[("POST", "/v1/templates")] = lambda r: r.error(422, "image_pull_failed", "registry.example: unreachable")
        with self.assertRaises(ImageError):
            Templates.create("web", from_image="registry.example/x:1")
        self.den.routes[("POST", "/v1/templates")] = lambda r: r.json(202, {"build": dict(BUILD, source=None)})
        with self.assertRaises(InvalidResponseError):
            Templates.start_build("web")

    def test_build_builds_cancel(self):
        failed = dict(BUILD, id="op_bbbbbbbbbbbbbbbb", state="error", finished_at="2026-01-02T03:05:00.000Z",
                      error={"code": "setup_failed", "message": "RUN exited 1", "details": {"stderr": "boom\n"}})
        queries = []
        self.den.routes[("GET", f"/v1/templates/builds/{failed['id']}")] = lambda r: r.json(200, failed)
        self.den.routes[("GET", "/v1/templates/builds/op_nope")] = lambda r: r.error(404, "not_found", "no such build")
        self.den.routes[("GET", "/v1/templates/builds")] = lambda r: (queries.append(r.query), r.json(200, {"builds": [BUILD, failed]}))
        self.den.routes[("POST", f"/v1/templates/builds/{BUILD['id']}/cancel")] = lambda r: r.json(
            200, dict(BUILD, state="cancelled", error={"code": "aborted", "message": "cancelled"}, finished_at="2026-01-02T03:06:00.000Z"))
        b = Templates.build(failed["id"])
        self.assertEqual((b.state, b.done, b.error["code"], b.finished_at.minute), ("error", True, "setup_failed", 5))
        with self.assertRaises(NotFoundError):
            Templates.build("op_nope")
        self.assertEqual([(x.id, x.state) for x in Templates.builds("web", limit=5)], [(BUILD["id"], "building"), (failed["id"], "error")])
        Templates.builds()
        self.assertEqual(queries, [{"name": "web", "limit": "5"}, {}])
        c = Templates.cancel_build(BUILD["id"])
        self.assertEqual((c.state, c.error["code"]), ("cancelled", "aborted"))


class BuildLogsTest(TemplatesCase):
    def _logs_route(self, released):
        seen = []

        def logs(r):
            seen.append(r.query)
            start = int(r.query.get("offset", 0))
            first = [line(0, "FROM python:3.12"), line(1, "RUN pip install flask"), line(2, "step 2 cached")]

            def gen():
                yield from (x for x in first if x["seq"] >= start)
                if r.query.get("follow") != "true":
                    return
                yield {"type": "keepalive"}
                released.wait(5)  # the build goes on: more lines after the client read the first
                yield {"type": "keepalive"}
                yield line(3, "build failed: RUN exited 1", "error")

            r.ndjson(gen())

        self.den.routes[("GET", f"/v1/templates/builds/{BUILD['id']}/logs")] = logs
        return seen

    def test_logs_so_far_and_followed(self):
        released = threading.Event()
        seen = self._logs_route(released)
        past = list(Templates.build_logs(BUILD["id"]))
        self.assertEqual([(x.seq, x.message) for x in past], [(0, "FROM python:3.12"), (1, "RUN pip install flask"), (2, "step 2 cached")])
        self.assertIsInstance(past[0], TemplateBuildLogLine)
        self.assertEqual(past[0].at.tzinfo, timezone.utc)
        self.assertEqual(seen[-1], {})

        got = []
        t0 = time.monotonic()
        for x in Templates.build_logs(BUILD["id"], offset=1, follow=True):
            got.append((x.seq, x.level, x.message))
            if len(got) == 2:
                released.set()  # lines arrive before the stream ends
        self.assertLess(time.monotonic() - t0, 4)
        self.assertEqual(got, [(1, "info", "RUN pip install flask"), (2, "info", "step 2 cached"), (3, "error", "build failed: RUN exited 1")])
        self.assertEqual(seen[-1], {"offset": "1", "follow": "true"})

        # An unknown build raises at the call, before the first line.
        self.den.routes[("GET", "/v1/templates/builds/op_nope/logs")] = lambda r: r.error(404, "not_found", "no such build")
        with self.assertRaises(NotFoundError):
            Templates.build_logs("op_nope")
        # A line that breaks the contract.
        self.den.routes[("GET", "/v1/templates/builds/op_bad/logs")] = lambda r: r.ndjson([{"seq": "x", "message": 1}])
        with self.assertRaises(InvalidResponseError):
            list(Templates.build_logs("op_bad"))

    def test_closing_early_hangs_up(self):
        hung_up = threading.Event()

        def forever(r):
            def gen():
                yield line(0, "first")
                while True:
                    time.sleep(0.05)
                    yield {"type": "keepalive"}

            r.ndjson(gen())
            hung_up.set()  # the writes failed: the client went away

        self.den.routes[("GET", f"/v1/templates/builds/{BUILD['id']}/logs")] = forever
        logs = Templates.build_logs(BUILD["id"], follow=True)
        self.assertEqual(next(logs).message, "first")
        logs.close()
        self.assertTrue(hung_up.wait(5), "the connection stayed open")

    async def test_async(self):
        released = threading.Event()
        self._logs_route(released)
        self.den.routes[("POST", "/v1/templates")] = lambda r: r.json(202, {"build": BUILD}) if json.loads(r.body).get("wait") is False else r.json(201, TEMPLATE)
        self.den.routes[("GET", f"/v1/templates/builds/{BUILD['id']}")] = lambda r: r.json(200, dict(BUILD, state="ready", version="0123456789ab"))
        b = await AsyncTemplates.start_build("web", dockerfile="FROM base\n")
        self.assertEqual(b.id, BUILD["id"])
        self.assertIsInstance(await AsyncTemplates.create("web", dockerfile="FROM base\n", wait=False), TemplateBuild)
        self.assertIsInstance(await AsyncTemplates.create("web", dockerfile="FROM base\n"), Template)
        got = []
        async with AsyncTemplates.build_logs(b.id, follow=True) as lines:
            async for x in lines:
                got.append(x.seq)
                if len(got) == 3:
                    released.set()
        self.assertEqual(got, [0, 1, 2, 3])
        done = await AsyncTemplates.build(b.id)
        self.assertEqual((done.state, done.version), ("ready", "0123456789ab"))
        self.den.routes[("GET", "/v1/templates/builds/op_nope/logs")] = lambda r: r.error(404, "not_found", "no such build")
        with self.assertRaises(NotFoundError):
            async for _ in AsyncTemplates.build_logs("op_nope"):
                pass


if __name__ == "__main__":
    unittest.main()
