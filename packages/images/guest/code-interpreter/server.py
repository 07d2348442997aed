#!/usr/bin/env python3
"""Den's code interpreter: the HTTP server on port 49999 that `@e2b/code-interpreter` talks to.

Runs inside a sandbox (python3 /opt/den/code-interpreter/server.py, as root, cwd /home/user) and
is snapshotted with it. Contexts are Jupyter Python kernels (ipykernel, spoken to over ZeroMQ
with jupyter_client's Session) or persistent bash processes. Standard library, python3-zmq,
python3-jupyter-client and python3-ipykernel only. See README.md next to this file for the wire
protocol, the bounds and the reasons behind the design.

Nothing here measures wall-clock time, and no waiting is cut short by a clock that jumped: the
VM that runs this may be frozen for hours and resumed (or forked) at any point.
"""

import base64
import codecs
import json
import os
import re
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import zmq
from jupyter_client.session import Session

# ---- bounds -------------------------------------------------------------------------------
MAX_OUTPUT_BYTES = 1024 * 1024  # stdout+stderr forwarded per execution
MAX_RESULT_BYTES = 16 * 1024 * 1024  # results (plots, tables) forwarded per execution, apart from the streams
MAX_ERROR_FIELD = 64 * 1024  # an error's value and traceback, each
MAX_BODY_BYTES = 16 * 1024 * 1024  # request body
MAX_CONTEXTS = 64
MAX_CONNECTIONS = 128  # concurrent HTTP connections (one thread each)
IDLE_CONNECTION_SECONDS = 60  # a keep-alive connection idle this long is closed
KERNEL_START_PATIENCE = 120.0  # seconds of (jump-tolerant) patience for a kernel to answer
INTERRUPT_PATIENCE = 10.0  # after an interrupt, before a second one; after that, a restart
POLL_SECONDS = 0.2

PORT = int(os.environ.get("DEN_CODE_PORT", "49999"))
SANDBOX_ENV_HEADER = "X-Den-Sandbox-Env"
LANGUAGES = {"python": "python", "python3": "python", "bash": "bash"}
TRUNCATION_MARKER = "[den: output truncated after %d bytes]\n" % MAX_OUTPUT_BYTES
MIME_KEYS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
}


def default_cwd():
    for d in (os.environ.get("DEN_CODE_CWD"), "/home/user", os.path.expanduser("~"), "/"):
        if d and os.path.isdir(d):
            return d
    return "/"


def runtime_dir():
    for base in ("/run",):
        try:
            d = os.path.join(base, "den-code-interpreter-%d" % os.getpid())
            os.makedirs(d, mode=0o700, exist_ok=True)
            return d
        except OSError:
            pass
    return tempfile.mkdtemp(prefix="den-ci-")


def log(msg):
    try:
        sys.stderr.write("den-code-interpreter: %s\n" % msg)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def now_iso():
    return datetime.now(timezone.utc).isoformat()


class Patience:
    """A stopwatch that a clock jump cannot exhaust: each look adds at most 1 s to the time spent,
    so a VM frozen for hours in the middle of a wait resumes with its patience (nearly) intact."""

    def __init__(self, seconds):
        self.limit = seconds
        self.spent = 0.0
        self.last = time.monotonic()

    def expired(self):
        now = time.monotonic()
        self.spent += min(max(now - self.last, 0.0), 1.0)
        self.last = now
        return self.spent >= self.limit


class KernelGone(Exception):
    pass


