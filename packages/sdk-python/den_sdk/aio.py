"""The asyncio client: :class:`AsyncSandbox` and the async resources, with the surface of the
blocking client (same names, same arguments, same result types), as coroutines and async
iterators. Standard library only.

How it works: each call runs the blocking client's call in a worker thread (a pool of up to
:data:`MAX_WORKER_THREADS`, so that many sandboxes can be driven at once); a stream (exec
output, followed events, a file read) is read by a thread of its own and handed over through
a bounded queue; a terminal's reader thread wakes the event loop. Cancelling a task (or
``asyncio.wait_for`` timing out) hangs up the connections its call opened, so no thread stays
blocked: the server then stops what the connection was for (a streamed command is killed).

Opening something returns an object that can be awaited *or* used as an ``async with``
block, which then also cleans up (a sandbox is destroyed, a terminal or stream closed)::

    sbx = await AsyncSandbox.create(template="base")         # destroy it yourself
    async with AsyncSandbox.create(template="base") as sbx:  # destroyed at the end of the block
        ...

Callbacks (``on_stdout``, ``on_stderr``, ``on_data``) are called on the event loop's thread.

Example::

    import asyncio
    from den_sdk import AsyncSandbox

    async def main():
        async with AsyncSandbox.create(template="base", ttl_seconds=600) as sbx:
            r = await sbx.exec("echo hi")
            print(r.stdout)
            async with sbx.exec_stream("for i in 1 2 3; do echo $i; sleep 1; done") as run:
                async for chunk in run:
                    print(chunk.text, end="")

    asyncio.run(main())
"""

from __future__ import annotations

import asyncio
import contextvars
import socket
import ssl
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields
from typing import (
    IO,
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Dict,
    Generator,
    Generic,
    Iterable,
    Iterator,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
    overload,
)

from ._client import UNSET, AbortScope, Client, seg
from ._websocket import MAX_HEAD_BYTES, MAX_ERROR_BODY_BYTES, _split, parse_head
from .checkpoints import Checkpoint, Checkpoints
from .code import CodeContexts, ContextLike
from .errors import SandboxNotFoundError, error_from_response
from .exec import Command, ExecChunk, ExecExit, ExecResult, ExecStream, command_body
from .filesystem import Filesystem, ListFilesResult
from .hosts import Hosts
from .keys import Keys
from .ports import PortForward
from .processes import Process, Processes, ProcessLogs
from .pty import Pty, PtyExit, Ptys, PatternLike, _bytes_pattern
from .sandbox import Network, Sandbox
from .templates import ContextData, Templates
from .types import (
    ApiKey,
    BuildContext,
    CodeContext,
    Execution,
    ExecutionError,
    ExecutionResult,
    FileInfo,
    HostInfo,
    ListeningPort,
    NetworkStatus,
    PortUrl,
    ProcessStatus,
    SandboxEvent,
    SandboxInfo,
    Template,
    TemplateBuild,
    TemplateBuildLogLine,
    UsageReport,
    Webhook,
    WebhookDeliveriesPage,
    WebhookDelivery,
)
from .usage import Instant, Usage
from .volumes import DEFAULT_CHUNK_BYTES, Volume, VolumeMountLike, Volumes, WriteData
from .webhooks import Webhooks

__all__ = [
    "AsyncSandbox",
    "AsyncFilesystem",
    "AsyncProcesses",
    "AsyncCodeContexts",
    "AsyncProcess",
    "AsyncPtys",
    "AsyncPty",
    "AsyncExecStream",
    "AsyncStream",
    "AsyncCheckpoint",
    "AsyncCheckpoints",
    "AsyncTemplates",
    "AsyncKeys",
    "AsyncUsage",
    "AsyncHosts",
    "AsyncWebhooks",
    "AsyncVolumes",
    "AwaitableContext",
    "MAX_WORKER_THREADS",
]

T = TypeVar("T")

#: Most worker threads running blocking calls at once (read when the first call is made).
MAX_WORKER_THREADS = 64
#: Items a stream's thread may read ahead of the consumer before it waits (backpressure).
STREAM_READ_AHEAD = 64

_executor: Optional[ThreadPoolExecutor] = None
_executor_lock = threading.Lock()


def _get_executor() -> ThreadPoolExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=MAX_WORKER_THREADS, thread_name_prefix="den-sdk-aio")
        return _executor


async def _call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Runs a blocking call in a worker thread; if the awaiting task is cancelled, the call's
    connections are shut down so the thread returns at once."""
    loop = asyncio.get_running_loop()
    scope = AbortScope()
    ctx = contextvars.copy_context()

    def run() -> T:
        with scope.active():
            return ctx.run(fn, *args, **kwargs)

    fut = loop.run_in_executor(_get_executor(), run)
    try:
        return await fut
    except asyncio.CancelledError:
        scope.abort()
        raise


def _on_loop(cb: Optional[Callable[[Any], Any]]) -> Optional[Callable[[Any], None]]:
    """A callback that, called from a worker thread, runs ``cb`` on the event loop's thread."""
    if cb is None:
        return None
    loop = asyncio.get_running_loop()

    def call(v: Any) -> None:
        try:
            loop.call_soon_threadsafe(cb, v)
        except RuntimeError:  # the loop is closed
            pass

    return call


class AwaitableContext(Coroutine[Any, Any, T]):
    """What opening something returns: a coroutine (await it, or hand it to
    ``asyncio.run``/``create_task``/``gather``) that is also an ``async with`` block, which
    awaits it and then closes (or destroys) the object when the block ends. Use it once.

    Example::

        sbx = await AsyncSandbox.create()                # awaited
        async with AsyncSandbox.create() as sbx:         # or entered
            ...
        task = asyncio.create_task(AsyncSandbox.create())
    """

    def __init__(self, make: Callable[[], Coroutine[Any, Any, T]]) -> None:
        self._make = make
        self._coro: Optional[Coroutine[Any, Any, T]] = None
        self._obj: Any = None

    def _inner(self) -> Coroutine[Any, Any, T]:
        if self._coro is None:
            self._coro = self._make()
        return self._coro

    def __await__(self) -> Generator[Any, None, T]:
        return self._inner().__await__()

    def send(self, value: Any) -> Any:
        """The coroutine protocol (what the event loop calls); code awaits instead.

        Example::

            sbx = await AsyncSandbox.create()
        """
        return self._inner().send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        """The coroutine protocol (the event loop cancels through it).

        Example::

            task = asyncio.create_task(AsyncSandbox.create()); task.cancel()
        """
        if val is None and tb is None:
            return self._inner().throw(typ)
        return self._inner().throw(typ, val, tb)

    def close(self) -> None:
        """Closes the coroutine without running it (nothing was sent yet, nothing is).

        Example::

            opening = AsyncSandbox.create()
            opening.close()   # changed our mind
        """
        if self._coro is not None:
            self._coro.close()

    async def __aenter__(self) -> T:
        self._obj = await self._inner()
        return await self._obj.__aenter__()  # type: ignore[no-any-return]

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._obj.__aexit__(*exc)


