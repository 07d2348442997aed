"""The ``Sandbox`` class: create, connect, list, restore, and everything done to one sandbox."""

from __future__ import annotations

import socket
from typing import Any, Callable, Dict, Iterator, List, Literal, Mapping, Optional, Sequence, Union, overload

from ._client import UNSET, Client, seg
from .checkpoints import Checkpoint
from .code import CodeContexts, ContextLike, run_code
from .errors import SandboxNotFoundError
from .exec import BUFFERED_EXEC_MAX_SECONDS, Command, ExecResult, ExecStream, command_body, exec_buffered, exec_streamed
from .filesystem import Filesystem
from .ports import PortForward, connect_port
from .processes import Process, Processes
from .pty import Ptys
from .types import ExecutionError, ExecutionResult, Execution, ListeningPort, NetworkPolicy, NetworkStatus, PortUrl, SandboxEvent, SandboxInfo, convert, network_to_wire
from .volumes import VolumeMountLike, mounts_to_wire

__all__ = ["Sandbox"]

Network = Union[NetworkPolicy, Mapping[str, Any]]


def _client(api_url: Optional[str], api_key: Optional[str], client: Optional[Client]) -> Client:
    return client if client is not None else Client(api_url, api_key)


def _body(**fields: Any) -> Dict[str, Any]:
    """A create or restore body: what was left out is not sent (UNSET, or None, except
    ``ttl_seconds=None``, which asks for no deadline)."""
    body: Dict[str, Any] = {}
    for k, v in fields.items():
        if v is UNSET or (v is None and k != "ttl_seconds"):
            continue
        if k == "network":
            v = network_to_wire(v)
        elif k == "volumes":
            v = mounts_to_wire(v)
        elif isinstance(v, Mapping):
            v = dict(v)
        body[k] = v
    return body


