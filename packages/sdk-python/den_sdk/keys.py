"""API keys (``/v1/keys``; admin routes: the calling key must be an admin key, others get
:class:`PermissionDeniedError`)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ._client import Client, seg
from .types import ApiKey, convert

__all__ = ["Keys"]


class Keys:
    """Managing API keys (needs an admin key).

    Example::

        k = Keys.create(owner="ci")
        hand_to_ci(k.key)        # the secret is never shown again
        Keys.revoke(k.id)
    """

    @staticmethod
    def create(owner: str, admin: Optional[bool] = None, *, format: Optional[str] = None, api_url: Optional[str] = None, api_key: Optional[str] = None) -> ApiKey:
        """Creates a key for ``owner`` (its sandboxes are visible to every key of the same
        owner); ``admin`` lets it manage keys; ``format="e2b"`` makes its secret ``e2b_`` +
        hex digits, the form the ``e2b`` Python client accepts (default ``"den"``: ``den_...``;
        either works everywhere). The answer's ``key`` is the secret, shown only this once.

        Example::

            created = Keys.create(owner="agent-fleet")
            print(created.id, created.key)
        """
        body: Dict[str, Any] = {"owner": owner}
        if admin is not None:
            body["admin"] = bool(admin)
        if format is not None:
            body["format"] = format
        return convert(Client(api_url, api_key).json("POST", "/v1/keys", json_body=body), ApiKey.from_wire)

    @staticmethod
    def list(*, api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[ApiKey]:
        """Every key (without secrets), revoked ones included.

        Example::

            active = [k for k in Keys.list() if k.revoked_at is None]
        """
        w = Client(api_url, api_key).json("GET", "/v1/keys")
        return convert(w, lambda v: [ApiKey.from_wire(k) for k in v["keys"]])

    @staticmethod
    def revoke(key_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> ApiKey:
        """Revokes a key (requests with it then get 401) and returns it, ``revoked_at`` set.
        An unknown id raises :class:`NotFoundError`.

        Example::

            k = Keys.revoke("key_abcdefghijklmnop")
            print(k.revoked_at)
        """
        return convert(Client(api_url, api_key).json("DELETE", f"/v1/keys/{seg(key_id)}"), ApiKey.from_wire)
