"""Webhooks (``/v1/webhooks``): an owner's sandbox lifecycle events, POSTed to a URL of theirs,
and the receiving side's signature check (the Standard Webhooks scheme, standard library only)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Union

from ._client import Client, seg
from .types import WEBHOOK_EVENT_TYPES, Webhook, WebhookDeliveriesPage, WebhookDelivery, WebhookPayload, convert

__all__ = ["Webhooks", "WebhookVerificationError", "WEBHOOK_EVENT_TYPES"]

#: How far a delivery's ``webhook-timestamp`` may be from now, by default, to be accepted.
DEFAULT_TOLERANCE_SECONDS = 300


class WebhookVerificationError(ValueError):
    """A delivery that did not pass :meth:`Webhooks.verify`: a missing header, a timestamp
    too far from now, or no signature that matches (forged, altered, or another secret).

    Example::

        try:
            payload = Webhooks.verify(body, headers, secret)
        except WebhookVerificationError:
            return 400
    """


def _page(v: Any) -> WebhookDeliveriesPage:
    return WebhookDeliveriesPage(deliveries=[WebhookDelivery.from_wire(d) for d in v["deliveries"]], next_cursor=v.get("next_cursor"))


def _header(headers: Mapping[str, str], name: str) -> Optional[str]:
    v = headers.get(name)
    if v is None:
        for k, val in headers.items():
            if k.lower() == name:
                return val
    return v


class Webhooks:
    """The caller's webhooks: every key sees and manages only its own owner's. Each delivery is
    signed the Standard Webhooks way; check one with :meth:`verify`.

    Example::

        hook = Webhooks.create(url="https://example.com/den", events=["sandbox.destroyed"])
        keep(hook.secret)            # never shown again
        for h in Webhooks.list():
            print(h.id, h.url, ",".join(h.events))
        Webhooks.delete(hook.id)
    """

    @staticmethod
    def create(
        url: str,
        events: Optional[Sequence[str]] = None,
        description: Optional[str] = None,
        *,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
    ) -> Webhook:
        """Creates a webhook delivering ``events`` (default: every type,
        :data:`WEBHOOK_EVENT_TYPES`) to ``url`` (http or https, resolving to a public address:
        the server refuses loopback, private and link-local ones unless its operator allows
        them; redirects are not followed). The answer's ``secret`` signs its deliveries and is
        shown only this once.

        Example::

            hook = Webhooks.create("https://example.com/den", events=["sandbox.created", "sandbox.destroyed"], description="audit")
            save_secret(hook.secret)
        """
        body: Dict[str, Any] = {"url": url}
        if events is not None:
            if isinstance(events, str):
                raise TypeError("events is a list of event types, not one string")
            body["events"] = list(events)
        if description is not None:
            body["description"] = description
        return convert(Client(api_url, api_key).json("POST", "/v1/webhooks", json_body=body), Webhook.from_wire)

    @staticmethod
    def list(*, api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[Webhook]:
        """The owner's webhooks (without secrets).

        Example::

            mine = [h for h in Webhooks.list() if h.url.startswith("https://example.com/")]
        """
        w = Client(api_url, api_key).json("GET", "/v1/webhooks")
        return convert(w, lambda v: [Webhook.from_wire(h) for h in v["webhooks"]])

    @staticmethod
    def get(webhook_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> Webhook:
        """One webhook (without its secret); :class:`NotFoundError` if there is none of this owner's.

        Example::

            hook = Webhooks.get("wh_abcdefghijklmnop")
            print(hook.url, hook.events)
        """
        return convert(Client(api_url, api_key).json("GET", f"/v1/webhooks/{seg(webhook_id)}"), Webhook.from_wire)

    @staticmethod
    def delete(webhook_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> None:
        """Deletes a webhook and its delivery log: nothing more is delivered to it.

        Example::

            Webhooks.delete(hook.id)
        """
        Client(api_url, api_key).empty("DELETE", f"/v1/webhooks/{seg(webhook_id)}")

    @staticmethod
    def deliveries(
        webhook_id: str,
        status: Optional[str] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
        *,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
    ) -> WebhookDeliveriesPage:
        """One page of a webhook's deliveries, newest first, optionally only those in
        ``status`` (``"pending"``, ``"delivered"``, ``"failed"``). Pass the page's
        ``next_cursor`` as ``cursor`` for the next one (or iterate them all with
        :meth:`all_deliveries`).

        Example::

            page = Webhooks.deliveries(hook.id, status="failed", limit=20)
            for d in page.deliveries:
                print(d.type, d.sandbox_id, d.attempts, d.response_status, d.error)
        """
        query = {"status": status, "limit": limit, "cursor": cursor}
        return convert(Client(api_url, api_key).json("GET", f"/v1/webhooks/{seg(webhook_id)}/deliveries", query=query), _page)

    @staticmethod
    def all_deliveries(
        webhook_id: str,
        status: Optional[str] = None,
        page_size: Optional[int] = None,
        *,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
    ) -> Iterator[WebhookDelivery]:
        """Every delivery of a webhook (in ``status``, if given), newest first, fetched a page at
        a time (following ``next_cursor``) as you iterate.

        Example::

            for d in Webhooks.all_deliveries(hook.id, status="failed"):
                Webhooks.redeliver(hook.id, d.id)
        """
        client = Client(api_url, api_key)

        def pages() -> Iterator[WebhookDelivery]:
            cursor: Optional[str] = None
            while True:
                query = {"status": status, "limit": page_size, "cursor": cursor}
                page = convert(client.json("GET", f"/v1/webhooks/{seg(webhook_id)}/deliveries", query=query), _page)
                yield from page.deliveries
                if page.next_cursor is None or page.next_cursor == cursor:  # never loop forever on a server bug
                    return
                cursor = page.next_cursor

        return pages()

    @staticmethod
    def redeliver(webhook_id: str, delivery_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> WebhookDelivery:
        """Sends a delivery's event again, after the rest of its queue: returns the new
        ``pending`` delivery of the same message (the same ``message_id``, so a receiver that
        dedupes on ``webhook-id`` sees it once).

        Example::

            again = Webhooks.redeliver(hook.id, "whd_abcdefghijklmnop")
            print(again.id, again.status)   # ... pending
        """
        path = f"/v1/webhooks/{seg(webhook_id)}/deliveries/{seg(delivery_id)}/redeliver"
        return convert(Client(api_url, api_key).json("POST", path), WebhookDelivery.from_wire)

    @staticmethod
    def verify(
        body: Union[str, bytes],
        headers: Mapping[str, str],
        secret: str,
        *,
        tolerance_seconds: float = DEFAULT_TOLERANCE_SECONDS,
        now: Optional[float] = None,
    ) -> WebhookPayload:
        """Checks a delivery the way the Standard Webhooks spec says (what the
        ``standardwebhooks`` packages do) and returns its payload. ``body`` is the raw request
        body, before any JSON parsing; ``headers`` its headers (any case); ``secret`` the
        webhook's ``whsec_...``. Raises :class:`WebhookVerificationError` if the
        ``webhook-signature`` header has no ``v1`` signature of
        ``"{webhook-id}.{webhook-timestamp}.{body}"`` under the secret, or the timestamp is more
        than ``tolerance_seconds`` from now. Dedupe on the ``webhook-id`` header: a redelivery
        keeps it.

        Example::

            # in the receiver's handler:
            payload = Webhooks.verify(request.body, request.headers, os.environ["DEN_WEBHOOK_SECRET"])
            if payload.type == "sandbox.destroyed":
                forget(payload.data["sandbox_id"])
        """
        raw = body.encode("utf-8") if isinstance(body, str) else bytes(body)
        msg_id = _header(headers, "webhook-id")
        ts = _header(headers, "webhook-timestamp")
        sigs = _header(headers, "webhook-signature")
        if not msg_id or not ts or not sigs:
            raise WebhookVerificationError("missing webhook-id, webhook-timestamp or webhook-signature header")
        try:
            when = int(ts)
        except ValueError:
            raise WebhookVerificationError("webhook-timestamp is not a number") from None
        t = time.time() if now is None else now
        if abs(t - when) > tolerance_seconds:
            raise WebhookVerificationError("webhook-timestamp is too far from now (a stale or replayed delivery?)")
        s = secret[len("whsec_") :] if secret.startswith("whsec_") else secret
        try:
            key = base64.b64decode(s, validate=True)
        except (binascii.Error, ValueError):
            raise WebhookVerificationError("the secret is not a whsec_ secret (base64)") from None
        mac = hmac.new(key, msg_id.encode("utf-8") + b"." + ts.encode("ascii") + b"." + raw, hashlib.sha256).digest()
        want = base64.b64encode(mac).decode("ascii")
        for entry in sigs.split():
            version, _, sig = entry.partition(",")
            if version == "v1" and hmac.compare_digest(sig, want):
                break
        else:
            raise WebhookVerificationError("no signature matches")
        try:
            payload = json.loads(raw.decode("utf-8"))
        except ValueError:
            raise WebhookVerificationError("the body is not JSON") from None
        try:
            return WebhookPayload.from_wire(payload)
        except (KeyError, TypeError, ValueError, AttributeError):
            raise WebhookVerificationError("the body is not a webhook payload") from None
