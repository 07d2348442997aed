"""The deployment's host agents (``/v1/hosts``; admin routes)."""

from __future__ import annotations

from typing import List, Optional

from ._client import Client, seg
from .types import HostInfo, convert

__all__ = ["Hosts"]


class Hosts:
    """The host agents sandboxes run on (needs an admin key).

    Example::

        for h in Hosts.list():
            print(h.id, h.status, h.used.sandboxes if h.used else "-")
        Hosts.drain("den_abc")     # its sandboxes go cold, to wake on other hosts
    """

    @staticmethod
    def list(*, api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[HostInfo]:
        """Every host: state, lease, kind, capacity and use.

        Example::

            up = [h for h in Hosts.list() if h.status == "up"]
        """
        w = Client(api_url, api_key).json("GET", "/v1/hosts")
        return convert(w, lambda v: [HostInfo.from_wire(h) for h in v["hosts"]])

    @staticmethod
    def drain(host_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> int:
        """Starts draining a host (no new sandboxes; its own go cold, then its volumes are
        parked in the store) and returns how many sandboxes and volumes are still on it
        (ask again for progress).

        Example::

            while Hosts.drain("den_abc") > 0:
                time.sleep(5)
        """
        w = Client(api_url, api_key).json("POST", f"/v1/hosts/{seg(host_id)}/drain", json_body={})
        return convert(w, lambda v: int(v["left"]))

    @staticmethod
    def undrain(host_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> None:
        """Ends a drain: the host takes new sandboxes again.

        Example::

            Hosts.undrain("den_abc")
        """
        Client(api_url, api_key).empty("POST", f"/v1/hosts/{seg(host_id)}/undrain", json_body={})

    @staticmethod
    def remove(host_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> None:
        """Removes a host that holds no sandbox (drain it first).

        Example::

            Hosts.remove("den_abc")
        """
        Client(api_url, api_key).empty("DELETE", f"/v1/hosts/{seg(host_id)}")
