"""The HTTP layer: configuration (arguments, then ``DEN_API_URL``/``DEN_API_KEY``), the bearer
header, query strings, JSON and raw bodies, NDJSON streams, and turning error responses into
typed errors. Standard library only (``urllib.request``)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager
from typing import Any, Dict, Generator, Iterator, List, Mapping, Optional, Sequence, Tuple, Type, Union

from .errors import DenConfigError, InvalidArgumentError, InvalidResponseError, error_from_response

__all__ = ["Client", "DEFAULT_API_URL", "DEFAULT_TIMEOUT", "seg", "iter_ndjson", "UNSET", "AbortScope", "register_socket"]

#: The API address used when neither ``api_url`` nor ``DEN_API_URL`` is set.
DEFAULT_API_URL = "http://127.0.0.1:8787"
#: Seconds a request may wait on its socket (connect, or a read) before ``socket.timeout``.
#: Generous: a wake from cold hibernation happens before the response's headers.
DEFAULT_TIMEOUT = 600.0
#: Longest NDJSON line accepted from a stream.
MAX_LINE_BYTES = 16 * 1024 * 1024

_VERSION = "0.1.0"
USER_AGENT = f"den-sdk-python/{_VERSION}"

QueryValue = Union[str, int, float, bool, None]
Query = Union[Mapping[str, QueryValue], Sequence[Tuple[str, QueryValue]]]


def iter_chunks(res: Any, chunk_bytes: int) -> Iterator[bytes]:
    """A response body as chunks of at most `chunk_bytes`; the response is closed when the iteration ends or is dropped."""
    try:
        while True:
            data = res.read(chunk_bytes)
            if not data:
                return
            yield data
    finally:
        res.close()


def _env(name: str) -> Optional[str]:
    v = os.environ.get(name)
    return v if v else None


def seg(s: Union[str, int]) -> str:
    """Percent-encodes one path segment.

    Example::

        path = f"/v1/sandboxes/{seg(sandbox_id)}"
    """
    s = str(s)
    if s == "":  # an empty id would turn /v1/sandboxes/{id} into the list route
        raise InvalidArgumentError("invalid_argument", "an id must not be empty", 400)
    return urllib.parse.quote(s, safe="")


def _query_string(query: Optional[Query]) -> str:
    if not query:
        return ""
    items = query.items() if isinstance(query, Mapping) else query
    pairs: List[Tuple[str, str]] = []
    for k, v in items:
        if v is None:
            continue
        pairs.append((k, ("true" if v else "false") if isinstance(v, bool) else str(v)))
    return urllib.parse.urlencode(pairs)


class _Unset:
    """Marks an argument that was not given (``None`` can mean something, e.g. no TTL)."""

    _instance: Optional["_Unset"] = None

    def __new__(cls) -> "_Unset":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET: Any = _Unset()


# ---------------------------------------------------------------------------- cancellation
#
# The asyncio client runs the blocking calls of this module in worker threads. To cancel one
# (a task cancelled while it awaits a 10-minute exec), it must be able to hang up the
# connections that call opened: every socket this SDK connects registers with the
# AbortScope active in its thread, and AbortScope.abort() shuts them down, so the blocked
# read returns at once instead of when its timeout runs out.

_local = threading.local()


class AbortScope:
    """The sockets a piece of work opened, so that another thread can hang them all up.

    Example::

        scope = AbortScope()
        with scope.active():          # in the worker thread
            client.json("GET", "/v1/sandboxes")
        scope.abort()                 # from any thread: shuts its connections down
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._socks: List[socket.socket] = []
        self.aborted = False

    @contextmanager
    def active(self) -> Iterator["AbortScope"]:
        """Makes this the scope sockets connected in this thread register with.

        Example::

            with scope.active():
                do_requests()
        """
        prev = getattr(_local, "scope", None)
        _local.scope = self
        try:
            yield self
        finally:
            _local.scope = prev

    def register(self, sock: socket.socket) -> None:
        """Adds a connected socket (shut down at once if the scope was already aborted).

        Example::

            scope.register(sock)
        """
        with self._lock:
            if not self.aborted:
                self._socks = [s for s in self._socks if s.fileno() != -1]
                self._socks.append(sock)
                return
        _hang_up(sock)
        raise ConnectionAbortedError("the call was cancelled")

    def abort(self) -> None:
        """Shuts down every socket of the scope (a read blocked on one returns); later ones are
        shut down as soon as they connect.

        Example::

            scope.abort()
        """
        with self._lock:
            self.aborted = True
            socks, self._socks = self._socks, []
        for s in socks:
            _hang_up(s)


