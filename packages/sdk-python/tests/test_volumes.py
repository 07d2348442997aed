"""Volumes against a real server and real microVMs, with the blocking and the asyncio client:
a volume written through the volume API (a str and a streamed binary file) is mounted in a
sandbox and read there; a second read-write mount, a read-only one beside the writer, a
delete, a grow and file transfers while it is held are ``VolumeInUseError``s; after the
writer is destroyed, two readers (one of them a fork's child) see its files and cannot write
them; the files are read back (whole, bounded, streamed), the volume grown and deleted."""

import hashlib
import io
import os
import unittest

from den_sdk import (
    AsyncSandbox,
    AsyncVolumes,
    ConflictError,
    DenError,
    DenFileNotFoundError,
    PayloadTooLargeError,
    Sandbox,
    Volume,
    VolumeInUseError,
    VolumeMount,
    VolumeMountInfo,
    VolumeNotFoundError,
    Volumes,
)

from ._support import RUN_TAG, require_server

#: Bytes of the streamed file: more than one chunk of the SDK's reads and writes.
BLOB_BYTES = 1_500_000


def _quiet_destroy(*sandboxes):
    for s in sandboxes:
        try:
            s.destroy()
        except DenError:
            pass


def _quiet_delete(name):
    try:
        Volumes.delete(name)
    except VolumeNotFoundError:
        pass


@require_server
class VolumesTest(unittest.TestCase):
    def test_volume_write_mount_conflicts_readers_read_back_grow_delete(self):
        name = f"{RUN_TAG}-vol"
        meta = {"suite": RUN_TAG, "task_id": "py-volumes"}
        v = Volumes.create(name, size_mb=64)
        self.addCleanup(_quiet_delete, name)
        self.assertIsInstance(v, Volume)
        self.assertRegex(v.id, r"^vol_[a-z2-7]{16}$")
        self.assertEqual((v.name, v.size_mb, v.mounts), (name, 64, []))
        self.assertIn(v.id, [x.id for x in Volumes.list()])
        with self.assertRaises(ConflictError) as cm:
            Volumes.create(name, size_mb=16)
        self.assertEqual(cm.exception.code, "already_exists")

        # Written without a sandbox: a str, and a binary file streamed from a file object.
        info = Volumes.write_file(name, "/in/hello.txt", "hello from python\n")
        self.assertEqual((info.path, info.size, info.type), ("/in/hello.txt", 18, "file"))
        blob = os.urandom(BLOB_BYTES)
        self.assertEqual(Volumes.write_file(name, "/in/blob", io.BytesIO(blob)).size, BLOB_BYTES)

        # Mounted read-write in a sandbox: the files are there, and it writes one.
        writer = Sandbox.create(persistent=True, ttl_seconds=300, metadata=meta, volumes=[VolumeMount(name, "/v")])
        self.addCleanup(_quiet_destroy, writer)
        r = writer.exec("cat /v/in/hello.txt && sha256sum /v/in/blob | cut -d' ' -f1 && echo from-sandbox > /v/out.txt", timeout_seconds=60)
        self.assertEqual((r.exit_code, r.stderr), (0, ""))
        self.assertEqual(r.stdout, f"hello from python\n{hashlib.sha256(blob).hexdigest()}\n")
        self.assertEqual(Volumes.get(name).mounts, [VolumeMountInfo(sandbox_id=writer.id, path="/v", read_only=False, held=True)])

        # One writer: a second read-write mount, a reader, a delete, a grow and file transfers are refused.
        with self.assertRaises(VolumeInUseError) as cm:
            Sandbox.create(ttl_seconds=300, metadata=meta, volumes=[{"name": name, "path": "/w"}])
        self.assertEqual((cm.exception.status, cm.exception.code), (409, "volume_in_use"))
        self.assertEqual((cm.exception.details or {}).get("sandbox_id"), writer.id, cm.exception.details)
        with self.assertRaises(VolumeInUseError):
            Sandbox.create(ttl_seconds=300, metadata=meta, volumes=[VolumeMount(name, "/w", read_only=True)])
        for refused in (lambda: Volumes.delete(name), lambda: Volumes.grow(name, 128), lambda: Volumes.write_file(name, "/x", b"no"),
                        lambda: Volumes.read_file(name, "/out.txt")):
            with self.assertRaises(VolumeInUseError):
                refused()
        self.assertEqual([s.id for s in Sandbox.list(metadata=meta)], [writer.id], "the refused creates left no sandbox")
        self.assertEqual(writer.destroy().state, "destroyed")
        self.assertEqual(Volumes.get(name).mounts, [])

        # Many readers: a sandbox and its fork's child, each with its own read-only mount.
        reader = Sandbox.create(persistent=True, ttl_seconds=300, metadata=meta, volumes=[VolumeMount(name, "/ro", read_only=True)])
        self.addCleanup(_quiet_destroy, reader)
        (child,) = reader.fork(volumes=[VolumeMount(name, "/ro2", read_only=True)])
        self.addCleanup(_quiet_destroy, child)
        self.assertEqual(reader.exec("cat /ro/out.txt").stdout, "from-sandbox\n")
        self.assertNotEqual(reader.exec("touch /ro/new").exit_code, 0, "a read-only mount takes no writes")
        self.assertEqual(child.exec("cat /ro2/out.txt; grep -q ' /ro ' /proc/mounts || echo no-parent-mount").stdout, "from-sandbox\nno-parent-mount\n")
        self.assertEqual(sorted((m.sandbox_id, m.path, m.read_only) for m in Volumes.get(name).mounts),
                         sorted([(reader.id, "/ro", True), (child.id, "/ro2", True)]))
        with self.assertRaises(VolumeInUseError):
            Volumes.write_file(name, "/x", b"no")
        # Read back beside the readers: whole, bounded, streamed.
        self.assertEqual(Volumes.read_file(name, "/out.txt", max_bytes=1024), b"from-sandbox\n")
        self.assertEqual(Volumes.read_text(name, "/in/hello.txt"), "hello from python\n")
        with self.assertRaises(PayloadTooLargeError):
            Volumes.read_file(name, "/in/blob", max_bytes=100_000)
        h, sizes = hashlib.sha256(), []
        for chunk in Volumes.read_stream(name, "/in/blob", chunk_bytes=256 * 1024):
            sizes.append(len(chunk))
            h.update(chunk)
        self.assertEqual((sum(sizes), h.hexdigest()), (BLOB_BYTES, hashlib.sha256(blob).hexdigest()))
        self.assertTrue(len(sizes) >= 6 and max(sizes) <= 256 * 1024, sizes)
        with self.assertRaises(DenFileNotFoundError):
            Volumes.read_stream(name, "/no/such")
        _quiet_destroy(reader, child)

        # Grown, then deleted once no sandbox mounts it.
        self.assertEqual(Volumes.grow(name, 128).size_mb, 128)
        self.assertEqual(Volumes.get(name).size_mb, 128)
        Volumes.delete(name)
        with self.assertRaises(VolumeNotFoundError) as nf:
            Volumes.get(name)
        self.assertEqual((nf.exception.status, nf.exception.code), (404, "volume_not_found"))
        with self.assertRaises(VolumeNotFoundError):
            Sandbox.create(ttl_seconds=300, metadata=meta, volumes=[VolumeMount(name, "/v")])
        self.assertNotIn(name, [x.name for x in Volumes.list()])


