"""A small RFC 6455 WebSocket client over ``socket`` and ``ssl`` (standard library only), and
the raw HTTP/1.1 upgrade it shares with port tunnels (``Upgrade: den-tcp``).

What it does: ``ws://`` and ``wss://`` (and ``http(s)://``, taken as the same), the opening
handshake with its ``Sec-WebSocket-Accept`` check, masked client frames, text and binary
messages (fragmented ones reassembled, big ones optionally sent in fragments), answering
pings, the closing handshake, a bound on the size of one message, and timeouts on connect
and on every send. A handshake the server refuses with an HTTP error becomes the typed
:class:`~den_sdk.DenError` of its body. No extensions (no compression), no proxies.

One thread may read while others send: sends are serialized, and a close from any thread
wakes a blocked reader.

Example::

    ws = WebSocket.connect("ws://127.0.0.1:8787/v1/sandboxes/sbx_.../pty", headers=client.auth_headers())
    ws.send(b"echo hi\\n")            # bytes: a binary message; str: a text one
    msg = ws.recv(timeout=10)        # bytes or str
    ws.close()
"""

from __future__ import annotations

import base64
import hashlib
import os
import select
import socket
import ssl
import struct
import threading
import time
import urllib.parse
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from ._client import register_socket
from .errors import error_from_response

__all__ = [
    "WebSocket",
    "WebSocketError",
    "WebSocketClosed",
    "WebSocketProtocolError",
    "open_socket",
    "http_upgrade",
    "DEFAULT_MAX_MESSAGE_BYTES",
]

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

OP_CONT = 0x0
OP_TEXT = 0x1
OP_BINARY = 0x2
OP_CLOSE = 0x8
OP_PING = 0x9
OP_PONG = 0xA

#: Longest message :meth:`WebSocket.recv` accepts by default (a longer one closes with 1009).
DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
#: Longest HTTP response head (status line and headers) read during a handshake.
MAX_HEAD_BYTES = 64 * 1024
#: Longest error body read from a refused handshake.
MAX_ERROR_BODY_BYTES = 64 * 1024

Message = Union[str, bytes]


class WebSocketError(ConnectionError):
    """Base of the WebSocket errors: the connection is unusable."""


class WebSocketClosed(WebSocketError):
    """The connection is closed: by a close handshake (``code``/``reason`` are the peer's, or
    ours), or abnormally (``code`` 1006: the TCP connection ended without one).

    Example::

        try:
            ws.recv()
        except WebSocketClosed as e:
            print(e.code, e.reason)
    """

    def __init__(self, code: int = 1006, reason: str = "") -> None:
        super().__init__(f"WebSocket closed ({code}){': ' + reason if reason else ''}")
        self.code = code
        self.reason = reason


class WebSocketProtocolError(WebSocketClosed):
    """The peer broke the protocol (an unmasked-frame rule, a bad opcode, invalid UTF-8 in a text
    message, a message over the size bound...); the connection was closed with ``code``."""


# ---------------------------------------------------------------------------- connections


def _split(url: str) -> Tuple[str, str, int, str, str]:
    """(scheme: http|https, host, port, Host header, path?query) of a ws/wss/http/https URL."""
    u = urllib.parse.urlsplit(url)
    scheme = {"ws": "http", "wss": "https", "http": "http", "https": "https"}.get(u.scheme.lower())
    if scheme is None or not u.hostname:
        raise ValueError(f"not a ws(s) or http(s) URL: {url!r}")
    port = u.port or (443 if scheme == "https" else 80)
    host_header = u.netloc.rsplit("@", 1)[-1]
    target = (u.path or "/") + (f"?{u.query}" if u.query else "")
    return scheme, u.hostname, port, host_header, target


def open_socket(url: str, timeout: Optional[float], ssl_context: Optional[ssl.SSLContext] = None) -> socket.socket:
    """A connected TCP (or, for https/wss, TLS) socket to the URL's host, registered with the
    thread's abort scope, with ``timeout`` on every operation.

    Example::

        sock = open_socket("http://127.0.0.1:8787/", timeout=30)
    """
    scheme, host, port, _, _ = _split(url)
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if scheme == "https":
            ctx = ssl_context or ssl.create_default_context()
            sock = ctx.wrap_socket(sock, server_hostname=host)
        register_socket(sock)
    except BaseException:
        sock.close()
        raise
    return sock


