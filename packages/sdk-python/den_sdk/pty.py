"""Interactive terminals: a command on a pseudo-terminal in the sandbox, over a WebSocket
(``GET /v1/sandboxes/{id}/pty``). Binary messages carry bytes (keystrokes in, terminal
output out); text messages carry JSON control (``resize``, ``signal`` from us; ``exit`` or
``error`` from the server before it closes)."""

from __future__ import annotations

import collections
import json
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Deque, Iterator, List, Optional, Pattern, Union

from ._client import Client, seg
from ._websocket import WebSocket, WebSocketClosed
from .errors import ERROR_STATUS, AbortedError, InvalidStateError, api_error

__all__ = ["Pty", "PtyExit", "Ptys"]

#: Input is sent in messages of at most this many bytes (the server takes up to 1 MiB each).
INPUT_CHUNK_BYTES = 64 * 1024
#: Output kept for :meth:`Pty.read` while nobody reads; past it the oldest is dropped.
DEFAULT_BUFFER_BYTES = 16 * 1024 * 1024
#: Longest message accepted from the server.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024

PatternLike = Union[str, bytes, "Pattern[str]", "Pattern[bytes]"]


@dataclass
class PtyExit:
    """How a terminal's command ended: its ``exit_code``, or the ``signal`` that killed it.

    Example::

        ex = term.wait()
        print(ex.exit_code, ex.signal)
    """

    exit_code: Optional[int]
    signal: Optional[int]


def _bytes_pattern(p: PatternLike) -> "Pattern[bytes]":
    if isinstance(p, bytes):
        return re.compile(p)
    if isinstance(p, str):
        return re.compile(p.encode("utf-8"))
    if isinstance(p.pattern, bytes):
        return p
    return re.compile(p.pattern.encode("utf-8"), p.flags & ~re.UNICODE)


