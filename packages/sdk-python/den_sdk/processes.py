"""Background processes: start one, wait for it, read its ring-buffered output, feed its stdin,
kill it (the ``/v1/sandboxes/{id}/processes`` routes)."""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from typing import List, Mapping, Optional, Union

from ._client import Client, seg
from .exec import Command, command_body
from .types import ProcessStatus, convert

__all__ = ["Process", "Processes", "ProcessLogs"]

#: Longest single ``wait_seconds`` long-poll; longer waits are several polls.
WAIT_POLL_SECONDS = 30
#: Input is sent in chunks of this many bytes (its base64 stays under the 350 000-char cap).
INPUT_CHUNK_BYTES = 192 * 1024


@dataclass
class ProcessLogs:
    """A slice of a background process's output: ``data`` from byte ``offset`` of the stream
    (later than asked if the ring buffer ``dropped`` bytes), ``next_offset`` to ask for next,
    and ``eof`` once the stream is closed and everything has been read.

    Example::

        chunk = proc.logs()
        print(chunk.text, chunk.next_offset, chunk.eof)
    """

    data: bytes
    offset: int
    next_offset: int
    dropped: bool
    eof: bool

    @property
    def text(self) -> str:
        """``data`` as UTF-8 text.

        Example::

            assert "listening" in proc.logs(stream="stderr").text
        """
        return self.data.decode("utf-8", "replace")