def _hang_up(sock: socket.socket) -> None:
    try:
        # socket.socket's own shutdown, also for an SSLSocket: its SSL object stays, so a
        # thread blocked in a read on it gets an error or EOF rather than a crash.
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


def register_socket(sock: socket.socket) -> None:
    """Registers a freshly connected socket with the thread's active :class:`AbortScope`, if any."""
    scope: Optional[AbortScope] = getattr(_local, "scope", None)
    if scope is not None:
        scope.register(sock)


_tracked_classes: Dict[type, type] = {}


def _tracked(cls: Type[http.client.HTTPConnection]) -> Type[http.client.HTTPConnection]:
    sub = _tracked_classes.get(cls)
    if sub is None:

        def connect(self: http.client.HTTPConnection) -> None:
            cls.connect(self)
            if self.sock is not None:
                register_socket(self.sock)

        sub = type("Tracked" + cls.__name__, (cls,), {"connect": connect})
        _tracked_classes[cls] = sub
    return sub


class _HTTPHandler(urllib.request.HTTPHandler):
    def do_open(self, http_class: Any, req: Any, **kw: Any) -> Any:
        return super().do_open(_tracked(http_class), req, **kw)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def do_open(self, http_class: Any, req: Any, **kw: Any) -> Any:
        return super().do_open(_tracked(http_class), req, **kw)


