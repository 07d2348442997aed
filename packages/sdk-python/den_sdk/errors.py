"""Typed errors for the Den API.

A non-2xx response with the body ``{"error": {"code", "message", "details"?}}`` becomes a
:class:`DenError`, or the subclass its ``code`` maps to (see :data:`ERROR_CLASSES`). The codes
and their HTTP statuses are ``ERROR_STATUS`` in ``packages/protocol/src/errors.ts``, copied
here as :data:`ERROR_STATUS`.

Network failures reaching the API itself (DNS, a refused TCP connection, a socket timeout) are
not wrapped: they propagate as the ``OSError`` subclasses ``urllib``/``http.client`` raise.

Example::

    from den_sdk import Sandbox, DenError, SandboxNotFoundError

    try:
        Sandbox.connect("sbx_aaaaaaaaaaaaaaaa")
    except SandboxNotFoundError as e:
        print(e.status, e.code, e.message)   # 404 sandbox_not_found ...
    except DenError as e:
        print("other API error", e.code)
"""

from __future__ import annotations

import builtins
import json
from typing import Any, Dict, Mapping, Optional, Type

__all__ = [
    "ERROR_STATUS",
    "ERROR_CLASSES",
    "DenError",
    "DenConfigError",
    "AuthenticationError",
    "UnauthorizedError",
    "PermissionDeniedError",
    "ForbiddenError",
    "InvalidArgumentError",
    "NotFoundError",
    "SandboxNotFoundError",
    "TemplateNotFoundError",
    "CheckpointNotFoundError",
    "ProcessNotFoundError",
    "DenFileNotFoundError",
    "VolumeNotFoundError",
    "ConflictError",
    "VolumeInUseError",
    "InvalidStateError",
    "SnapshotError",
    "SetupFailedError",
    "PayloadTooLargeError",
    "QuotaExceededError",
    "UnavailableError",
    "CapacityError",
    "DenTimeoutError",
    "DenConnectionRefusedError",
    "AbortedError",
    "InternalError",
    "InvalidResponseError",
    "error_class_for",
    "api_error",
    "error_from_response",
]

#: Every error code the server sends and the HTTP status it maps to (a copy of
#: ``ERROR_STATUS`` in ``packages/protocol/src/errors.ts``; a test keeps them equal).
ERROR_STATUS: Dict[str, int] = {
    "invalid_argument": 400,
    "unknown_op": 400,
    "path_too_long": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "sandbox_not_found": 404,
    "template_not_found": 404,
    "snapshot_not_found": 404,
    "proc_not_found": 404,
    "file_not_found": 404,
    "volume_not_found": 404,
    "not_found": 404,
    "context_not_found": 404,
    "cwd_not_found": 400,
    "not_a_directory": 400,
    "is_a_directory": 400,
    "unreadable": 400,
    "already_exists": 409,
    "not_empty": 409,
    "volume_in_use": 409,
    "disk_full": 409,
    "permission_denied": 403,
    "ca_not_configured": 409,
    "sandbox_not_running": 409,
    "code_interpreter_unavailable": 409,
    "exec_timeout": 408,
    "quota_exceeded": 429,
    "limit_exceeded": 429,
    "payload_too_large": 413,
    "route_not_found": 404,
    "sandbox_destroyed": 410,
    "invalid_state": 409,
    "operation_in_progress": 409,
    "snapshot_incompatible": 409,
    "snapshot_corrupt": 422,
    "setup_failed": 422,
    "disk_corrupt": 422,
    "image_not_found": 404,
    "image_pull_failed": 422,
    "image_invalid": 422,
    "capacity_exhausted": 503,
    "agent_unavailable": 503,
    "agent_protocol_error": 502,
    "connection_refused": 502,
    "timeout": 504,
    "guest_unresponsive": 504,
    "aborted": 499,
    "io_error": 500,
    "qemu_error": 500,
    "build_failed": 500,
    "internal": 500,
}


class DenError(Exception):
    """Any error the Den API returned: a stable ``code``, a human ``message``, the HTTP
    ``status`` and, for some 4xx, ``details`` (a failed setup command's output, a quota's
    numbers). Codes without a more specific class (and unknown codes) are plain ``DenError``.

    Example::

        try:
            sbx.filesystem.read("/etc/shadow")
        except DenError as e:
            print(e.status, e.code, e.message, e.details)
    """

    def __init__(self, code: str, message: str, status: Optional[int] = None, details: Optional[Dict[str, Any]] = None) -> None:
        Exception.__init__(self, message)
        self.code = code
        self.message = message
        self.status = status if status is not None else ERROR_STATUS.get(code, 500)
        self.details = details

    def __str__(self) -> str:
        return f"{self.code} ({self.status}): {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r}, status={self.status!r})"

    def __reduce__(self):  # pickle support (the constructor takes more than one argument)
        return (type(self), (self.code, self.message, self.status, self.details))


