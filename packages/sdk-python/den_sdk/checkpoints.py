"""Durable checkpoints: taken with :meth:`Sandbox.snapshot`, restored with
:meth:`Sandbox.restore`; they outlive the sandbox they came from."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Dict, List, Mapping, Optional

from ._client import Client, seg
from .types import convert, parse_time

__all__ = ["Checkpoint", "Checkpoints"]


@dataclass
class Checkpoint:
    """A durable checkpoint of a sandbox (memory, device state and disk, in the snapshot
    store). ``pause_ms`` is how long the sandbox was paused while it was taken;
    ``stored_bytes`` what it occupies in the store.

    Example::

        cp = sbx.snapshot(name="deps-installed")
        print(cp.id, cp.name, cp.stored_bytes)
        copy = cp.restore(ttl_seconds=600)
    """

    id: str
    name: Optional[str]
    sandbox_id: str
    template: str
    template_version: str
    vcpus: int
    memory_mb: int
    disk_mb: int
    pause_ms: float
    stored_bytes: int
    created_at: datetime
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _client: Optional[Client] = field(default=None, repr=False, compare=False)

    @classmethod
    def from_wire(cls, w: Mapping[str, Any], client: Optional[Client] = None) -> "Checkpoint":
        """Builds a checkpoint from its JSON body.

        Example::

            cp = Checkpoint.from_wire(client.json("GET", f"/v1/checkpoints/{cp_id}"), client)
        """
        return cls(
            id=w["id"],
            name=w.get("name"),
            sandbox_id=w["sandbox_id"],
            template=w["template"],
            template_version=w["template_version"],
            vcpus=w["vcpus"],
            memory_mb=w["memory_mb"],
            disk_mb=w["disk_mb"],
            pause_ms=w["pause_ms"],
            stored_bytes=w["stored_bytes"],
            created_at=parse_time(w["created_at"]),  # type: ignore[arg-type]
            raw=dict(w),
            _client=client,
        )

    def restore(self, **kwargs: Any):
        """A new sandbox from this checkpoint (same as ``Sandbox.restore(cp, ...)``; takes the
        same keyword arguments).

        Example::

            again = cp.restore(ttl_seconds=600, metadata={"attempt": "2"})
        """
        from .sandbox import Sandbox

        if self._client is not None and "api_url" not in kwargs and "api_key" not in kwargs:
            kwargs["_client"] = self._client
        return Sandbox.restore(self, **kwargs)

    def delete(self) -> None:
        """Deletes the checkpoint; sandboxes restored from it keep working.

        Example::

            cp.delete()
        """
        (self._client or Client()).empty("DELETE", f"/v1/checkpoints/{seg(self.id)}")


class Checkpoints:
    """Checkpoints of the caller's sandboxes.

    Example::

        for c in Checkpoints.list():
            print(c.id, c.name, c.stored_bytes)
    """

    @staticmethod
    def list(sandbox_id: Optional[str] = None, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[Checkpoint]:
        """Lists checkpoints, optionally of one sandbox.

        Example::

            mine = Checkpoints.list(sandbox_id=sbx.id)
        """
        client = Client(api_url, api_key)
        w = client.json("GET", "/v1/checkpoints", query={"sandbox_id": sandbox_id})
        return convert(w, lambda v: [Checkpoint.from_wire(c, client) for c in v["checkpoints"]])

    @staticmethod
    def get(checkpoint_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> Checkpoint:
        """Gets one checkpoint (raises :class:`CheckpointNotFoundError`).

        Example::

            cp = Checkpoints.get("snap_abcdefghijklmnop")
        """
        client = Client(api_url, api_key)
        return convert(client.json("GET", f"/v1/checkpoints/{seg(checkpoint_id)}"), lambda v: Checkpoint.from_wire(v, client))

    @staticmethod
    def delete(checkpoint_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> None:
        """Deletes a checkpoint by id; sandboxes restored from it keep working.

        Example::

            Checkpoints.delete(cp.id)
        """
        Client(api_url, api_key).empty("DELETE", f"/v1/checkpoints/{seg(checkpoint_id)}")
