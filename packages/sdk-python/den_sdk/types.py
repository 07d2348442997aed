"""The SDK's views of the API's bodies: small dataclasses built from the snake_case JSON (field
names are the wire's), with timestamps as timezone-aware ``datetime`` objects. Each keeps the
JSON it came from in ``raw`` for fields a newer server may add."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, TypeVar, Union

from .errors import InvalidResponseError

__all__ = [
    "SandboxInfo",
    "NetworkPolicy",
    "NetworkStatus",
    "FileInfo",
    "SandboxEvent",
    "ProcessStatus",
    "ListeningPort",
    "PortUrl",
    "Template",
    "TemplateBuild",
    "TemplateBuildLogLine",
    "BuildContext",
    "ApiKey",
    "UsageReport",
    "UsageGroup",
    "UsageCost",
    "UsagePrices",
    "HostInfo",
    "HostKind",
    "HostResources",
    "Webhook",
    "WebhookDelivery",
    "WebhookPayload",
    "WebhookDeliveriesPage",
    "WEBHOOK_EVENT_TYPES",
    "CodeContext",
    "ExecutionResult",
    "ExecutionError",
    "Logs",
    "Execution",
    "parse_time",
]

T = TypeVar("T")

_TIME_RE = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:?\d{2})?$")


def parse_time(s: Optional[str]) -> Optional[datetime]:
    """Parses the API's ISO 8601 timestamps (``2025-01-02T03:04:05.678Z``) on any Python >= 3.9.

    Example::

        parse_time("2025-01-02T03:04:05.678Z").year  # 2025
    """
    if s is None:
        return None
    m = _TIME_RE.match(s)
    if not m:
        return datetime.fromisoformat(s)
    base, frac, tz = m.groups()
    frac = ((frac or "") + "000000")[:6]
    if tz is None or tz == "Z":
        tz = "+00:00"
    elif ":" not in tz:
        tz = tz[:3] + ":" + tz[3:]
    dt = datetime.fromisoformat(f"{base}.{frac}{tz}")
    return dt.astimezone(timezone.utc)


def convert(value: Any, fn: Callable[[Any], T], status: int = 200) -> T:
    """Runs ``fn`` on a decoded body; a missing or mistyped field becomes an
    :class:`InvalidResponseError`."""
    try:
        return fn(value)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise InvalidResponseError("invalid_response", f"response does not match the API contract: {e!r}", status) from None


@dataclass
class NetworkPolicy:
    """A sandbox's network. ``egress``: ``"none"`` (default; nothing leaves the guest),
    ``"allowlist"`` (only ``allow``: domain names, ``*.example.com``, addresses, CIDRs) or
    ``"open"`` (all but ``deny``). Private, loopback and link-local ranges and the Den host
    are refused whatever the policy says. Anywhere a policy is accepted, a plain ``dict`` in
    the wire's shape works too.

    Example::

        policy = NetworkPolicy(egress="allowlist", allow=["pypi.org", "*.pythonhosted.org"])
        sbx = Sandbox.create(network=policy)
    """

    egress: str = "none"
    allow: Optional[List[str]] = None
    deny: Optional[List[str]] = None
    max_connections: Optional[int] = None
    bandwidth_mbps: Optional[int] = None

    def to_wire(self) -> Dict[str, Any]:
        """The JSON body of this policy.

        Example::

            NetworkPolicy(egress="none").to_wire()  # {"egress": "none"}
        """
        out: Dict[str, Any] = {"egress": self.egress}
        for k in ("allow", "deny", "max_connections", "bandwidth_mbps"):
            v = getattr(self, k)
            if v is not None:
                out[k] = list(v) if isinstance(v, (list, tuple)) else v
        return out

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "NetworkPolicy":
        """Builds a policy from its JSON.

        Example::

            NetworkPolicy.from_wire({"egress": "open", "deny": ["203.0.113.0/24"]})
        """
        return cls(
            egress=w["egress"],
            allow=w.get("allow"),
            deny=w.get("deny"),
            max_connections=w.get("max_connections"),
            bandwidth_mbps=w.get("bandwidth_mbps"),
        )


def network_to_wire(policy: Union[NetworkPolicy, Mapping[str, Any]]) -> Dict[str, Any]:
    if isinstance(policy, NetworkPolicy):
        return policy.to_wire()
    if isinstance(policy, Mapping):
        return {k: v for k, v in policy.items() if v is not None}
    raise TypeError("network must be a NetworkPolicy or a dict")


@dataclass
class SandboxInfo:
    """What the API knows about a sandbox (the ``Sandbox`` body).

    Example::

        info = sbx.refresh()
        print(info.state, info.expires_at, info.metadata["task_id"])
    """

    id: str
    state: str
    state_reason: Optional[str]
    template: str
    template_version: str
    persistent: bool
    ttl_seconds: Optional[int]
    expires_at: Optional[datetime]
    idle_timeout_seconds: int
    on_idle: str
    metadata: Dict[str, str]
    vcpus: int
    memory_mb: int
    disk_mb: int
    created_at: datetime
    last_activity_at: datetime
    destroyed_at: Optional[datetime]
    #: ``"warm"``, ``"cold"`` or ``"disk"`` while hibernated, else None.
    hibernate_mode: Optional[str]
    #: Bytes its snapshot occupies in the store while cold-hibernated, else None.
    stored_bytes: Optional[int]
    network: NetworkPolicy
    #: The operation in flight on it (``{"id", "kind", "since"}``), else None; ``state`` stays the last settled one.
    operation: Optional[Dict[str, Any]] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "SandboxInfo":
        """Builds the info from a ``Sandbox`` JSON body.

        Example::

            info = SandboxInfo.from_wire(client.json("GET", f"/v1/sandboxes/{id}"))
        """
        return cls(
            id=w["id"],
            state=w["state"],
            state_reason=w.get("state_reason"),
            template=w["template"],
            template_version=w["template_version"],
            persistent=bool(w["persistent"]),
            ttl_seconds=w.get("ttl_seconds"),
            expires_at=parse_time(w.get("expires_at")),
            idle_timeout_seconds=w["idle_timeout_seconds"],
            on_idle=w["on_idle"],
            metadata=dict(w.get("metadata") or {}),
            vcpus=w["vcpus"],
            memory_mb=w["memory_mb"],
            disk_mb=w["disk_mb"],
            created_at=parse_time(w["created_at"]),  # type: ignore[arg-type]
            last_activity_at=parse_time(w["last_activity_at"]),  # type: ignore[arg-type]
            destroyed_at=parse_time(w.get("destroyed_at")),
            hibernate_mode=w.get("hibernate_mode"),
            stored_bytes=w.get("stored_bytes"),
            network=NetworkPolicy.from_wire(w.get("network") or {"egress": "none"}),
            operation=w.get("operation"),
            raw=dict(w),
        )


@dataclass
class NetworkStatus:
    """A sandbox's network policy, whether its network is up, and the connection attempts it
    refused since then, by why (``private``, ``policy``, ``limit``, ``dns``).

    Example::

        st = sbx.network_status()
        print(st.active, st.refused["policy"])
    """

    policy: NetworkPolicy
    active: bool
    refused: Dict[str, int]

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "NetworkStatus":
        """Builds the status from its JSON.

        Example::

            NetworkStatus.from_wire(client.json("GET", f"/v1/sandboxes/{id}/network"))
        """
        return cls(policy=NetworkPolicy.from_wire(w["policy"]), active=bool(w["active"]), refused=dict(w["refused"]))


@dataclass
class FileInfo:
    """A path's metadata (the ``FileStat`` body). ``type`` is ``file``, ``dir``, ``symlink``
    or ``other``; ``mode`` the Unix mode bits; ``target`` a symlink's target.

    Example::

        st = sbx.filesystem.stat("/etc/hostname")
        print(st.type, st.size, st.mtime)
    """

    path: str
    type: str
    size: int
    mode: int
    mtime: datetime
    target: Optional[str] = None

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "FileInfo":
        """Builds the info from a ``FileStat`` JSON body.

        Example::

            FileInfo.from_wire({"path": "/a", "type": "file", "size": 1, "mode": 420, "mtime": "2025-01-01T00:00:00Z"})
        """
        return cls(path=w["path"], type=w["type"], size=w["size"], mode=w["mode"], mtime=parse_time(w["mtime"]), target=w.get("target"))  # type: ignore[arg-type]


@dataclass
class SandboxEvent:
    """One entry of a sandbox's event log: ``seq`` (pass it as ``after`` to resume), ``type``
    (``created``, ``hibernated``, ``exec.started``, ...), ``reason`` and ``data``.

    Example::

        for ev in sbx.events():
            print(ev.seq, ev.type, ev.reason)
    """

    seq: int
    sandbox_id: str
    at: datetime
    type: str
    reason: Optional[str]
    data: Dict[str, Any]

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "SandboxEvent":
        """Builds the event from its JSON.

        Example::

            SandboxEvent.from_wire(line)
        """
        return cls(seq=w["seq"], sandbox_id=w["sandbox_id"], at=parse_time(w["at"]), type=w["type"], reason=w.get("reason"), data=dict(w.get("data") or {}))  # type: ignore[arg-type]


@dataclass
class ProcessStatus:
    """A background process's status (the ``ProcessInfo`` body).

    Example::

        st = proc.wait()
        if not st.running:
            print("exited with", st.exit_code)
    """

    proc: int
    pid: int
    running: bool
    exit_code: Optional[int]
    signal: Optional[int]
    timed_out: bool

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "ProcessStatus":
        """Builds the status from a ``ProcessInfo`` JSON body.

        Example::

            ProcessStatus.from_wire({"proc": 1, "pid": 42, "running": True, "exit_code": None, "signal": None, "timed_out": False})
        """
        return cls(proc=w["proc"], pid=w["pid"], running=bool(w["running"]), exit_code=w.get("exit_code"), signal=w.get("signal"), timed_out=bool(w.get("timed_out", False)))


@dataclass
class ListeningPort:
    """A TCP port listening inside a sandbox: the ``address`` it is bound to in the guest
    (all are reachable through Den), ``family`` (4 or 6), and the ``pid``/``process`` holding it.

    Example::

        for p in sbx.ports():
            print(p.port, p.process)
    """

    port: int
    address: str
    family: int
    pid: Optional[int] = None
    process: Optional[str] = None

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "ListeningPort":
        """Builds the port from its JSON.

        Example::

            ListeningPort.from_wire({"port": 8000, "address": "0.0.0.0", "family": 4})
        """
        return cls(port=w["port"], address=w["address"], family=w["family"], pid=w.get("pid"), process=w.get("process"))


@dataclass
class PortUrl:
    """A signed URL to one port of one sandbox: anyone holding it reaches the port until
    ``expires_at``. ``url`` is at ``/`` of the port's own host name (its own origin, for
    browsers); ``vhost_url`` the same; ``path_url`` under the API's path (for clients that
    cannot resolve the port's host name; a browser is redirected to ``url``); ``token`` the
    ``den_token`` alone.

    Example::

        u = sbx.create_port_url(8000, expires_in_seconds=600)
        print(u.url)
        page = urllib.request.urlopen(u.path_url).read()
    """

    port: int
    url: str
    vhost_url: str
    path_url: str
    token: str
    expires_at: datetime

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "PortUrl":
        """Builds the URL from its JSON.

        Example::

            PortUrl.from_wire(client.json("POST", f"/v1/sandboxes/{id}/urls", json_body={"port": 8000}))
        """
        return cls(port=w["port"], url=w["url"], vhost_url=w["vhost_url"], path_url=w.get("path_url", w["url"]), token=w["token"], expires_at=parse_time(w["expires_at"]))  # type: ignore[arg-type]


def _opt_time(s: Optional[str]) -> Optional[datetime]:
    return None if s is None else parse_time(s)


@dataclass
class Template:
    """A template version (the ``Template`` body): what ``Sandbox.create(template=...)``
    starts from. ``current``: whether ``name`` alone resolves to this version; ``owner``:
    who built it through the API (only they can use it), None for the server's own.

    Example::

        for t in Templates.list():
            print(f"{t.name}@{t.version}", "(current)" if t.current else "", t.memory_mb)
    """

    name: str
    version: str
    current: bool
    owner: Optional[str]
    vcpus: int
    memory_mb: int
    disk_mb: int
    created_at: datetime
    #: What it was made from: ``recipe base``, ``template base@...``, ``image registry/repo@sha256:...``.
    source: Optional[str] = None
    #: How its sandboxes run by default (an image's ``env``, ``workdir``, ``user``, ``start_cmd``,
    #: ``ready_cmd``), as the wire has it; None: as their source.
    run: Optional[Dict[str, Any]] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "Template":
        """Builds a template from its JSON.

        Example::

            Template.from_wire(client.json("GET", "/v1/templates")["templates"][0])
        """
        return cls(
            name=w["name"], version=w["version"], current=bool(w["current"]), owner=w.get("owner"),
            vcpus=w["vcpus"], memory_mb=w["memory_mb"], disk_mb=w["disk_mb"],
            created_at=parse_time(w["created_at"]), source=w.get("source"), run=w.get("run"), raw=dict(w),  # type: ignore[arg-type]
        )


@dataclass
class TemplateBuild:
    """A template build (the ``TemplateBuild`` body): what it builds (``name``; ``source``, e.g.
    ``{"kind": "dockerfile", "from": "python:3.12"}``), how it stands (``state``: ``building``,
    then ``ready``, ``error`` or ``cancelled``) and, once it has ended, the ``version`` it made or
    the ``error`` it ended with (``{"code", "message", "details"?}``, as the API's errors are;
    ``aborted`` for a cancelled one).

    Example::

        b = Templates.build("op_...")
        if b.state == "ready":
            print(f"{b.name}@{b.version}")
        elif b.error:
            print(b.error["code"], b.error["message"])
    """

    id: str
    name: str
    state: str
    source: Dict[str, str]
    version: Optional[str]
    error: Optional[Dict[str, Any]]
    created_at: datetime
    finished_at: Optional[datetime]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def done(self) -> bool:
        """Whether the build has ended (``ready``, ``error`` or ``cancelled``).

        Example::

            while not (b := Templates.build(b.id)).done:
                time.sleep(1)
        """
        return self.state != "building"

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "TemplateBuild":
        """Builds a build from its JSON.

        Example::

            TemplateBuild.from_wire(client.json("GET", "/v1/templates/builds/op_x"))
        """
        err = w["error"]
        if err is not None and not (isinstance(err.get("code"), str) and isinstance(err.get("message"), str)):
            raise TypeError("a build's error has a code and a message")
        source = w["source"]
        if not isinstance(source, dict):
            raise TypeError("a build's source is an object")
        return cls(
            id=w["id"], name=w["name"], state=w["state"], source=dict(source), version=w["version"], error=err,
            created_at=parse_time(w["created_at"]), finished_at=_opt_time(w["finished_at"]), raw=dict(w),  # type: ignore[arg-type]
        )


@dataclass
class TemplateBuildLogLine:
    """One line of a build's log (see :meth:`Templates.build_logs`). ``seq`` counts from 0:
    ``offset=line.seq + 1`` resumes after it; ``level`` is ``info`` or ``error``.

    Example::

        for line in Templates.build_logs(build.id, follow=True):
            print(line.message)
    """

    seq: int
    at: datetime
    level: str
    message: str

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "TemplateBuildLogLine":
        """Builds a line from its JSON.

        Example::

            TemplateBuildLogLine.from_wire({"seq": 0, "at": "2025-01-01T00:00:00Z", "level": "info", "message": "FROM base"})
        """
        if not isinstance(w["seq"], int) or not isinstance(w["message"], str):
            raise TypeError("a log line has an integer seq and a string message")
        return cls(seq=w["seq"], at=parse_time(w["at"]), level=w["level"], message=w["message"])  # type: ignore[arg-type]


@dataclass
class BuildContext:
    """An uploaded build context (the answer to :meth:`Templates.upload_context`): ``context``
    is the ``sha256:<hex>`` a Dockerfile build names; ``size`` its bytes.

    Example::

        ctx = Templates.upload_context("./app")
        Templates.create("app", dockerfile=open("./app/Dockerfile").read(), context=ctx.context)
    """

    context: str
    size: int

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "BuildContext":
        """Builds it from its JSON.

        Example::

            BuildContext.from_wire({"context": "sha256:" + "0" * 64, "size": 10240})
        """
        if not isinstance(w["context"], str) or not isinstance(w["size"], int):
            raise TypeError("a context is a string digest and an integer size")
        return cls(context=w["context"], size=w["size"])


@dataclass
class ApiKey:
    """An API key (the ``ApiKey`` body). ``key``, the secret, is only in the answer to
    :meth:`Keys.create` (shown once); ``revoked_at`` is set once it is revoked.

    Example::

        k = Keys.create(owner="ci")
        print(k.id, k.key)
    """

    id: str
    owner: str
    admin: bool
    created_at: datetime
    revoked_at: Optional[datetime]
    key: Optional[str] = field(default=None, repr=False)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "ApiKey":
        """Builds a key from its JSON.

        Example::

            ApiKey.from_wire({"id": "key_1", "owner": "ci", "admin": False, "created_at": "2025-01-01T00:00:00Z", "revoked_at": None})
        """
        raw = {k: v for k, v in w.items() if k != "key"}
        return cls(
            id=w["id"], owner=w["owner"], admin=bool(w["admin"]), created_at=parse_time(w["created_at"]),  # type: ignore[arg-type]
            revoked_at=_opt_time(w.get("revoked_at")), key=w.get("key"), raw=raw,
        )


@dataclass
class UsageCost:
    """What a usage group cost, from the server's price table (``vcpu``, ``memory``,
    ``storage`` and their ``total``).

    Example::

        g = Usage.get().groups[0]
        if g.cost is not None:
            print(g.cost.total)
    """

    vcpu: float
    memory: float
    storage: float
    total: float

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "UsageCost":
        """Builds the cost from its JSON.

        Example::

            UsageCost.from_wire({"vcpu": 1.0, "memory": 0.5, "storage": 0.0, "total": 1.5})
        """
        return cls(vcpu=w["vcpu"], memory=w["memory"], storage=w["storage"], total=w["total"])


@dataclass
class UsagePrices:
    """The server's price table: per vCPU-second, per GiB-second of memory, per GB-month stored.

    Example::

        p = Usage.get().prices
        if p is not None:
            print(p.vcpu_second, p.gib_second, p.gb_month)
    """

    vcpu_second: float
    gib_second: float
    gb_month: float

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "UsagePrices":
        """Builds the prices from their JSON.

        Example::

            UsagePrices.from_wire({"vcpu_second": 1e-5, "gib_second": 1e-6, "gb_month": 0.02})
        """
        return cls(vcpu_second=w["vcpu_second"], gib_second=w["gib_second"], gb_month=w["gb_month"])


@dataclass
class UsageGroup:
    """One group of a usage report (``UsageGroup``): an owner, a sandbox or a metadata value
    (``key``; None for sandboxes without that metadata key), depending on ``group_by``.
    Seconds in each state; vCPU- and GiB-seconds reserved while running; host CPU its VMs
    used and CPU Den spent for them; bytes kept in the snapshot store; a cost where the server
    has prices.

    Example::

        for g in Usage.get(group_by="metadata.task_id").groups:
            print(g.key, round(g.running_seconds), g.host_cpu_seconds, g.stored_gb_months)
    """

    key: Optional[str]
    sandboxes: int
    running_seconds: float
    warm_hibernated_seconds: float
    cold_hibernated_seconds: float
    vcpu_seconds: float
    memory_gib_seconds: float
    host_cpu_seconds: float
    den_cpu_seconds: float
    stored_byte_seconds: float
    stored_gb_months: float
    cost: Optional[UsageCost]

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "UsageGroup":
        """Builds the group from its JSON.

        Example::

            UsageGroup.from_wire(report_json["groups"][0])
        """
        return cls(
            key=w.get("key"), sandboxes=w["sandboxes"], running_seconds=w["running_seconds"],
            warm_hibernated_seconds=w["warm_hibernated_seconds"], cold_hibernated_seconds=w["cold_hibernated_seconds"],
            vcpu_seconds=w["vcpu_seconds"], memory_gib_seconds=w["memory_gib_seconds"], host_cpu_seconds=w["host_cpu_seconds"],
            den_cpu_seconds=w["den_cpu_seconds"], stored_byte_seconds=w["stored_byte_seconds"], stored_gb_months=w["stored_gb_months"],
            cost=None if w.get("cost") is None else UsageCost.from_wire(w["cost"]),
        )


@dataclass
class UsageReport:
    """Metered usage over a period (``UsageReport``): ``from_`` (PEP 8's spelling of the wire's
    ``from``) to ``to``, grouped by ``group_by``.

    Example::

        r = Usage.get(group_by="owner")
        print(r.from_, r.to, [(g.key, g.running_seconds) for g in r.groups])
    """

    from_: datetime
    to: datetime
    group_by: str
    prices: Optional[UsagePrices]
    groups: List[UsageGroup]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "UsageReport":
        """Builds the report from its JSON.

        Example::

            UsageReport.from_wire(client.json("GET", "/v1/usage"))
        """
        return cls(
            from_=parse_time(w["from"]), to=parse_time(w["to"]), group_by=w["group_by"],  # type: ignore[arg-type]
            prices=None if w.get("prices") is None else UsagePrices.from_wire(w["prices"]),
            groups=[UsageGroup.from_wire(g) for g in w["groups"]], raw=dict(w),
        )


@dataclass
class HostKind:
    """What a host is: its QEMU version, accelerator (``kvm``, ``tcg``), CPU model and architecture.

    Example::

        h = Hosts.list()[0]
        print(h.kind.accelerator if h.kind else "unknown")
    """

    qemu_version: str
    accelerator: str
    cpu_model: str
    arch: str


@dataclass
class HostResources:
    """Memory (MiB) and vCPUs; in a host's ``capacity`` also the disk it keeps free
    (``disk_reserve_mb``), in its ``used`` the ``sandboxes`` holding them.

    Example::

        h = Hosts.list()[0]
        if h.capacity and h.used:
            print(h.used.memory_mb, "of", h.capacity.memory_mb, "MiB")
    """

    memory_mb: int
    vcpus: int
    disk_reserve_mb: Optional[int] = None
    sandboxes: Optional[int] = None


@dataclass
class HostInfo:
    """One host agent as ``GET /v1/hosts`` shows it (``HostEntry``): whether it answers now
    (``status``: ``up``/``unreachable``), what the operator said (``state``: ``up``,
    ``draining``, ``removed``), how it is managed (``config`` or ``lease``), its kind,
    capacity and use (None while it does not answer), and the live sandboxes placed on it.

    Example::

        for h in Hosts.list():
            print(h.id, h.status, h.state, h.sandboxes)
    """

    id: str
    url: str
    status: str
    error: Optional[str]
    state: str
    managed: str
    lease_until: Optional[datetime]
    lost_at: Optional[datetime]
    kind: Optional[HostKind]
    capacity: Optional[HostResources]
    used: Optional[HostResources]
    sandboxes: int
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "HostInfo":
        """Builds the host from its JSON.

        Example::

            HostInfo.from_wire(client.json("GET", "/v1/hosts")["hosts"][0])
        """
        k, c, u = w.get("kind"), w.get("capacity"), w.get("used")
        return cls(
            id=w["id"], url=w["url"], status=w["status"], error=w.get("error"), state=w["state"], managed=w["managed"],
            lease_until=_opt_time(w.get("lease_until")), lost_at=_opt_time(w.get("lost_at")),
            kind=None if k is None else HostKind(qemu_version=k["qemuVersion"], accelerator=k["accelerator"], cpu_model=k["cpuModel"], arch=k["arch"]),
            capacity=None if c is None else HostResources(memory_mb=c["memory_mb"], vcpus=c["vcpus"], disk_reserve_mb=c.get("disk_reserve_mb")),
            used=None if u is None else HostResources(memory_mb=u["memory_mb"], vcpus=u["vcpus"], sandboxes=u.get("sandboxes")),
            sandboxes=w["sandboxes"], raw=dict(w),
        )


#: Every event type a webhook can subscribe to (what one created without ``events`` gets).
WEBHOOK_EVENT_TYPES = (
    "sandbox.created", "sandbox.hibernated", "sandbox.woken", "sandbox.destroyed", "sandbox.lost", "sandbox.recovered",
    "sandbox.error", "sandbox.forked", "checkpoint.created", "checkpoint.deleted", "network.refused", "sandbox.refused",
)


@dataclass
class Webhook:
    """A webhook (the ``Webhook`` body): where an owner's sandbox events are POSTed. ``secret``
    (``whsec_...``), which signs the deliveries, is only in the answer to
    :meth:`Webhooks.create` (shown once).

    Example::

        hook = Webhooks.create(url="https://example.com/den", events=["sandbox.destroyed"])
        save_secret(hook.secret)
    """

    id: str
    url: str
    events: List[str]
    description: Optional[str]
    created_at: datetime
    secret: Optional[str] = field(default=None, repr=False)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "Webhook":
        """Builds a webhook from its JSON.

        Example::

            Webhook.from_wire(client.json("GET", f"/v1/webhooks/{hook_id}"))
        """
        return cls(
            id=w["id"], url=w["url"], events=list(w["events"]), description=w.get("description"),
            created_at=parse_time(w["created_at"]), secret=w.get("secret"),  # type: ignore[arg-type]
            raw={k: v for k, v in w.items() if k != "secret"},
        )


@dataclass
class WebhookPayload:
    """The JSON body a webhook receives: ``type``, when it happened (``timestamp``) and the
    event's ``data`` (``sandbox_id``, ``reason``, ``mode``, ``children``, ``checkpoint``, ...).

    Example::

        payload = Webhooks.verify(body, headers, secret)
        if payload.type == "sandbox.destroyed":
            print(payload.data["sandbox_id"], payload.data.get("reason"))
    """

    type: str
    timestamp: datetime
    data: Dict[str, Any]

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "WebhookPayload":
        """Builds a payload from its JSON.

        Example::

            WebhookPayload.from_wire(json.loads(body))
        """
        return cls(type=w["type"], timestamp=parse_time(w["timestamp"]), data=dict(w.get("data") or {}))  # type: ignore[arg-type]


@dataclass
class WebhookDelivery:
    """One delivery of an event to a webhook (``WebhookDelivery``). ``status``: ``pending``
    (not delivered yet; retried with backoff), ``delivered`` or ``failed`` (given up).
    ``message_id`` is the ``webhook-id`` header the receiver sees: the same for every attempt
    and redelivery of one event, so receivers dedupe on it.

    Example::

        for d in Webhooks.deliveries(hook.id, status="failed").deliveries:
            print(d.id, d.type, d.attempts, d.response_status, d.error)
    """

    id: str
    message_id: str
    webhook_id: str
    type: str
    #: None for events of no one sandbox (``sandbox.refused``).
    sandbox_id: Optional[str]
    status: str
    attempts: int
    created_at: datetime
    last_attempt_at: Optional[datetime]
    next_attempt_at: Optional[datetime]
    delivered_at: Optional[datetime]
    #: The receiver's HTTP status at the last attempt (None: no response).
    response_status: Optional[int]
    #: Why the last attempt failed.
    error: Optional[str]
    payload: WebhookPayload
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "WebhookDelivery":
        """Builds a delivery from its JSON.

        Example::

            WebhookDelivery.from_wire(page_json["deliveries"][0])
        """
        return cls(
            id=w["id"], message_id=w["message_id"], webhook_id=w["webhook_id"], type=w["type"], sandbox_id=w.get("sandbox_id"),
            status=w["status"], attempts=w["attempts"], created_at=parse_time(w["created_at"]),  # type: ignore[arg-type]
            last_attempt_at=_opt_time(w.get("last_attempt_at")), next_attempt_at=_opt_time(w.get("next_attempt_at")),
            delivered_at=_opt_time(w.get("delivered_at")), response_status=w.get("response_status"), error=w.get("error"),
            payload=WebhookPayload.from_wire(w["payload"]), raw=dict(w),
        )


@dataclass
class WebhookDeliveriesPage:
    """One page of a webhook's deliveries, newest first; ``next_cursor`` is None on the last
    page. Iterating it iterates the deliveries.

    Example::

        page = Webhooks.deliveries(hook.id, limit=20)
        if page.next_cursor:
            page = Webhooks.deliveries(hook.id, cursor=page.next_cursor)
    """

    deliveries: List[WebhookDelivery]
    next_cursor: Optional[str]

    def __iter__(self) -> Iterator[WebhookDelivery]:
        return iter(self.deliveries)

    def __len__(self) -> int:
        return len(self.deliveries)


# ---------------------------------------------------------------- code interpreter

#: The MIME forms a code result may carry (``png``, ``jpeg`` and ``pdf`` are base64).
RESULT_FORMATS = ("text", "html", "markdown", "svg", "png", "jpeg", "pdf", "latex", "json", "javascript")


@dataclass
class CodeContext:
    """A code context of a code-interpreter sandbox: a kernel of one ``language`` whose state
    (variables, imports, ``cwd``) persists between runs.

    Example::

        ctx = sbx.code_contexts.create(language="python", cwd="/tmp")
        sbx.run_code("x = 1", context=ctx)
    """

    id: str
    language: str
    cwd: str

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "CodeContext":
        """Builds the context from its JSON.

        Example::

            CodeContext.from_wire({"id": "c1", "language": "python", "cwd": "/home/user"})
        """
        return cls(id=str(w["id"]), language=str(w["language"]), cwd=str(w["cwd"]))


@dataclass
class ExecutionResult:
    """One result of a run: the cell's value (``is_main_result``) or something it displayed (a
    plot), in every MIME form the kernel gave; ``png``, ``jpeg`` and ``pdf`` are base64.

    Example::

        e = sbx.run_code("import matplotlib.pyplot as plt; plt.plot([1, 2]); plt.show()")
        png = next(r.png for r in e.results if r.png)   # base64
    """

    is_main_result: bool = False
    text: Optional[str] = None
    html: Optional[str] = None
    markdown: Optional[str] = None
    svg: Optional[str] = None
    png: Optional[str] = None
    jpeg: Optional[str] = None
    pdf: Optional[str] = None
    latex: Optional[str] = None
    json: Any = None
    javascript: Optional[str] = None
    extra: Any = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "ExecutionResult":
        """Builds the result from a ``result`` line of the run's stream.

        Example::

            ExecutionResult.from_wire({"type": "result", "is_main_result": True, "text": "2"})
        """
        def s(k: str) -> Optional[str]:
            v = w.get(k)
            return v if isinstance(v, str) else None

        return cls(
            is_main_result=bool(w.get("is_main_result", False)), text=s("text"), html=s("html"), markdown=s("markdown"),
            svg=s("svg"), png=s("png"), jpeg=s("jpeg"), pdf=s("pdf"), latex=s("latex"), json=w.get("json"),
            javascript=s("javascript"), extra=w.get("extra"), raw=dict(w),
        )

    def formats(self) -> List[str]:
        """The MIME forms this result has.

        Example::

            ExecutionResult(text="2", html="<b>2</b>").formats()   # ["text", "html"]
        """
        return [k for k in RESULT_FORMATS if getattr(self, k) is not None]


@dataclass
class ExecutionError:
    """An exception the code raised: its class ``name``, its message (``value``) and the
    formatted ``traceback``. A run that raises still returns: check :attr:`Execution.error`.

    Example::

        err = sbx.run_code("1 / 0").error
        print(err.name, err.value)   # ZeroDivisionError division by zero
    """

    name: str
    value: str
    traceback: str


@dataclass
class Logs:
    """What a run printed, one entry per piece as it came.

    Example::

        print("".join(sbx.run_code("print(1)").logs.stdout))   # "1\\n"
    """

    stdout: List[str] = field(default_factory=list)
    stderr: List[str] = field(default_factory=list)


@dataclass
class Execution:
    """What a run left behind: ``results``, ``logs``, the ``error`` it raised (if any) and the
    kernel's ``execution_count``. :attr:`text` is the cell's value as a REPL shows it.

    Example::

        e = sbx.run_code("x = 41\\nx + 1")
        print(e.text, e.error)   # "42" None
    """

    results: List[ExecutionResult] = field(default_factory=list)
    logs: Logs = field(default_factory=Logs)
    error: Optional[ExecutionError] = None
    execution_count: Optional[int] = None

    @property
    def text(self) -> Optional[str]:
        """The main result's text (None if the cell had no value).

        Example::

            assert sbx.run_code("1 + 1").text == "2"
        """
        for r in self.results:
            if r.is_main_result:
                return r.text
        return None