def _read_head(sock: socket.socket, exact: bool) -> Tuple[int, str, Dict[str, str], bytes]:
    """Reads a response head: (status, reason, lower-cased headers, bytes read past it). With
    ``exact``, reads a byte at a time so that nothing past the head is consumed."""
    buf = bytearray()
    while True:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            break
        if len(buf) > MAX_HEAD_BYTES:
            raise WebSocketError("the server's response head is too long")
        chunk = sock.recv(1 if exact else 4096)
        if not chunk:
            raise WebSocketError("the server closed the connection before answering the upgrade")
        buf += chunk
    head, rest = bytes(buf[:end]), bytes(buf[end + 4 :])
    status, reason, headers = parse_head(head)
    return status, reason, headers, rest


def parse_head(head: bytes) -> Tuple[int, str, Dict[str, str]]:
    """(status, reason, lower-cased headers) of an HTTP response head (without its blank line).

    Example::

        parse_head(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: den-tcp")
    """
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise WebSocketError(f"not an HTTP response: {lines[0][:100]!r}")
    headers: Dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            k = k.strip().lower()
            headers[k] = f"{headers[k]}, {v.strip()}" if k in headers else v.strip()
    return int(parts[1]), parts[2] if len(parts) > 2 else "", headers


def _read_body(sock: socket.socket, headers: Mapping[str, str], rest: bytes) -> bytes:
    """The (bounded) body of a refused upgrade, for its error message."""
    buf = bytearray(rest)
    want: Optional[int] = None
    if headers.get("content-length", "").isdigit():
        want = min(int(headers["content-length"]), MAX_ERROR_BODY_BYTES)
    try:
        while (want is None or len(buf) < want) and len(buf) < MAX_ERROR_BODY_BYTES:
            chunk = sock.recv(4096)
            if not chunk:
                break
            buf += chunk
    except OSError:
        pass
    body = bytes(buf if want is None else buf[:want])
    if "chunked" in headers.get("transfer-encoding", "").lower():
        out = bytearray()
        while body:
            line, _, body = body.partition(b"\r\n")
            try:
                n = int(line.split(b";")[0].strip() or b"0", 16)
            except ValueError:
                break
            if n == 0:
                break
            out += body[:n]
            body = body[n + 2 :]
        body = bytes(out)
    return body


def http_upgrade(
    url: str,
    headers: Mapping[str, str],
    *,
    timeout: Optional[float],
    ssl_context: Optional[ssl.SSLContext] = None,
    exact: bool = False,
) -> Tuple[socket.socket, Dict[str, str], bytes]:
    """Sends ``GET`` with ``headers`` (which name the upgrade) and returns the socket, the
    response headers and any bytes read past them once the server answered 101. Any other
    answer raises the typed error of its body (``401`` -> :class:`~den_sdk.AuthenticationError`).

    Example::

        sock, hdrs, rest = http_upgrade(url, {"Connection": "Upgrade", "Upgrade": "den-tcp", **client.auth_headers()}, timeout=30, exact=True)
    """
    _, _, _, host_header, target = _split(url)
    sock = open_socket(url, timeout, ssl_context)
    try:
        lines = [f"GET {target} HTTP/1.1", f"Host: {host_header}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        status, reason, resp_headers, rest = _read_head(sock, exact)
        if status != 101:
            body = _read_body(sock, resp_headers, rest)
            raise error_from_response(status, body, reason)
        return sock, resp_headers, rest
    except BaseException:
        sock.close()
        raise


# ---------------------------------------------------------------------------- frames


def _mask(data: bytes, key: bytes) -> bytes:
    n = len(data)
    if n == 0:
        return b""
    k = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "little") ^ int.from_bytes(k, "little")).to_bytes(n, "little")


def _frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    head = bytearray([(0x80 if fin else 0) | opcode])
    n = len(payload)
    if n < 126:
        head.append(0x80 | n)
    elif n < 1 << 16:
        head.append(0x80 | 126)
        head += struct.pack(">H", n)
    else:
        head.append(0x80 | 127)
        head += struct.pack(">Q", n)
    key = os.urandom(4)
    return bytes(head) + key + _mask(payload, key)


def _close_payload(code: int, reason: str) -> bytes:
    if code == 1005:  # "no status": an empty close frame
        return b""
    return struct.pack(">H", code) + reason.encode("utf-8")[:123]