class Sink:
    """Where one execution's events go: NDJSON lines on a chunked HTTP response, at most
    MAX_OUTPUT_BYTES of output, and a way to notice that the client went away while the cell
    prints nothing (its socket becomes readable at EOF)."""

    def __init__(self, handler):
        self.handler = handler
        self.sock = handler.connection
        self.gone = False
        self.sent = 0
        self.truncated = False
        self.result_bytes = 0
        self.pending = []

    def fileno(self):
        return self.sock.fileno()

    def client_gone(self):
        """True once the client has closed its side (EOF or error on the socket)."""
        if self.gone:
            return True
        try:
            r, _, x = select.select([self.sock], [], [self.sock], 0)
            if x:
                self.gone = True
            elif r:
                data = self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
                if data == b"":
                    self.gone = True
        except BlockingIOError:
            pass
        except OSError:
            self.gone = True
        return self.gone

    def _budget(self, n):
        """How many of n bytes of output may still go; queues the marker once when they run out."""
        if self.truncated:
            return 0
        left = MAX_OUTPUT_BYTES - self.sent
        if n <= left:
            self.sent += n
            return n
        self.truncated = True
        self.sent = MAX_OUTPUT_BYTES
        return max(left, 0)

    def _marker(self):
        self.pending.append({"type": "stderr", "text": TRUNCATION_MARKER, "timestamp": now_iso()})

    def stream(self, name, text):
        if not text or self.truncated:
            return
        raw = text.encode("utf-8", "replace")
        allowed = self._budget(len(raw))
        if allowed < len(raw):
            text = raw[:allowed].decode("utf-8", "ignore")
        if text:
            self.pending.append({"type": name, "text": text, "timestamp": now_iso()})
        if allowed < len(raw):
            self._marker()

    def result(self, data, is_main):
        # Results have a budget of their own: a cell whose prints were cut still gives its value.
        event = {"type": "result", "is_main_result": bool(is_main)}
        extra = {}
        for mime, value in data.items():
            key = MIME_KEYS.get(mime)
            if key:
                event[key] = value
            else:
                extra[mime] = value
        if extra:
            event["extra"] = extra
        size = len(json.dumps(event))
        if self.result_bytes + size <= MAX_RESULT_BYTES:
            self.result_bytes += size
            self.pending.append(event)
        else:  # a result is all or nothing
            self.pending.append({"type": "stderr", "text": "[den: a result of %d bytes dropped: past %d bytes of results]\n" % (size, MAX_RESULT_BYTES), "timestamp": now_iso()})

    def error(self, name, value, traceback):
        self.pending.append(
            {
                "type": "error",
                "name": str(name)[:MAX_ERROR_FIELD],
                "value": str(value)[:MAX_ERROR_FIELD],
                "traceback": str(traceback)[-MAX_ERROR_FIELD:],
            }
        )

    def event(self, event):
        self.pending.append(event)

    def flush(self):
        if not self.pending:
            return
        events, self.pending = self.pending, []
        if self.gone:
            return
        body = "".join(json.dumps(e, ensure_ascii=True) + "\n" for e in events).encode("ascii")
        try:
            self.handler.wfile.write(b"%x\r\n%s\r\n" % (len(body), body))
        except OSError:
            self.gone = True


# ---- Python (Jupyter) kernels --------------------------------------------------------------

ZMQ = zmq.Context.instance()

# Installed silently in every Python kernel: sys.modules["_den_ci"], which applies an execution's
# environment variables and puts the earlier values back afterwards. Run with exec() in a
# namespace of its own, so nothing lands in the user's namespace.
HELPER_SRC = r"""
import os, sys, types
m = types.ModuleType("_den_ci")
m.saved = {}
def apply(env):
    saved = {}
    for k, v in env.items():
        try:
            saved[k] = os.environ.get(k)
            os.environ[k] = v
        except Exception:
            pass
    m.saved = saved
def restore():
    for k, v in m.saved.items():
        try:
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        except Exception:
            pass
    m.saved = {}
m.apply = apply
m.restore = restore
sys.modules["_den_ci"] = m
"""

# The default context's warm-up: import what data work uses, draw (and close) one figure so that
# the fonts are loaded, all in a throwaway namespace.
WARMUP_SRC = r"""
import importlib
for name in ("numpy", "pandas", "matplotlib", "matplotlib_inline.backend_inline", "matplotlib.pyplot"):
    try:
        importlib.import_module(name)
    except Exception:
        pass
try:
    import io
    import matplotlib.pyplot as plt
    fig = plt.figure(figsize=(1, 1))
    fig.gca().plot([0, 1], [0, 1])
    fig.savefig(io.BytesIO(), format="png")
    plt.close(fig)
except Exception:
    pass
"""


def silent_code(src):
    return "exec(compile(%r, '<den>', 'exec'), {})" % src


class KernelProcess:
    """What a context's kernel process has in common, Python's or bash's: liveness, how it
    ended, and a kill of its whole process group (what it started goes with it)."""

    proc = None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def describe_exit(self):
        rc = self.proc.returncode if self.proc else None
        if rc is None:
            return "unknown status"
        if rc < 0:
            try:
                return "killed by %s" % signal.Signals(-rc).name
            except ValueError:
                return "killed by signal %d" % -rc
        return "exit status %d" % rc

    def kill_group(self):
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


