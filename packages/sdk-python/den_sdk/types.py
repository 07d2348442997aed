"""The SDK's views of the API's bodies: small dataclasses built from the snake_case JSON (field
names are the wire's), with timestamps as timezone-aware ``datetime`` objects. Each keeps the
JSON it came from in ``raw`` for fields a newer server may add."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List, Mapping, Optional, TypeVar, Union

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