class WebSocket:
    """A client WebSocket connection. Get one with :meth:`connect`.

    Example::

        with WebSocket.connect("wss://den.example.com/v1/sandboxes/sbx_.../pty?rows=24&cols=80", headers=auth) as ws:
            ws.send(b"ls\\n")
            for msg in ws:              # until the server closes the connection
                print(msg)
    """

    def __init__(self, sock: socket.socket, rest: bytes = b"", *, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, subprotocol: Optional[str] = None) -> None:
        self._sock = sock
        self._buf = bytearray(rest)
        self.max_message_bytes = max_message_bytes
        #: The subprotocol the server chose, if any.
        self.subprotocol = subprotocol
        self._send_lock = threading.Lock()
        self._recv_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._close_sent = False
        self._closed = threading.Event()
        #: The close code and reason, once closed (1006: without a closing handshake).
        self.close_code: Optional[int] = None
        self.close_reason = ""
        self._frag_op: Optional[int] = None
        self._frag: List[bytes] = []
        self._frag_len = 0
        self._pongs = 0

    # ----------------------------------------------------------------- opening

    @classmethod
    def connect(
        cls,
        url: str,
        headers: Optional[Mapping[str, str]] = None,
        *,
        timeout: Optional[float] = 30.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        ssl_context: Optional[ssl.SSLContext] = None,
        subprotocols: Optional[Sequence[str]] = None,
    ) -> "WebSocket":
        """Opens a connection: the TCP/TLS connect and the opening handshake, each bounded by
        ``timeout`` seconds (which then bounds every send; reads take their own timeout).
        ``headers`` are sent with the handshake (e.g. ``Authorization``). A refusal (an HTTP
        answer other than 101) raises the typed error of its body.

        Example::

            ws = WebSocket.connect("ws://127.0.0.1:8787/v1/sandboxes/sbx_.../pty", headers=client.auth_headers(), timeout=30)
        """
        key = base64.b64encode(os.urandom(16)).decode("ascii")
        hdrs = {
            "Upgrade": "websocket",
            "Connection": "Upgrade",
            "Sec-WebSocket-Key": key,
            "Sec-WebSocket-Version": "13",
        }
        if subprotocols:
            hdrs["Sec-WebSocket-Protocol"] = ", ".join(subprotocols)
        for k, v in (headers or {}).items():
            hdrs[k] = v
        sock, resp, rest = http_upgrade(url, hdrs, timeout=timeout, ssl_context=ssl_context)
        try:
            want = base64.b64encode(hashlib.sha1((key + GUID).encode("ascii")).digest()).decode("ascii")
            if resp.get("upgrade", "").lower() != "websocket" or "upgrade" not in resp.get("connection", "").lower():
                raise WebSocketError("the server did not upgrade to a WebSocket")
            if resp.get("sec-websocket-accept") != want:
                raise WebSocketError("the server's Sec-WebSocket-Accept does not match the key")
            if resp.get("sec-websocket-extensions"):
                raise WebSocketError("the server chose an extension this client did not offer")
            proto = resp.get("sec-websocket-protocol")
            if proto is not None and proto not in (subprotocols or ()):
                raise WebSocketError(f"the server chose a subprotocol this client did not offer: {proto!r}")
        except BaseException:
            sock.close()
            raise
        return cls(sock, rest, max_message_bytes=max_message_bytes, subprotocol=proto)

    # ----------------------------------------------------------------- state

    @property
    def closed(self) -> bool:
        """Whether the connection is closed (no more messages will come).

        Example::

            if not ws.closed:
                ws.send("ping")
        """
        return self._closed.is_set()

    def __repr__(self) -> str:
        return f"WebSocket(closed={self.closed}, close_code={self.close_code})"

    # ----------------------------------------------------------------- sending

    def _send_raw(self, data: bytes, control: bool = False) -> None:
        with self._send_lock:
            if self._closed.is_set() or (self._close_sent and not control):
                raise WebSocketClosed(self.close_code or 1006, self.close_reason or "the connection is closed")
            try:
                self._sock.sendall(data)
            except (OSError, ValueError) as e:
                self._teardown(1006, f"send failed: {e}")
                raise WebSocketClosed(1006, f"send failed: {e}") from None

    def send(self, data: Union[str, bytes, bytearray, memoryview], *, fragment_bytes: Optional[int] = None) -> None:
        """Sends one message: a ``str`` as a text message, bytes as a binary one. With
        ``fragment_bytes``, a longer message goes as several frames of at most that many bytes.

        Example::

            ws.send(b"\\x03")                           # binary
            ws.send('{"type": "resize", "rows": 40, "cols": 120}')   # text
        """
        if isinstance(data, str):
            op, payload = OP_TEXT, data.encode("utf-8")
        else:
            op, payload = OP_BINARY, bytes(data)
        if fragment_bytes is None or len(payload) <= fragment_bytes:
            self._send_raw(_frame(op, payload))
            return
        if fragment_bytes < 1:
            raise ValueError("fragment_bytes must be positive")
        # The frames of one message are sent under one lock hold, so that no other message is
        # interleaved (control frames of the reader may not be either: they wait).
        frames = []
        for i in range(0, len(payload), fragment_bytes):
            last = i + fragment_bytes >= len(payload)
            frames.append(_frame(op if i == 0 else OP_CONT, payload[i : i + fragment_bytes], fin=last))
        self._send_raw(b"".join(frames))

    def ping(self, payload: bytes = b"") -> None:
        """Sends a ping (at most 125 bytes); the peer's pong is consumed by :meth:`recv`.

        Example::

            ws.ping(b"are you there")
        """
        if len(payload) > 125:
            raise ValueError("a ping payload is at most 125 bytes")
        self._send_raw(_frame(OP_PING, payload), control=True)

    # ----------------------------------------------------------------- receiving

    def _wait_readable(self, deadline: Optional[float]) -> bool:
        if deadline is None:
            return True
        if isinstance(self._sock, ssl.SSLSocket) and self._sock.pending():
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        fd = self._sock.fileno()
        if fd < 0:
            return True  # closed under us: the recv reports it
        if hasattr(select, "poll"):
            p = select.poll()
            p.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
            return bool(p.poll(max(1, int(left * 1000))))
        r, _, _ = select.select([fd], [], [], left)
        return bool(r)

    def _fill(self, deadline: Optional[float]) -> None:
        if self._closed.is_set():
            raise WebSocketClosed(self.close_code or 1006, self.close_reason)
        if not self._wait_readable(deadline):
            raise TimeoutError("no WebSocket message within the timeout")
        try:
            chunk = self._sock.recv(65536)
        except socket.timeout:
            # The socket's timeout bounds sends; a quiet connection is not an error here.
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError("no WebSocket message within the timeout") from None
            return
        except (OSError, ValueError) as e:
            self._teardown(1006, str(e))
            raise WebSocketClosed(1006, f"connection lost: {e}") from None
        if not chunk:
            self._teardown(1006, "the connection ended without a closing handshake")
            raise WebSocketClosed(1006, "the connection ended without a closing handshake")
        self._buf += chunk

    def _read(self, n: int, deadline: Optional[float]) -> bytes:
        while len(self._buf) < n:
            self._fill(deadline)
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def _fail(self, code: int, reason: str) -> "WebSocketProtocolError":
        try:
            self._send_close(code, reason)
        except WebSocketClosed:
            pass
        self._teardown(code, reason)
        return WebSocketProtocolError(code, reason)

    def _next_message(self, deadline: Optional[float]) -> Message:
        while True:
            b0, b1 = self._read(2, deadline)
            fin, rsv, op = bool(b0 & 0x80), b0 & 0x70, b0 & 0x0F
            masked, n = bool(b1 & 0x80), b1 & 0x7F
            if n == 126:
                (n,) = struct.unpack(">H", self._read(2, deadline))
            elif n == 127:
                (n,) = struct.unpack(">Q", self._read(8, deadline))
                if n >> 63:
                    raise self._fail(1002, "frame length has its top bit set")
            if rsv:
                raise self._fail(1002, "reserved bits set without an extension")
            if masked:
                raise self._fail(1002, "a server frame is masked")
            if op >= 0x8:
                if not fin or n > 125:
                    raise self._fail(1002, "a control frame is fragmented or longer than 125 bytes")
            elif self._frag_len + n > self.max_message_bytes:
                raise self._fail(1009, f"message over {self.max_message_bytes} bytes")
            payload = self._read(n, deadline)

            if op == OP_PING:
                try:
                    self._send_raw(_frame(OP_PONG, payload), control=True)
                except WebSocketClosed:
                    pass
                continue
            if op == OP_PONG:
                self._pongs += 1
                continue
            if op == OP_CLOSE:
                if n == 1:
                    raise self._fail(1002, "a close frame with a 1-byte payload")
                code = struct.unpack(">H", payload[:2])[0] if n >= 2 else 1005
                try:
                    reason = payload[2:].decode("utf-8")
                except UnicodeDecodeError:
                    raise self._fail(1007, "a close reason that is not UTF-8") from None
                try:
                    self._send_close(code if code not in (1005, 1006, 1015) else 1000, "")  # echo (no-op if ours went first)
                except WebSocketClosed:
                    pass
                self._teardown(code, reason)
                raise WebSocketClosed(code, reason)
            if op in (OP_TEXT, OP_BINARY):
                if self._frag_op is not None:
                    raise self._fail(1002, "a new message began inside a fragmented one")
                if not fin:
                    self._frag_op, self._frag, self._frag_len = op, [payload], n
                    continue
                return self._deliver(op, payload)
            if op == OP_CONT:
                if self._frag_op is None:
                    raise self._fail(1002, "a continuation frame outside a fragmented message")
                self._frag.append(payload)
                self._frag_len += n
                if not fin:
                    continue
                op, data = self._frag_op, b"".join(self._frag)
                self._frag_op, self._frag, self._frag_len = None, [], 0
                return self._deliver(op, data)
            raise self._fail(1002, f"unknown opcode {op}")

    def _deliver(self, op: int, data: bytes) -> Message:
        if op == OP_BINARY:
            return data
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail(1007, "a text message that is not UTF-8") from None

    def recv(self, timeout: Optional[float] = None) -> Message:
        """The next message: ``bytes`` for a binary one, ``str`` for a text one. Pings are
        answered meanwhile. Raises :class:`WebSocketClosed` once the connection is closed (its
        ``code`` 1000 for a normal close), ``TimeoutError`` if no message came within
        ``timeout`` seconds (None: wait as long as it takes). One thread reads at a time.

        Example::

            try:
                msg = ws.recv(timeout=5)
            except TimeoutError:
                msg = None
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._recv_lock.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            raise TimeoutError("another thread is reading this WebSocket")
        try:
            return self._next_message(deadline)
        finally:
            self._recv_lock.release()

    def __iter__(self) -> Iterator[Message]:
        """Yields messages until the connection closes normally (1000 or 1005); an abnormal
        close raises its :class:`WebSocketClosed`.

        Example::

            for msg in ws:
                handle(msg)
        """
        while True:
            try:
                yield self.recv()
            except WebSocketClosed as e:
                if e.code in (1000, 1005) and not isinstance(e, WebSocketProtocolError):
                    return
                raise

    # ----------------------------------------------------------------- closing

    def _send_close(self, code: int, reason: str) -> None:
        with self._state_lock:
            if self._close_sent:
                return
            self._close_sent = True
        self._send_raw(_frame(OP_CLOSE, _close_payload(code, reason)), control=True)

    def _teardown(self, code: int, reason: str) -> None:
        with self._state_lock:
            if self._closed.is_set():
                return
            self.close_code, self.close_reason = code, reason
            self._closed.set()
        try:
            socket.socket.shutdown(self._sock, socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self._sock.close()
        except OSError:
            pass

    def close(self, code: int = 1000, reason: str = "", timeout: float = 5.0) -> None:
        """Closes the connection with the closing handshake: sends a close frame, waits up to
        ``timeout`` seconds for the peer's (dropping messages that arrive meanwhile), then
        closes the socket. Idempotent; safe from any thread (a reader blocked in
        :meth:`recv` gets :class:`WebSocketClosed`).

        Example::

            ws.close()                       # 1000, normal
            ws.close(1001, "going away")
        """
        if self._closed.is_set():
            return
        try:
            self._send_close(code, reason)
        except WebSocketClosed:
            return
        if self._recv_lock.acquire(blocking=False):
            try:
                deadline = time.monotonic() + timeout
                while not self._closed.is_set():
                    try:
                        self._next_message(deadline)
                    except (WebSocketClosed, TimeoutError):
                        break
            finally:
                self._recv_lock.release()
        else:
            self._closed.wait(timeout)  # the reading thread sees the peer's close frame
        self._teardown(code, reason)

    def abort(self) -> None:
        """Drops the connection at once, without the closing handshake.

        Example::

            ws.abort()
        """
        self._teardown(1006, "aborted")

    def __enter__(self) -> "WebSocket":
        """Example::

        with WebSocket.connect(url) as ws:
            ws.send("hi")
        """
        return self

    def __exit__(self, *exc: object) -> None:
        """Closes the connection (see :meth:`close`).

        Example::

            with WebSocket.connect(url) as ws:
                pass   # closed here
        """
        self.close()