class _StreamState:
    """What a stream's reader thread shares with its consumer (the thread holds this, never the
    AsyncStream, so that a stream dropped unclosed is collected and hangs up)."""

    def __init__(self, make: Callable[[], Iterator[Any]], read_ahead: int) -> None:
        self.make = make
        self.credits = threading.Semaphore(read_ahead)
        self.scope = AbortScope()
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.queue: Optional["asyncio.Queue[Tuple[str, Any]]"] = None
        self.closing = False

    def post(self, msg: Tuple[str, Any]) -> None:
        assert self.loop is not None and self.queue is not None
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, msg)
        except RuntimeError:  # the loop is closed: nobody will read
            self.closing = True

    def run(self) -> None:
        it: Optional[Iterator[Any]] = None
        with self.scope.active():
            try:
                it = iter(self.make())
                self.post(("started", None))
                for item in it:
                    self.credits.acquire()
                    if self.closing:
                        return
                    self.post(("item", item))
                self.post(("end", None))
            except BaseException as e:  # noqa: BLE001 - handed to the consumer
                self.post(("error", e))
            finally:
                close = getattr(it, "close", None)
                if close is not None:
                    try:
                        close()
                    except Exception:  # noqa: BLE001
                        pass

    def stop(self) -> None:
        if not self.closing:
            self.closing = True
            self.scope.abort()
            self.credits.release()


class AsyncStream(Generic[T]):
    """An async iterator over a blocking stream of the client (followed events, a file's
    chunks), read by a thread of its own a little ahead of you. :meth:`aclose` (or leaving its
    ``async with`` block, cancelling the task iterating it, or dropping it) hangs up the
    connection.

    Example::

        async with sbx.events(follow=True) as events:
            async for ev in events:
                print(ev.type)
                if ev.type == "hibernated":
                    break
    """

    def __init__(self, make: Callable[[], Iterator[T]], read_ahead: int = STREAM_READ_AHEAD) -> None:
        self._state = _StreamState(make, read_ahead)
        self._thread: Optional[threading.Thread] = None
        self._finished = False

    def __del__(self) -> None:
        state = getattr(self, "_state", None)
        if state is not None:
            state.stop()

    async def _start(self) -> None:
        if self._thread is None:
            st = self._state
            st.loop = asyncio.get_running_loop()
            st.queue = asyncio.Queue()
            self._thread = threading.Thread(target=st.run, name="den-sdk-stream", daemon=True)
            self._thread.start()
            try:
                kind, value = await st.queue.get()
            except asyncio.CancelledError:
                await self.aclose()
                raise
            if kind == "error":
                self._finished = True
                raise value
            # kind == "started"

    def __aiter__(self) -> "AsyncStream[T]":
        return self

    async def __anext__(self) -> T:
        await self._start()
        if self._finished:
            raise StopAsyncIteration
        st = self._state
        assert st.queue is not None
        try:
            kind, value = await st.queue.get()
        except asyncio.CancelledError:
            await self.aclose()
            raise
        if kind == "item":
            st.credits.release()
            return value  # type: ignore[no-any-return]
        self._finished = True
        if kind == "error":
            raise value
        raise StopAsyncIteration

    async def aclose(self) -> None:
        """Stops reading and hangs up the connection (idempotent).

        Example::

            events = sbx.events(follow=True)
            first = await events.__anext__()
            await events.aclose()
        """
        self._finished = True
        self._state.stop()

    async def __aenter__(self) -> "AsyncStream[T]":
        await self._start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


# ------------------------------------------------------------------------------ exec


class AsyncExecStream:
    """A command running on the streaming route: ``async for`` it for :class:`ExecChunk`
    objects as output arrives, then ``await run.wait()`` for how it ended. Get one with
    :meth:`AsyncSandbox.exec_stream` (awaited, the request has been accepted: an unknown
    sandbox raises there). :meth:`aclose` (or leaving the ``async with`` block) hangs up, and
    Den kills the command.

    Example::

        async with sbx.exec_stream("make test") as run:
            async for chunk in run:
                print(chunk.stream, chunk.text, end="")
            print((await run.wait()).exit_code)
    """

    def __init__(self, client: Client, sandbox_id: str, body: Dict[str, Any]) -> None:
        box: List[ExecStream] = []  # (the reader thread's closure holds this, not self)

        def make() -> Iterator[ExecChunk]:
            box.append(ExecStream(client, sandbox_id, body))
            return iter(box[0])

        self._box = box
        self._stream: AsyncStream[ExecChunk] = AsyncStream(make)
        self._error: Optional[BaseException] = None

    @property
    def _sync(self) -> Optional[ExecStream]:
        return self._box[0] if self._box else None

    async def _open(self) -> "AsyncExecStream":
        await self._stream._start()
        return self

    @property
    def pid(self) -> Optional[int]:
        """The guest PID, once the ``start`` line has been read.

        Example::

            run = await sbx.exec_stream("sleep 5"); await run.__anext__(); print(run.pid)
        """
        return None if self._sync is None else self._sync.pid

    @property
    def exit(self) -> Optional[ExecExit]:
        """How the command ended, once the stream has been read to its end (else None).

        Example::

            async for _ in run: pass
            print(run.exit.exit_code)
        """
        return None if self._sync is None else self._sync.exit

    def __aiter__(self) -> "AsyncExecStream":
        return self

    async def __anext__(self) -> ExecChunk:
        try:
            return await self._stream.__anext__()
        except StopAsyncIteration:
            raise
        except Exception as e:
            self._error = e
            raise

    async def wait(self) -> ExecExit:
        """How the command ended, reading (and dropping) any output not yet read; raises the
        stream's error if it failed.

        Example::

            ex = await (await sbx.exec_stream("sleep 1; exit 3")).wait()
            assert ex.exit_code == 3
        """
        async for _ in self:
            pass
        if self.exit is not None:
            return self.exit
        if self._error is not None:
            raise self._error
        raise RuntimeError("the exec stream was closed before the command exited")

    async def aclose(self) -> None:
        """Hangs up (if the command still runs, Den kills it).

        Example::

            run = await sbx.exec_stream("sleep 100"); await run.aclose()
        """
        await self._stream.aclose()

    async def __aenter__(self) -> "AsyncExecStream":
        await self._open()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


# ------------------------------------------------------------------------------ files


class AsyncFilesystem:
    """The files of one sandbox (``sbx.filesystem``), as coroutines (see :class:`Filesystem`).

    Example::

        await sbx.filesystem.write("/workspace/main.py", "print('hi')\\n")
        print(await sbx.filesystem.read_text("/workspace/main.py"))
    """

    def __init__(self, sync: Filesystem) -> None:
        self._sync = sync

    async def read(self, path: str) -> bytes:
        """Reads a whole file as bytes (``DenFileNotFoundError`` if there is none).

        Example::

            png = await sbx.filesystem.read("/workspace/plot.png")
        """
        return await _call(self._sync.read, path)

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        """Reads a whole file as text.

        Example::

            report = await sbx.filesystem.read_text("/work/report.md")
        """
        return await _call(self._sync.read_text, path, encoding)

    def read_stream(self, path: str, chunk_bytes: int = 256 * 1024) -> AsyncStream[bytes]:
        """The file's bytes as an async iterator of chunks, without holding it in memory.

        Example::

            async with sbx.filesystem.read_stream("/workspace/big.tar") as chunks:
                async for chunk in chunks:
                    out.write(chunk)
        """
        return AsyncStream(lambda: self._sync.read_stream(path, chunk_bytes))

    async def write(self, path: str, data: Union[str, bytes, bytearray, memoryview, IO[bytes], Iterable[bytes]]) -> FileInfo:
        """Writes a whole file (a ``str`` as UTF-8; bytes; or a binary file object or iterable
        of bytes, streamed from a worker thread). Returns its info.

        Example::

            await sbx.filesystem.write("/workspace/data.bin", bytes([0, 255]))
        """
        return await _call(self._sync.write, path, data)

    async def list(self, path: str) -> ListFilesResult:
        """Lists a directory.

        Example::

            for e in await sbx.filesystem.list("/workspace"):
                print(e.type, e.path)
        """
        return await _call(self._sync.list, path)

    async def stat(self, path: str) -> FileInfo:
        """A path's metadata.

        Example::

            print((await sbx.filesystem.stat("/etc/hostname")).size)
        """
        return await _call(self._sync.stat, path)

    async def exists(self, path: str) -> bool:
        """Whether a path exists.

        Example::

            if not await sbx.filesystem.exists("/workspace/.venv"):
                await sbx.exec("python3 -m venv /workspace/.venv")
        """
        return await _call(self._sync.exists, path)

    async def mkdir(self, path: str, parents: bool = True) -> None:
        """Creates a directory (with its parents by default).

        Example::

            await sbx.filesystem.mkdir("/workspace/a/b")
        """
        await _call(self._sync.mkdir, path, parents)

    async def remove(self, path: str, recursive: bool = False) -> None:
        """Removes a file, or with ``recursive`` a directory tree.

        Example::

            await sbx.filesystem.remove("/workspace/build", recursive=True)
        """
        await _call(self._sync.remove, path, recursive)

    async def rename(self, src: str, dst: str) -> None:
        """Renames (moves) a file or directory.

        Example::

            await sbx.filesystem.rename("/workspace/out.tmp", "/workspace/out.csv")
        """
        await _call(self._sync.rename, src, dst)