class PythonKernel(KernelProcess):
    language = "python"

    def __init__(self, cwd, rundir):
        self.cwd = cwd
        self.rundir = rundir
        self.proc = None
        self.sockets = []
        self.count = 0
        self.name = "k-unstarted"

    def start(self):
        key = uuid.uuid4().hex.encode()
        self.name = name = "k" + uuid.uuid4().hex[:12]
        ip = os.path.join(self.rundir, name)
        ports = dict(shell_port=1, iopub_port=2, stdin_port=3, control_port=4, hb_port=5)
        conn = dict(ports, ip=ip, transport="ipc", key=key.decode(), signature_scheme="hmac-sha256",
                    kernel_name="python3")
        cf = os.path.join(self.rundir, name + ".json")
        with open(cf, "w") as f:
            json.dump(conn, f)
        env = dict(os.environ)
        env.update(
            MPLBACKEND="module://matplotlib_inline.backend_inline",
            PYDEVD_DISABLE_FILE_VALIDATION="1",
            JPY_PARENT_PID=str(os.getpid()),
        )
        env.pop("DEN_CODE_PORT", None)
        argv = [sys.executable, "-Xfrozen_modules=off", "-m", "ipykernel_launcher", "-f", cf,
                "--HistoryManager.enabled=False", "--IPKernelApp.log_level=ERROR"]
        self.proc = subprocess.Popen(argv, cwd=self.cwd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, start_new_session=True)
        self.session = Session(key=key, signature_scheme="hmac-sha256", username="den")
        self.shell = ZMQ.socket(zmq.DEALER)
        self.shell.linger = 0
        self.shell.connect("ipc://%s-%d" % (ip, ports["shell_port"]))
        self.iopub = ZMQ.socket(zmq.SUB)
        self.iopub.linger = 0
        self.iopub.rcvhwm = 0
        self.iopub.setsockopt(zmq.SUBSCRIBE, b"")
        self.iopub.connect("ipc://%s-%d" % (ip, ports["iopub_port"]))
        self.sockets = [self.shell, self.iopub]
        self._handshake()
        self.run_silent(silent_code(HELPER_SRC))

    def _handshake(self):
        """Asks for kernel_info until the reply came and iopub delivers (a SUB socket misses
        what is published before its subscription reached the kernel)."""
        patience = Patience(KERNEL_START_PATIENCE)
        replied = iopub_seen = False
        asked = set()
        poller = zmq.Poller()
        poller.register(self.shell, zmq.POLLIN)
        poller.register(self.iopub, zmq.POLLIN)
        ticks = 0
        while not (replied and iopub_seen):
            if self.proc.poll() is not None:
                raise KernelGone("the Python kernel exited while starting (status %s)" % self.proc.returncode)
            if patience.expired():
                raise KernelGone("the Python kernel did not answer in %d s" % KERNEL_START_PATIENCE)
            if ticks % 5 == 0:
                asked.add(self.session.send(self.shell, "kernel_info_request", {})["header"]["msg_id"])
            ticks += 1
            for sock, _ in poller.poll(POLL_SECONDS * 1000):
                while True:
                    _, msg = self.session.recv(sock, mode=zmq.NOBLOCK)
                    if msg is None:
                        break
                    if sock is self.iopub:
                        iopub_seen = True
                    elif msg["parent_header"].get("msg_id") in asked:
                        replied = True
        # Let the answers to the other kernel_info requests arrive, then drop them.
        for _ in range(3):
            for sock, _ in poller.poll(50):
                while self.session.recv(sock, mode=zmq.NOBLOCK)[1] is not None:
                    pass

    def interrupt(self):
        # The kernel only (not its process group): a process the user started in the
        # background from this context must survive the interruption of a later cell.
        if self.alive():
            try:
                os.kill(self.proc.pid, signal.SIGINT)
            except OSError:
                pass

    def kill(self):
        for s in self.sockets:
            s.close(linger=0)
        self.sockets = []
        self.kill_group()
        for f in os.listdir(self.rundir):
            if f.startswith(self.name):
                try:
                    os.unlink(os.path.join(self.rundir, f))
                except OSError:
                    pass

    def run_silent(self, code):
        """Runs bookkeeping code (no output forwarded, no history) and waits for it."""
        self._run(code, None, silent=True)

    def execute(self, code, env, sink):
        if env:
            self.run_silent("__import__('_den_ci').apply(__import__('json').loads(%r))" % json.dumps(env))
        try:
            self._run(code, sink, silent=False)
        finally:
            if env and self.alive() and self.sockets:
                self.run_silent("__import__('_den_ci').restore()")

    def _run(self, code, sink, silent):
        content = dict(code=code, silent=silent, store_history=not silent, user_expressions={},
                       allow_stdin=False, stop_on_error=False)
        msg_id = self.session.send(self.shell, "execute_request", content)["header"]["msg_id"]
        poller = zmq.Poller()
        poller.register(self.shell, zmq.POLLIN)
        poller.register(self.iopub, zmq.POLLIN)
        if sink is not None and not sink.gone:
            poller.register(sink.fileno(), zmq.POLLIN)
        replied = idle = False
        interrupted = None  # Patience since the last interrupt
        interrupts = 0
        after_reply = None
        while not (replied and idle):
            if not self.alive():
                raise KernelGone(self.describe_exit())
            if after_reply is not None and after_reply.expired():
                break  # the idle status got lost: the reply is what counts
            if sink is not None and sink.gone and interrupted is None:
                self.interrupt()
                interrupted, interrupts = Patience(INTERRUPT_PATIENCE), 1
            elif interrupted is not None and interrupted.expired():
                if interrupts >= 2:
                    raise KernelGone("it ignored two interrupts")
                self.interrupt()
                interrupted, interrupts = Patience(INTERRUPT_PATIENCE), interrupts + 1
            for sock, _ in poller.poll(POLL_SECONDS * 1000):
                if isinstance(sock, int):
                    if sink.client_gone():
                        poller.unregister(sock)
                    else:
                        # Data from a client that waits for our answer: stop watching it.
                        poller.unregister(sock)
                    continue
                while True:
                    _, msg = self.session.recv(sock, mode=zmq.NOBLOCK)
                    if msg is None:
                        break
                    if msg["parent_header"].get("msg_id") != msg_id:
                        continue
                    kind = msg["header"]["msg_type"]
                    c = msg["content"]
                    if sock is self.shell:
                        if kind == "execute_reply":
                            replied = True
                            after_reply = Patience(2.0)
                            if not silent and c.get("execution_count") is not None:
                                self.count = c["execution_count"]
                        continue
                    if after_reply is not None:
                        after_reply = Patience(2.0)  # still draining our output
                    if kind == "status":
                        if c.get("execution_state") == "idle":
                            idle = True
                    elif sink is None:
                        continue
                    elif kind == "stream":
                        sink.stream("stderr" if c.get("name") == "stderr" else "stdout", c.get("text", ""))
                    elif kind == "execute_result":
                        sink.result(c.get("data", {}), True)
                    elif kind == "display_data":
                        sink.result(c.get("data", {}), False)
                    elif kind == "error":
                        sink.error(c.get("ename", "Error"), c.get("evalue", ""), "\n".join(c.get("traceback", [])))
            if sink is not None:
                sink.flush()
        if sink is not None:
            sink.event({"type": "number_of_executions", "execution_count": self.count})


