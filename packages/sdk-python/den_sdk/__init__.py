"""Den's Python SDK: long-running microVM sandboxes for AI agents. Standard library only.

Configuration: ``api_url``/``api_key`` arguments, else ``DEN_API_URL`` (default
``http://127.0.0.1:8787``) and ``DEN_API_KEY``.

Example::

    from den_sdk import Sandbox

    with Sandbox.create(template="base", ttl_seconds=3600, metadata={"task_id": "t-42"}) as sbx:
        sbx.exec("git init -q /work && echo hi > /work/a.txt")
        print(sbx.exec("cat /work/a.txt").stdout)   # "hi\\n"
        sbx.hibernate()                              # while the model thinks
        sbx.wake()
        cp = sbx.snapshot(name="milestone")
        a, b = sbx.fork(count=2)
"""

from ._client import DEFAULT_API_URL, Client
from .checkpoints import Checkpoint, Checkpoints
from .errors import (
    ERROR_CLASSES,
    ERROR_STATUS,
    AbortedError,
    AuthenticationError,
    CapacityError,
    CheckpointNotFoundError,
    ConflictError,
    DenConfigError,
    DenConnectionRefusedError,
    DenError,
    DenFileNotFoundError,
    DenTimeoutError,
    ForbiddenError,
    InternalError,
    InvalidArgumentError,
    InvalidResponseError,
    InvalidStateError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    ProcessNotFoundError,
    QuotaExceededError,
    SandboxNotFoundError,
    SetupFailedError,
    SnapshotError,
    TemplateNotFoundError,
    UnauthorizedError,
    UnavailableError,
    error_class_for,
)
from .exec import ExecChunk, ExecExit, ExecResult, ExecStream
from .filesystem import Filesystem, ListFilesResult
from .processes import Process, Processes, ProcessLogs
from .sandbox import Sandbox
from .types import FileInfo, ListeningPort, NetworkPolicy, NetworkStatus, PortUrl, ProcessStatus, SandboxEvent, SandboxInfo

__version__ = "0.1.0"

__all__ = [
    "Sandbox",
    "SandboxInfo",
    "Checkpoint",
    "Checkpoints",
    "ExecResult",
    "ExecStream",
    "ExecChunk",
    "ExecExit",
    "Filesystem",
    "ListFilesResult",
    "FileInfo",
    "Process",
    "Processes",
    "ProcessLogs",
    "ProcessStatus",
    "SandboxEvent",
    "NetworkPolicy",
    "NetworkStatus",
    "ListeningPort",
    "PortUrl",
    "Client",
    "DEFAULT_API_URL",
    "ERROR_STATUS",
    "ERROR_CLASSES",
    "error_class_for",
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
    "ConflictError",
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
]
