"""A scripted stand-in for the Den API, for the offline tests: plain HTTP routes, WebSocket
upgrades (server side of RFC 6455, written here independently of the client) and
``Upgrade: den-tcp`` tunnels, over HTTP or TLS (``fixtures/localhost-*.pem``: a throwaway
self-signed certificate for localhost and 127.0.0.1, made for these tests only)."""

import base64
import hashlib
import json
import os
import socket
import ssl
import struct
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CERT = FIXTURES / "localhost-cert.pem"
KEY = FIXTURES / "localhost-key.pem"
GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

SANDBOX = {
    "id": "sbx_aaaaaaaaaaaaaaaa", "state": "running", "state_reason": None, "template": "base", "template_version": "0123456789ab",
    "persistent": False, "ttl_seconds": 3600, "expires_at": "2030-01-01T00:00:00.000Z", "idle_timeout_seconds": 900, "on_idle": "hibernate",
    "metadata": {}, "vcpus": 1, "memory_mb": 512, "disk_mb": 2048, "created_at": "2025-01-01T00:00:00.000Z",
    "last_activity_at": "2025-01-01T00:00:00.000Z", "destroyed_at": None, "hibernate_mode": None, "stored_bytes": None,
    "network": {"egress": "none"}, "operation": None,
}


def client_tls_context() -> ssl.SSLContext:
    """A client context that trusts the fixture certificate."""
    ctx = ssl.create_default_context(cafile=str(CERT))
    return ctx


class WSPeer:
    """The server's side of one WebSocket connection."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def _read(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("client went away")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_frame(self) -> Tuple[bool, int, bytes, bool]:
        """(fin, opcode, unmasked payload, whether it was masked)."""
        b0, b1 = self._read(2)
        n = b1 & 0x7F
        if n == 126:
            (n,) = struct.unpack(">H", self._read(2))
        elif n == 127:
            (n,) = struct.unpack(">Q", self._read(8))
        masked = bool(b1 & 0x80)
        key = self._read(4) if masked else b"\0\0\0\0"
        data = bytes(b ^ key[i % 4] for i, b in enumerate(self._read(n)))
        return bool(b0 & 0x80), b0 & 0x0F, data, masked

    def read_message(self) -> Tuple[int, bytes]:
        """The next data message (reassembled), answering pings; (8, payload) for a close."""
        parts = []
        op0 = None
        while True:
            fin, op, data, masked = self.read_frame()
            assert masked, "a client frame was not masked"
            if op == 9:
                self.send_frame(10, data)
                continue
            if op == 10:
                continue
            if op == 8:
                return 8, data
            if op0 is None:
                op0 = op
            parts.append(data)
            if fin:
                return op0, b"".join(parts)

    def send_frame(self, opcode: int, payload: bytes = b"", fin: bool = True, mask: bool = False, rsv: int = 0) -> None:
        head = bytes([(0x80 if fin else 0) | rsv | opcode])
        n = len(payload)
        mbit = 0x80 if mask else 0
        if n < 126:
            head += bytes([mbit | n])
        elif n < 65536:
            head += bytes([mbit | 126]) + struct.pack(">H", n)
        else:
            head += bytes([mbit | 127]) + struct.pack(">Q", n)
        if mask:
            key = os.urandom(4)
            payload = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
            head += key
        self.sock.sendall(head + payload)

    def send_text(self, text: str) -> None:
        self.send_frame(1, text.encode("utf-8"))

    def send_binary(self, data: bytes) -> None:
        self.send_frame(2, data)

    def close(self, code: int = 1000, reason: str = "") -> None:
        self.send_frame(8, struct.pack(">H", code) + reason.encode())


class Request:
    def __init__(self, h: "Handler") -> None:
        self.h = h
        u = urllib.parse.urlsplit(h.path)
        self.method = h.command
        self.path = u.path
        self.query = dict(urllib.parse.parse_qsl(u.query))
        self.headers = {k.lower(): v for k, v in h.headers.items()}
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            self.body = self._read_chunked()
            self.chunked = True
        else:
            n = int(self.headers.get("content-length") or 0)
            self.body = h.rfile.read(n) if n else b""
            self.chunked = False

    def _read_chunked(self) -> bytes:
        parts = []
        while True:
            size = int(self.h.rfile.readline(100).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.h.rfile.readline(1000) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            parts.append(self.h.rfile.read(size))
            self.h.rfile.readline(10)  # the CRLF after the chunk

    def json(self, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.h.send_response(status)
        self.h.send_header("Content-Type", "application/json")
        self.h.send_header("Content-Length", str(len(data)))
        self.h.end_headers()
        self.h.wfile.write(data)

    def error(self, status: int, code: str, message: str, details: Optional[Dict[str, Any]] = None) -> None:
        err: Dict[str, Any] = {"code": code, "message": message}
        if details is not None:
            err["details"] = details
        self.json(status, {"error": err})

    def raw(self, status: int, data: bytes, content_type: str = "application/octet-stream") -> None:
        self.h.send_response(status)
        self.h.send_header("Content-Type", content_type)
        self.h.send_header("Content-Length", str(len(data)))
        self.h.end_headers()
        self.h.wfile.write(data)

    def ndjson(self, lines: Any) -> None:
        """Streams NDJSON lines (an iterable; each an object), chunked."""
        self.h.send_response(200)
        self.h.send_header("Content-Type", "application/x-ndjson")
        self.h.send_header("Transfer-Encoding", "chunked")
        self.h.end_headers()
        try:
            for line in lines:
                data = (json.dumps(line) + "\n").encode()
                self.h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.h.wfile.flush()
            self.h.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass

    def upgrade_ws(self, accept: Optional[str] = None) -> WSPeer:
        key = self.headers["sec-websocket-key"]
        want = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        self.h.wfile.write(
            ("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
             f"Sec-WebSocket-Accept: {accept or want}\r\n\r\n").encode()
        )
        self.h.wfile.flush()
        self.h.close_connection = True
        return WSPeer(self.h.connection)

    def upgrade_tcp(self) -> socket.socket:
        self.h.wfile.write(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: den-tcp\r\n\r\n")
        self.h.wfile.flush()
        self.h.close_connection = True
        return self.h.connection


Route = Callable[[Request], None]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "FakeDen._Server"

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _dispatch(self) -> None:
        req = Request(self)
        self.server.fake.requests.append(req)
        route = self.server.fake.routes.get((req.method, req.path))
        if route is None:
            req.error(404, "route_not_found", f"no route {req.method} {req.path}")
            return
        route(req)

    do_GET = do_POST = do_PUT = do_DELETE = _dispatch


class FakeDen:
    """``with FakeDen() as den: den.routes[("GET", "/v1/x")] = fn; den.url``"""

    class _Server(ThreadingHTTPServer):
        daemon_threads = True
        fake: "FakeDen"

        def handle_error(self, request: Any, client_address: Any) -> None:
            pass  # a scripted handler whose client went away: expected in these tests

    def __init__(self, tls: bool = False) -> None:
        self.routes: Dict[Tuple[str, str], Route] = {}
        self.requests: list = []
        self.server = self._Server(("127.0.0.1", 0), Handler)
        self.server.fake = self
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(str(CERT), str(KEY))
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        scheme = "https" if tls else "http"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> "FakeDen":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def sandbox_routes(self) -> None:
        """GET /v1/sandboxes/{SANDBOX id}: the canned sandbox."""
        self.routes[("GET", f"/v1/sandboxes/{SANDBOX['id']}")] = lambda r: r.json(200, SANDBOX)
