"""Running commands: the request body shared by exec and background processes, the buffered
exec route, and the NDJSON exec stream (``start``, ``stdout``/``stderr`` chunks, then
``exit`` or ``error``)."""

from __future__ import annotations

import base64
import codecs
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Union

from ._client import Client, iter_ndjson, seg
from .errors import ERROR_STATUS, InvalidResponseError, api_error

__all__ = ["Command", "ExecResult", "ExecChunk", "ExecExit", "ExecStream"]

#: A command: a string runs with ``bash -c``, a list is an argv run directly (no shell).
Command = Union[str, Sequence[str]]

#: Commands bounded by a timeout up to this long use the buffered route; others stream.
BUFFERED_EXEC_MAX_SECONDS = 240


def _b64(data: Union[str, bytes]) -> str:
    return base64.b64encode(data.encode("utf-8") if isinstance(data, str) else bytes(data)).decode("ascii")


def command_body(
    cmd: Command,
    *,
    timeout_seconds: Optional[float] = None,
    cwd: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    stdin: Union[str, bytes, None] = None,
    buffer_bytes: Optional[int] = None,
) -> Dict[str, Any]:
    """The snake_case body of an exec or start-process request.

    Example::

        command_body(["python3", "-c", "print(1)"], cwd="/work", timeout_seconds=10)
    """
    if isinstance(cmd, str):
        body: Dict[str, Any] = {"cmd": cmd}
    elif isinstance(cmd, (bytes, bytearray)):
        raise TypeError("cmd must be a str or a list of str")
    else:
        body = {"argv": [str(a) for a in cmd]}
    if cwd is not None:
        body["cwd"] = cwd
    if env is not None:
        body["env"] = dict(env)
    if stdin is not None:
        body["stdin_b64"] = _b64(stdin)
    if timeout_seconds is not None:
        body["timeout_seconds"] = timeout_seconds
    if buffer_bytes is not None:
        body["buffer_bytes"] = buffer_bytes
    return body


@dataclass
class ExecResult:
    """What a finished command left behind. A non-zero exit is not an exception: check
    ``exit_code`` (None when a signal killed it; see ``signal``). ``timed_out`` says its
    ``timeout_seconds`` ran out (it was then killed, ``signal`` 9).

    Example::

        r = sbx.exec("echo hi; exit 3")
        print(r.stdout, r.exit_code, r.ok)   # "hi\\n" 3 False
    """

    #: stdout as UTF-8 text (invalid sequences replaced; ``stdout_bytes`` has the exact bytes).
    stdout: str
    stderr: str
    exit_code: Optional[int]
    signal: Optional[int]
    timed_out: bool
    #: Run time: the server's measure (buffered route) or the client's wall time (streamed).
    duration_ms: float
    stdout_bytes: bytes = field(default=b"", repr=False)
    stderr_bytes: bytes = field(default=b"", repr=False)

    @property
    def ok(self) -> bool:
        """Whether the command exited 0 (and did not time out).

        Example::

            assert sbx.exec("true").ok
        """
        return self.exit_code == 0 and not self.timed_out


@dataclass
class ExecChunk:
    """One chunk of output from :class:`ExecStream`: which ``stream`` (``"stdout"`` or
    ``"stderr"``), the raw ``data``, and ``text`` (decoded in order per stream, so a
    character split across two chunks comes out whole in the second).

    Example::

        for chunk in sbx.exec_stream("make"):
            print(chunk.stream, chunk.text, end="")
    """

    stream: str
    data: bytes
    text: str


@dataclass
class ExecExit:
    """How a streamed command ended; ``pid`` is the guest PID from the ``start`` line.

    Example::

        ex = sbx.exec_stream("exit 3").wait()
        print(ex.exit_code)   # 3
    """

    pid: Optional[int]
    exit_code: Optional[int]
    signal: Optional[int]
    timed_out: bool


def _stream_error(e: Any) -> Exception:
    if not isinstance(e, Mapping):
        return InvalidResponseError("invalid_response", f"bad error line: {e!r}", 200)
    code = str(e.get("code", "internal"))
    return api_error(code, str(e.get("message", "")), ERROR_STATUS.get(code, 500))


def _start_stream(client: Client, sandbox_id: str, body: Dict[str, Any]) -> Any:
    body = {k: v for k, v in body.items() if k != "buffer_bytes"}
    return client.request(
        "POST",
        f"/v1/sandboxes/{seg(sandbox_id)}/exec/stream",
        json_body=body,
        accept="application/x-ndjson",
    )


def exec_buffered(client: Client, sandbox_id: str, body: Dict[str, Any]) -> ExecResult:
    """Buffered exec: one request, one :class:`ExecResult` (the server caps the output)."""
    body = {k: v for k, v in body.items() if k != "buffer_bytes"}
    t = body.get("timeout_seconds")
    # The answer comes when the command ends: wait on the socket for longer than it may run.
    sock_timeout = max(client.timeout, float(t) + 120) if t else None
    r = client.json("POST", f"/v1/sandboxes/{seg(sandbox_id)}/exec", json_body=body, timeout=sock_timeout)
    try:
        out_b = base64.b64decode(r["stdout_b64"]) if r.get("stdout_b64") is not None else r["stdout"].encode("utf-8")
        err_b = base64.b64decode(r["stderr_b64"]) if r.get("stderr_b64") is not None else r["stderr"].encode("utf-8")
        return ExecResult(
            stdout=r["stdout"],
            stderr=r["stderr"],
            exit_code=r.get("exit_code"),
            signal=r.get("signal"),
            timed_out=bool(r["timed_out"]),
            duration_ms=r["duration_ms"],
            stdout_bytes=out_b,
            stderr_bytes=err_b,
        )
    except (KeyError, TypeError, ValueError) as e:
        raise InvalidResponseError("invalid_response", f"exec result does not match the API contract: {e!r}", 200) from None