# ------------------------------------------------------------------------------ processes


class AsyncProcess:
    """A handle on a background process, as coroutines (see :class:`Process`).

    Example::

        proc = await sbx.exec("python3 -m http.server 8000", background=True)
        print((await proc.logs(stream="stderr")).text)
        await proc.kill()
    """

    def __init__(self, sync: Process) -> None:
        self._sync = sync

    def __repr__(self) -> str:
        return "Async" + repr(self._sync)

    @property
    def sync(self) -> Process:
        """The blocking handle underneath (for code in a thread).

        Example::

            await asyncio.to_thread(proc.sync.wait)
        """
        return self._sync

    @property
    def proc(self) -> int:
        """The process handle id.

        Example::

            again = await sbx.processes.get(proc.proc)
        """
        return self._sync.proc

    @property
    def pid(self) -> int:
        """The process's PID inside the guest.

        Example::

            await sbx.exec(f"kill -USR1 {proc.pid}")
        """
        return self._sync.pid

    @property
    def sandbox_id(self) -> str:
        """The id of the sandbox it runs in.

        Example::

            print(proc.sandbox_id)
        """
        return self._sync.sandbox_id

    @property
    def status(self) -> ProcessStatus:
        """The last known status.

        Example::

            if proc.status.running:
                await proc.kill()
        """
        return self._sync.status

    async def refresh(self) -> ProcessStatus:
        """Fetches the current status.

        Example::

            if not (await proc.refresh()).running:
                print("done")
        """
        return await _call(self._sync.refresh)

    async def wait(self, timeout_seconds: Optional[float] = None) -> ProcessStatus:
        """Waits until it exits (or about ``timeout_seconds``) and returns its status.

        Example::

            st = await proc.wait(timeout_seconds=60)
        """
        return await _call(self._sync.wait, timeout_seconds)

    async def logs(self, stream: str = "stdout", offset: int = 0) -> ProcessLogs:
        """Buffered output of ``stream`` from byte ``offset`` on.

        Example::

            chunk = await proc.logs(offset=0)
            print(chunk.text, chunk.next_offset)
        """
        return await _call(self._sync.logs, stream, offset)

    async def write(self, data: Union[str, bytes]) -> None:
        """Writes to its stdin.

        Example::

            await proc.write("hello\\n")
        """
        await _call(self._sync.write, data)

    async def close_stdin(self) -> None:
        """Closes its stdin.

        Example::

            await proc.close_stdin()
        """
        await _call(self._sync.close_stdin)

    async def kill(self) -> None:
        """Kills it and its whole process tree.

        Example::

            await proc.kill()
        """
        await _call(self._sync.kill)


class AsyncCodeContexts:
    """The code interpreter's contexts of one sandbox (``sbx.code_contexts``), as coroutines.

    Example::

        ctx = await sbx.code_contexts.create(language="python")
        await sbx.run_code("x = 1", context=ctx)
        await sbx.code_contexts.remove(ctx)
    """

    def __init__(self, sync: CodeContexts) -> None:
        self._sync = sync

    async def create(self, language: Optional[str] = None, cwd: Optional[str] = None) -> CodeContext:
        """Starts a context (a kernel of ``language``, default python, in ``cwd``).

        Example::

            ctx = await sbx.code_contexts.create(language="python", cwd="/tmp")
        """
        return await _call(self._sync.create, language, cwd)

    async def list(self) -> List[CodeContext]:
        """The sandbox's contexts.

        Example::

            print([c.id for c in await sbx.code_contexts.list()])
        """
        return await _call(self._sync.list)

    async def restart(self, ctx: ContextLike) -> None:
        """Restarts a context (its variables are gone).

        Example::

            await sbx.code_contexts.restart(ctx)
        """
        await _call(self._sync.restart, ctx)

    async def remove(self, ctx: ContextLike) -> None:
        """Removes a context (its kernel stops).

        Example::

            await sbx.code_contexts.remove(ctx)
        """
        await _call(self._sync.remove, ctx)


class AsyncProcesses:
    """The background processes of one sandbox (``sbx.processes``), as coroutines.

    Example::

        for p in await sbx.processes.list():
            if p.status.running:
                await p.kill()
    """

    def __init__(self, sync: Processes) -> None:
        self._sync = sync

    async def start(
        self,
        cmd: Command,
        timeout_seconds: Optional[float] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Union[str, bytes, None] = None,
        buffer_bytes: Optional[int] = None,
    ) -> AsyncProcess:
        """Starts a command in the background and returns its handle.

        Example::

            server = await sbx.processes.start("python3 -m http.server 8000")
        """
        return AsyncProcess(await _call(self._sync.start, cmd, timeout_seconds, cwd, env, stdin, buffer_bytes))

    async def list(self) -> List[AsyncProcess]:
        """The sandbox's background processes.

        Example::

            running = [p for p in await sbx.processes.list() if p.status.running]
        """
        return [AsyncProcess(p) for p in await _call(self._sync.list)]

    async def get(self, proc: int) -> AsyncProcess:
        """A handle on one process by its ``proc`` id.

        Example::

            p = await sbx.processes.get(3)
        """
        return AsyncProcess(await _call(self._sync.get, proc))


# ------------------------------------------------------------------------------ terminals