class Pty:
    """An interactive terminal in a sandbox. Get one with ``sbx.pty.create(...)``.

    Output is read with :meth:`read`, :meth:`expect` or by iterating (chunks of ``bytes`` until
    the command ends), or pushed to an ``on_data`` callback (then it is not kept for reading).
    A background thread receives it meanwhile, keeping up to 16 MiB that nobody read (the
    oldest is dropped past that; see :attr:`dropped_bytes`). Ctrl-C is ``write("\\x03")``: the
    terminal turns it into SIGINT for the foreground process, as on a real terminal.

    Example::

        with sbx.pty.create(rows=40, cols=120) as term:
            term.write("echo $((6*7))\\n")
            term.expect(r"42")
            term.resize(50, 160)
            term.write("exit 3\\n")
            print(term.wait().exit_code)    # 3
    """

    def __init__(self, ws: WebSocket, on_data: Optional[Callable[[bytes], None]] = None, buffer_bytes: int = DEFAULT_BUFFER_BYTES) -> None:
        self._ws = ws
        self._on_data = on_data
        self._buffer_bytes = buffer_bytes
        self._cond = threading.Condition(threading.RLock())
        self._chunks: Deque[bytes] = collections.deque()
        self._size = 0
        #: Bytes of output dropped because nobody read them and the buffer was full.
        self.dropped_bytes = 0
        self._exit: Optional[PtyExit] = None
        self._failure: Optional[BaseException] = None
        self._done = threading.Event()
        self._closed_by_us = False
        self._listeners: List[Callable[[], None]] = []
        self._reader = threading.Thread(target=self._run, name="den-pty-reader", daemon=True)
        self._reader.start()

    @classmethod
    def open(
        cls,
        client: Client,
        sandbox_id: str,
        *,
        rows: int = 24,
        cols: int = 80,
        cmd: Optional[str] = None,
        cwd: Optional[str] = None,
        on_data: Optional[Callable[[bytes], None]] = None,
        timeout: Optional[float] = 30.0,
    ) -> "Pty":
        """Opens a terminal (see :meth:`Ptys.create`); returns once the WebSocket is connected.

        Example::

            term = Pty.open(client, "sbx_...", rows=24, cols=80)
        """
        _check_size(rows, cols)
        query = {"cmd": cmd or None, "cwd": cwd or None, "rows": rows, "cols": cols}
        url = client.url(f"/v1/sandboxes/{seg(sandbox_id)}/pty", query)
        ws = WebSocket.connect(url, client.auth_headers(), timeout=timeout, max_message_bytes=MAX_MESSAGE_BYTES, ssl_context=client.ssl_context)
        return cls(ws, on_data)

    def __repr__(self) -> str:
        return f"Pty(done={self.done}, exit={self._exit!r})"

    # ----------------------------------------------------------------- the reader thread

    def _run(self) -> None:
        try:
            while True:
                msg = self._ws.recv()
                if isinstance(msg, bytes):
                    self._output(msg)
                else:
                    self._control(msg)
        except WebSocketClosed as e:
            if self._exit is None and self._failure is None:
                why = "" if e.code in (1000, 1005, 1006) else f" (WebSocket close {e.code}{': ' + e.reason if e.reason else ''})"
                self._failure = AbortedError("aborted", f"the terminal closed before its command exited{why}", 499)
        except BaseException as e:  # noqa: BLE001 - kept, raised by wait()
            if self._failure is None:
                self._failure = e
            self._ws.abort()
        finally:
            with self._cond:
                self._done.set()
                self._cond.notify_all()
            self._notify()

    def _output(self, data: bytes) -> None:
        if self._on_data is not None:
            self._on_data(data)  # a raising callback ends the terminal (wait() raises it)
        else:
            with self._cond:
                self._chunks.append(data)
                self._size += len(data)
                while self._size > self._buffer_bytes and len(self._chunks) > 1:
                    old = self._chunks.popleft()
                    self._size -= len(old)
                    self.dropped_bytes += len(old)
                self._cond.notify_all()
        self._notify()

    def _control(self, text: str) -> None:
        try:
            m = json.loads(text)
        except ValueError:
            return
        if not isinstance(m, dict):
            return
        if m.get("type") == "exit":
            self._exit = PtyExit(exit_code=m.get("exit_code"), signal=m.get("signal"))
        elif m.get("type") == "error" and isinstance(m.get("error"), dict):
            code = str(m["error"].get("code", "internal"))
            # Kept; raised only if the terminal then closes without an exit.
            self._failure = api_error(code, str(m["error"].get("message", "")), ERROR_STATUS.get(code, 500))

    def _notify(self) -> None:
        for fn in list(self._listeners):
            try:
                fn()
            except Exception:  # noqa: BLE001 - a listener (the asyncio bridge) must not kill the reader
                pass

    # ----------------------------------------------------------------- state

    @property
    def done(self) -> bool:
        """Whether the terminal has ended (its command exited, or the connection closed).

        Example::

            while not term.done:
                print(term.read(timeout=1).decode(), end="")
        """
        return self._done.is_set()

    @property
    def exit(self) -> Optional[PtyExit]:
        """How the command ended, once it has (else None).

        Example::

            if term.exit is not None:
                print(term.exit.exit_code)
        """
        return self._exit

    def _final_error(self) -> BaseException:
        return self._failure or AbortedError("aborted", "the terminal was closed before its command exited", 499)

    # ----------------------------------------------------------------- input

    def _send(self, data: Union[str, bytes]) -> None:
        if self._done.is_set():
            if self._exit is not None:
                raise InvalidStateError("invalid_state", "the terminal's command has exited", 409)
            raise self._final_error()
        try:
            self._ws.send(data)
        except WebSocketClosed:
            if self._exit is not None:
                raise InvalidStateError("invalid_state", "the terminal's command has exited", 409) from None
            raise self._final_error() from None

    def write(self, data: Union[str, bytes, bytearray, memoryview]) -> None:
        """Sends keystrokes (or any bytes; a ``str`` as UTF-8) to the terminal.

        Example::

            term.write("ls -la\\n")
            term.write(b"\\x03")        # Ctrl-C
        """
        b = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        for i in range(0, len(b), INPUT_CHUNK_BYTES):
            self._send(b[i : i + INPUT_CHUNK_BYTES])

    def resize(self, rows: int, cols: int) -> None:
        """Resizes the terminal; the foreground program gets SIGWINCH.

        Example::

            term.resize(50, 160)
            term.write("stty size\\n")     # 50 160
        """
        _check_size(rows, cols)
        self._send(json.dumps({"type": "resize", "rows": int(rows), "cols": int(cols)}))

    def signal(self, signal: int) -> None:
        """Sends a signal (a number, or a ``signal.Signals``) to the terminal's process group.

        Example::

            import signal
            term.signal(signal.SIGTERM)
        """
        n = int(signal)
        if not 1 <= n <= 64:
            raise ValueError("signal must be from 1 to 64")
        self._send(json.dumps({"type": "signal", "signal": n}))

    # ----------------------------------------------------------------- output

    def _take(self) -> bytes:
        out = b"".join(self._chunks)
        self._chunks.clear()
        self._size = 0
        return out

    def read(self, timeout: Optional[float] = None) -> bytes:
        """The output that arrived since the last read, waiting up to ``timeout`` seconds
        (None: as long as it takes) for some. Returns ``b""`` once the terminal has ended and
        everything was read; raises ``TimeoutError`` if nothing came in time.

        Example::

            term.write("uname -a\\n")
            print(term.read(timeout=5).decode(errors="replace"))
        """
        self._check_readable()
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._chunks and not self._done.is_set():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError("no terminal output within the timeout")
                self._cond.wait(left)
            return self._take()

    def expect(self, pattern: PatternLike, timeout: Optional[float] = 30.0) -> str:
        """Reads output until ``pattern`` (a regular expression, ``str`` or ``bytes``, matched
        against the raw bytes) matches, and returns the output up to the end of the match as
        text; what came after stays to be read. Raises ``TimeoutError`` if it did not match
        within ``timeout`` seconds, ``EOFError`` if the terminal ended first (the output read is
        then put back).

        Example::

            term.write("python3 -q\\n")
            term.expect(r">>> ")
            term.write("print(6 * 7)\\n")
            term.expect(r"\\b42\\b")
        """
        self._check_readable()
        rx = _bytes_pattern(pattern)
        deadline = None if timeout is None else time.monotonic() + timeout
        acc = bytearray()
        with self._cond:
            while True:
                got = self._match(rx, acc)
                if got is not None:
                    return got
                left = None if deadline is None else deadline - time.monotonic()
                if self._done.is_set() or (left is not None and left <= 0):
                    raise self._no_match(rx, acc, timeout)
                self._cond.wait(left)

    def _match(self, rx: "Pattern[bytes]", acc: bytearray) -> Optional[str]:
        """(Under the lock.) Moves the buffered output into ``acc``; on a match, puts back what
        follows it and returns the text up to its end."""
        with self._cond:
            acc += self._take()
            m = rx.search(acc)
            if m is None:
                return None
            rest = bytes(acc[m.end() :])
            if rest:
                self._chunks.appendleft(rest)
                self._size += len(rest)
            return bytes(acc[: m.end()]).decode("utf-8", "replace")

    def _no_match(self, rx: "Pattern[bytes]", acc: bytearray, timeout: Optional[float]) -> BaseException:
        """Puts ``acc`` back to be read again; the EOFError or TimeoutError to raise."""
        with self._cond:
            if acc:
                self._chunks.appendleft(bytes(acc))
                self._size += len(acc)
            tail = bytes(acc[-300:]).decode("utf-8", "replace")
            if self._done.is_set():
                return EOFError(f"the terminal ended before {rx.pattern!r} appeared; its output ends with {tail!r}")
            return TimeoutError(f"{rx.pattern!r} did not appear within {timeout} s; the output ends with {tail!r}")

    def _check_readable(self) -> None:
        if self._on_data is not None:
            raise RuntimeError("this terminal's output goes to its on_data callback")

    def __iter__(self) -> Iterator[bytes]:
        """Yields output chunks as they arrive until the terminal ends; raises the terminal's
        error if it ended other than by its command's exit (or by :meth:`close`).

        Example::

            term.write("ls; exit\\n")
            for chunk in term:
                print(chunk.decode(errors="replace"), end="")
        """
        while True:
            data = self.read()
            if data:
                yield data
                continue
            if self._exit is None and not self._closed_by_us:
                raise self._final_error()
            return

    def wait(self, timeout: Optional[float] = None) -> PtyExit:
        """Waits for the command to end and returns how it did. Raises the terminal's error
        if it ended otherwise (a sandbox that does not exist: ``SandboxNotFoundError``; the
        connection lost or :meth:`close` called: ``AbortedError``), ``TimeoutError`` after
        ``timeout`` seconds.

        Example::

            term.write("exit 7\\n")
            assert term.wait(timeout=30).exit_code == 7
        """
        if not self._done.wait(timeout):
            raise TimeoutError("the terminal's command did not exit within the timeout")
        if self._exit is not None:
            return self._exit
        raise self._final_error()

    # ----------------------------------------------------------------- closing

    def close(self) -> None:
        """Closes the terminal (its command, if still running, is killed). Idempotent.

        Example::

            term.close()
        """
        if not self._done.is_set():
            self._closed_by_us = True
        self._ws.close(timeout=2.0)

    def __enter__(self) -> "Pty":
        """Example::

        with sbx.pty.create() as term:
            term.write("exit\\n")
            term.wait()
        """
        return self

    def __exit__(self, *exc: Any) -> None:
        """Closes the terminal (see :meth:`close`).

        Example::

            with sbx.pty.create() as term:
                term.write("sleep 100\\n")   # killed when the block ends
        """
        self.close()


