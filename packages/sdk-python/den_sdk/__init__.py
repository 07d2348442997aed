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

The asyncio client has the same surface (``den_sdk.aio``)::

    from den_sdk import AsyncSandbox

    async with AsyncSandbox.create(template="base") as sbx:
        print((await sbx.exec("echo hi")).stdout)

Volumes outlive the sandboxes that mount them::

    from den_sdk import VolumeMount, Volumes

    Volumes.create("work", size_mb=1024)
    Volumes.write_file("work", "/task.md", "refactor auth")
    with Sandbox.create(volumes=[VolumeMount("work", "/work")]) as sbx:
        sbx.exec("cat /work/task.md > /work/notes.txt")
    print(Volumes.read_text("work", "/notes.txt"))
"""

from ._client import DEFAULT_API_URL, Client
from ._websocket import WebSocket, WebSocketClosed, WebSocketError, WebSocketProtocolError
from .aio import (
    AsyncCheckpoint,
    AsyncCheckpoints,
    AsyncExecStream,
    AsyncFilesystem,
    AsyncHosts,
    AsyncKeys,
    AsyncProcess,
    AsyncProcesses,
    AsyncCodeContexts,
    AsyncPty,
    AsyncPtys,
    AsyncSandbox,
    AsyncStream,
    AsyncTemplates,
    AsyncUsage,
    AsyncVolumes,
    AsyncWebhooks,
    AwaitableContext,
)
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
    ImageError,
    SnapshotError,
    TemplateNotFoundError,
    UnauthorizedError,
    UnavailableError,
    VolumeInUseError,
    VolumeNotFoundError,
    error_class_for,
)
from .code import CodeContexts
from .exec import ExecChunk, ExecExit, ExecResult, ExecStream
from .filesystem import Filesystem, ListFilesResult
from .hosts import Hosts
from .keys import Keys
from .ports import PortForward
from .processes import Process, Processes, ProcessLogs
from .pty import Pty, PtyExit, Ptys
from .sandbox import Sandbox
from .templates import Templates
from .types import (
    WEBHOOK_EVENT_TYPES,
    ApiKey,
    BuildContext,
    CodeContext,
    Execution,
    ExecutionError,
    ExecutionResult,
    FileInfo,
    HostInfo,
    HostKind,
    Logs,
    HostResources,
    ListeningPort,
    NetworkPolicy,
    NetworkStatus,
    PortUrl,
    ProcessStatus,
    SandboxEvent,
    SandboxInfo,
    Template,
    TemplateBuild,
    TemplateBuildLogLine,
    UsageCost,
    UsageGroup,
    UsagePrices,
    UsageReport,
    Webhook,
    WebhookDeliveriesPage,
    WebhookDelivery,
    WebhookPayload,
)
from .usage import Usage
from .volumes import Volume, VolumeMount, VolumeMountInfo, Volumes
from .webhooks import Webhooks, WebhookVerificationError

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
    "CodeContexts",
    "CodeContext",
    "Execution",
    "ExecutionError",
    "ExecutionResult",
    "Logs",
    "ProcessLogs",
    "ProcessStatus",
    "SandboxEvent",
    "NetworkPolicy",
    "NetworkStatus",
    "ListeningPort",
    "PortUrl",
    "PortForward",
    "Pty",
    "Ptys",
    "PtyExit",
    "Templates",
    "Template",
    "TemplateBuild",
    "TemplateBuildLogLine",
    "BuildContext",
    "Keys",
    "ApiKey",
    "Usage",
    "UsageReport",
    "UsageGroup",
    "UsageCost",
    "UsagePrices",
    "Hosts",
    "HostInfo",
    "HostKind",
    "HostResources",
    "Webhooks",
    "Webhook",
    "WebhookDelivery",
    "WebhookDeliveriesPage",
    "WebhookPayload",
    "WebhookVerificationError",
    "WEBHOOK_EVENT_TYPES",
    "Volumes",
    "Volume",
    "VolumeMount",
    "VolumeMountInfo",
    "AsyncSandbox",
    "AsyncFilesystem",
    "AsyncProcesses",
    "AsyncCodeContexts",
    "AsyncProcess",
    "AsyncPtys",
    "AsyncPty",
    "AsyncExecStream",
    "AsyncStream",
    "AsyncCheckpoint",
    "AsyncCheckpoints",
    "AsyncTemplates",
    "AsyncKeys",
    "AsyncUsage",
    "AsyncHosts",
    "AsyncWebhooks",
    "AsyncVolumes",
    "AwaitableContext",
    "WebSocket",
    "WebSocketError",
    "WebSocketClosed",
    "WebSocketProtocolError",
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
    "VolumeNotFoundError",
    "ConflictError",
    "VolumeInUseError",
    "InvalidStateError",
    "SnapshotError",
    "SetupFailedError",
    "ImageError",
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