@require_server
class AsyncVolumesTest(unittest.IsolatedAsyncioTestCase):
    async def test_async_volume_write_mount_conflict_read_delete(self):
        name = f"{RUN_TAG}-avol"
        meta = {"suite": RUN_TAG, "task_id": "py-aio-volumes"}
        v = await AsyncVolumes.create(name, 32)
        self.addCleanup(_quiet_delete, name)
        self.assertEqual((v.name, v.size_mb, v.mounts), (name, 32, []))
        self.assertIn(name, [x.name for x in await AsyncVolumes.list()])
        self.assertEqual((await AsyncVolumes.write_file(name, "/task.md", b"refactor auth\n")).size, 14)

        async with AsyncSandbox.create(persistent=True, ttl_seconds=300, metadata=meta, volumes=[VolumeMount(name, "/data")]) as sbx:
            r = await sbx.exec("cat /data/task.md && seq 1 20000 > /data/out.txt")
            self.assertEqual((r.exit_code, r.stdout), (0, "refactor auth\n"))
            with self.assertRaises(VolumeInUseError):
                await AsyncSandbox.create(ttl_seconds=300, metadata=meta, volumes=[VolumeMount(name, "/data")])
            self.assertEqual([m.sandbox_id for m in (await AsyncVolumes.get(name)).mounts], [sbx.id])
            with self.assertRaises(VolumeInUseError):
                await AsyncVolumes.delete(name)
        # Destroyed at the end of the block: the volume is free and has what it wrote.
        want = "".join(f"{i}\n" for i in range(1, 20001))
        self.assertEqual(await AsyncVolumes.read_text(name, "/out.txt", max_bytes=1 << 20), want)
        got = []
        async with AsyncVolumes.read_stream(name, "/out.txt", chunk_bytes=16 * 1024) as chunks:
            async for c in chunks:
                got.append(c)
        self.assertEqual(b"".join(got).decode(), want)
        self.assertTrue(len(got) > 1 and max(map(len, got)) <= 16 * 1024, [len(c) for c in got])
        await AsyncVolumes.delete(name)
        with self.assertRaises(VolumeNotFoundError):
            await AsyncVolumes.get(name)


if __name__ == "__main__":
    unittest.main()