class AsyncPty:
    """An interactive terminal, for asyncio (see :class:`Pty`). ``async for`` it for output
    chunks, or :meth:`read` / :meth:`expect`; :meth:`write`, :meth:`resize`, :meth:`signal`;
    ``await term.wait()`` for the exit.

    Example::

        async with sbx.pty.create(rows=24, cols=80) as term:
            await term.write("echo $((6*7))\\n")
            await term.expect(r"42")
            await term.write("exit 3\\n")
            print((await term.wait()).exit_code)   # 3
    """

    def __init__(self, sync: Pty) -> None:
        self._sync = sync
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        self._send_lock = asyncio.Lock()

        def wake() -> None:
            try:
                self._loop.call_soon_threadsafe(self._event.set)
            except RuntimeError:
                pass

        sync._listeners.append(wake)
        wake()  # (it may have ended already)

    @property
    def sync(self) -> Pty:
        """The blocking terminal underneath.

        Example::

            term.sync.dropped_bytes
        """
        return self._sync

    @property
    def done(self) -> bool:
        """Whether the terminal has ended.

        Example::

            while not term.done:
                print((await term.read(timeout=1)).decode(), end="")
        """
        return self._sync.done

    @property
    def exit(self) -> Optional[PtyExit]:
        """How the command ended, once it has.

        Example::

            if term.exit is not None:
                print(term.exit.exit_code)
        """
        return self._sync.exit

    async def _until(self, ready: Callable[[], Any], timeout: Optional[float]) -> Any:
        """Waits until ``ready()`` returns something other than None."""
        deadline = None if timeout is None else self._loop.time() + timeout
        while True:
            self._event.clear()
            v = ready()
            if v is not None:
                return v
            left = None if deadline is None else deadline - self._loop.time()
            if left is not None and left <= 0:
                raise TimeoutError
            try:
                await asyncio.wait_for(self._event.wait(), left)
            except asyncio.TimeoutError:
                raise TimeoutError from None

    async def _send(self, fn: Callable[..., None], *args: Any) -> None:
        async with self._send_lock:  # in order, one at a time
            await _call(fn, *args)

    async def write(self, data: Union[str, bytes, bytearray, memoryview]) -> None:
        """Sends keystrokes (or any bytes).

        Example::

            await term.write("ls -la\\n")
        """
        await self._send(self._sync.write, data)

    async def resize(self, rows: int, cols: int) -> None:
        """Resizes the terminal.

        Example::

            await term.resize(50, 160)
        """
        await self._send(self._sync.resize, rows, cols)

    async def signal(self, signal: int) -> None:
        """Sends a signal to the terminal's process group.

        Example::

            await term.signal(2)
        """
        await self._send(self._sync.signal, signal)

    async def read(self, timeout: Optional[float] = None) -> bytes:
        """The output since the last read, waiting up to ``timeout`` seconds for some; ``b""``
        once the terminal has ended and everything was read; ``TimeoutError`` if nothing came.

        Example::

            print((await term.read(timeout=5)).decode(errors="replace"))
        """
        s = self._sync
        s._check_readable()

        def ready() -> Optional[bytes]:
            with s._cond:
                if s._chunks or s._done.is_set():
                    return s._take()
            return None

        try:
            return await self._until(ready, timeout)
        except TimeoutError:
            raise TimeoutError("no terminal output within the timeout") from None

    async def expect(self, pattern: PatternLike, timeout: Optional[float] = 30.0) -> str:
        """Reads output until ``pattern`` matches and returns it up to the match's end (see
        :meth:`Pty.expect`).

        Example::

            await term.write("stty size\\n")
            await term.expect(r"24 80")
        """
        s = self._sync
        s._check_readable()
        rx = _bytes_pattern(pattern)
        acc = bytearray()

        def ready() -> Optional[str]:
            got = s._match(rx, acc)
            if got is None and s._done.is_set():
                got = s._match(rx, acc)  # (anything that arrived just before the end)
                if got is None:
                    raise s._no_match(rx, acc, timeout)
            return got

        try:
            return await self._until(ready, timeout)
        except TimeoutError:
            raise s._no_match(rx, acc, timeout) from None

    def __aiter__(self) -> "AsyncPty":
        return self

    async def __anext__(self) -> bytes:
        data = await self.read()
        if data:
            return data
        if self._sync._exit is None and not self._sync._closed_by_us:
            raise self._sync._final_error()
        raise StopAsyncIteration

    async def wait(self, timeout: Optional[float] = None) -> PtyExit:
        """Waits for the command to end and returns how it did (raises the terminal's error if
        it ended otherwise; ``TimeoutError`` after ``timeout`` seconds).

        Example::

            await term.write("exit 7\\n")
            assert (await term.wait(timeout=30)).exit_code == 7
        """
        try:
            await self._until(lambda: True if self._sync.done else None, timeout)
        except TimeoutError:
            raise TimeoutError("the terminal's command did not exit within the timeout") from None
        return self._sync.wait(0)

    async def close(self) -> None:
        """Closes the terminal (its command, if still running, is killed).

        Example::

            await term.close()
        """
        await _call(self._sync.close)

    async def __aenter__(self) -> "AsyncPty":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class AsyncPtys:
    """The terminals of one sandbox (``sbx.pty``), for asyncio.

    Example::

        term = await sbx.pty.create(rows=24, cols=80)
    """

    def __init__(self, sync: Ptys) -> None:
        self._sync = sync

    def create(
        self,
        *,
        rows: int = 24,
        cols: int = 80,
        cmd: Optional[str] = None,
        cwd: Optional[str] = None,
        on_data: Optional[Callable[[bytes], Any]] = None,
        timeout: Optional[float] = 30.0,
    ) -> AwaitableContext[AsyncPty]:
        """Opens a terminal (see :meth:`Ptys.create`); await it, or ``async with`` it to close
        it at the end of the block. ``on_data`` is called on the event loop's thread.

        Example::

            async with sbx.pty.create(cmd="python3 -q") as term:
                await term.expect(">>> ")
        """

        async def make() -> AsyncPty:
            cb = _on_loop(on_data)
            sync = await _call(self._sync.create, rows=rows, cols=cols, cmd=cmd, cwd=cwd, on_data=cb, timeout=timeout)
            return AsyncPty(sync)

        return AwaitableContext(make)


# ------------------------------------------------------------------------------ checkpoints


class AsyncCheckpoint(Checkpoint):
    """A :class:`Checkpoint` whose :meth:`restore` and :meth:`delete` are coroutines.

    Example::

        cp = await sbx.snapshot(name="tests-pass")
        async with cp.restore(ttl_seconds=600) as copy:
            print(await copy.filesystem.read_text("/work/a.txt"))
        await cp.delete()
    """

    @classmethod
    def of(cls, cp: Checkpoint) -> "AsyncCheckpoint":
        """The async view of a checkpoint.

        Example::

            acp = AsyncCheckpoint.of(Checkpoints.get("snap_..."))
        """
        return cls(**{f.name: getattr(cp, f.name) for f in fields(cp)})

    def restore(self, **kwargs: Any) -> AwaitableContext["AsyncSandbox"]:
        """A new sandbox from this checkpoint (as :meth:`AsyncSandbox.restore`).

        Example::

            again = await cp.restore(ttl_seconds=600)
        """
        if self._client is not None and "api_url" not in kwargs and "api_key" not in kwargs:
            kwargs["_client"] = self._client
        return AsyncSandbox.restore(self, **kwargs)

    async def delete(self) -> None:  # type: ignore[override]
        """Deletes the checkpoint.

        Example::

            await cp.delete()
        """
        await _call(Checkpoint.delete, self)


