"""The standard-library WebSocket client, the PTY protocol on top of it, and raw port tunnels,
against a scripted local server (no Den, no VMs): masking, fragments both ways, ping/pong,
the closing handshake from either side, the message-size bound, timeouts, refused handshakes
as typed errors, a bad accept key, and TLS (wss)."""

import json
import socket
import struct
import threading
import time
import unittest
import urllib.request

from den_sdk import (
    AbortedError,
    AuthenticationError,
    Client,
    DenConnectionRefusedError,
    InvalidStateError,
    NotFoundError,
    Pty,
    SandboxNotFoundError,
    WebSocket,
    WebSocketClosed,
    WebSocketError,
    WebSocketProtocolError,
)
from den_sdk.ports import PortForward, connect_port

from ._fake_server import FakeDen, client_tls_context

AUTH = {"Authorization": "Bearer den_test"}


class WebSocketClientTest(unittest.TestCase):
    def serve(self, handler, tls=False):
        den = FakeDen(tls=tls)
        den.routes[("GET", "/ws")] = handler
        den.__enter__()
        self.addCleanup(den.__exit__)
        return den

    def test_echo_text_and_binary_masked_with_auth(self):
        seen = {}

        def handler(req):
            seen["auth"] = req.headers.get("authorization")
            peer = req.upgrade_ws()
            for _ in range(3):
                op, data = peer.read_message()  # asserts every client frame is masked
                peer.send_frame(op, data)
            op, data = peer.read_message()
            seen["close"] = (op, data)
            peer.send_frame(8, data)

        den = self.serve(handler)
        with WebSocket.connect(den.url.replace("http", "ws") + "/ws", AUTH, timeout=10) as ws:
            ws.send("héllo")
            self.assertEqual(ws.recv(timeout=10), "héllo")
            ws.send(b"\x00\xff" * 40000)  # 80 000 bytes: the 16-bit length form
            self.assertEqual(ws.recv(timeout=10), b"\x00\xff" * 40000)
            ws.send(bytes(range(256)) * 300, fragment_bytes=1000)  # sent in 77 frames
            self.assertEqual(ws.recv(timeout=10), bytes(range(256)) * 300)
        self.assertTrue(ws.closed)
        self.assertEqual(ws.close_code, 1000)
        self.assertEqual(seen["auth"], "Bearer den_test")
        self.assertEqual(seen["close"], (8, struct.pack(">H", 1000)))

    def test_fragmented_message_with_a_ping_inside_and_a_server_close(self):
        pong = {}

        def handler(req):
            peer = req.upgrade_ws()
            peer.send_frame(1, b"frag", fin=False)
            peer.send_frame(9, b"are you there")  # a control frame between fragments
            peer.send_frame(0, b"ment", fin=False)
            peer.send_frame(0, "ed ✓".encode(), fin=True)
            fin, op, data, masked = peer.read_frame()
            pong["frame"] = (fin, op, data, masked)
            peer.close(1000, "bye")
            peer.read_frame()  # the client's echo

        den = self.serve(handler)
        ws = WebSocket.connect(den.url + "/ws", timeout=10)  # http:// is taken as ws://
        self.assertEqual(list(ws), ["fragmented ✓"])  # iteration ends at a normal close
        self.assertEqual(pong["frame"], (True, 10, b"are you there", True))
        self.assertEqual((ws.close_code, ws.close_reason), (1000, "bye"))
        with self.assertRaises(WebSocketClosed):
            ws.send("too late")

    def test_message_over_the_bound_closes_with_1009(self):
        got = {}

        def handler(req):
            peer = req.upgrade_ws()
            peer.send_frame(2, b"x" * 600, fin=False)
            peer.send_frame(0, b"x" * 600)
            op, data = peer.read_message()
            got["close"] = (op, struct.unpack(">H", data[:2])[0])

        den = self.serve(handler)
        ws = WebSocket.connect(den.url + "/ws", timeout=10, max_message_bytes=1000)
        with self.assertRaises(WebSocketProtocolError) as cm:
            ws.recv(timeout=10)
        self.assertEqual(cm.exception.code, 1009)
        deadline = time.monotonic() + 5
        while "close" not in got and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(got["close"], (8, 1009))

    def test_protocol_violations(self):
        for name, send in [
            ("masked server frame", lambda p: p.send_frame(1, b"hi", mask=True)),
            ("reserved bits", lambda p: p.send_frame(1, b"hi", rsv=0x40)),
            ("bad opcode", lambda p: p.send_frame(3, b"")),
            ("continuation first", lambda p: p.send_frame(0, b"x")),
            ("invalid utf-8", lambda p: p.send_frame(1, b"\xff\xfe")),
        ]:
            with self.subTest(name):
                den = self.serve(lambda req, send=send: (send(req.upgrade_ws()), time.sleep(0.5)))
                ws = WebSocket.connect(den.url + "/ws", timeout=10)
                with self.assertRaises(WebSocketProtocolError) as cm:
                    ws.recv(timeout=10)
                self.assertIn(cm.exception.code, (1002, 1007))
                self.assertTrue(ws.closed)

    def test_recv_timeout_then_still_usable(self):
        def handler(req):
            peer = req.upgrade_ws()
            time.sleep(2)
            peer.send_text("late")
            peer.read_message()

        den = self.serve(handler)
        ws = WebSocket.connect(den.url + "/ws", timeout=10)
        t0 = time.monotonic()
        with self.assertRaises(TimeoutError):
            ws.recv(timeout=0.2)
        self.assertLess(time.monotonic() - t0, 1.5)
        self.assertEqual(ws.recv(timeout=10), "late")
        ws.abort()

    def test_close_from_another_thread_wakes_a_blocked_reader(self):
        def handler(req):
            peer = req.upgrade_ws()
            op, data = peer.read_message()
            peer.send_frame(8, data)

        den = self.serve(handler)
        ws = WebSocket.connect(den.url + "/ws", timeout=10)
        out = {}

        def reader():
            try:
                ws.recv()
            except WebSocketClosed as e:
                out["code"] = e.code

        t = threading.Thread(target=reader)
        t.start()
        time.sleep(0.2)
        ws.close(timeout=5)
        t.join(5)
        self.assertFalse(t.is_alive())
        self.assertEqual(out["code"], 1000)

    def test_refused_handshakes_are_typed_errors(self):
        den = self.serve(lambda req: req.error(401, "unauthorized", "invalid or revoked API key"))
        with self.assertRaises(AuthenticationError) as cm:
            WebSocket.connect(den.url + "/ws", timeout=10)
        self.assertEqual((cm.exception.status, cm.exception.code), (401, "unauthorized"))
        with self.assertRaises(NotFoundError):
            WebSocket.connect(den.url + "/nope", timeout=10)  # route_not_found

    def test_a_wrong_accept_key_is_refused(self):
        den = self.serve(lambda req: req.upgrade_ws(accept="AAAAAAAAAAAAAAAAAAAAAAAAAAA="))
        with self.assertRaises(WebSocketError):
            WebSocket.connect(den.url + "/ws", timeout=10)

    def test_wss(self):
        def handler(req):
            peer = req.upgrade_ws()
            op, data = peer.read_message()
            peer.send_frame(op, data[::-1])
            op, data = peer.read_message()
            peer.send_frame(8, data)

        den = self.serve(handler, tls=True)
        url = den.url.replace("https", "wss").replace("127.0.0.1", "localhost") + "/ws"
        with WebSocket.connect(url, timeout=10, ssl_context=client_tls_context()) as ws:
            ws.send(b"abc" * 50000)
            self.assertEqual(ws.recv(timeout=10), (b"abc" * 50000)[::-1])
        self.assertEqual(ws.close_code, 1000)
        with self.assertRaises(OSError):  # the system's trust store does not know the test CA
            WebSocket.connect(url, timeout=10)