class Client:
    """A configured connection to the Den API. Every SDK object holds one; most code never
    builds one directly.

    Example::

        client = Client(api_url="http://127.0.0.1:8787", api_key="den_...")
        templates = client.json("GET", "/v1/templates")["templates"]
    """

    def __init__(
        self,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: Optional[float] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
    ) -> None:
        url = api_url or _env("DEN_API_URL") or DEFAULT_API_URL
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise DenConfigError(f"Den API URL must be an http(s) URL: {url!r}")
        self.api_url = url.rstrip("/")
        key = api_key or _env("DEN_API_KEY")
        if not key:
            raise DenConfigError("No Den API key: pass api_key=... or set the DEN_API_KEY environment variable")
        self._api_key = key
        self.timeout = DEFAULT_TIMEOUT if timeout is None else timeout
        #: The TLS settings for an https API (None: the system's defaults).
        self.ssl_context = ssl_context
        self._opener = urllib.request.build_opener(_HTTPHandler(), _HTTPSHandler(context=ssl_context))

    def __repr__(self) -> str:
        return f"Client(api_url={self.api_url!r})"

    def auth_headers(self) -> Dict[str, str]:
        """The headers that authenticate a request made outside :meth:`request` (the PTY's
        WebSocket, a raw port connection).

        Example::

            headers = client.auth_headers()   # {"Authorization": "Bearer den_...", "User-Agent": ...}
        """
        return {"Authorization": f"Bearer {self._api_key}", "User-Agent": USER_AGENT}

    def url(self, path: str, query: Optional[Query] = None) -> str:
        """The full URL of ``path`` with ``query``.

        Example::

            client.url("/v1/sandboxes", {"limit": 10})
        """
        qs = _query_string(query)
        return self.api_url + path + (f"?{qs}" if qs else "")

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Query] = None,
        json_body: Any = UNSET,
        body: Any = None,
        accept: str = "application/json",
        timeout: Optional[float] = None,
    ):
        """Sends one request and returns the open response if it is 2xx (close it, or use it
        as a context manager); otherwise reads the body and raises the typed error.

        Example::

            with client.request("GET", "/v1/sandboxes", query={"limit": 10}) as res:
                print(json.load(res))
        """
        headers = dict(self.auth_headers(), Accept=accept)
        data: Any = None
        if json_body is not UNSET:
            headers["Content-Type"] = "application/json"
            data = json.dumps(json_body).encode("utf-8")
        elif body is not None:
            headers["Content-Type"] = "application/octet-stream"
            # bytes as they are; a binary file object or an iterable of bytes is streamed
            # (chunked transfer encoding), never read whole into memory.
            data = bytes(body) if isinstance(body, (bytes, bytearray, memoryview)) else body
        req = urllib.request.Request(self.url(path, query), data=data, headers=headers, method=method)
        try:
            return self._opener.open(req, timeout=self.timeout if timeout is None else timeout)
        except urllib.error.HTTPError as e:
            try:
                raw = e.read()
            except (OSError, socket.timeout):
                raw = b""
            finally:
                e.close()
            raise error_from_response(e.code, raw, str(e.reason or "")) from None

    def raw(self, method: str, path: str, **kw: Any) -> bytes:
        """Sends a request and returns the whole response body as bytes.

        Example::

            data = client.raw("GET", f"/v1/sandboxes/{seg(id)}/files", query={"path": "/etc/hostname"}, accept="application/octet-stream")
        """
        with self.request(method, path, **kw) as res:
            return res.read()

    def json(self, method: str, path: str, **kw: Any) -> Any:
        """Sends a request and parses its JSON body (a body that is not JSON is an
        :class:`InvalidResponseError`).

        Example::

            info = client.json("GET", f"/v1/sandboxes/{seg(id)}")
        """
        with self.request(method, path, **kw) as res:
            status = res.status
            text = res.read()
        try:
            return json.loads(text.decode("utf-8"))
        except ValueError:
            raise InvalidResponseError("invalid_response", f"response is not JSON: {text[:200]!r}", status) from None

    def empty(self, method: str, path: str, **kw: Any) -> None:
        """Sends a request whose answer has no body we need (e.g. 204) and drains it.

        Example::

            client.empty("DELETE", f"/v1/checkpoints/{seg(cp_id)}")
        """
        with self.request(method, path, **kw) as res:
            res.read()

    def ndjson(self, method: str, path: str, **kw: Any) -> Generator[Dict[str, Any], None, None]:
        """Sends a request at once and returns an iterator over the objects of its NDJSON body,
        one per line, skipping ``{"type": "keepalive"}`` lines. Closing the iterator (or
        reading it to the end) closes the connection.

        Example::

            for ev in client.ndjson("GET", f"/v1/sandboxes/{seg(id)}/events", query={"follow": True}, accept="application/x-ndjson"):
                print(ev["type"])
        """
        return iter_ndjson(self.request(method, path, **kw))


def iter_ndjson(res: Any, max_line_bytes: int = MAX_LINE_BYTES, skip_non_objects: bool = False) -> Generator[Dict[str, Any], None, None]:
    """The objects of an open NDJSON response, one per line (keepalive lines skipped); the
    response is closed when the iterator ends or is closed. A line over ``max_line_bytes``
    raises; a JSON value that is no object raises too, or is skipped with ``skip_non_objects``.

    Example::

        for line in iter_ndjson(client.request("POST", path, json_body=body, accept="application/x-ndjson")):
            print(line)
    """
    try:
        status = res.status
        while True:
            line = res.readline(max_line_bytes + 1)
            if not line:
                return
            if len(line) > max_line_bytes:
                raise InvalidResponseError("invalid_response", "NDJSON line over the size cap", status)
            line = line.strip()
            if not line:
                continue
            try:
                value = json.loads(line.decode("utf-8"))
            except ValueError:
                raise InvalidResponseError("invalid_response", f"NDJSON line is not JSON: {line[:200]!r}", status) from None
            if not isinstance(value, dict):
                if skip_non_objects:
                    continue
                raise InvalidResponseError("invalid_response", "NDJSON line is not an object", status)
            if value.get("type") == "keepalive":
                continue
            yield value
    finally:
        res.close()
