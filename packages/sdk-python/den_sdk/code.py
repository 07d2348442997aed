"""The code interpreter: running code in a sandbox made from ``code-interpreter-v1`` (its
kernels keep variables and imports between runs) and its contexts. A run streams what the
code prints and returns as NDJSON lines (``POST /v1/sandboxes/{id}/code/execute``)."""

from __future__ import annotations

import socket
import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, Union

from . import _client
from ._client import AbortScope, Client, iter_ndjson, seg
from .errors import DenError, DenTimeoutError, api_error
from .types import CodeContext, Execution, ExecutionError, ExecutionResult, convert

__all__ = ["CodeContexts", "run_code", "CODE_MAX_LINE_BYTES"]

#: The longest line of a run's stream read (an image's base64 is one line).
CODE_MAX_LINE_BYTES = 32 * 1024 * 1024

ContextLike = Union[str, CodeContext]


def _ctx_id(ctx: ContextLike) -> str:
    return ctx.id if isinstance(ctx, CodeContext) else str(ctx)


class _Deadline(AbortScope):
    """An AbortScope for one run's timeout that also registers its sockets with the scope
    active around it (the asyncio client's, so cancelling the task still hangs up)."""

    def __init__(self, outer: Optional[AbortScope]) -> None:
        super().__init__()
        self._outer = outer

    def register(self, sock: socket.socket) -> None:
        if self._outer is not None:
            self._outer.register(sock)
        super().register(sock)


def run_code(
    client: Client,
    sandbox_id: str,
    code: str,
    *,
    language: Optional[str] = None,
    context: Optional[ContextLike] = None,
    on_stdout: Optional[Callable[[str], Any]] = None,
    on_stderr: Optional[Callable[[str], Any]] = None,
    on_result: Optional[Callable[[ExecutionResult], Any]] = None,
    on_error: Optional[Callable[[ExecutionError], Any]] = None,
    envs: Optional[Mapping[str, str]] = None,
    timeout: Optional[float] = None,
) -> Execution:
    """Runs code on the code interpreter's streaming route (see :meth:`Sandbox.run_code`)."""
    body: Dict[str, Any] = {"code": code}
    if language is not None:
        body["language"] = language
    if context is not None:
        body["context_id"] = _ctx_id(context)
    if envs is not None:
        body["env_vars"] = dict(envs)
    execution = Execution()
    scope = _Deadline(getattr(_client._local, "scope", None))
    timer = threading.Timer(timeout, scope.abort) if timeout is not None else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    res = None
    try:
        with scope.active():
            try:
                res = client.request(
                    "POST", f"/v1/sandboxes/{seg(sandbox_id)}/code/execute", json_body=body, accept="application/x-ndjson",
                    timeout=timeout if timeout is not None and timeout > client.timeout else None,
                )
                status = res.status
                # (Keepalive lines and values that are no object are skipped, as lines of unknown types below.)
                for line in iter_ndjson(res, CODE_MAX_LINE_BYTES, skip_non_objects=True):
                    t = line.get("type")
                    if t in ("stdout", "stderr"):
                        text = str(line.get("text", ""))
                        (execution.logs.stdout if t == "stdout" else execution.logs.stderr).append(text)
                        cb = on_stdout if t == "stdout" else on_stderr
                        if cb is not None:
                            cb(text)
                    elif t == "result":
                        r = convert(line, ExecutionResult.from_wire, status)
                        execution.results.append(r)
                        if on_result is not None:
                            on_result(r)
                    elif t == "error":
                        execution.error = convert(line, lambda w: ExecutionError(name=str(w["name"]), value=str(w["value"]), traceback=str(w["traceback"])), status)
                        if on_error is not None:
                            on_error(execution.error)
                    elif t == "number_of_executions":
                        n = line.get("execution_count")
                        execution.execution_count = n if isinstance(n, int) else None
                    elif t == "end_of_execution":
                        return execution
                    elif t == "unexpected_end_of_execution":
                        raise _end_error(line.get("error"), execution)
                    # keepalive and types this SDK does not know: skipped
                raise _end_error(None, execution)
            except Exception:
                # The deadline hung up: whatever the read then saw (EOF, a reset), it is the timeout.
                outer = scope._outer
                if timer is not None and scope.aborted and not (outer is not None and outer.aborted):
                    raise _timeout(timeout, execution) from None
                raise
    finally:
        if timer is not None:
            timer.cancel()
        if res is not None:
            res.close()


def _timeout(timeout: Optional[float], execution: Execution) -> DenError:
    return DenTimeoutError("timeout", f"the code ran past timeout={timeout} s; it was interrupted", None, {"execution": execution})


def _end_error(e: Any, execution: Execution) -> DenError:
    """A run that ended without its end: Den's error if it said one. ``details["execution"]`` holds what came."""
    if isinstance(e, Mapping) and isinstance(e.get("code"), str):
        return api_error(e["code"], str(e.get("message", "")), None, {"execution": execution})
    return api_error("agent_unavailable", "the run ended before its end (did the kernel die?)", None, {"execution": execution})


class CodeContexts:
    """The code interpreter's contexts of one sandbox (``sbx.code_contexts``): each a kernel whose
    state persists between runs; pass one to :meth:`Sandbox.run_code` as ``context``.

    Example::

        ctx = sbx.code_contexts.create(language="python")
        sbx.run_code("x = 1", context=ctx)
        print(sbx.run_code("x + 1", context=ctx).text)   # "2"
        sbx.code_contexts.remove(ctx)
    """

    def __init__(self, client: Client, sandbox_id: str) -> None:
        self._client = client
        self._id = sandbox_id

    def _path(self, ctx: Optional[ContextLike] = None, suffix: str = "") -> str:
        base = f"/v1/sandboxes/{seg(self._id)}/code/contexts"
        return base if ctx is None else f"{base}/{seg(_ctx_id(ctx))}{suffix}"

    def create(self, language: Optional[str] = None, cwd: Optional[str] = None) -> CodeContext:
        """Starts a context: a kernel of ``language`` (default python) in ``cwd``.

        Example::

            ctx = sbx.code_contexts.create(language="python", cwd="/tmp")
        """
        body: Dict[str, Any] = {}
        if language is not None:
            body["language"] = language
        if cwd is not None:
            body["cwd"] = cwd
        return convert(self._client.json("POST", self._path(), json_body=body), CodeContext.from_wire)

    def list(self) -> List[CodeContext]:
        """The sandbox's contexts.

        Example::

            for c in sbx.code_contexts.list():
                print(c.id, c.language)
        """
        w = self._client.json("GET", self._path())
        return convert(w, lambda v: [CodeContext.from_wire(c) for c in v["contexts"]])

    def restart(self, ctx: ContextLike) -> None:
        """Restarts a context: its kernel starts over (its variables are gone). An unknown one
        raises :class:`NotFoundError` (``context_not_found``).

        Example::

            sbx.code_contexts.restart(ctx)
        """
        self._client.empty("POST", self._path(ctx, "/restart"))

    def remove(self, ctx: ContextLike) -> None:
        """Removes a context (its kernel stops). An unknown one raises :class:`NotFoundError`.

        Example::

            sbx.code_contexts.remove(ctx.id)
        """
        self._client.empty("DELETE", self._path(ctx))