class AsyncCheckpoints:
    """Checkpoints of the caller's sandboxes, as coroutines (see :class:`Checkpoints`).

    Example::

        for c in await AsyncCheckpoints.list():
            print(c.id, c.name)
    """

    @staticmethod
    async def list(sandbox_id: Optional[str] = None, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[AsyncCheckpoint]:
        """Lists checkpoints, optionally of one sandbox.

        Example::

            mine = await AsyncCheckpoints.list(sandbox_id=sbx.id)
        """
        return [AsyncCheckpoint.of(c) for c in await _call(Checkpoints.list, sandbox_id, api_url=api_url, api_key=api_key)]

    @staticmethod
    async def get(checkpoint_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> AsyncCheckpoint:
        """Gets one checkpoint.

        Example::

            cp = await AsyncCheckpoints.get("snap_abcdefghijklmnop")
        """
        return AsyncCheckpoint.of(await _call(Checkpoints.get, checkpoint_id, api_url=api_url, api_key=api_key))

    @staticmethod
    async def delete(checkpoint_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> None:
        """Deletes a checkpoint by id.

        Example::

            await AsyncCheckpoints.delete(cp.id)
        """
        await _call(Checkpoints.delete, checkpoint_id, api_url=api_url, api_key=api_key)


# ------------------------------------------------------------------------------ the sandbox


class AsyncSandbox:
    """One sandbox, for asyncio: the surface of :class:`Sandbox` as coroutines. Get one with
    :meth:`create`, :meth:`connect`, :meth:`list` or :meth:`restore`; each of the first two and
    the last returns an :class:`AwaitableContext`: await it, or ``async with`` it to destroy the
    sandbox when the block ends (also on an exception).

    Example::

        async with AsyncSandbox.create(template="base") as sbx:
            await sbx.filesystem.write("/workspace/hello.py", "print('hello')")
            print((await sbx.exec("python3 /workspace/hello.py")).stdout)
        # destroyed here
    """

    def __init__(self, sync: Sandbox) -> None:
        self._sync = sync
        #: The sandbox's files.
        self.filesystem = AsyncFilesystem(sync.filesystem)
        #: The sandbox's background processes.
        self.processes = AsyncProcesses(sync.processes)
        #: The sandbox's interactive terminals: ``await sbx.pty.create(...)``.
        self.pty = AsyncPtys(sync.pty)
        #: The code interpreter's contexts (see :class:`AsyncCodeContexts`).
        self.code_contexts = AsyncCodeContexts(sync.code_contexts)

    def __repr__(self) -> str:
        return f"AsyncSandbox(id={self.id!r}, state={self.state!r})"

    @staticmethod
    def _opening(make: Callable[[], Sandbox]) -> AwaitableContext["AsyncSandbox"]:
        async def run() -> AsyncSandbox:
            return AsyncSandbox(await _call(make))

        return AwaitableContext(run)

    # ----------------------------------------------------------------- constructors

    @classmethod
    def create(
        cls,
        template: Optional[str] = None,
        persistent: bool = False,
        ttl_seconds: Optional[int] = UNSET,
        metadata: Optional[Mapping[str, str]] = None,
        idle_timeout_seconds: Optional[int] = None,
        on_idle: Optional[str] = None,
        vcpus: Optional[int] = None,
        memory_mb: Optional[int] = None,
        disk_mb: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
        network: Optional[Network] = None,
        volumes: Optional[Sequence[VolumeMountLike]] = None,
        *,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
    ) -> AwaitableContext["AsyncSandbox"]:
        """Creates a sandbox (arguments as :meth:`Sandbox.create`).

        Example::

            sbx = await AsyncSandbox.create(template="base", ttl_seconds=3600, metadata={"task_id": "t-42"})
            async with AsyncSandbox.create() as scratch:
                await scratch.exec("true")
        """
        return cls._opening(lambda: Sandbox.create(
            template, persistent, ttl_seconds, metadata, idle_timeout_seconds, on_idle, vcpus, memory_mb, disk_mb, env, network, volumes,
            api_url=api_url, api_key=api_key,
        ))

    @classmethod
    def connect(cls, sandbox_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> AwaitableContext["AsyncSandbox"]:
        """Attaches to an existing sandbox by id (``SandboxNotFoundError`` if there is none).

        Example::

            sbx = await AsyncSandbox.connect("sbx_abcdefghijklmnop")
        """
        return cls._opening(lambda: Sandbox.connect(sandbox_id, api_url=api_url, api_key=api_key))

    @classmethod
    async def list(
        cls,
        state: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
        page_size: Optional[int] = None,
        *,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
    ) -> AsyncIterator["AsyncSandbox"]:
        """Every sandbox of this key that matches the filters, newest first, a page at a time.

        Example::

            async for s in AsyncSandbox.list(state="running", metadata={"task_id": "t-42"}):
                print(s.id)
        """
        it = Sandbox.list(state, metadata, page_size, api_url=api_url, api_key=api_key)
        end = object()
        while True:
            s = await _call(next, it, end)
            if s is end:
                return
            yield cls(s)

    @classmethod
    def restore(
        cls,
        checkpoint: Union[str, Checkpoint],
        persistent: Optional[bool] = None,
        ttl_seconds: Optional[int] = UNSET,
        idle_timeout_seconds: Optional[int] = None,
        on_idle: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
        network: Optional[Network] = None,
        volumes: Optional[Sequence[VolumeMountLike]] = None,
        *,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        _client: Optional[Client] = None,
    ) -> AwaitableContext["AsyncSandbox"]:
        """A new sandbox from a checkpoint (arguments as :meth:`Sandbox.restore`).

        Example::

            back = await AsyncSandbox.restore(cp, ttl_seconds=600)
        """
        return cls._opening(lambda: Sandbox.restore(
            checkpoint, persistent, ttl_seconds, idle_timeout_seconds, on_idle, metadata, network, volumes,
            api_url=api_url, api_key=api_key, _client=_client,
        ))

    # ----------------------------------------------------------------- state

    @property
    def sync(self) -> Sandbox:
        """The blocking :class:`Sandbox` underneath (for code that runs in a thread).

        Example::

            await asyncio.to_thread(lambda: sbx.sync.exec("make"))
        """
        return self._sync

    @property
    def id(self) -> str:
        """The sandbox id.

        Example::

            print(sbx.id)
        """
        return self._sync.id

    @property
    def state(self) -> str:
        """The last known state.

        Example::

            if sbx.state == "hibernated":
                await sbx.wake()
        """
        return self._sync.state

    @property
    def info(self) -> SandboxInfo:
        """The last known info.

        Example::

            print(sbx.info.template, sbx.info.expires_at)
        """
        return self._sync.info

    async def refresh(self) -> SandboxInfo:
        """Fetches the current info.

        Example::

            info = await sbx.refresh()
        """
        return await _call(self._sync.refresh)

    # ----------------------------------------------------------------- commands

    @overload
    async def exec(self, cmd: Command, timeout_seconds: Optional[float] = ..., cwd: Optional[str] = ..., env: Optional[Mapping[str, str]] = ..., *, stdin: Union[str, bytes, None] = ..., background: Literal[False] = ..., on_stdout: Optional[Callable[[str], Any]] = ..., on_stderr: Optional[Callable[[str], Any]] = ...) -> ExecResult: ...  # noqa: E501

    @overload
    async def exec(self, cmd: Command, timeout_seconds: Optional[float] = ..., cwd: Optional[str] = ..., env: Optional[Mapping[str, str]] = ..., *, stdin: Union[str, bytes, None] = ..., background: Literal[True], buffer_bytes: Optional[int] = ...) -> AsyncProcess: ...  # noqa: E501

    async def exec(
        self,
        cmd: Command,
        timeout_seconds: Optional[float] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        *,
        stdin: Union[str, bytes, None] = None,
        background: bool = False,
        on_stdout: Optional[Callable[[str], Any]] = None,
        on_stderr: Optional[Callable[[str], Any]] = None,
        buffer_bytes: Optional[int] = None,
    ) -> Union[ExecResult, AsyncProcess]:
        """Runs a command and waits for it (as :meth:`Sandbox.exec`; a non-zero exit is not an
        exception). ``on_stdout``/``on_stderr`` are called on the event loop's thread;
        ``background=True`` returns an :class:`AsyncProcess` at once. Cancelling the task
        hangs up, and Den kills the command.

        Example::

            r = await sbx.exec("ls /workspace")
            await sbx.exec("make", cwd="/app", on_stdout=lambda s: print(s, end=""))
            server = await sbx.exec("python3 -m http.server 8000", background=True)
        """
        if background:
            return await self.processes.start(cmd, timeout_seconds, cwd, env, stdin, buffer_bytes)
        return await _call(
            self._sync.exec, cmd, timeout_seconds, cwd, env, stdin=stdin,
            on_stdout=_on_loop(on_stdout), on_stderr=_on_loop(on_stderr),
        )

    def exec_stream(
        self,
        cmd: Command,
        timeout_seconds: Optional[float] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        *,
        stdin: Union[str, bytes, None] = None,
    ) -> AwaitableContext[AsyncExecStream]:
        """Runs a command on the streaming route: an :class:`AsyncExecStream` of its output.

        Example::

            async with sbx.exec_stream("for i in 1 2 3; do echo $i; sleep 1; done") as run:
                async for chunk in run:
                    print(chunk.stream, chunk.text, end="")
                print((await run.wait()).exit_code)
        """
        body = command_body(cmd, timeout_seconds=timeout_seconds, cwd=cwd, env=env, stdin=stdin)
        return AwaitableContext(AsyncExecStream(self._sync._client, self.id, body)._open)

    async def run_code(
        self,
        code: str,
        language: Optional[str] = None,
        context: Optional[ContextLike] = None,
        *,
        on_stdout: Optional[Callable[[str], Any]] = None,
        on_stderr: Optional[Callable[[str], Any]] = None,
        on_result: Optional[Callable[[ExecutionResult], Any]] = None,
        on_error: Optional[Callable[[ExecutionError], Any]] = None,
        envs: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> Execution:
        """Runs code in the sandbox's code interpreter (as :meth:`Sandbox.run_code`); the
        callbacks are called on the event loop's thread. Cancelling the task hangs up, and Den
        interrupts the run.

        Example::

            e = await sbx.run_code("x = 41\\nx + 1", on_stdout=print)
            print(e.text)   # "42"
        """
        return await _call(
            self._sync.run_code, code, language, context, on_stdout=_on_loop(on_stdout), on_stderr=_on_loop(on_stderr),
            on_result=_on_loop(on_result), on_error=_on_loop(on_error), envs=envs, timeout=timeout,
        )

    # ----------------------------------------------------------------- lifecycle

    async def hibernate(self, mode: str = "warm") -> SandboxInfo:
        """Hibernates the sandbox (``"warm"``, ``"cold"`` or ``"disk"``; see :meth:`Sandbox.hibernate`).

        Example::

            await sbx.hibernate()
            await sbx.hibernate(mode="cold")
        """
        return await _call(self._sync.hibernate, mode)

    async def wake(self) -> SandboxInfo:
        """Wakes a hibernated sandbox.

        Example::

            await sbx.wake()
        """
        return await _call(self._sync.wake)

    async def snapshot(self, name: Optional[str] = None) -> AsyncCheckpoint:
        """Takes a durable checkpoint while the sandbox runs.

        Example::

            cp = await sbx.snapshot(name="deps-installed")
        """
        return AsyncCheckpoint.of(await _call(self._sync.snapshot, name))

    async def fork(self, count: int = 1, volumes: Optional[Sequence[VolumeMountLike]] = None) -> List["AsyncSandbox"]:
        """Forks the sandbox into ``count`` independent copies (each mounting ``volumes``, as
        :meth:`Sandbox.fork`).

        Example::

            a, b = await sbx.fork(count=2)
        """
        return [AsyncSandbox(s) for s in await _call(self._sync.fork, count, volumes)]

    async def set_timeout(self, seconds: int) -> SandboxInfo:
        """Sets the deadline to ``seconds`` from now.

        Example::

            await sbx.set_timeout(30 * 60)
        """
        return await _call(self._sync.set_timeout, seconds)

    @overload
    def events(self, after: Optional[int] = ..., follow: Literal[False] = ...) -> Awaitable[List[SandboxEvent]]: ...

    @overload
    def events(self, after: Optional[int] = ..., follow: Literal[True] = ...) -> AsyncStream[SandboxEvent]: ...

    def events(self, after: Optional[int] = None, follow: bool = False) -> Union[Awaitable[List[SandboxEvent]], AsyncStream[SandboxEvent]]:
        """The event log: without ``follow``, a coroutine for the list of events after
        ``after``; with ``follow=True``, an :class:`AsyncStream` of them and then of new ones.

        Example::

            past = await sbx.events()
            async with sbx.events(after=past[-1].seq, follow=True) as evs:
                async for ev in evs:
                    if ev.type == "destroyed":
                        break
        """
        if follow:
            return AsyncStream(lambda: self._sync.events(after=after, follow=True))
        return _call(self._sync.events, after)

    # ----------------------------------------------------------------- network and ports

    async def set_network(self, policy: Optional[Network] = None, **kwargs: Any) -> SandboxInfo:
        """Changes the network policy (a :class:`NetworkPolicy`, a dict, or keyword fields).

        Example::

            await sbx.set_network(egress="allowlist", allow=["pypi.org"])
        """
        return await _call(self._sync.set_network, policy, **kwargs)

    async def network_status(self) -> NetworkStatus:
        """The network policy, whether it is up, and the refused attempts.

        Example::

            print((await sbx.network_status()).refused)
        """
        return await _call(self._sync.network_status)

    async def ports(self) -> List[ListeningPort]:
        """TCP ports listening inside the sandbox.

        Example::

            print([p.port for p in await sbx.ports()])
        """
        return await _call(self._sync.ports)

    async def create_port_url(self, port: int, expires_in_seconds: Optional[int] = None) -> PortUrl:
        """A signed URL to ``port``.

        Example::

            u = await sbx.create_port_url(3000, expires_in_seconds=900)
        """
        return await _call(self._sync.create_port_url, port, expires_in_seconds)

    async def get_url(self, port: int, expires_in_seconds: Optional[int] = None) -> str:
        """The URL of a server listening on ``port`` (signed, under the API's path).

        Example::

            url = await sbx.get_url(8000)
        """
        return await _call(self._sync.get_url, port, expires_in_seconds)

    async def connect_port(self, port: int, timeout: Optional[float] = 30.0) -> Tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A raw TCP connection to ``port`` inside the sandbox through the API, as asyncio
        streams (see :meth:`Sandbox.connect_port`).

        Example::

            reader, writer = await sbx.connect_port(6379)
            writer.write(b"PING\\r\\n")
            print(await reader.readline())
            writer.close()
        """
        if not isinstance(port, int) or not 1 <= port <= 65535:
            raise ValueError("port must be an int from 1 to 65535")
        client = self._sync._client
        url = client.url(f"/v1/sandboxes/{seg(self.id)}/ports/{port}")
        scheme, host, p, host_header, target = _split(url)
        ctx: Optional[ssl.SSLContext] = None
        if scheme == "https":
            ctx = client.ssl_context or ssl.create_default_context()
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, p, ssl=ctx, server_hostname=host if ctx else None, limit=MAX_HEAD_BYTES), timeout,
        )
        try:
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            headers = dict(client.auth_headers(), Connection="Upgrade", Upgrade="den-tcp")
            lines = [f"GET {target} HTTP/1.1", f"Host: {host_header}"] + [f"{k}: {v}" for k, v in headers.items()]
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
            status, reason, resp = parse_head(head[:-4])
            if status != 101:
                n = int(resp["content-length"]) if resp.get("content-length", "").isdigit() else MAX_ERROR_BODY_BYTES
                try:
                    body = await asyncio.wait_for(reader.read(min(n, MAX_ERROR_BODY_BYTES)), timeout)
                except (asyncio.TimeoutError, OSError):
                    body = b""
                raise error_from_response(status, body, reason)
            return reader, writer
        except BaseException:
            writer.close()
            raise

    def forward(self, port: int, local_port: int = 0, bind: str = "127.0.0.1") -> AwaitableContext[PortForward]:
        """Serves ``port`` of the sandbox on a local port (see :meth:`Sandbox.forward`); its
        threads do the copying, so it does not load the event loop.

        Example::

            async with sbx.forward(8000) as fwd:
                reader, writer = await asyncio.open_connection("127.0.0.1", fwd.local_port)
        """

        async def make() -> PortForward:
            return await _call(self._sync.forward, port, local_port, bind)

        return AwaitableContext(make)

    # ----------------------------------------------------------------- teardown

    async def destroy(self) -> SandboxInfo:
        """Destroys the sandbox (idempotent).

        Example::

            await sbx.destroy()
        """
        return await _call(self._sync.destroy)

    async def delete(self) -> SandboxInfo:
        """Alias of :meth:`destroy`.

        Example::

            await sbx.delete()
        """
        return await self.destroy()

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        # Destroyed also on an exception (which then propagates), and when the block was
        # cancelled: shielded, so that the cancellation does not cancel the cleanup.
        try:
            await asyncio.shield(self.destroy())
        except SandboxNotFoundError:
            pass
        except Exception:
            if exc_type is None:
                raise


# ------------------------------------------------------------------------------ resources


class AsyncTemplates:
    """Templates, as coroutines (see :class:`Templates`).

    Example::

        for t in await AsyncTemplates.list():
            print(t.name, t.version)
    """

    @staticmethod
    async def list(*, api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[Template]:
        """Every template version this key may use.

        Example::

            names = {t.name for t in await AsyncTemplates.list()}
        """
        return await _call(Templates.list, api_url=api_url, api_key=api_key)

    @overload
    @staticmethod
    async def create(name: str, setup: Optional[Sequence[str]] = ..., *, wait: Literal[False], **kwargs: Any) -> TemplateBuild: ...

    @overload
    @staticmethod
    async def create(name: str, setup: Optional[Sequence[str]] = ..., *, wait: Optional[Literal[True]] = ..., **kwargs: Any) -> Template: ...

    @staticmethod
    async def create(
        name: str,
        setup: Optional[Sequence[str]] = None,
        *,
        from_template: Optional[str] = None,
        from_checkpoint: Optional[str] = None,
        setup_timeout_seconds: Optional[int] = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        **kwargs: Any,
    ) -> Union[Template, TemplateBuild]:
        """Builds a template (see :meth:`Templates.create`: the same arguments, ``from_image``,
        ``dockerfile``, ``context``, ``build_args``, ``wait``, ... included). Returns the
        :class:`Template`, or with ``wait=False`` the :class:`TemplateBuild`.

        Example::

            t = await AsyncTemplates.create("myproject", setup=["echo 'print(42)' > /workspace/main.py"])
        """
        return await _call(
            Templates.create, name, setup, from_template=from_template, from_checkpoint=from_checkpoint,
            setup_timeout_seconds=setup_timeout_seconds, api_url=api_url, api_key=api_key, **kwargs,
        )

    @staticmethod
    async def start_build(name: str, setup: Optional[Sequence[str]] = None, **kwargs: Any) -> TemplateBuild:
        """Starts a build and answers at once (see :meth:`Templates.start_build`; same arguments).

        Example::

            b = await AsyncTemplates.start_build("web", from_image="nginx:1.27")
            async with AsyncTemplates.build_logs(b.id, follow=True) as lines:
                async for line in lines:
                    print(line.message)
        """
        return await _call(Templates.start_build, name, setup, **kwargs)

    @staticmethod
    async def upload_context(
        data: ContextData, *, digest: Optional[str] = None, api_url: Optional[str] = None, api_key: Optional[str] = None,
    ) -> BuildContext:
        """Uploads a build context (see :meth:`Templates.upload_context`), from a worker thread.

        Example::

            ctx = await AsyncTemplates.upload_context("./app")
        """
        return await _call(Templates.upload_context, data, digest=digest, api_url=api_url, api_key=api_key)

    @staticmethod
    async def build(build_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> TemplateBuild:
        """One build of yours (see :meth:`Templates.build`).

        Example::

            b = await AsyncTemplates.build("op_...")
        """
        return await _call(Templates.build, build_id, api_url=api_url, api_key=api_key)

    @staticmethod
    async def builds(
        name: Optional[str] = None, *, limit: Optional[int] = None, api_url: Optional[str] = None, api_key: Optional[str] = None,
    ) -> List[TemplateBuild]:
        """Your builds, newest first (see :meth:`Templates.builds`).

        Example::

            for b in await AsyncTemplates.builds("web"):
                print(b.id, b.state)
        """
        return await _call(Templates.builds, name, limit=limit, api_url=api_url, api_key=api_key)

    @staticmethod
    async def cancel_build(build_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> TemplateBuild:
        """Cancels a running build (see :meth:`Templates.cancel_build`).

        Example::

            await AsyncTemplates.cancel_build(b.id)
        """
        return await _call(Templates.cancel_build, build_id, api_url=api_url, api_key=api_key)

    @staticmethod
    def build_logs(
        build_id: str, offset: int = 0, follow: bool = False, *, api_url: Optional[str] = None, api_key: Optional[str] = None,
    ) -> AsyncStream[TemplateBuildLogLine]:
        """A build's log lines as an async iterator (see :meth:`Templates.build_logs`); an unknown
        build raises at the first ``__anext__`` (or on entering ``async with``).

        Example::

            async with AsyncTemplates.build_logs(b.id, follow=True) as lines:
                async for line in lines:
                    print(line.message)
        """
        return AsyncStream(lambda: Templates.build_logs(build_id, offset, follow, api_url=api_url, api_key=api_key))

    @staticmethod
    async def delete(name: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> None:
        """Deletes a template you built.

        Example::

            await AsyncTemplates.delete("myproject")
        """
        await _call(Templates.delete, name, api_url=api_url, api_key=api_key)


class AsyncVolumes:
    """The caller's volumes, as coroutines (see :class:`Volumes`; same arguments and errors).

    Example::

        await AsyncVolumes.create("work", size_mb=1024)
        await AsyncVolumes.write_file("work", "/input.txt", "hello\n")
        async with AsyncSandbox.create(volumes=[VolumeMount("work", "/work")]) as sbx:
            await sbx.exec("wc -c /work/input.txt > /work/out.txt")
        print(await AsyncVolumes.read_text("work", "/out.txt"))
    """

    @staticmethod
    async def create(name: str, size_mb: int, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> Volume:
        """Creates an empty volume.

        Example::

            v = await AsyncVolumes.create("datasets", size_mb=10_240)
        """
        return await _call(Volumes.create, name, size_mb, api_url=api_url, api_key=api_key)

    @staticmethod
    async def list(*, api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[Volume]:
        """The owner's volumes, each with the sandboxes it is mounted in.

        Example::

            names = [v.name for v in await AsyncVolumes.list()]
        """
        return await _call(Volumes.list, api_url=api_url, api_key=api_key)

    @staticmethod
    async def get(name: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> Volume:
        """One volume (``VolumeNotFoundError`` if there is none of that name).

        Example::

            v = await AsyncVolumes.get("work")
        """
        return await _call(Volumes.get, name, api_url=api_url, api_key=api_key)

    @staticmethod
    async def delete(name: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> None:
        """Deletes a volume and its data (``VolumeInUseError`` while a sandbox mounts it).

        Example::

            await AsyncVolumes.delete("scratch")
        """
        await _call(Volumes.delete, name, api_url=api_url, api_key=api_key)

    @staticmethod
    async def grow(name: str, size_mb: int, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> Volume:
        """Grows a volume's filesystem to ``size_mb``.

        Example::

            v = await AsyncVolumes.grow("work", 4096)
        """
        return await _call(Volumes.grow, name, size_mb, api_url=api_url, api_key=api_key)

    @staticmethod
    async def write_file(name: str, path: str, data: WriteData, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> FileInfo:
        """Writes a file into a volume without a sandbox (a ``str`` as UTF-8; bytes; a binary
        file object or iterable of bytes, streamed from a worker thread).

        Example::

            await AsyncVolumes.write_file("work", "/in/task.md", "refactor auth")
        """
        return await _call(Volumes.write_file, name, path, data, api_url=api_url, api_key=api_key)

    @staticmethod
    def read_stream(
        name: str, path: str, chunk_bytes: int = DEFAULT_CHUNK_BYTES, *, api_url: Optional[str] = None, api_key: Optional[str] = None,
    ) -> AsyncStream[bytes]:
        """A file of a volume as an async iterator of chunks, without holding it in memory (a
        missing file raises at the first ``__anext__``, or on entering ``async with``).

        Example::

            async with AsyncVolumes.read_stream("work", "/results.tar") as chunks:
                async for chunk in chunks:
                    out.write(chunk)
        """
        return AsyncStream(lambda: Volumes.read_stream(name, path, chunk_bytes, api_url=api_url, api_key=api_key))

    @staticmethod
    async def read_file(
        name: str, path: str, max_bytes: Optional[int] = None, *, api_url: Optional[str] = None, api_key: Optional[str] = None,
    ) -> bytes:
        """Reads a whole file of a volume as bytes (``max_bytes`` as in :meth:`Volumes.read_file`).

        Example::

            db = await AsyncVolumes.read_file("work", "/app.sqlite")
        """
        return await _call(Volumes.read_file, name, path, max_bytes, api_url=api_url, api_key=api_key)

    @staticmethod
    async def read_text(
        name: str, path: str, encoding: str = "utf-8", max_bytes: Optional[int] = None, *,
        api_url: Optional[str] = None, api_key: Optional[str] = None,
    ) -> str:
        """Reads a whole file of a volume as text.

        Example::

            log = await AsyncVolumes.read_text("work", "/run.log")
        """
        return await _call(Volumes.read_text, name, path, encoding, max_bytes, api_url=api_url, api_key=api_key)


class AsyncKeys:
    """API keys, as coroutines (see :class:`Keys`; needs an admin key).

    Example::

        k = await AsyncKeys.create(owner="ci")
        await AsyncKeys.revoke(k.id)
    """

    @staticmethod
    async def create(owner: str, admin: Optional[bool] = None, *, format: Optional[str] = None, api_url: Optional[str] = None, api_key: Optional[str] = None) -> ApiKey:
        """Creates a key; its ``key`` (the secret) is shown only this once. ``format="e2b"``:
        an ``e2b_<hex>`` secret, the form the ``e2b`` Python client accepts.

        Example::

            created = await AsyncKeys.create(owner="agent-fleet")
        """
        return await _call(Keys.create, owner, admin, format=format, api_url=api_url, api_key=api_key)

    @staticmethod
    async def list(*, api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[ApiKey]:
        """Every key (without secrets).

        Example::

            active = [k for k in await AsyncKeys.list() if k.revoked_at is None]
        """
        return await _call(Keys.list, api_url=api_url, api_key=api_key)

    @staticmethod
    async def revoke(key_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> ApiKey:
        """Revokes a key.

        Example::

            k = await AsyncKeys.revoke("key_abcdefghijklmnop")
        """
        return await _call(Keys.revoke, key_id, api_url=api_url, api_key=api_key)


class AsyncUsage:
    """Metered usage, as a coroutine (see :class:`Usage`).

    Example::

        report = await AsyncUsage.get(group_by="owner")
    """

    @staticmethod
    async def get(
        from_: Optional[Instant] = None,
        to: Optional[Instant] = None,
        group_by: Optional[str] = None,
        owner: Optional[str] = None,
        *,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
    ) -> UsageReport:
        """Usage over a period, grouped.

        Example::

            r = await AsyncUsage.get(group_by="metadata.task_id")
        """
        return await _call(Usage.get, from_, to, group_by, owner, api_url=api_url, api_key=api_key)


class AsyncHosts:
    """The host agents, as coroutines (see :class:`Hosts`; needs an admin key).

    Example::

        for h in await AsyncHosts.list():
            print(h.id, h.status)
    """

    @staticmethod
    async def list(*, api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[HostInfo]:
        """Every host.

        Example::

            hosts = await AsyncHosts.list()
        """
        return await _call(Hosts.list, api_url=api_url, api_key=api_key)

    @staticmethod
    async def drain(host_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> int:
        """Starts draining a host; returns how many sandboxes and volumes are left on it.

        Example::

            left = await AsyncHosts.drain("den_abc")
        """
        return await _call(Hosts.drain, host_id, api_url=api_url, api_key=api_key)

    @staticmethod
    async def undrain(host_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> None:
        """Ends a drain.

        Example::

            await AsyncHosts.undrain("den_abc")
        """
        await _call(Hosts.undrain, host_id, api_url=api_url, api_key=api_key)

    @staticmethod
    async def remove(host_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> None:
        """Removes a drained host.

        Example::

            await AsyncHosts.remove("den_abc")
        """
        await _call(Hosts.remove, host_id, api_url=api_url, api_key=api_key)


class AsyncWebhooks:
    """Webhooks, as coroutines (see :class:`Webhooks`).

    Example::

        hook = await AsyncWebhooks.create("https://example.com/den", events=["sandbox.destroyed"])
        await AsyncWebhooks.delete(hook.id)
    """

    #: The signature check of a delivery (no I/O: the same function as :meth:`Webhooks.verify`).
    verify = staticmethod(Webhooks.verify)

    @staticmethod
    async def create(
        url: str,
        events: Optional[Sequence[str]] = None,
        description: Optional[str] = None,
        *,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
    ) -> Webhook:
        """Creates a webhook; its ``secret`` is shown only this once.

        Example::

            hook = await AsyncWebhooks.create("https://example.com/den", description="audit")
        """
        return await _call(Webhooks.create, url, events, description, api_url=api_url, api_key=api_key)

    @staticmethod
    async def list(*, api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[Webhook]:
        """The owner's webhooks.

        Example::

            hooks = await AsyncWebhooks.list()
        """
        return await _call(Webhooks.list, api_url=api_url, api_key=api_key)

    @staticmethod
    async def get(webhook_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> Webhook:
        """One webhook.

        Example::

            hook = await AsyncWebhooks.get("wh_abcdefghijklmnop")
        """
        return await _call(Webhooks.get, webhook_id, api_url=api_url, api_key=api_key)

    @staticmethod
    async def delete(webhook_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> None:
        """Deletes a webhook.

        Example::

            await AsyncWebhooks.delete(hook.id)
        """
        await _call(Webhooks.delete, webhook_id, api_url=api_url, api_key=api_key)

    @staticmethod
    async def deliveries(
        webhook_id: str,
        status: Optional[str] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
        *,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
    ) -> WebhookDeliveriesPage:
        """One page of a webhook's deliveries, newest first.

        Example::

            page = await AsyncWebhooks.deliveries(hook.id, status="failed")
        """
        return await _call(Webhooks.deliveries, webhook_id, status, limit, cursor, api_url=api_url, api_key=api_key)

    @staticmethod
    async def all_deliveries(
        webhook_id: str,
        status: Optional[str] = None,
        page_size: Optional[int] = None,
        *,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
    ) -> AsyncIterator[WebhookDelivery]:
        """Every delivery of a webhook, a page at a time.

        Example::

            async for d in AsyncWebhooks.all_deliveries(hook.id, status="failed"):
                await AsyncWebhooks.redeliver(hook.id, d.id)
        """
        it = Webhooks.all_deliveries(webhook_id, status, page_size, api_url=api_url, api_key=api_key)
        end = object()
        while True:
            d = await _call(next, it, end)
            if d is end:
                return
            yield d

    @staticmethod
    async def redeliver(webhook_id: str, delivery_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> WebhookDelivery:
        """Sends a delivery's event again.

        Example::

            again = await AsyncWebhooks.redeliver(hook.id, "whd_abcdefghijklmnop")
        """
        return await _call(Webhooks.redeliver, webhook_id, delivery_id, api_url=api_url, api_key=api_key)