class Process:
    """A handle on a background process in a sandbox.

    Example::

        proc = sbx.exec("python3 -m http.server 8000", background=True)
        print(proc.proc, proc.pid)
        print(proc.logs(stream="stderr").text)
        proc.kill()
    """

    def __init__(self, client: Client, sandbox_id: str, status: ProcessStatus) -> None:
        self._client = client
        self._sandbox_id = sandbox_id
        self._status = status

    def __repr__(self) -> str:
        return f"Process(sandbox_id={self._sandbox_id!r}, proc={self.proc}, pid={self.pid}, running={self._status.running})"

    @property
    def proc(self) -> int:
        """The process handle id (unique within its sandbox).

        Example::

            again = sbx.processes.get(proc.proc)
        """
        return self._status.proc

    @property
    def pid(self) -> int:
        """The process's PID inside the guest.

        Example::

            sbx.exec(f"kill -USR1 {proc.pid}")
        """
        return self._status.pid

    @property
    def sandbox_id(self) -> str:
        """The id of the sandbox the process runs in.

        Example::

            print(proc.sandbox_id)
        """
        return self._sandbox_id

    @property
    def status(self) -> ProcessStatus:
        """The last known status (updated by :meth:`refresh` and :meth:`wait`).

        Example::

            if proc.status.running:
                proc.kill()
        """
        return self._status

    def _path(self, suffix: str = "") -> str:
        return f"/v1/sandboxes/{seg(self._sandbox_id)}/processes/{seg(self.proc)}{suffix}"

    def _get(self, wait_seconds: Optional[int]) -> ProcessStatus:
        timeout = max(self._client.timeout, (wait_seconds or 0) + 60)
        w = self._client.json("GET", self._path(), query={"wait_seconds": wait_seconds}, timeout=timeout)
        self._status = convert(w, ProcessStatus.from_wire)
        return self._status

    def refresh(self) -> ProcessStatus:
        """Fetches the current status without waiting.

        Example::

            if not proc.refresh().running:
                print("done")
        """
        return self._get(None)

    def wait(self, timeout_seconds: Optional[float] = None) -> ProcessStatus:
        """Waits until the process exits (long-polling the server, 30 s at a time) and returns
        its final status. With ``timeout_seconds``, returns after about that long even if it
        still runs (check ``running``).

        Example::

            st = proc.wait(timeout_seconds=60)
            if st.running:
                proc.kill()
            else:
                print("exit", st.exit_code)
        """
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        while True:
            left = WAIT_POLL_SECONDS if deadline is None else deadline - time.monotonic()
            wait_seconds = max(0, min(WAIT_POLL_SECONDS, int(-(-left // 1))))
            st = self._get(wait_seconds)
            if not st.running or wait_seconds == 0 or (deadline is not None and time.monotonic() >= deadline):
                return st

    def logs(self, stream: str = "stdout", offset: int = 0) -> ProcessLogs:
        """Reads buffered output of ``stream`` (``"stdout"`` or ``"stderr"``) from byte
        ``offset`` on. The server keeps a ring buffer per stream, so old output may be gone.

        Example::

            offset = 0
            while True:
                chunk = proc.logs(offset=offset)
                print(chunk.text, end="")
                offset = chunk.next_offset
                if chunk.eof:
                    break
                time.sleep(0.5)
        """
        w = self._client.json("GET", self._path("/logs"), query={"stream": stream, "offset": offset})
        return convert(
            w,
            lambda v: ProcessLogs(data=base64.b64decode(v["data_b64"]), offset=v["offset"], next_offset=v["next_offset"], dropped=bool(v["dropped"]), eof=bool(v["eof"])),
        )

    def write(self, data: Union[str, bytes]) -> None:
        """Writes to the process's stdin (UTF-8 for a ``str``); large data goes in several requests.

        Example::

            proc = sbx.exec("cat > /tmp/out", background=True)
            proc.write("hello\\n")
            proc.close_stdin()
        """
        b = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        for i in range(0, len(b), INPUT_CHUNK_BYTES):
            self._input(b[i : i + INPUT_CHUNK_BYTES], False)

    def close_stdin(self) -> None:
        """Closes the process's stdin (it reads end-of-file).

        Example::

            proc.close_stdin()
        """
        self._input(b"", True)

    def _input(self, b: bytes, eof: bool) -> None:
        body = {"data_b64": base64.b64encode(b).decode("ascii")}
        if eof:
            body["eof"] = True  # type: ignore[assignment]
        self._client.empty("POST", self._path("/input"), json_body=body)

    def kill(self) -> None:
        """Kills the process and its whole process tree.

        Example::

            proc.kill()
        """
        self._client.empty("DELETE", self._path())


class Processes:
    """The background processes of one sandbox (``sbx.processes``).

    Example::

        for p in sbx.processes.list():
            if p.status.running:
                p.kill()
    """

    def __init__(self, client: Client, sandbox_id: str) -> None:
        self._client = client
        self._sandbox_id = sandbox_id

    def start(
        self,
        cmd: Command,
        timeout_seconds: Optional[float] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Union[str, bytes, None] = None,
        buffer_bytes: Optional[int] = None,
    ) -> Process:
        """Starts a command in the background and returns its handle at once. Same as
        ``sbx.exec(cmd, background=True, ...)``. ``buffer_bytes`` sizes each output stream's
        ring buffer (4 KiB to 8 MiB).

        Example::

            server = sbx.processes.start(["python3", "-m", "http.server", "8000"], cwd="/srv")
        """
        body = command_body(cmd, timeout_seconds=timeout_seconds, cwd=cwd, env=env, stdin=stdin, buffer_bytes=buffer_bytes)
        w = self._client.json("POST", f"/v1/sandboxes/{seg(self._sandbox_id)}/processes", json_body=body)
        return Process(self._client, self._sandbox_id, convert(w, ProcessStatus.from_wire))

    def list(self) -> List[Process]:
        """The sandbox's background processes (running ones and exited ones the server still tracks).

        Example::

            running = [p for p in sbx.processes.list() if p.status.running]
        """
        w = self._client.json("GET", f"/v1/sandboxes/{seg(self._sandbox_id)}/processes")
        return [Process(self._client, self._sandbox_id, s) for s in convert(w, lambda v: [ProcessStatus.from_wire(p) for p in v["processes"]])]

    def get(self, proc: int) -> Process:
        """A handle on one process by its ``proc`` id (raises :class:`ProcessNotFoundError`).

        Example::

            proc = sbx.processes.get(3)
        """
        w = self._client.json("GET", f"/v1/sandboxes/{seg(self._sandbox_id)}/processes/{seg(proc)}")
        return Process(self._client, self._sandbox_id, convert(w, ProcessStatus.from_wire))