class DenConfigError(ValueError):
    """The SDK is not configured: no API key in the arguments nor in ``DEN_API_KEY``, or an
    API URL that is not http(s). Raised before any request is made.

    Example::

        try:
            Sandbox.create()
        except DenConfigError as e:
            print("set DEN_API_KEY:", e)
    """


class AuthenticationError(DenError):
    """401 ``unauthorized``: no key, a wrong key or a revoked key.

    Example::

        try:
            Sandbox.connect(sbx_id, api_key="wrong")
        except AuthenticationError:
            print("check DEN_API_KEY")
    """


#: The TypeScript SDK's name for :class:`AuthenticationError`.
UnauthorizedError = AuthenticationError


class PermissionDeniedError(DenError):
    """403 ``forbidden`` (a non-admin key on an admin route) or ``permission_denied`` (a guest
    file the sandbox user may not touch).

    Example::

        try:
            sbx.filesystem.write("/proc/version", "x")
        except PermissionDeniedError as e:
            print(e.code)
    """


#: The TypeScript SDK's name for :class:`PermissionDeniedError`.
ForbiddenError = PermissionDeniedError


class InvalidArgumentError(DenError):
    """400: the request did not validate (``invalid_argument``, ``unknown_op``,
    ``path_too_long``), or a path argument is unusable (``cwd_not_found``,
    ``not_a_directory``, ``is_a_directory``, ``unreadable``).

    Example::

        try:
            sbx.set_timeout(0)
        except InvalidArgumentError as e:
            print(e.message)
    """


class NotFoundError(DenError):
    """404: the base of the ``*NotFoundError`` classes; also ``not_found`` and
    ``route_not_found`` themselves.

    Example::

        try:
            sbx.filesystem.stat("/nope")
        except NotFoundError as e:
            print(e.code)   # file_not_found
    """


class SandboxNotFoundError(NotFoundError):
    """404 ``sandbox_not_found``: no such sandbox, or one of another owner.

    Example::

        try:
            Sandbox.connect("sbx_aaaaaaaaaaaaaaaa")
        except SandboxNotFoundError:
            print("gone")
    """


class TemplateNotFoundError(NotFoundError):
    """404 ``template_not_found``.

    Example::

        try:
            Sandbox.create(template="nope")
        except TemplateNotFoundError:
            print("build it first")
    """


class CheckpointNotFoundError(NotFoundError):
    """404 ``snapshot_not_found``: no such checkpoint.

    Example::

        try:
            Sandbox.restore("snap_aaaaaaaaaaaaaaaa")
        except CheckpointNotFoundError:
            print("deleted?")
    """


class ProcessNotFoundError(NotFoundError):
    """404 ``proc_not_found``: no such background process.

    Example::

        try:
            sbx.processes.get(99)
        except ProcessNotFoundError:
            print("no process 99")
    """


class DenFileNotFoundError(NotFoundError, builtins.FileNotFoundError):
    """404 ``file_not_found``: no such path inside the sandbox. Also a builtin
    ``FileNotFoundError``, so ``except FileNotFoundError`` catches it.

    Example::

        try:
            text = sbx.filesystem.read_text("/maybe")
        except FileNotFoundError:
            text = ""
    """


class VolumeNotFoundError(NotFoundError):
    """404 ``volume_not_found``: the owner has no volume of that name (another owner's does
    not exist for this key).

    Example::

        try:
            Volumes.get("work")
        except VolumeNotFoundError:
            Volumes.create("work", size_mb=1024)
    """


class ConflictError(DenError):
    """409 ``already_exists`` (a file, or a volume name the owner has), ``not_empty`` or
    ``disk_full``; the base of :class:`VolumeInUseError`.

    Example::

        try:
            sbx.filesystem.mkdir("/workspace", parents=False)
        except ConflictError:
            pass
    """


class VolumeInUseError(ConflictError):
    """409 ``volume_in_use``: a mount, delete, grow or file transfer of a volume that other
    mounts hold (one read-write mount or any number of read-only ones, never both);
    ``details`` name the volume and the sandbox holding it.

    Example::

        try:
            Sandbox.create(volumes=[VolumeMount("work", "/work")])
        except VolumeInUseError as e:
            print("held by", e.details and e.details.get("sandbox_id"))
    """


