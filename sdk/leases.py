"""Lease tokens: idempotent receives for readers that may repeat a read (Spark tasks).

``SimpleConsumer.receive_lease(token, page)`` pops under a lease token. Asking again for the
same (token, page) while the lease lives returns the same messages, with their current
receipt handles. ``ack_leases`` and ``renew_leases`` act on every message of each lease.
Leases live in the server's coordinator: in cluster mode in etcd, so any proxy replays a
lease another proxy popped (one that died included); `popmq serve` keeps them in memory, so
its restart forgets them and their messages are delivered again after their invisible time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from popmq._gen.popmq.v1 import messaging_pb2
from popmq.sdk.types import ReceivedMessage, datetime_from_timestamp

__all__ = ["LeasePage", "LeaseResult"]


@dataclass(frozen=True, slots=True)
class LeasePage:
    """One page of a lease.

    Attributes:
        messages: The page's messages with their current receipt handles; possibly none.
        replayed: True when the page was popped before and is returned again.
        lease_until: When the lease ends unless renewed (UTC).
        page_id: The page's identity, for ``ack_leases(read_pages=...)``; ``""`` from a
            server of an earlier release.
    """

    messages: list[ReceivedMessage]
    replayed: bool
    lease_until: datetime
    page_id: str = ""

    @classmethod
    def from_proto(cls, response: messaging_pb2.LeasePopResponse) -> LeasePage:
        """Build a page from a LeasePop response."""
        return cls(
            messages=[ReceivedMessage.from_proto(m) for m in response.messages],
            replayed=response.replayed,
            lease_until=datetime_from_timestamp(response.lease_until),
            page_id=response.page_id,
        )


@dataclass(frozen=True, slots=True)
class LeaseResult:
    """The outcome of acking or renewing one lease.

    Attributes:
        lease_token: The token.
        code: gRPC status code name: ``"OK"``, ``"NOT_FOUND"`` (unknown or expired lease),
            ``"FAILED_PRECONDITION"`` (some messages could not be acked or renewed), ...
        message: Why, when ``code`` is not ``"OK"``.
        messages: Messages the lease holds.
        lease_until: When the lease now ends (UTC); the epoch when unknown.
    """

    lease_token: str
    code: str
    message: str
    messages: int
    lease_until: datetime

    @property
    def ok(self) -> bool:
        """Whether every message of the lease was acked or renewed."""
        return self.code == "OK"

    @classmethod
    def from_proto(cls, result: messaging_pb2.LeaseResult) -> LeaseResult:
        """Build a result from its wire form."""
        return cls(
            lease_token=result.lease_token,
            code=result.code,
            message=result.message,
            messages=result.messages,
            lease_until=datetime_from_timestamp(result.lease_until),
        )