class Sandbox:
    """One sandbox: a long-running microVM. Get one with :meth:`create`, :meth:`connect`,
    :meth:`list` or :meth:`restore`. As a context manager it is destroyed when the block ends
    (also when it ends with an exception).

    Configuration: ``api_url``/``api_key`` arguments, else the environment variables
    ``DEN_API_URL`` (default ``http://127.0.0.1:8787``) and ``DEN_API_KEY``.

    Example::

        from den_sdk import Sandbox

        with Sandbox.create(template="base") as sbx:
            sbx.filesystem.write("/workspace/hello.py", "print('hello')")
            print(sbx.exec("python3 /workspace/hello.py").stdout)   # "hello\\n"
        # destroyed here
    """

    def __init__(self, client: Client, info: SandboxInfo) -> None:
        self._client = client
        self._info = info
        #: The sandbox's files (see :class:`Filesystem`).
        self.filesystem = Filesystem(client, info.id)
        #: The sandbox's background processes (see :class:`Processes`).
        self.processes = Processes(client, info.id)
        #: The sandbox's interactive terminals: ``sbx.pty.create(...)`` (see :class:`Ptys`).
        self.pty = Ptys(client, info.id)
        #: The code interpreter's contexts (a sandbox made from ``code-interpreter-v1``; see :class:`CodeContexts`).
        self.code_contexts = CodeContexts(client, info.id)

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r}, state={self.state!r})"

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
    ) -> "Sandbox":
        """Creates a sandbox (restoring its template's snapshot) and returns once the API has
        answered.

        - ``template``: a name or ``name@version`` (server default: ``base``).
        - ``persistent``: exempt from the idle timeout's action (it is kept, hibernated).
        - ``ttl_seconds``: hard deadline from creation (server default 3600); ``None`` with
          ``persistent=True`` means none. A backstop, not the way to clean up.
        - ``metadata``: your labels (filterable in :meth:`list`, groupable in usage).
        - ``idle_timeout_seconds`` / ``on_idle`` (``"hibernate"`` or ``"destroy"``).
        - ``vcpus``, ``memory_mb``, ``disk_mb``: its shape; ``env``: variables every command
          gets; ``network``: a :class:`NetworkPolicy` or dict (default: no egress).
        - ``volumes``: volumes to mount, ``[VolumeMount(name, path, read_only=False)]`` (or
          dicts); one held read-write elsewhere (or, for a writer, held at all) raises
          :class:`VolumeInUseError`.

        Example::

            sbx = Sandbox.create(
                template="base",
                persistent=True,
                ttl_seconds=3600,
                metadata={"task_id": "refactor-auth", "user_id": "u_8821"},
            )
        """
        client = Client(api_url, api_key)
        body = _body(
            template=template, persistent=True if persistent else None, ttl_seconds=ttl_seconds,
            idle_timeout_seconds=idle_timeout_seconds, on_idle=on_idle, metadata=metadata,
            vcpus=vcpus, memory_mb=memory_mb, disk_mb=disk_mb, env=env, network=network, volumes=volumes,
        )
        w = client.json("POST", "/v1/sandboxes", json_body=body)
        return cls(client, convert(w, SandboxInfo.from_wire))

    @classmethod
    def connect(cls, sandbox_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> "Sandbox":
        """Attaches to an existing sandbox by id, fetching its info (raises
        :class:`SandboxNotFoundError` if there is none, or it belongs to another owner).

        Example::

            sbx = Sandbox.connect("sbx_abcdefghijklmnop")
            print(sbx.state)
        """
        client = Client(api_url, api_key)
        w = client.json("GET", f"/v1/sandboxes/{seg(sandbox_id)}")
        return cls(client, convert(w, SandboxInfo.from_wire))

    @classmethod
    def list(
        cls,
        state: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
        page_size: Optional[int] = None,
        *,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
    ) -> Iterator["Sandbox"]:
        """Every sandbox of this key that matches the filters, newest first, fetched a page at a
        time (following ``next_cursor``) as you iterate. Yields :class:`Sandbox` objects (their
        ``info`` is as of the listing).

        Example::

            for s in Sandbox.list(state="running", metadata={"task_id": "t-42"}):
                print(s.id, s.info.created_at)
        """
        client = Client(api_url, api_key)

        def pages() -> Iterator["Sandbox"]:
            cursor: Optional[str] = None
            while True:
                query: List[Any] = []
                if state is not None:
                    query.append(("state", state))
                for k, v in (metadata or {}).items():
                    query.append((f"metadata.{k}", v))
                if page_size is not None:
                    query.append(("limit", page_size))
                if cursor is not None:
                    query.append(("cursor", cursor))
                page = client.json("GET", "/v1/sandboxes", query=query)
                infos, nxt = convert(page, lambda v: ([SandboxInfo.from_wire(s) for s in v["sandboxes"]], v.get("next_cursor")))
                for info in infos:
                    yield cls(client, info)
                if nxt is None or nxt == cursor:  # the second test: never loop forever on a server bug
                    return
                cursor = nxt

        return pages()

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
    ) -> "Sandbox":
        """Creates a new sandbox from a checkpoint (a :class:`Checkpoint` or its id): the exact
        files, processes and memory of the moment it was taken. Its metadata gets
        ``restored_from``; lifecycle settings are as at create; the network defaults to the
        policy the sandbox had then. A checkpoint holds no volume: the restored sandbox mounts
        only ``volumes`` (as at :meth:`create`).

        Example::

            cp = sbx.snapshot(name="tests-pass")
            back = Sandbox.restore(cp, ttl_seconds=600)
            same = Sandbox.restore("snap_abcdefghijklmnop", volumes=[VolumeMount("work", "/work")])
        """
        client = _client if _client is not None else Client(api_url, api_key)
        cp_id = checkpoint if isinstance(checkpoint, str) else checkpoint.id
        body = _body(
            persistent=persistent, ttl_seconds=ttl_seconds, idle_timeout_seconds=idle_timeout_seconds,
            on_idle=on_idle, metadata=metadata, network=network, volumes=volumes,
        )
        w = client.json("POST", f"/v1/checkpoints/{seg(cp_id)}/restore", json_body=body)
        return cls(client, convert(w, SandboxInfo.from_wire))

    # ----------------------------------------------------------------- state

    @property
    def id(self) -> str:
        """The sandbox id (``sbx_...``).

        Example::

            save_for_later(sbx.id)   # then Sandbox.connect(sbx_id)
        """
        return self._info.id

    @property
    def state(self) -> str:
        """The last known state: ``creating``, ``running``, ``hibernated``, ``destroyed``,
        ``lost`` or ``error`` (call :meth:`refresh` for the current one).

        Example::

            if sbx.state == "hibernated":
                sbx.wake()
        """
        return self._info.state

    @property
    def info(self) -> SandboxInfo:
        """The last known info, as of creation or the last call that returned it.

        Example::

            print(sbx.info.template, sbx.info.expires_at, sbx.info.metadata)
        """
        return self._info

    def _path(self, suffix: str = "") -> str:
        return f"/v1/sandboxes/{seg(self.id)}{suffix}"

    def _update(self, method: str, suffix: str = "", **kw: Any) -> SandboxInfo:
        self._info = convert(self._client.json(method, self._path(suffix), **kw), SandboxInfo.from_wire)
        return self._info

    def refresh(self) -> SandboxInfo:
        """Fetches the current info (and updates :attr:`state` and :attr:`info`).

        Example::

            info = sbx.refresh()
            print(info.state, info.last_activity_at)
        """
        return self._update("GET")

    # ----------------------------------------------------------------- commands

    @overload
    def exec(self, cmd: Command, timeout_seconds: Optional[float] = ..., cwd: Optional[str] = ..., env: Optional[Mapping[str, str]] = ..., *, stdin: Union[str, bytes, None] = ..., background: Literal[False] = ..., on_stdout: Optional[Callable[[str], None]] = ..., on_stderr: Optional[Callable[[str], None]] = ...) -> ExecResult: ...  # noqa: E501

    @overload
    def exec(self, cmd: Command, timeout_seconds: Optional[float] = ..., cwd: Optional[str] = ..., env: Optional[Mapping[str, str]] = ..., *, stdin: Union[str, bytes, None] = ..., background: Literal[True], buffer_bytes: Optional[int] = ...) -> Process: ...  # noqa: E501

    def exec(
        self,
        cmd: Command,
        timeout_seconds: Optional[float] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        *,
        stdin: Union[str, bytes, None] = None,
        background: bool = False,
        on_stdout: Optional[Callable[[str], None]] = None,
        on_stderr: Optional[Callable[[str], None]] = None,
        buffer_bytes: Optional[int] = None,
    ) -> Union[ExecResult, Process]:
        """Runs a command and waits for it. A ``str`` runs with ``bash -c``; a list is an argv.
        A non-zero exit is **not** an exception: check ``exit_code``. A command that outlives
        ``timeout_seconds`` is killed and returns with ``timed_out=True``.

        - Plain, with ``0 < timeout_seconds <= 240``: one buffered request.
        - Otherwise (no timeout, a longer one) or with ``on_stdout``/``on_stderr``: the
          streaming route (keepalives hold the connection however long it runs); the
          callbacks get text as it arrives, and the result still has all the output.
        - ``background=True``: starts a background process and returns its :class:`Process`
          handle at once (same as :meth:`Processes.start`).

        ``stdin`` (str or bytes) is fed to the command, then closed. A hibernated sandbox is
        woken first.

        Example::

            r = sbx.exec("ls /workspace")
            print(r.stdout, r.stderr, r.exit_code)
            py = sbx.exec(["python3", "-c", "import sys; print(sys.stdin.read().upper())"], stdin="hi")
            sbx.exec("make", cwd="/app", timeout_seconds=600, on_stdout=lambda s: print(s, end=""))
            server = sbx.exec("python3 -m http.server 8000", background=True)
        """
        if background:
            return self.processes.start(cmd, timeout_seconds=timeout_seconds, cwd=cwd, env=env, stdin=stdin, buffer_bytes=buffer_bytes)
        body = command_body(cmd, timeout_seconds=timeout_seconds, cwd=cwd, env=env, stdin=stdin)
        short = timeout_seconds is not None and 0 < timeout_seconds <= BUFFERED_EXEC_MAX_SECONDS
        if on_stdout or on_stderr or not short:
            return exec_streamed(self._client, self.id, body, on_stdout, on_stderr)
        return exec_buffered(self._client, self.id, body)

    def exec_stream(
        self,
        cmd: Command,
        timeout_seconds: Optional[float] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        *,
        stdin: Union[str, bytes, None] = None,
    ) -> ExecStream:
        """Runs a command on the streaming route (``POST .../exec/stream``, NDJSON): iterate the
        returned :class:`ExecStream` for output chunks as they arrive, then ``wait()`` for the
        exit. Closing it early (or leaving its ``with`` block) kills the command.

        Example::

            with sbx.exec_stream("for i in 1 2 3; do echo $i; sleep 1; done") as run:
                for chunk in run:
                    print(chunk.stream, chunk.text, end="")
                print(run.wait().exit_code)
        """
        return ExecStream(self._client, self.id, command_body(cmd, timeout_seconds=timeout_seconds, cwd=cwd, env=env, stdin=stdin))

    def run_code(
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
        """Runs code in the sandbox's code interpreter (a sandbox made from
        ``code-interpreter-v1``): in the language's default context (python unless ``language``
        says), or in ``context`` (its variables and imports persist between runs). The callbacks
        get what the code prints and returns as it comes; the :class:`Execution` has it all. An
        exception the code raises is not raised here: check ``error``. ``timeout`` (seconds)
        hangs up, which interrupts the run, and raises :class:`DenTimeoutError`. A sandbox
        without a code interpreter raises :class:`InvalidStateError`
        (``code_interpreter_unavailable``).

        Example::

            with Sandbox.create(template="code-interpreter-v1") as sbx:
                e = sbx.run_code("import math\\nprint('pi')\\nmath.pi", on_stdout=print)
                print(e.text)   # "3.141592653589793"
        """
        return run_code(
            self._client, self.id, code, language=language, context=context, on_stdout=on_stdout, on_stderr=on_stderr,
            on_result=on_result, on_error=on_error, envs=envs, timeout=timeout,
        )

    # ----------------------------------------------------------------- lifecycle

    def hibernate(self, mode: str = "warm") -> SandboxInfo:
        """Hibernates the sandbox (idempotent). ``"warm"``: snapshot and pause in place, for an
        instant wake. ``"cold"``: move it to the snapshot store, so its VM is gone and it costs
        no CPU or RAM (this also turns a warm hibernation cold). ``"disk"``: shut it down keeping
        only its files (no CPU or RAM; its processes and memory are gone, a wake boots it). Exec,
        file and process calls on a hibernated sandbox wake it first.

        Example::

            sbx.hibernate()               # while the model thinks
            sbx.hibernate(mode="cold")    # a long wait
            print(sbx.state, sbx.info.hibernate_mode, sbx.info.stored_bytes)
        """
        if mode not in ("warm", "cold", "disk"):
            raise ValueError('mode must be "warm", "cold" or "disk"')
        return self._update("POST", "/hibernate", json_body={"mode": mode})

    def wake(self) -> SandboxInfo:
        """Wakes a hibernated sandbox (idempotent): same processes, memory and files.

        Example::

            sbx.wake()
            assert sbx.state == "running"
        """
        return self._update("POST", "/wake")

    def snapshot(self, name: Optional[str] = None) -> Checkpoint:
        """Takes a durable checkpoint while the sandbox runs (it pauses only while its memory is
        copied). The checkpoint outlives the sandbox; restore it with :meth:`restore`.

        Example::

            cp = sbx.snapshot(name="deps-installed")
            copy = Sandbox.restore(cp)
        """
        body: Dict[str, Any] = {} if name is None else {"name": name}
        w = self._client.json("POST", self._path("/checkpoints"), json_body=body)
        return convert(w, lambda v: Checkpoint.from_wire(v, self._client))

    def fork(self, count: int = 1, volumes: Optional[Sequence[VolumeMountLike]] = None) -> List["Sandbox"]:
        """Forks the sandbox: ``count`` (1 to 16) new, independent sandboxes with its exact
        state (files, processes, memory), copy-on-write. Children get the parent's metadata plus
        ``forked_from``. They do not get the parent's volumes: ``volumes`` are what each child
        mounts (a read-write one can go to one child only).

        Example::

            a, b = sbx.fork(count=2)
            a.exec("try-approach-a"); b.exec("try-approach-b")
            readers = sbx.fork(count=3, volumes=[VolumeMount("datasets", "/data", read_only=True)])
        """
        body: Dict[str, Any] = {"count": count}
        if volumes is not None:
            body["volumes"] = mounts_to_wire(volumes)
        w = self._client.json("POST", self._path("/fork"), json_body=body)
        infos = convert(w, lambda v: [SandboxInfo.from_wire(s) for s in v["sandboxes"]])
        return [Sandbox(self._client, i) for i in infos]

    def set_timeout(self, seconds: int) -> SandboxInfo:
        """Sets the sandbox's deadline to ``seconds`` from now (``info.expires_at``).

        Example::

            sbx.set_timeout(30 * 60)   # 30 more minutes
        """
        return self._update("POST", "/timeout", json_body={"seconds": seconds})

    @overload
    def events(self, after: Optional[int] = ..., follow: Literal[False] = ...) -> List[SandboxEvent]: ...

    @overload
    def events(self, after: Optional[int] = ..., follow: Literal[True] = ...) -> Iterator[SandboxEvent]: ...

    def events(self, after: Optional[int] = None, follow: bool = False) -> Union[List[SandboxEvent], Iterator[SandboxEvent]]:
        """The sandbox's event log (state changes, execs, transfers...). Without ``follow``,
        a list of the events after ``after``; with ``follow=True``, an iterator that yields them
        and then new ones as they happen, until the server ends the stream or you stop (call
        ``close()`` on it to hang up).

        Example::

            past = sbx.events()
            for ev in sbx.events(after=past[-1].seq, follow=True):
                print(ev.type, ev.reason)
                if ev.type == "destroyed":
                    break
        """
        if not follow:
            w = self._client.json("GET", self._path("/events"), query={"after": after})
            return convert(w, lambda v: [SandboxEvent.from_wire(e) for e in v["events"]])
        lines = self._client.ndjson("GET", self._path("/events"), query={"after": after, "follow": True}, accept="application/x-ndjson")

        def gen() -> Iterator[SandboxEvent]:
            try:
                for line in lines:
                    yield convert(line, SandboxEvent.from_wire)
            finally:
                lines.close()  # type: ignore[attr-defined]

        return gen()

    # ----------------------------------------------------------------- network and ports

    def set_network(self, policy: Optional[Network] = None, **kwargs: Any) -> SandboxInfo:
        """Changes the sandbox's network policy: at once if it runs, at its wake if hibernated.
        Pass a :class:`NetworkPolicy`, a dict, or its fields as keywords (``egress``, ``allow``,
        ``deny``, ``max_connections``, ``bandwidth_mbps``). A bad entry is a 400 and changes
        nothing.

        Example::

            sbx.set_network(egress="allowlist", allow=["pypi.org", "*.pythonhosted.org"])
            sbx.exec("pip install requests")
            sbx.set_network(NetworkPolicy(egress="none"))
        """
        if policy is None:
            policy = NetworkPolicy(**kwargs)
        elif kwargs:
            raise TypeError("give a policy or keyword fields, not both")
        return self._update("PUT", "/network", json_body=network_to_wire(policy))

    def network_status(self) -> NetworkStatus:
        """The network policy, whether the network is up, and how many connection attempts it
        refused, by why.

        Example::

            st = sbx.network_status()
            print(st.policy.egress, st.active, st.refused)
        """
        return convert(self._client.json("GET", self._path("/network")), NetworkStatus.from_wire)

    def ports(self) -> List[ListeningPort]:
        """TCP ports listening inside the sandbox (empty while it is hibernated; listing never
        wakes it).

        Example::

            sbx.exec("python3 -m http.server 8000", background=True)
            print([p.port for p in sbx.ports()])   # [8000] once it listens
        """
        w = self._client.json("GET", self._path("/ports"))
        return convert(w, lambda v: [ListeningPort.from_wire(p) for p in v["ports"]])

    def create_port_url(self, port: int, expires_in_seconds: Optional[int] = None) -> PortUrl:
        """A signed URL to ``port`` that works without a key (in a browser, say) until it
        expires (default 3600 s; the server caps it). A request to it wakes a hibernated sandbox.

        Example::

            u = sbx.create_port_url(3000, expires_in_seconds=900)
            print("open", u.url)
        """
        body: Dict[str, Any] = {"port": port}
        if expires_in_seconds is not None:
            body["expires_in_seconds"] = expires_in_seconds
        return convert(self._client.json("POST", self._path("/urls"), json_body=body), PortUrl.from_wire)

    def get_url(self, port: int, expires_in_seconds: Optional[int] = None) -> str:
        """The URL of a server listening on ``port`` in the sandbox: a signed one (see
        :meth:`create_port_url`), under the API's path, so it works for any client; a
        browser opening it is sent on to the port's own origin (``PortUrl.url``).

        Example::

            import urllib.request
            url = sbx.get_url(8000)
            page = urllib.request.urlopen(url).read()
        """
        return self.create_port_url(port, expires_in_seconds).path_url

    def connect_port(self, port: int, timeout: Optional[float] = 30.0) -> socket.socket:
        """A raw TCP connection to ``port`` inside the sandbox, through the API (an HTTP upgrade
        to ``den-tcp``): works whatever the sandbox's network policy, and wakes it if
        hibernated. The socket is blocking, without a timeout; close it when done. Nothing
        listening there raises :class:`DenConnectionRefusedError`.

        Example::

            with sbx.connect_port(6379) as sock:
                sock.sendall(b"PING\r\n")
                print(sock.recv(100))   # b"+PONG\r\n"
        """
        return connect_port(self._client, self.id, port, timeout)

    def forward(self, port: int, local_port: int = 0, bind: str = "127.0.0.1") -> PortForward:
        """Serves ``port`` of the sandbox on ``bind:local_port`` of this machine (0: a free
        port, see :attr:`PortForward.local_port`), one tunnel through the API per connection
        (any TCP protocol), until the forwarder is closed: what ``den forward`` does.

        Example::

            with sbx.forward(5432) as fwd:
                conn = psycopg.connect(host="127.0.0.1", port=fwd.local_port)
        """
        return PortForward(lambda: connect_port(self._client, self.id, port), port, local_port=local_port, bind=bind)

    # ----------------------------------------------------------------- teardown

    def destroy(self) -> SandboxInfo:
        """Destroys the sandbox (idempotent) and returns its final info (state ``destroyed``).

        Example::

            try:
                ...
            finally:
                sbx.destroy()
        """
        return self._update("DELETE")

    def delete(self) -> SandboxInfo:
        """Alias of :meth:`destroy`.

        Example::

            sbx.delete()
        """
        return self.destroy()

    def __enter__(self) -> "Sandbox":
        """Example::

        with Sandbox.create() as sbx:
            sbx.exec("echo scoped")
        """
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        """Destroys the sandbox when the ``with`` block ends, also on an exception (which then
        propagates). A sandbox that is already gone is not an error.

        Example::

            with Sandbox.create() as sbx:
                raise RuntimeError("boom")   # sbx is destroyed, then the error propagates
        """
        try:
            self.destroy()
        except SandboxNotFoundError:
            pass
        except Exception:
            if exc_type is None:
                raise