# ---- bash ----------------------------------------------------------------------------------

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class BashKernel(KernelProcess):
    """A persistent `bash --norc` driven over pipes: each cell is written to a file and sourced
    (stdin from /dev/null), so cwd, variables and functions persist; a per-execution random
    marker printed after it on stdout (with $?) and stderr tells where the cell's output ends."""

    language = "bash"

    def __init__(self, cwd, rundir):
        self.cwd = cwd
        self.rundir = rundir
        self.proc = None
        self.count = 0

    def start(self):
        env = dict(os.environ)
        env.pop("DEN_CODE_PORT", None)
        env.setdefault("TERM", "dumb")
        self.proc = subprocess.Popen(["bash", "--noprofile", "--norc"], cwd=self.cwd, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True)
        for f in (self.proc.stdout, self.proc.stderr):
            os.set_blocking(f.fileno(), False)
        # An interrupt (SIGINT to the group) ends the running command, not the shell.
        self._write("trap : INT\n")

    def _write(self, text):
        self.proc.stdin.write(text.encode())
        self.proc.stdin.flush()

    def interrupt(self):
        if self.alive():
            try:
                os.killpg(self.proc.pid, signal.SIGINT)
            except OSError:
                pass

    def kill(self):
        if self.proc is not None:
            self.kill_group()
            for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                try:
                    f.close()
                except OSError:
                    pass

    def execute(self, code, env, sink):
        token = "__DEN_END_%s" % uuid.uuid4().hex
        cell = os.path.join(self.rundir, "cell-%s.sh" % uuid.uuid4().hex)
        with open(cell, "w") as f:
            f.write(code)
            if not code.endswith("\n"):
                f.write("\n")
        lines, restore = [], []
        for i, (k, v) in enumerate((env or {}).items()):
            if not ENV_NAME.match(k):
                continue
            lines.append("__den_s%d=${%s+x}; __den_v%d=${%s-}; export %s=%s" % (i, k, i, k, k, shlex.quote(v)))
            restore.append('if [ -n "$__den_s%d" ]; then export %s="$__den_v%d"; else unset %s; fi; unset __den_s%d __den_v%d'
                           % (i, k, i, k, i, i))
        lines.append(". %s < /dev/null" % shlex.quote(cell))
        lines.append("__den_rc=$?")
        lines += restore
        lines.append("printf '%%s %%s\\n' %s \"$__den_rc\"; printf '%%s\\n' %s >&2; unset __den_rc" % (token, token))
        try:
            self._write("\n".join(lines) + "\n")
            self._collect(token.encode(), sink)
        finally:
            try:
                os.unlink(cell)
            except OSError:
                pass

    def _collect(self, token, sink):
        out_fd, err_fd = self.proc.stdout.fileno(), self.proc.stderr.fileno()
        bufs = {out_fd: b"", err_fd: b""}
        done = {out_fd: False, err_fd: False}
        decoders = {out_fd: codecs.getincrementaldecoder("utf-8")("replace"),
                    err_fd: codecs.getincrementaldecoder("utf-8")("replace")}
        names = {out_fd: "stdout", err_fd: "stderr"}
        rc = None
        poller = select.poll()
        poller.register(out_fd, select.POLLIN)
        poller.register(err_fd, select.POLLIN)
        client = sink.fileno() if not sink.gone else None
        if client is not None:
            poller.register(client, select.POLLIN)
        interrupted, interrupts = None, 0
        while not (done[out_fd] and done[err_fd]):
            if sink.gone and interrupted is None:
                self.interrupt()
                interrupted, interrupts = Patience(INTERRUPT_PATIENCE), 1
            elif interrupted is not None and interrupted.expired():
                if interrupts >= 2:
                    raise KernelGone("it ignored two interrupts")
                self.interrupt()
                interrupted, interrupts = Patience(INTERRUPT_PATIENCE), interrupts + 1
            events = poller.poll(POLL_SECONDS * 1000)
            if not events and not self.alive():
                raise KernelGone(self.describe_exit())
            for fd, _ in events:
                if fd == client:
                    sink.client_gone()
                    poller.unregister(fd)
                    client = None
                    continue
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                if not data:
                    poller.unregister(fd)
                    if not done[fd]:
                        raise KernelGone(self.describe_exit() if not self.alive() else "its output closed")
                    continue
                if done[fd]:
                    continue
                buf = bufs[fd] + data
                at = buf.find(token)
                if at >= 0:
                    if fd == out_fd:
                        nl = buf.find(b"\n", at)
                        if nl < 0:
                            bufs[fd] = buf
                            continue
                        try:
                            rc = int(buf[at + len(token):nl].strip() or b"0")
                        except ValueError:
                            rc = 0
                    text, bufs[fd], done[fd] = buf[:at], b"", True
                    final = True
                else:
                    # Everything but a tail that could be the start of the marker goes now.
                    keep = next((k for k in range(min(len(token) - 1, len(buf)), 0, -1) if buf.endswith(token[:k])), 0)
                    text, bufs[fd] = buf[:len(buf) - keep], buf[len(buf) - keep:]
                    final = False
                    if not text:
                        continue
                sink.stream(names[fd], decoders[fd].decode(text, final))
            sink.flush()
        self.count += 1
        if rc:
            sink.error("CommandExitError", "exit status %d" % rc, "bash: the cell exited with status %d" % rc)
        sink.event({"type": "number_of_executions", "execution_count": self.count})