class InvalidStateError(DenError):
    """409/410 ``invalid_state``, ``operation_in_progress``, ``sandbox_not_running`` or ``sandbox_destroyed``: the
    sandbox is not in a state that allows the call (409 ``code_interpreter_unavailable``: it
    has no code interpreter, as it was not made from ``code-interpreter-v1``).

    Example::

        try:
            sbx.exec("true")
        except InvalidStateError as e:
            print(sbx.refresh().state, e.code)
    """


class SnapshotError(DenError):
    """409 ``snapshot_incompatible`` or 422 ``snapshot_corrupt``: a checkpoint or a cold
    sandbox's snapshot cannot be restored on this host; or 422 ``disk_corrupt``: a disk or
    volume image's header is not what Den made (it was altered), so Den will not open it.

    Example::

        try:
            Sandbox.restore(cp)
        except SnapshotError as e:
            print(e.code)
    """


class SetupFailedError(DenError):
    """422 ``setup_failed``: a template's setup command failed; ``details`` has its output.

    Example::

        except SetupFailedError as e:
            print(e.details.get("stderr"))
    """


class ImageError(DenError):
    """A template build from an OCI image failed: 404 ``image_not_found`` (the registry has no
    such image), 422 ``image_pull_failed`` (unreachable, credentials refused, stalled; the message
    names the registry) or 422 ``image_invalid`` (malformed, lying digests, over a limit).

    Example::

        try:
            Templates.create("web", from_image="registry.example:5000/web:1")
        except ImageError as e:
            print(e.code, e.message)
    """


class PayloadTooLargeError(DenError):
    """413 ``payload_too_large``: a body over the server's limit, or a buffered exec whose
    output went past its cap (use :meth:`Sandbox.exec_stream`).

    Example::

        try:
            sbx.exec("cat /dev/urandom | head -c 100000000 | base64", timeout_seconds=60)
        except PayloadTooLargeError:
            print("stream it instead")
    """


class QuotaExceededError(DenError):
    """429 ``quota_exceeded`` or ``limit_exceeded``: too many sandboxes, too many stored
    bytes, ... for this key. ``details`` has the numbers when the server sends them.

    Example::

        try:
            Sandbox.create()
        except QuotaExceededError as e:
            print(e.details)
    """


class UnavailableError(DenError):
    """503 ``agent_unavailable`` (and the base of :class:`CapacityError`): worth retrying.

    Example::

        try:
            sbx.exec("true")
        except UnavailableError:
            time.sleep(1)
    """


class CapacityError(UnavailableError):
    """503 ``capacity_exhausted``: the host cannot fit another sandbox (or this wake, fork
    or restore) without overcommitting; ``details`` says what is in use.

    Example::

        try:
            Sandbox.create(memory_mb=8192)
        except CapacityError as e:
            print("host full:", e.details)
    """


class DenTimeoutError(DenError, builtins.TimeoutError):
    """408 ``exec_timeout``, 504 ``timeout`` or ``guest_unresponsive`` (the sandbox's guest agent
    missed a deadline): the server gave up waiting. Also a builtin
    ``TimeoutError``. (A command that outlives its own ``timeout_seconds`` is *not* an
    error: its result says ``timed_out=True``.)

    Example::

        try:
            sbx.exec("sleep 100", timeout_seconds=1)
        except TimeoutError as e:
            print("timed out:", e)
    """


class DenConnectionRefusedError(DenError, builtins.ConnectionRefusedError):
    """502 ``connection_refused``: nothing listens on the sandbox port a request was
    forwarded to. Also a builtin ``ConnectionRefusedError``.

    Example::

        try:
            urlopen_through_den(sbx, 8000)
        except ConnectionRefusedError:
            print("start the server first")
    """


class AbortedError(DenError):
    """499 ``aborted``: the operation was cancelled (the client went away, a shutdown).

    Example::

        except AbortedError:
            retry()
    """


class InternalError(DenError):
    """5xx ``internal``, ``io_error``, ``qemu_error``, ``build_failed`` or
    ``agent_protocol_error``: a failure on the server's side.

    Example::

        try:
            sbx.snapshot()
        except InternalError as e:
            log.error("den failed: %s", e)
    """


class InvalidResponseError(DenError):
    """The server's answer did not match the contract (not JSON, a missing field, a stream
    that ended before its final line). ``code`` is ``"invalid_response"``.

    Example::

        except InvalidResponseError:
            print("a proxy in the way?")
    """


