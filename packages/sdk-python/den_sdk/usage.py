"""Metered usage (``GET /v1/usage``): what sandboxes held and used, and what it costs."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Optional, Union

from ._client import Client
from .types import UsageReport, convert

__all__ = ["Usage"]

Instant = Union[datetime, str]


def _instant(v: Optional[Instant]) -> Optional[str]:
    if v is None or isinstance(v, str):
        return v
    if not isinstance(v, datetime):
        raise TypeError("a usage period bound is a datetime or an ISO 8601 string")
    u = v.astimezone(timezone.utc)  # (a naive datetime is local time, as everywhere in Python)
    return u.strftime("%Y-%m-%dT%H:%M:%S.") + f"{u.microsecond // 1000:03d}Z"


class Usage:
    """The server's metering: seconds running, warm- and cold-hibernated; vCPU- and
    GiB-seconds reserved while running; host CPU its VMs used and CPU Den spent for them;
    bytes kept in the snapshot store; and a cost where the server has a price table.

    Example::

        report = Usage.get(group_by="metadata.task_id")
        for g in report.groups:
            print(g.key, round(g.running_seconds), "s running")
    """

    @staticmethod
    def get(
        from_: Optional[Instant] = None,
        to: Optional[Instant] = None,
        group_by: Optional[str] = None,
        owner: Optional[str] = None,
        *,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
    ) -> UsageReport:
        """Usage from ``from_`` (default: a day before ``to``) to ``to`` (default: now), as
        datetimes or ISO 8601 strings, grouped by ``group_by``: ``"sandbox"`` (default),
        ``"owner"`` or ``"metadata.<key>"``. ``owner`` (admin keys only): one owner's usage.

        Example::

            from datetime import datetime, timedelta, timezone
            last_hour = Usage.get(from_=datetime.now(timezone.utc) - timedelta(hours=1), group_by="owner")
        """
        query = {"from": _instant(from_), "to": _instant(to), "group_by": group_by, "owner": owner}
        return convert(Client(api_url, api_key).json("GET", "/v1/usage", query=query), UsageReport.from_wire)