# ---- contexts ------------------------------------------------------------------------------


class Context:
    def __init__(self, language, cwd, rundir):
        self.id = str(uuid.uuid4())
        self.language = language
        self.cwd = cwd
        self.lock = threading.Lock()
        self.rundir = rundir
        self.kernel = None
        self.lost = None  # why the kernel went, when no execution has said so yet
        self.removed = False
        self.note = None  # a loss of state no execution has reported yet

    def info(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    def ensure_started(self):
        """With the lock held: starts the kernel, or replaces a dead one. Returns a note when
        state was lost that no execution reported."""
        note, self.note = self.note, None
        if self.kernel is not None and not self.kernel.alive():
            if self.lost is None:
                note = "[den: the %s process of this context had died (%s) and was restarted: earlier state is gone]\n" % (
                    self.language, self.kernel.describe_exit())
            self.kernel.kill()
            self.kernel = None
        if self.kernel is None:
            k = PythonKernel(self.cwd, self.rundir) if self.language == "python" else BashKernel(self.cwd, self.rundir)
            try:
                k.start()
            except BaseException:
                k.kill()
                raise
            self.kernel = k
            self.lost = None
        return note

    def acquire(self, sink=None):
        """Waits for this context's one execution slot; gives up when the client goes away."""
        while not self.lock.acquire(timeout=0.25):
            if sink is not None and sink.client_gone():
                return False
        if self.removed:
            self.lock.release()
            return False
        return True

    def stop(self):
        if self.kernel is not None:
            self.kernel.kill()
            self.kernel = None


class Registry:
    def __init__(self):
        self.lock = threading.Lock()
        self.contexts = {}
        self.defaults = {}
        self.rundir = runtime_dir()
        self.ready = False
        self.startup_error = None

    def get(self, cid):
        with self.lock:
            return self.contexts.get(cid)

    def create(self, language, cwd, default=False):
        with self.lock:
            if default and language in self.defaults and self.defaults[language].id in self.contexts:
                return self.defaults[language], False
            if len(self.contexts) >= MAX_CONTEXTS:
                raise OverflowError("too many contexts (at most %d): delete some first" % MAX_CONTEXTS)
            ctx = Context(language, cwd, self.rundir)
            self.contexts[ctx.id] = ctx
            if default:
                self.defaults[language] = ctx
            return ctx, True

    def remove(self, ctx):
        with self.lock:
            self.contexts.pop(ctx.id, None)
            if self.defaults.get(ctx.language) is ctx:
                del self.defaults[ctx.language]

    def list(self):
        with self.lock:
            return [c.info() for c in self.contexts.values()]

    def shutdown(self):
        with self.lock:
            ctxs = list(self.contexts.values())
        for c in ctxs:
            if c.kernel is not None:
                c.kernel.kill()
        shutil.rmtree(self.rundir, ignore_errors=True)


REG = Registry()


def warm_up():
    """Creates the default Python context and warms it; /health says OK only afterwards."""
    ctx = None
    for attempt in range(3):
        try:
            ctx, _ = REG.create("python", default_cwd(), default=True)
            with ctx.lock:
                ctx.ensure_started()
                ctx.kernel.run_silent(silent_code(WARMUP_SRC))
            REG.ready = True
            log("ready: default python context %s" % ctx.id)
            return
        except Exception as e:  # noqa: BLE001
            REG.startup_error = "the default Python context failed to start: %s" % e
            log(REG.startup_error)
            if ctx is not None:
                ctx.stop()


# ---- HTTP ----------------------------------------------------------------------------------


class BadRequest(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "den-code-interpreter"
    sys_version = ""
    timeout = IDLE_CONNECTION_SECONDS

    def log_message(self, fmt, *args):  # quiet: errors only
        pass

    # -- plumbing
    def reply(self, status, body=None, ctype="application/json"):
        if body is None:
            data = b""
        elif isinstance(body, (bytes, bytearray)):
            data = bytes(body)
        elif ctype.startswith("text/"):
            data = str(body).encode()
        else:
            data = json.dumps(body).encode()
        self.send_response(status)
        if status != 204:
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if data and status != 204:
            self.wfile.write(data)

    def fail(self, status, message):
        self.reply(status, message + "\n", "text/plain; charset=utf-8")

    def read_json(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            self.close_connection = True
            raise BadRequest(411, "a Content-Length is required")
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.close_connection = True
            raise BadRequest(400, "bad Content-Length")
        if n > MAX_BODY_BYTES:
            # Read (and drop) a body of up to 4x the bound, so the client sees the 413 rather
            # than a connection reset in the middle of its upload.
            self.close_connection = True
            if n <= 4 * MAX_BODY_BYTES:
                while n > 0:
                    chunk = self.rfile.read(min(n, 1 << 20))
                    if not chunk:
                        break
                    n -= len(chunk)
            raise BadRequest(413, "request body too large (at most %d bytes)" % MAX_BODY_BYTES)
        raw = self.rfile.read(n) if n > 0 else b""
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except ValueError:
            raise BadRequest(400, "the body is not JSON")
        if not isinstance(body, dict):
            raise BadRequest(400, "the body must be a JSON object")
        return body

    def route(self):
        return self.path.split("?", 1)[0].rstrip("/") or "/"

    def dispatch(self, method):
        try:
            path = self.route()
            parts = path.strip("/").split("/")
            if path == "/health" and method == "GET":
                if REG.ready:
                    return self.reply(200, "OK")
                return self.reply(503, REG.startup_error or "starting")
            if path == "/execute" and method == "POST":
                return self.execute()
            if path == "/contexts":
                if method == "GET":
                    return self.reply(200, REG.list())
                if method == "POST":
                    return self.create_context()
            if len(parts) == 2 and parts[0] == "contexts" and method == "DELETE":
                return self.delete_context(parts[1])
            if len(parts) == 3 and parts[0] == "contexts" and parts[2] == "restart" and method == "POST":
                return self.restart_context(parts[1])
            if method in ("POST", "DELETE"):
                self.discard_body()
            self.fail(404, "no such endpoint: %s %s" % (method, path))
        except BadRequest as e:
            self.fail(e.status, str(e))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # noqa: BLE001
            log("error on %s %s: %r" % (method, self.path, e))
            self.close_connection = True
            try:
                self.fail(500, "internal error: %s" % e)
            except OSError:
                pass

    def discard_body(self):
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            n = 0
        if 0 < n <= MAX_BODY_BYTES:
            self.rfile.read(n)
        elif n:
            self.close_connection = True

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_DELETE(self):
        self.dispatch("DELETE")

    # -- endpoints
    def create_context(self):
        body = self.read_json()
        language = language_of(body.get("language"))
        cwd = body.get("cwd") or default_cwd()
        if not isinstance(cwd, str) or not os.path.isdir(cwd):
            raise BadRequest(400, "cwd %r is not a directory" % (cwd,))
        try:
            ctx, _ = REG.create(language, cwd)
        except OverflowError as e:
            raise BadRequest(429, str(e))
        with ctx.lock:
            try:
                ctx.ensure_started()
            except Exception as e:  # noqa: BLE001
                REG.remove(ctx)
                ctx.removed = True
                raise BadRequest(500, "the %s context failed to start: %s" % (language, e))
        self.reply(200, ctx.info())

    def context_or_404(self, cid):
        ctx = REG.get(cid)
        if ctx is None:
            raise BadRequest(404, "context %s not found" % cid)
        return ctx

    def restart_context(self, cid):
        self.discard_body()
        ctx = self.context_or_404(cid)
        # A running execution is cut short: the kernel is killed under it (it reports that).
        ctx.lost = "restarted"
        kill_now(ctx)
        if not ctx.acquire():
            raise BadRequest(404, "context %s not found" % cid)
        try:
            ctx.stop()
            try:
                ctx.ensure_started()
            except Exception as e:  # noqa: BLE001
                raise BadRequest(500, "the context failed to restart: %s" % e)
        finally:
            ctx.lock.release()
        self.reply(204)

    def delete_context(self, cid):
        self.discard_body()
        ctx = self.context_or_404(cid)
        REG.remove(ctx)
        ctx.lost = "deleted"
        kill_now(ctx)
        with ctx.lock:
            ctx.removed = True
            ctx.stop()
        self.reply(204)

    def execute(self):
        body = self.read_json()
        code = body.get("code")
        if not isinstance(code, str):
            raise BadRequest(400, "code (a string) is required")
        cid, lang = body.get("context_id"), body.get("language")
        if cid and lang:
            raise BadRequest(400, "context_id and language cannot both be given")
        env = {}
        header = self.headers.get(SANDBOX_ENV_HEADER)
        if header:
            try:
                env = json.loads(base64.b64decode(header, validate=False))
            except ValueError:
                raise BadRequest(400, "%s is not base64 of a JSON object" % SANDBOX_ENV_HEADER)
            if not isinstance(env, dict):
                raise BadRequest(400, "%s is not base64 of a JSON object" % SANDBOX_ENV_HEADER)
        extra = body.get("env_vars") or {}
        if not isinstance(extra, dict):
            raise BadRequest(400, "env_vars must be an object of strings")
        env = {str(k): str(v) for k, v in list(env.items()) + list(extra.items())
               if k and "=" not in str(k) and "\0" not in str(k) + str(v)}
        if cid:
            ctx = self.context_or_404(cid)
        else:
            language = language_of(lang)
            try:
                ctx, _ = REG.create(language, default_cwd(), default=True)
            except OverflowError as e:
                raise BadRequest(429, str(e))

        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        sink = Sink(self)
        if not ctx.acquire(sink):
            if not sink.client_gone():
                sink.error("ContextNotFound", "the context was deleted while this execution waited", "")
                sink.event({"type": "end_of_execution"})
                sink.flush()
            return self.end_chunks(sink)
        try:
            run(ctx, code, env, sink)
        finally:
            ctx.lock.release()
        sink.event({"type": "end_of_execution"})
        sink.flush()
        self.end_chunks(sink)

    def end_chunks(self, sink):
        if sink.gone:
            self.close_connection = True
            return
        try:
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True


def kill_now(ctx):
    """Kills a context's processes without waiting for its lock (an execution may hold it)."""
    kernel = ctx.kernel
    proc = kernel.proc if kernel is not None else None
    if proc is not None and proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass


def run(ctx, code, env, sink):
    """With the context's lock held: (re)starts its kernel if needed and runs one cell."""
    try:
        note = ctx.ensure_started()
    except Exception as e:  # noqa: BLE001
        sink.error("KernelStartError", "the %s context could not start: %s" % (ctx.language, e), "")
        return
    if note:
        sink.stream("stderr", note)
    kernel = ctx.kernel
    try:
        kernel.execute(code, env, sink)
    except KernelGone as e:
        if ctx.lost in ("restarted", "deleted"):
            why = "the context was %s during this execution" % ctx.lost
        elif kernel.alive():
            why = "the %s process of this context was killed: %s after the client went away" % (ctx.language, e)
        else:
            why = "the %s process died during this execution (%s)" % (ctx.language, e)
        ctx.lost = why
        kernel.kill()
        ctx.kernel = None
        if sink.gone:  # nobody heard it: the next execution is told
            ctx.note = "[den: %s; this is a fresh one: earlier state is gone]\n" % why
        sink.error("DeadKernelError", why + "; the next execution in this context starts a fresh one: "
                   "earlier variables are gone", "")
    sink.flush()


def language_of(value):
    if value is None or value == "":
        return "python"
    if not isinstance(value, str) or value.lower() not in LANGUAGES:
        raise BadRequest(400, "unsupported language %r: supported are python and bash" % (value,))
    return LANGUAGES[value.lower()]


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.active = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request, client_address):
        if not self.active.acquire(blocking=False):
            try:
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 22\r\nConnection: close\r\n\r\ntoo many connections\r\n")
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.active.release()

    def handle_error(self, request, client_address):
        pass


def main():
    server = Server(("0.0.0.0", PORT), Handler)

    def stop(signum, frame):
        REG.shutdown()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log("listening on 0.0.0.0:%d" % PORT)
    threading.Thread(target=warm_up, name="warm-up", daemon=True).start()
    try:
        server.serve_forever(poll_interval=3600)
    finally:
        REG.shutdown()


if __name__ == "__main__":
    main()
