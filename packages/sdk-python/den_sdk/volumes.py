"""Volumes: named per-owner filesystems that outlive every sandbox that mounts them
(``/v1/volumes``).

A volume is mounted with ``volumes=[VolumeMount(name, path, read_only=False)]`` (or dicts of
the same keys) on :meth:`Sandbox.create`, :meth:`Sandbox.restore` and :meth:`Sandbox.fork`.
It is held by one read-write mount or by any number of read-only ones, never both (a
conflicting mount raises :class:`VolumeInUseError`). A warm hibernation keeps it held; a cold
one lets go of it (unless a process keeps files open on it) and the wake mounts it again. It is
not part of a checkpoint. Its files can be read and written without a sandbox.

Example::

    from den_sdk import Sandbox, VolumeMount, Volumes

    Volumes.create("work", size_mb=1024)
    Volumes.write_file("work", "/input.txt", "hello\\n")
    with Sandbox.create(volumes=[VolumeMount("work", "/work")]) as sbx:
        sbx.exec("wc -c /work/input.txt > /work/out.txt")
    print(Volumes.read_text("work", "/out.txt"))   # "6 /work/input.txt\\n"
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

from ._client import Client, iter_chunks, seg
from .errors import PayloadTooLargeError
from .filesystem import _file_chunks
from .types import FileInfo, convert, parse_time

__all__ = ["Volume", "VolumeMount", "VolumeMountInfo", "Volumes", "VolumeMountLike", "mounts_to_wire"]

#: The size of the chunks :meth:`Volumes.read_stream` yields, by default.
DEFAULT_CHUNK_BYTES = 256 * 1024

#: What ``data`` of :meth:`Volumes.write_file` may be.
WriteData = Union[str, bytes, bytearray, memoryview, IO[bytes], Iterable[bytes]]


@dataclass(frozen=True)
class VolumeMount:
    """One volume to mount into a sandbox: the volume's ``name``, the guest ``path`` it is
    mounted at (absolute, made if missing, not ``/`` nor a system directory), and
    ``read_only`` (default False: one read-write mount at a time, or any number of read-only
    ones, never both). A dict with the same keys works wherever a mount is taken.

    Example::

        mounts = [VolumeMount("datasets", "/data", read_only=True), VolumeMount("work", "/work")]
        sbx = Sandbox.create(volumes=mounts)
    """

    name: str
    path: str
    read_only: bool = False

    def to_wire(self) -> Dict[str, Any]:
        """The JSON of this mount (``read_only`` only when it is set).

        Example::

            VolumeMount("work", "/work").to_wire()   # {"name": "work", "path": "/work"}
        """
        out: Dict[str, Any] = {"name": self.name, "path": self.path}
        if self.read_only:
            out["read_only"] = True
        return out


#: A mount as the SDK takes it: a :class:`VolumeMount`, or a dict ``{"name", "path", "read_only"?}``.
VolumeMountLike = Union[VolumeMount, Mapping[str, Any]]


def mounts_to_wire(volumes: Sequence[VolumeMountLike]) -> List[Dict[str, Any]]:
    """The ``volumes`` of a create, restore or fork body (the server checks the names and
    paths; this checks the shapes).

    Example::

        mounts_to_wire([VolumeMount("a", "/a"), {"name": "b", "path": "/b", "read_only": True}])
    """
    if isinstance(volumes, (str, bytes, Mapping, VolumeMount)):
        raise TypeError("volumes is a list of VolumeMount (or dicts), not one mount")
    out: List[Dict[str, Any]] = []
    for m in volumes:
        if isinstance(m, VolumeMount):
            w = m.to_wire()
        elif isinstance(m, Mapping):
            unknown = set(m) - {"name", "path", "read_only"}
            if unknown:
                raise TypeError(f"unknown volume mount keys: {sorted(unknown)} (name, path, read_only)")
            if "name" not in m or "path" not in m:
                raise TypeError("a volume mount needs a name and a path")
            w = {"name": m["name"], "path": m["path"]}
            if m.get("read_only") is not None:
                w["read_only"] = m["read_only"]
        else:
            raise TypeError(f"a volume mount is a VolumeMount or a dict, not {type(m).__name__}")
        if not isinstance(w["name"], str) or not isinstance(w["path"], str):
            raise TypeError("a volume mount's name and path are strings")
        if not isinstance(w.get("read_only", False), bool):
            raise TypeError("a volume mount's read_only is a bool")
        out.append(w)
    return out


@dataclass
class VolumeMountInfo:
    """Where a volume is mounted (the ``mounts`` of a :class:`Volume`): the sandbox (not
    destroyed), the guest path, whether read-only, and ``held``: whether the mount holds the
    volume now (a cold-hibernated sandbox that let it go holds it again at its wake).

    Example::

        for m in Volumes.get("work").mounts:
            print(m.sandbox_id, m.path, "ro" if m.read_only else "rw", "" if m.held else "(asleep)")
    """

    sandbox_id: str
    path: str
    read_only: bool
    held: bool

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "VolumeMountInfo":
        """Builds it from one entry of a ``Volume`` body's ``mounts``.

        Example::

            VolumeMountInfo.from_wire({"sandbox_id": "sbx_...", "path": "/w", "read_only": False, "held": True})
        """
        return cls(sandbox_id=w["sandbox_id"], path=w["path"], read_only=bool(w["read_only"]), held=bool(w["held"]))


@dataclass
class Volume:
    """A volume (the ``Volume`` body): its id (``vol_...``), name, size in MiB, creation time
    and the sandboxes (not destroyed) it is mounted in.

    Example::

        v = Volumes.get("work")
        print(v.id, v.size_mb, [m.sandbox_id for m in v.mounts])
    """

    id: str
    name: str
    size_mb: int
    created_at: datetime
    mounts: List[VolumeMountInfo]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "Volume":
        """Builds a volume from its JSON body.

        Example::

            v = Volume.from_wire(client.json("GET", "/v1/volumes/work"))
        """
        if not isinstance(w["mounts"], list):
            raise TypeError("mounts is not a list")
        return cls(
            id=w["id"],
            name=w["name"],
            size_mb=int(w["size_mb"]),
            created_at=parse_time(w["created_at"]),  # type: ignore[arg-type]
            mounts=[VolumeMountInfo.from_wire(m) for m in w["mounts"]],
            raw=dict(w),
        )


def _path(name: str, suffix: str = "") -> str:
    return f"/v1/volumes/{seg(name)}{suffix}"


def _body(data: WriteData) -> object:
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if hasattr(data, "read"):
        return _file_chunks(data)  # type: ignore[arg-type]
    return iter(data)


class Volumes:
    """The caller's volumes. Every method also takes ``api_url=`` and ``api_key=``.

    Errors: :class:`VolumeNotFoundError` (404 ``volume_not_found``) for a name the owner has
    none of; :class:`VolumeInUseError` (409 ``volume_in_use``, ``details`` name the holder) for
    a mount, delete, grow or file transfer the volume's holders refuse;
    :class:`QuotaExceededError` (429) past the owner's volume count or size quota, or too many
    transfers at once.

    Example::

        Volumes.create("work", size_mb=2048)
        Volumes.write_file("work", "/input/task.md", "refactor auth")   # no sandbox needed
        sbx = Sandbox.create(persistent=True, volumes=[VolumeMount("work", "/work")])
        sbx.exec("cat /work/input/task.md > /work/notes.txt")
        sbx.destroy()                                                    # the volume stays
        print(Volumes.read_text("work", "/notes.txt"))
    """

    @staticmethod
    def create(name: str, size_mb: int, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> Volume:
        """Creates an empty volume: ``name`` is 1 to 63 lowercase letters, digits and ``-``
        (unique among the owner's), ``size_mb`` the filesystem's size (16 MiB to 1 TiB; host
        disk is taken only as it is written). :class:`ConflictError` ``already_exists`` for a
        name the owner has.

        Example::

            v = Volumes.create("datasets", size_mb=10_240)
        """
        client = Client(api_url, api_key)
        w = client.json("POST", "/v1/volumes", json_body={"name": name, "size_mb": size_mb})
        return convert(w, Volume.from_wire)

    @staticmethod
    def list(*, api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[Volume]:
        """The owner's volumes, by name, each with the sandboxes it is mounted in.

        Example::

            for v in Volumes.list():
                print(v.name, v.size_mb, len(v.mounts))
        """
        w = Client(api_url, api_key).json("GET", "/v1/volumes")
        return convert(w, lambda v: [Volume.from_wire(x) for x in v["volumes"]])

    @staticmethod
    def get(name: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> Volume:
        """One volume (:class:`VolumeNotFoundError` if the owner has none of that name).

        Example::

            v = Volumes.get("work")
        """
        return convert(Client(api_url, api_key).json("GET", _path(name)), Volume.from_wire)

    @staticmethod
    def delete(name: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> None:
        """Deletes a volume and its data; :class:`VolumeInUseError` while any sandbox that is
        not destroyed mounts it (hibernated ones too).

        Example::

            Volumes.delete("scratch")
        """
        Client(api_url, api_key).empty("DELETE", _path(name))

    @staticmethod
    def grow(name: str, size_mb: int, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> Volume:
        """Grows a volume's filesystem to ``size_mb`` (larger than now: a volume never
        shrinks); :class:`VolumeInUseError` while a sandbox holds it.

        Example::

            v = Volumes.grow("work", 4096)
        """
        w = Client(api_url, api_key).json("POST", _path(name, "/grow"), json_body={"size_mb": size_mb})
        return convert(w, Volume.from_wire)

    @staticmethod
    def write_file(name: str, path: str, data: WriteData, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> FileInfo:
        """Writes a file into a volume without a sandbox, creating or replacing it (atomically;
        parents are made): a ``str`` as UTF-8, bytes as they are, a binary file object (or an
        iterable of bytes) streamed without being read into memory. ``path`` is from the
        volume's root. Returns the file's info. :class:`VolumeInUseError` while a sandbox
        holds the volume.

        Example::

            Volumes.write_file("work", "/config/settings.json", json.dumps({"debug": True}))
            with open("data.csv", "rb") as f:
                Volumes.write_file("work", "/in/data.csv", f)
        """
        w = Client(api_url, api_key).json("PUT", _path(name, "/files"), query={"path": path}, body=_body(data))
        return convert(w, FileInfo.from_wire)

    @staticmethod
    def read_stream(
        name: str, path: str, chunk_bytes: int = DEFAULT_CHUNK_BYTES, *, api_url: Optional[str] = None, api_key: Optional[str] = None,
    ) -> Iterator[bytes]:
        """Reads a file of a volume without a sandbox, as chunks of at most ``chunk_bytes``,
        never holding it whole in memory. The request is made here, so a missing file
        (:class:`DenFileNotFoundError`) or a volume a sandbox holds read-write
        (:class:`VolumeInUseError`) raises before the first chunk. Close the iterator to stop
        early (it hangs up).

        Example::

            with open("results.tar", "wb") as out:
                for chunk in Volumes.read_stream("work", "/results.tar"):
                    out.write(chunk)
        """
        if chunk_bytes <= 0:
            raise ValueError("chunk_bytes must be positive")
        res = Client(api_url, api_key).request("GET", _path(name, "/files"), query={"path": path}, accept="application/octet-stream")
        return iter_chunks(res, chunk_bytes)

    @staticmethod
    def read_file(
        name: str, path: str, max_bytes: Optional[int] = None, *, api_url: Optional[str] = None, api_key: Optional[str] = None,
    ) -> bytes:
        """Reads a whole file of a volume as bytes. With ``max_bytes``, a file longer than that
        raises :class:`PayloadTooLargeError` once that much has been read (the connection is
        closed; no more is read).

        Example::

            db = Volumes.read_file("work", "/app.sqlite")
            head = Volumes.read_file("work", "/small.json", max_bytes=1 << 20)
        """
        if max_bytes is not None and max_bytes < 0:
            raise ValueError("max_bytes must not be negative")
        parts: List[bytes] = []
        got = 0
        stream = Volumes.read_stream(name, path, api_url=api_url, api_key=api_key)
        try:
            for chunk in stream:
                got += len(chunk)
                if max_bytes is not None and got > max_bytes:
                    raise PayloadTooLargeError("payload_too_large", f"{path} in volume {name} is over max_bytes ({max_bytes})", 413)
                parts.append(chunk)
        finally:
            stream.close()  # type: ignore[attr-defined]
        return b"".join(parts)

    @staticmethod
    def read_text(
        name: str, path: str, encoding: str = "utf-8", max_bytes: Optional[int] = None, *,
        api_url: Optional[str] = None, api_key: Optional[str] = None,
    ) -> str:
        """Reads a whole file of a volume as text (``max_bytes`` as in :meth:`read_file`).

        Example::

            log = Volumes.read_text("work", "/run.log")
        """
        return Volumes.read_file(name, path, max_bytes, api_url=api_url, api_key=api_key).decode(encoding)
