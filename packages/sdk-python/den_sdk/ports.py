"""Raw TCP to a sandbox's ports through the API (``Upgrade: den-tcp``), and a local port
forwarder built on it (what ``den forward`` does): they work whatever the sandbox's network
policy, and wake it if hibernated."""

from __future__ import annotations

import socket
import threading
from typing import Any, Callable, List, Optional, Set, Tuple

from ._client import Client, seg
from ._websocket import http_upgrade

__all__ = ["connect_port", "PortForward"]


def connect_port(client: Client, sandbox_id: str, port: int, timeout: Optional[float] = 30.0) -> socket.socket:
    """A TCP connection to ``port`` inside the sandbox, spliced through the API: the returned
    socket (blocking, no timeout) carries the bytes both ways. A refusal raises the typed error
    of the API's answer (:class:`~den_sdk.DenConnectionRefusedError` if nothing listens there).

    Example::

        sock = connect_port(client, "sbx_...", 6379)
        sock.sendall(b"PING\\r\\n")
    """
    if not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError("port must be an int from 1 to 65535")
    url = client.url(f"/v1/sandboxes/{seg(sandbox_id)}/ports/{port}")
    headers = dict(client.auth_headers(), Connection="Upgrade", Upgrade="den-tcp")
    # exact: the head is read a byte at a time, so the guest's first bytes stay in the socket.
    sock, _, _ = http_upgrade(url, headers, timeout=timeout, ssl_context=client.ssl_context, exact=True)
    sock.settimeout(None)
    return sock


def _half_close(sock: socket.socket) -> None:
    try:
        # socket.socket's own: on an SSLSocket, ssl's shutdown() would drop its TLS state too.
        socket.socket.shutdown(sock, socket.SHUT_WR)
    except OSError:
        pass


def _hang_up(sock: socket.socket) -> None:
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class PortForward:
    """A local TCP port that forwards every connection to a port inside a sandbox, one tunnel
    through the API per connection, until :meth:`close` (or the end of its ``with`` block).
    Get one with :meth:`Sandbox.forward`. Threads do the copying; the object can be used from
    asyncio code too (``async with``).

    Example::

        with sbx.forward(8000) as fwd:            # a free local port on 127.0.0.1
            page = urllib.request.urlopen(f"http://127.0.0.1:{fwd.local_port}/").read()
    """

    def __init__(self, connect: Callable[[], socket.socket], remote_port: int, local_port: int = 0, bind: str = "127.0.0.1") -> None:
        self._connect = connect
        #: The port inside the sandbox.
        self.remote_port = remote_port
        family = socket.AF_INET6 if ":" in bind else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind((bind, local_port))
            self._listener.listen(64)
            self._listener.settimeout(0.5)
        except BaseException:
            self._listener.close()
            raise
        addr = self._listener.getsockname()
        self._address: Tuple[str, int] = (addr[0], addr[1])
        self._lock = threading.Lock()
        self._open: Set[socket.socket] = set()
        self._closed = threading.Event()
        #: Errors of tunnels that could not be opened (most recent last; at most 20 kept).
        self.errors: List[BaseException] = []
        #: How many connections were accepted.
        self.connections = 0
        self._thread = threading.Thread(target=self._serve, name=f"den-forward-{self._address[1]}", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"PortForward({self._address[0]}:{self._address[1]} -> {self.remote_port}, closed={self.closed})"

    @property
    def local_address(self) -> Tuple[str, int]:
        """The local ``(host, port)`` it listens on.

        Example::

            host, port = fwd.local_address
        """
        return self._address

    @property
    def local_port(self) -> int:
        """The local port it listens on (the one the OS chose when asked for 0).

        Example::

            urllib.request.urlopen(f"http://127.0.0.1:{fwd.local_port}/")
        """
        return self._address[1]

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called.

        Example::

            assert not fwd.closed
        """
        return self._closed.is_set()

    def _track(self, s: socket.socket) -> bool:
        with self._lock:
            if self._closed.is_set():
                return False
            self._open.add(s)
            return True

    def _untrack(self, *socks: socket.socket) -> None:
        with self._lock:
            for s in socks:
                self._open.discard(s)
        for s in socks:
            _hang_up(s)

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            client.settimeout(None)
            self.connections += 1
            if not self._track(client):
                _hang_up(client)
                return
            threading.Thread(target=self._handle, args=(client,), name="den-forward-conn", daemon=True).start()

    def _handle(self, client: socket.socket) -> None:
        try:
            tunnel = self._connect()
        except BaseException as e:  # noqa: BLE001 - recorded; the local client is hung up
            with self._lock:
                self.errors = (self.errors + [e])[-20:]
            self._untrack(client)
            return
        if not self._track(tunnel):
            self._untrack(client, tunnel)
            return
        up = threading.Thread(target=self._pipe, args=(client, tunnel), name="den-forward-up", daemon=True)
        up.start()
        self._pipe(tunnel, client)
        up.join()
        self._untrack(client, tunnel)

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except (OSError, ValueError):
            pass
        finally:
            _half_close(dst)

    def close(self) -> None:
        """Stops listening and hangs up every forwarded connection (idempotent).

        Example::

            fwd = sbx.forward(5432)
            ...
            fwd.close()
        """
        self._close(join=True)

    def _close(self, join: bool) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        _hang_up(self._listener)  # (a shutdown wakes the accept on Linux; its timeout elsewhere)
        with self._lock:
            socks, self._open = list(self._open), set()
        for s in socks:
            _hang_up(s)
        if join and threading.current_thread() is not self._thread:
            self._thread.join(timeout=2)

    def __enter__(self) -> "PortForward":
        """Example::

        with sbx.forward(8000, local_port=18000) as fwd:
            print(fwd.local_port)   # 18000
        """
        return self

    def __exit__(self, *exc: Any) -> None:
        """Closes the forwarder (see :meth:`close`).

        Example::

            with sbx.forward(8000) as fwd:
                pass   # closed here
        """
        self.close()

    async def __aenter__(self) -> "PortForward":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self._close(join=False)  # never block the event loop

    async def aclose(self) -> None:
        """:meth:`close` for asyncio code (it does not wait for the accepting thread).

        Example::

            fwd = await sbx.forward(8000)
            await fwd.aclose()
        """
        self._close(join=False)