#: Which class each error code raises (every code of :data:`ERROR_STATUS` has one).
ERROR_CLASSES: Dict[str, Type[DenError]] = {
    "unauthorized": AuthenticationError,
    "forbidden": PermissionDeniedError,
    "permission_denied": PermissionDeniedError,
    "invalid_argument": InvalidArgumentError,
    "unknown_op": InvalidArgumentError,
    "path_too_long": InvalidArgumentError,
    "cwd_not_found": InvalidArgumentError,
    "not_a_directory": InvalidArgumentError,
    "is_a_directory": InvalidArgumentError,
    "unreadable": InvalidArgumentError,
    "not_found": NotFoundError,
    "route_not_found": NotFoundError,
    "context_not_found": NotFoundError,
    "sandbox_not_found": SandboxNotFoundError,
    "template_not_found": TemplateNotFoundError,
    "snapshot_not_found": CheckpointNotFoundError,
    "proc_not_found": ProcessNotFoundError,
    "file_not_found": DenFileNotFoundError,
    "volume_not_found": VolumeNotFoundError,
    "already_exists": ConflictError,
    "not_empty": ConflictError,
    "volume_in_use": VolumeInUseError,
    "disk_full": ConflictError,
    "ca_not_configured": ConflictError,
    "invalid_state": InvalidStateError,
    "operation_in_progress": InvalidStateError,
    "sandbox_not_running": InvalidStateError,
    "sandbox_destroyed": InvalidStateError,
    "code_interpreter_unavailable": InvalidStateError,
    "snapshot_incompatible": SnapshotError,
    "snapshot_corrupt": SnapshotError,
    "disk_corrupt": SnapshotError,
    "setup_failed": SetupFailedError,
    "image_not_found": ImageError,
    "image_pull_failed": ImageError,
    "image_invalid": ImageError,
    "payload_too_large": PayloadTooLargeError,
    "quota_exceeded": QuotaExceededError,
    "limit_exceeded": QuotaExceededError,
    "agent_unavailable": UnavailableError,
    "capacity_exhausted": CapacityError,
    "exec_timeout": DenTimeoutError,
    "timeout": DenTimeoutError,
    "guest_unresponsive": DenTimeoutError,
    "connection_refused": DenConnectionRefusedError,
    "aborted": AbortedError,
    "internal": InternalError,
    "io_error": InternalError,
    "qemu_error": InternalError,
    "build_failed": InternalError,
    "agent_protocol_error": InternalError,
    "invalid_response": InvalidResponseError,
}


def error_class_for(code: str) -> Type[DenError]:
    """The class an error ``code`` raises (:class:`DenError` for codes this SDK does not know).

    Example::

        assert error_class_for("sandbox_not_found") is SandboxNotFoundError
    """
    return ERROR_CLASSES.get(code, DenError)


def api_error(code: str, message: str, status: Optional[int] = None, details: Optional[Dict[str, Any]] = None) -> DenError:
    """Builds the typed error for ``code``; ``status`` defaults to the one the code maps to.

    Example::

        e = api_error("sandbox_not_found", "no such sandbox")
        assert isinstance(e, SandboxNotFoundError) and e.status == 404
    """
    return error_class_for(code)(code, message, status, details)


def error_from_response(status: int, body: bytes, reason: str = "") -> DenError:
    """Turns an error response's status and raw body into a typed error. A body that is not
    ``{"error": {"code", "message"}}`` (an HTML page from a proxy, say) gives a
    :class:`DenError` with the code ``http_<status>`` and the start of the body as message.

    Example::

        e = error_from_response(401, b'{"error":{"code":"unauthorized","message":"bad key"}}')
        assert isinstance(e, AuthenticationError)
    """
    try:
        parsed = json.loads(body.decode("utf-8", "replace")) if body else None
    except ValueError:
        parsed = None
    err = parsed.get("error") if isinstance(parsed, Mapping) else None
    if isinstance(err, Mapping) and isinstance(err.get("code"), str) and isinstance(err.get("message"), str):
        details = err.get("details")
        return api_error(err["code"], err["message"], status, dict(details) if isinstance(details, Mapping) else None)
    snippet = body.decode("utf-8", "replace").strip()[:200] if body else ""
    msg = f"HTTP {status}" + (f" {reason}" if reason else "") + (f": {snippet}" if snippet else "")
    return DenError(f"http_{status}", msg, status)