def _check_size(rows: int, cols: int) -> None:
    if not (1 <= int(rows) <= 1000 and 1 <= int(cols) <= 1000):
        raise ValueError("rows and cols must be from 1 to 1000")


class Ptys:
    """The terminals of one sandbox (``sbx.pty``).

    Example::

        term = sbx.pty.create(rows=24, cols=80)
    """

    def __init__(self, client: Client, sandbox_id: str) -> None:
        self._client = client
        self._sandbox_id = sandbox_id

    def create(
        self,
        *,
        rows: int = 24,
        cols: int = 80,
        cmd: Optional[str] = None,
        cwd: Optional[str] = None,
        on_data: Optional[Callable[[bytes], None]] = None,
        timeout: Optional[float] = 30.0,
    ) -> Pty:
        """Opens an interactive terminal of ``rows`` x ``cols`` running ``cmd`` (a shell string;
        default a login bash) in ``cwd``, with the sandbox's environment. Returns once the
        WebSocket is connected (``timeout`` bounds that, and each send); a sandbox that does not
        exist or cannot run it makes :meth:`Pty.wait` raise. With ``on_data``, output goes to
        that callback (called in the terminal's reader thread, with raw bytes that may split a
        UTF-8 character) instead of being kept for :meth:`Pty.read`. A hibernated sandbox is
        woken. Closing the terminal kills its command.

        Example::

            term = sbx.pty.create(rows=40, cols=120)
            term = sbx.pty.create(cmd="python3 -q", on_data=lambda b: sys.stdout.buffer.write(b))
        """
        return Pty.open(self._client, self._sandbox_id, rows=rows, cols=cols, cmd=cmd, cwd=cwd, on_data=on_data, timeout=timeout)