def pty_server(den, seen):
    """The server side of /v1/sandboxes/{id}/pty, scripted: echoes input as output, answers a
    resize with "size R C", and on "exit N" sends the exit and closes."""

    def handler(req):
        seen["query"] = req.query
        peer = req.upgrade_ws()
        buf = b""
        while True:
            op, data = peer.read_message()
            if op == 8:
                seen["closed_by_client"] = True
                peer.send_frame(8, data)
                return
            if op == 1:
                m = json.loads(data)
                seen.setdefault("control", []).append(m)
                if m["type"] == "resize":
                    peer.send_binary(f"size {m['rows']} {m['cols']}\r\n".encode())
                continue
            buf += data
            peer.send_binary(data)
            if b"exit " in buf and buf.endswith(b"\n"):
                code = int(buf.split(b"exit ")[1])
                peer.send_text(json.dumps({"type": "exit", "exit_code": code, "signal": None}))
                peer.close(1000)
                peer.read_frame()
                return

    den.routes[("GET", "/v1/sandboxes/sbx_aaaaaaaaaaaaaaaa/pty")] = handler


class PtyProtocolTest(unittest.TestCase):
    def setUp(self):
        self.den = FakeDen()
        self.den.__enter__()
        self.addCleanup(self.den.__exit__)
        self.client = Client(api_url=self.den.url, api_key="den_test")
        self.seen = {}
        pty_server(self.den, self.seen)

    def test_input_resize_expect_exit(self):
        term = Pty.open(self.client, "sbx_aaaaaaaaaaaaaaaa", rows=30, cols=100, cmd="bash -l")
        self.assertEqual(self.seen["query"], {"cmd": "bash -l", "rows": "30", "cols": "100"})
        term.write("echo hi\n")
        self.assertEqual(term.expect(r"hi\n", timeout=10), "echo hi\n")
        term.resize(33, 99)
        self.assertEqual(term.expect(r"size \d+ \d+\r\n", timeout=10), "size 33 99\r\n")
        term.signal(2)
        term.write(b"x" * 200_000)  # sent in 64 KiB messages
        got = b""
        while len(got) < 200_000:
            got += term.read(timeout=10)
        self.assertEqual(got, b"x" * 200_000)
        with self.assertRaises(TimeoutError):
            term.read(timeout=0.1)
        term.write("exit 7\n")
        self.assertEqual(term.wait(timeout=10).exit_code, 7)
        self.assertTrue(term.done)
        self.assertEqual(self.seen["control"], [{"type": "resize", "rows": 33, "cols": 99}, {"type": "signal", "signal": 2}])
        with self.assertRaises(InvalidStateError):
            term.write("more")
        with self.assertRaises(EOFError):
            term.expect("never", timeout=5)
        term.close()

    def test_iteration_and_on_data(self):
        chunks = []
        term = Pty.open(self.client, "sbx_aaaaaaaaaaaaaaaa", on_data=chunks.append)
        term.write("exit 0\n")
        self.assertEqual(term.wait(timeout=10).exit_code, 0)
        self.assertEqual(b"".join(chunks), b"exit 0\n")
        with self.assertRaises(RuntimeError):
            term.read()
        with Pty.open(self.client, "sbx_aaaaaaaaaaaaaaaa") as term:
            term.write("exit 3\n")
            self.assertEqual(b"".join(term), b"exit 3\n")
            self.assertEqual(term.exit.exit_code, 3)

    def test_close_kills_and_wait_reports_it(self):
        term = Pty.open(self.client, "sbx_aaaaaaaaaaaaaaaa")
        term.close()
        with self.assertRaises(AbortedError):
            term.wait(timeout=10)
        self.assertEqual(list(term), [])  # closed by us: the iteration just ends
        deadline = time.monotonic() + 5
        while not self.seen.get("closed_by_client") and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertTrue(self.seen.get("closed_by_client"))

    def test_an_error_frame_becomes_the_typed_error(self):
        def handler(req):
            peer = req.upgrade_ws()
            peer.send_text(json.dumps({"type": "error", "error": {"code": "sandbox_not_found", "message": "sandbox \"x\" does not exist"}}))
            peer.close(1011)
            try:
                peer.read_frame()
            except EOFError:
                pass

        self.den.routes[("GET", "/v1/sandboxes/sbx_bbbbbbbbbbbbbbbb/pty")] = handler
        term = Pty.open(self.client, "sbx_bbbbbbbbbbbbbbbb")
        with self.assertRaises(SandboxNotFoundError) as cm:
            term.wait(timeout=10)
        self.assertEqual(cm.exception.status, 404)
        with self.assertRaises(SandboxNotFoundError):
            list(term)