def exec_streamed(
    client: Client,
    sandbox_id: str,
    body: Dict[str, Any],
    on_stdout: Optional[Callable[[str], None]] = None,
    on_stderr: Optional[Callable[[str], None]] = None,
) -> ExecResult:
    """Runs a command on the streaming route, calling ``on_stdout``/``on_stderr`` with text as
    it arrives, and returns the same :class:`ExecResult` a buffered exec would."""
    started = time.monotonic()
    stream = ExecStream(client, sandbox_id, body)
    out: List[bytes] = []
    err: List[bytes] = []
    with stream:
        for chunk in stream:
            if chunk.stream == "stdout":
                out.append(chunk.data)
                if on_stdout and chunk.text:
                    on_stdout(chunk.text)
            else:
                err.append(chunk.data)
                if on_stderr and chunk.text:
                    on_stderr(chunk.text)
        ex = stream.wait()
    for cb, dec in ((on_stdout, stream._decoders["stdout"]), (on_stderr, stream._decoders["stderr"])):
        rest = dec.decode(b"", final=True)
        if cb and rest:
            cb(rest)
    out_b, err_b = b"".join(out), b"".join(err)
    return ExecResult(
        stdout=out_b.decode("utf-8", "replace"),
        stderr=err_b.decode("utf-8", "replace"),
        exit_code=ex.exit_code,
        signal=ex.signal,
        timed_out=ex.timed_out,
        duration_ms=(time.monotonic() - started) * 1000.0,
        stdout_bytes=out_b,
        stderr_bytes=err_b,
    )


class ExecStream:
    """A command running on the streaming route (``POST /v1/sandboxes/{id}/exec/stream``):
    iterate it for :class:`ExecChunk` objects as output arrives, then call :meth:`wait` for how
    it ended. The request is sent when the stream is created (an unknown sandbox raises
    there). It can be iterated once; :meth:`wait` reads (and drops) output nobody read.
    :meth:`close` (or leaving a ``with`` block) hangs up, and Den kills the command.

    Example::

        with sbx.exec_stream("for i in 1 2 3; do echo $i; sleep 1; done") as run:
            for chunk in run:
                print(chunk.stream, chunk.text, end="")
            print(run.wait().exit_code)
    """

    def __init__(self, client: Client, sandbox_id: str, body: Dict[str, Any]) -> None:
        self._res = _start_stream(client, sandbox_id, body)
        self._lines = iter_ndjson(self._res)
        self._decoders = {
            "stdout": codecs.getincrementaldecoder("utf-8")("replace"),
            "stderr": codecs.getincrementaldecoder("utf-8")("replace"),
        }
        self._pid: Optional[int] = None
        self._exit: Optional[ExecExit] = None
        self._error: Optional[BaseException] = None
        self._claimed = False
        self._closed = False

    @property
    def pid(self) -> Optional[int]:
        """The guest PID, once the ``start`` line has been read.

        Example::

            run = sbx.exec_stream("sleep 5"); next(iter(run), None); print(run.pid)
        """
        return self._pid

    @property
    def exit(self) -> Optional[ExecExit]:
        """How the command ended, once the stream has been read to its end (else None).

        Example::

            for _ in run: pass
            print(run.exit.exit_code)
        """
        return self._exit

    def __iter__(self) -> Iterator[ExecChunk]:
        if self._claimed:
            raise RuntimeError("an ExecStream can be iterated only once")
        self._claimed = True
        return self._chunks()

    def _chunks(self) -> Iterator[ExecChunk]:
        try:
            for line in self._lines:
                t = line.get("type")
                if t == "start":
                    self._pid = line.get("pid")
                elif t in ("stdout", "stderr"):
                    try:
                        data = base64.b64decode(line["data_b64"])
                    except (KeyError, TypeError, ValueError):
                        raise InvalidResponseError("invalid_response", "bad output line in exec stream", 200) from None
                    yield ExecChunk(stream=t, data=data, text=self._decoders[t].decode(data))
                elif t == "exit":
                    self._exit = ExecExit(pid=self._pid, exit_code=line.get("exit_code"), signal=line.get("signal"), timed_out=bool(line.get("timed_out", False)))
                    return
                elif t == "error":
                    raise _stream_error(line.get("error"))
                # Lines of a type this SDK does not know are skipped.
            raise InvalidResponseError("invalid_response", "exec stream ended without an exit line", 200)
        except BaseException as e:
            self._error = e
            raise
        finally:
            self.close()

    def wait(self) -> ExecExit:
        """Returns how the command ended, reading (and dropping) any output not yet read.
        Raises the stream's error if it failed.

        Example::

            ex = sbx.exec_stream("sleep 1; exit 3").wait()
            assert ex.exit_code == 3
        """
        if not self._claimed:
            for _ in self:
                pass
        if self._exit is not None:
            return self._exit
        if self._error is not None:
            raise self._error
        raise RuntimeError("the exec stream was closed before the command exited")

    def close(self) -> None:
        """Closes the connection (if the command still runs, Den kills it).

        Example::

            run = sbx.exec_stream("sleep 100"); run.close()
        """
        if not self._closed:
            self._closed = True
            self._lines.close()
            self._res.close()

    def __enter__(self) -> "ExecStream":
        """Example::

        with sbx.exec_stream("make") as run:
            for chunk in run:
                print(chunk.text, end="")
        """
        return self

    def __exit__(self, *exc: Any) -> None:
        """Closes the stream (a command still running is killed).

        Example::

            with sbx.exec_stream("sleep 100") as run:
                pass   # hung up here; Den kills the command
        """
        self.close()
