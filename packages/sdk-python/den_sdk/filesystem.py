"""Files inside a sandbox: ``sbx.filesystem``. Paths are absolute guest paths."""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO, Iterable, Iterator, List, Union

from ._client import Client, iter_chunks, seg
from .errors import DenFileNotFoundError
from .types import FileInfo, convert

__all__ = ["Filesystem", "ListFilesResult"]


@dataclass
class ListFilesResult:
    """What :meth:`Filesystem.list` returns: the ``entries`` and whether the server stopped
    before the end of a very large directory (``truncated``). Iterating it iterates the entries.

    Example::

        for e in sbx.filesystem.list("/workspace"):
            print(e.type, e.path, e.size)
    """

    entries: List[FileInfo]
    truncated: bool

    def __iter__(self):
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def names(self) -> List[str]:
        """The entries' base names.

        Example::

            assert "main.py" in sbx.filesystem.list("/workspace").names
        """
        return [e.path.rstrip("/").rsplit("/", 1)[-1] for e in self.entries]


def _file_chunks(f: IO[bytes], size: int = 256 * 1024) -> Iterator[bytes]:
    while True:
        b = f.read(size)
        if not b:
            return
        if isinstance(b, str):
            raise TypeError("write() takes a file opened in binary mode")
        yield b


class Filesystem:
    """The files of one sandbox (``sbx.filesystem``).

    Example::

        sbx.filesystem.write("/workspace/main.py", "print('hi')\\n")
        r = sbx.exec("python3 /workspace/main.py")
    """

    def __init__(self, client: Client, sandbox_id: str) -> None:
        self._client = client
        self._sandbox_id = sandbox_id

    def _path(self, suffix: str = "") -> str:
        return f"/v1/sandboxes/{seg(self._sandbox_id)}/files{suffix}"

    def read(self, path: str) -> bytes:
        """Reads a whole file as bytes (raises :class:`DenFileNotFoundError`, a
        ``FileNotFoundError``, if there is none).

        Example::

            png = sbx.filesystem.read("/workspace/plot.png")
        """
        return self._client.raw("GET", self._path(), query={"path": path}, accept="application/octet-stream")

    def read_stream(self, path: str, chunk_bytes: int = 256 * 1024) -> Iterator[bytes]:
        """Reads a file as chunks of at most ``chunk_bytes``, without holding it in memory (a
        missing file raises here, before the first chunk). Close the iterator to stop early.

        Example::

            with open("big.tar", "wb") as out:
                for chunk in sbx.filesystem.read_stream("/workspace/big.tar"):
                    out.write(chunk)
        """
        res = self._client.request("GET", self._path(), query={"path": path}, accept="application/octet-stream")
        return iter_chunks(res, chunk_bytes)

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        """Reads a whole file as text.

        Example::

            report = sbx.filesystem.read_text("/work/report.md")
        """
        return self.read(path).decode(encoding)

    def write(self, path: str, data: Union[str, bytes, bytearray, memoryview, IO[bytes], Iterable[bytes]]) -> FileInfo:
        """Writes a whole file, creating or replacing it (atomically in the guest): a ``str`` is
        written as UTF-8, bytes as they are, and a binary file object (or an iterable of
        bytes) is streamed without being read into memory. Returns the new file's info.

        Example::

            sbx.filesystem.write("/workspace/data.bin", bytes([0, 255, 10]))
            sbx.filesystem.write("/workspace/notes.txt", "hello\\n")
            with open("big.tar", "rb") as f:
                sbx.filesystem.write("/workspace/big.tar", f)
        """
        if isinstance(data, str):
            body: object = data.encode("utf-8")
        elif isinstance(data, (bytes, bytearray, memoryview)):
            body = bytes(data)
        elif hasattr(data, "read"):
            body = _file_chunks(data)  # type: ignore[arg-type]
        else:
            body = iter(data)
        w = self._client.json("PUT", self._path(), query={"path": path}, body=body)
        return convert(w, FileInfo.from_wire)

    def list(self, path: str) -> ListFilesResult:
        """Lists a directory.

        Example::

            for e in sbx.filesystem.list("/workspace").entries:
                print(e.type, e.path, e.size)
        """
        w = self._client.json("GET", self._path("/list"), query={"path": path})
        return convert(w, lambda v: ListFilesResult(entries=[FileInfo.from_wire(e) for e in v["entries"]], truncated=bool(v["truncated"])))

    def stat(self, path: str) -> FileInfo:
        """A path's metadata (a symlink is described, not followed).

        Example::

            st = sbx.filesystem.stat("/workspace/out.csv")
            print(st.size, st.mtime)
        """
        return convert(self._client.json("GET", self._path("/stat"), query={"path": path}), FileInfo.from_wire)

    def exists(self, path: str) -> bool:
        """Whether a path exists (a :meth:`stat` that maps ``file_not_found`` to False).

        Example::

            if not sbx.filesystem.exists("/workspace/.venv"):
                sbx.exec("python3 -m venv /workspace/.venv")
        """
        try:
            self.stat(path)
            return True
        except DenFileNotFoundError:
            return False

    def mkdir(self, path: str, parents: bool = True) -> None:
        """Creates a directory; with ``parents`` (the default) also its missing parents, and no
        error if it exists.

        Example::

            sbx.filesystem.mkdir("/workspace/a/b/c")
        """
        self._client.empty("POST", self._path("/mkdir"), json_body={"path": path, "parents": bool(parents)})

    def remove(self, path: str, recursive: bool = False) -> None:
        """Removes a file, or with ``recursive`` a directory and everything in it.

        Example::

            sbx.filesystem.remove("/workspace/build", recursive=True)
        """
        self._client.empty("DELETE", self._path(), query={"path": path, "recursive": True if recursive else None})

    def rename(self, src: str, dst: str) -> None:
        """Renames (moves) a file or directory.

        Example::

            sbx.filesystem.rename("/workspace/out.tmp", "/workspace/out.csv")
        """
        self._client.empty("POST", self._path("/rename"), json_body={"from": src, "to": dst})