class TunnelTest(unittest.TestCase):
    def setUp(self):
        self.den = FakeDen()
        self.den.__enter__()
        self.addCleanup(self.den.__exit__)
        self.client = Client(api_url=self.den.url, api_key="den_test")

        def echo(req):
            assert req.headers["upgrade"] == "den-tcp" and req.headers["authorization"] == "Bearer den_test"
            sock = req.upgrade_tcp()
            sock.sendall(b"hello ")  # the guest speaks first: nothing of it may be lost
            while True:
                data = sock.recv(65536)
                if not data:
                    break
                sock.sendall(data.upper())
            sock.shutdown(socket.SHUT_WR)

        self.den.routes[("GET", "/v1/sandboxes/sbx_aaaaaaaaaaaaaaaa/ports/7000")] = echo
        self.den.routes[("GET", "/v1/sandboxes/sbx_aaaaaaaaaaaaaaaa/ports/9999")] = lambda r: r.error(502, "connection_refused", "nothing listens on port 9999")

    def test_connect_port(self):
        with connect_port(self.client, "sbx_aaaaaaaaaaaaaaaa", 7000) as sock:
            sock.sendall(b"abc")
            sock.shutdown(socket.SHUT_WR)
            got = b""
            while True:
                d = sock.recv(100)
                if not d:
                    break
                got += d
        self.assertEqual(got, b"hello ABC")
        with self.assertRaises(DenConnectionRefusedError) as cm:
            connect_port(self.client, "sbx_aaaaaaaaaaaaaaaa", 9999)
        self.assertEqual(cm.exception.status, 502)

    def test_forward_serves_many_connections(self):
        with PortForward(lambda: connect_port(self.client, "sbx_aaaaaaaaaaaaaaaa", 7000), 7000) as fwd:
            for i in range(3):
                with socket.create_connection(fwd.local_address, timeout=10) as s:
                    s.sendall(f"n{i}".encode())
                    s.shutdown(socket.SHUT_WR)
                    got = b""
                    while True:
                        d = s.recv(100)
                        if not d:
                            break
                        got += d
                self.assertEqual(got, f"hello N{i}".encode())
            self.assertEqual(fwd.connections, 3)
        self.assertTrue(fwd.closed)
        with self.assertRaises(OSError):
            socket.create_connection(fwd.local_address, timeout=2)

    def test_forward_records_refusals(self):
        with PortForward(lambda: connect_port(self.client, "sbx_aaaaaaaaaaaaaaaa", 9999), 9999) as fwd:
            with socket.create_connection(fwd.local_address, timeout=10) as s:
                self.assertEqual(s.recv(100), b"")  # hung up
            deadline = time.monotonic() + 5
            while not fwd.errors and time.monotonic() < deadline:
                time.sleep(0.02)
            self.assertIsInstance(fwd.errors[0], DenConnectionRefusedError)


class TlsRestTest(unittest.TestCase):
    def test_rest_calls_over_https_with_a_context(self):
        with FakeDen(tls=True) as den:
            den.routes[("GET", "/v1/templates")] = lambda r: r.json(200, {"templates": []})
            c = Client(api_url=den.url.replace("127.0.0.1", "localhost"), api_key="k", ssl_context=client_tls_context())
            self.assertEqual(c.json("GET", "/v1/templates"), {"templates": []})
            with self.assertRaises(urllib.request.URLError):
                Client(api_url=den.url.replace("127.0.0.1", "localhost"), api_key="k").json("GET", "/v1/templates")


if __name__ == "__main__":
    unittest.main()
