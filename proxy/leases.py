"""Lease tokens: idempotent pops for callers that may repeat a read (Spark tasks).

A lease is what the pops made under one (group, lease token) took: a list of pages, one per
pop. Asking again for a page while the lease lives returns the same messages with their
current receipt handles, so a retried task, a re-run stage or a query restarted from its
checkpoint reads exactly what the first attempt read. AckLease and RenewLease act on every
message of a lease.

A lease lives until the earliest invisible deadline of its pages. After that the broker
delivers its unacknowledged messages again (to anyone), so an expired lease cannot be
replayed: it starts afresh at page 0. Leases live in this process only; a proxy restart
forgets them, and their messages come back after their invisible time like any other
unacknowledged pop.

Everything runs on the proxy's event loop. Each lease has an asyncio.Lock that serialises
the pops, renewals and acks of that lease (a retried task racing its zombie attempt, a
driver acking while a task still reads).
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from popmq.broker_core import (
    MESSAGE_OVERHEAD_BYTES,
    BrokerAPI,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PopMQError,
    PoppedMessage,
    ResourceExhaustedError,
)

log = logging.getLogger(__name__)

MAX_TOKEN_LENGTH = 256


@dataclass(frozen=True, kw_only=True)
class LeaseConfig:
    """Bounds of the lease table."""

    max_leases: int = 100_000
    """Live leases (acknowledged ones count until their deadline); beyond: RESOURCE_EXHAUSTED."""
    max_pages: int = 4096
    """Pops one lease may make."""
    max_bytes: int = 512 * 1024 * 1024
    """Message bytes all leases may hold for replay (bodies plus a per-message allowance);
    a new page past it is RESOURCE_EXHAUSTED until leases are acked or expire, so the
    proxy's memory stays bounded however many leases clients open."""


@dataclass(frozen=True, slots=True)
class LeasePage:
    """One page of a lease, as LeasePop answers it."""

    messages: list[PoppedMessage]
    replayed: bool
    lease_until_ms: int


@dataclass(frozen=True, slots=True)
class LeaseOutcome:
    """The result of acking or renewing one lease token."""

    token: str
    error: PopMQError | None
    messages: int
    lease_until_ms: int


@dataclass(slots=True)
class _Page:
    messages: list[PoppedMessage]
    deadline_ms: int
    held_bytes: int = 0
    """What the page's messages count against LeaseConfig.max_bytes."""


def _held_bytes(messages: Sequence[PoppedMessage]) -> int:
    return sum(len(m.record.body) + MESSAGE_OVERHEAD_BYTES for m in messages)


class _Lease:
    __slots__ = ("acked", "acked_count", "group", "lock", "pages", "token", "topic")

    def __init__(self, group: str, topic: str, token: str) -> None:
        self.group = group
        self.topic = topic
        self.token = token
        self.pages: list[_Page] = []
        self.acked = False
        self.acked_count = 0
        self.lock = asyncio.Lock()  # guards pages, acked and acked_count across awaits

    @property
    def deadline_ms(self) -> int:
        """When the lease ends: its earliest page deadline (far future while it has none)."""
        return min((page.deadline_ms for page in self.pages), default=2**63 - 1)

    @property
    def message_count(self) -> int:
        if self.acked:
            return self.acked_count
        return sum(len(page.messages) for page in self.pages)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def check_token(token: str) -> None:
    if not token:
        raise InvalidArgumentError(f"lease_token is empty: use 1 to {MAX_TOKEN_LENGTH} characters")
    if len(token) > MAX_TOKEN_LENGTH:
        raise InvalidArgumentError(
            f"lease_token is {len(token)} characters long: at most {MAX_TOKEN_LENGTH} allowed"
        )
    if not token.isprintable():
        raise InvalidArgumentError("lease_token must be printable characters only")


class LeaseTable:
    """Leases by (group, token), with their pages and deadlines."""

    def __init__(self, broker: BrokerAPI, config: LeaseConfig | None = None) -> None:
        self._broker = broker
        self.config = config or LeaseConfig()
        # (group, token) -> lease; leases leave at their deadline (see _purge).
        self._leases: dict[tuple[str, str], _Lease] = {}
        # (deadline_ms, group, token) of leases, for _purge; stale entries are skipped.
        self._expiry: list[tuple[int, str, str]] = []
        # Sum of the held_bytes of every page of every lease in _leases.
        self.held_bytes = 0

    def __len__(self) -> int:
        return len(self._leases)

    def _purge(self, now: int) -> None:
        """Forget leases whose deadline passed (their messages are the broker's again)."""
        expiry = self._expiry
        while expiry and expiry[0][0] <= now:
            deadline, group, token = heapq.heappop(expiry)
            lease = self._leases.get((group, token))
            if lease is None or lease.deadline_ms != deadline:
                continue  # renewed or reset since: a newer entry is on the heap
            if lease.lock.locked():
                heapq.heappush(expiry, (now + 1000, group, token))
                continue
            self._set_pages(lease, [])
            del self._leases[(group, token)]

    def _set_pages(self, lease: _Lease, pages: list[_Page]) -> None:
        """Replace a lease's pages, keeping held_bytes in step."""
        self.held_bytes += sum(p.held_bytes for p in pages) - sum(p.held_bytes for p in lease.pages)
        lease.pages = pages

    def _schedule(self, lease: _Lease) -> None:
        if lease.pages:
            heapq.heappush(self._expiry, (lease.deadline_ms, lease.group, lease.token))

    async def pop(
        self,
        group: str,
        topic: str,
        token: str,
        page: int,
        invisible_s: float,
        pop: Callable[[], Awaitable[list[PoppedMessage]]],
    ) -> LeasePage:
        """Return page `page` of the lease, popping it with `pop` when it is the next one.

        `invisible_s` is the invisible time `pop` asks for; an empty page lives that long.
        """
        check_token(token)
        if page < 0:
            raise InvalidArgumentError(f"page {page} is negative: pages count from 0")
        now = _now_ms()
        self._purge(now)
        key = (group, token)
        lease = self._leases.get(key)
        if lease is None:
            if page != 0:
                raise FailedPreconditionError(
                    f"lease {token!r} is unknown or expired (a proxy restart forgets leases); "
                    f"read it again from page 0, not page {page}"
                )
            if len(self._leases) >= self.config.max_leases:
                raise ResourceExhaustedError(
                    f"{len(self._leases)} leases are live, the most this proxy holds; ack "
                    "leases or let them expire"
                )
            lease = self._leases[key] = _Lease(group, topic, token)
        if lease.topic != topic:
            raise InvalidArgumentError(
                f"lease {token!r} holds messages of topic {lease.topic!r}, not {topic!r}"
            )
        async with lease.lock:
            if self._leases.setdefault(key, lease) is not lease:
                # Our lease was dropped (its first pop failed) and another call started anew.
                raise FailedPreconditionError(
                    f"lease {token!r} was restarted by a concurrent call; ask again"
                )
            try:
                return await self._page(lease, page, invisible_s, pop)
            finally:
                if not lease.pages and not lease.acked and self._leases.get(key) is lease:
                    del self._leases[key]  # the first pop failed: nothing to remember

    async def _page(
        self,
        lease: _Lease,
        page: int,
        invisible_s: float,
        pop: Callable[[], Awaitable[list[PoppedMessage]]],
    ) -> LeasePage:
        if lease.acked:
            raise FailedPreconditionError(
                f"lease {lease.token!r} was acknowledged; its messages are done"
            )
        now = _now_ms()
        if lease.pages and lease.deadline_ms <= now:
            if page != 0:
                raise FailedPreconditionError(
                    f"lease {lease.token!r} expired {(now - lease.deadline_ms) / 1000:.3f}s ago "
                    f"and its messages are delivered again; read it again from page 0, not "
                    f"page {page}"
                )
            log.info("lease %s of group %s expired; starting it afresh", lease.token, lease.group)
            self._set_pages(lease, [])
        if page < len(lease.pages):
            return LeasePage(list(lease.pages[page].messages), True, lease.deadline_ms)
        if page > len(lease.pages):
            raise InvalidArgumentError(
                f"page {page} of lease {lease.token!r} cannot be popped yet: the lease has "
                f"{len(lease.pages)} pages, so the next one is page {len(lease.pages)}"
            )
        if len(lease.pages) >= self.config.max_pages:
            raise ResourceExhaustedError(
                f"lease {lease.token!r} has {len(lease.pages)} pages, the most one lease holds"
            )
        if self.held_bytes >= self.config.max_bytes:
            raise ResourceExhaustedError(
                f"leases hold {self.held_bytes} bytes of messages, the most this proxy holds "
                f"({self.config.max_bytes}); ack leases or let them expire, then retry"
            )
        started = _now_ms()
        messages = await pop()
        # Every message of one pop shares its deadline; an empty page lives as long as if it
        # had popped something, so a replay answers it (empty) the same way.
        deadline = min((m.invisible_until_ms for m in messages), default=None)
        if deadline is None:
            deadline = started + round(invisible_s * 1000)
        held = _held_bytes(messages)
        lease.pages.append(_Page(messages, deadline, held))
        self.held_bytes += held
        self._schedule(lease)
        return LeasePage(list(messages), False, lease.deadline_ms)

    async def ack(self, group: str, tokens: Sequence[str]) -> list[LeaseOutcome]:
        """Acknowledge every message of each lease; one outcome per token."""
        if not tokens:
            raise InvalidArgumentError("lease_tokens is empty: give at least one token")
        for token in tokens:
            check_token(token)
        self._purge(_now_ms())
        outcomes = []
        for token in tokens:
            lease = self._leases.get((group, token))
            if lease is None:
                outcomes.append(LeaseOutcome(token, _unknown(token), 0, 0))
                continue
            async with lease.lock:
                outcomes.append(await self._ack(lease))
        return outcomes

    async def _ack(self, lease: _Lease) -> LeaseOutcome:
        count = lease.message_count
        if lease.acked:
            return LeaseOutcome(lease.token, None, count, lease.deadline_ms)
        handles = [m.receipt_handle for page in lease.pages for m in page.messages]
        failures: list[PopMQError] = []
        if handles:
            results = await self._broker.ack(lease.group, handles)
            failures = [error for error in results if error is not None]
        # Done either way: what could not be acked is the broker's to deliver again. The
        # acknowledged lease stays until its deadline, to refuse replays, without its bodies.
        lease.acked, lease.acked_count = True, count
        self._set_pages(lease, [_Page([], page.deadline_ms) for page in lease.pages])
        error: PopMQError | None = None
        if failures:
            error = FailedPreconditionError(
                f"{len(failures)} of {count} messages of lease {lease.token!r} could not be "
                f"acknowledged and are delivered again: {failures[0]}"
            )
        return LeaseOutcome(lease.token, error, count, lease.deadline_ms)

    async def renew(
        self, group: str, tokens: Sequence[str], invisible_s: float
    ) -> list[LeaseOutcome]:
        """Move every message of each lease to now + invisible_s; one outcome per token."""
        if not tokens:
            raise InvalidArgumentError("lease_tokens is empty: give at least one token")
        for token in tokens:
            check_token(token)
        pop = self._broker.server_info().pop
        if not pop.min_invisible_s <= invisible_s <= pop.max_invisible_s:
            raise InvalidArgumentError(
                f"invisible_duration {invisible_s:g}s is outside "
                f"{pop.min_invisible_s:g}s..{pop.max_invisible_s:g}s"
            )
        self._purge(_now_ms())
        outcomes = []
        for token in tokens:
            lease = self._leases.get((group, token))
            if lease is None:
                outcomes.append(LeaseOutcome(token, _unknown(token), 0, 0))
                continue
            async with lease.lock:
                outcomes.append(await self._renew(lease, invisible_s))
        return outcomes

    async def _renew(self, lease: _Lease, invisible_s: float) -> LeaseOutcome:
        count = lease.message_count
        if lease.acked:
            return LeaseOutcome(
                lease.token,
                FailedPreconditionError(f"lease {lease.token!r} was acknowledged"),
                count,
                lease.deadline_ms,
            )
        now = _now_ms()
        if lease.deadline_ms <= now:
            return LeaseOutcome(
                lease.token,
                FailedPreconditionError(
                    f"lease {lease.token!r} expired {(now - lease.deadline_ms) / 1000:.3f}s ago; "
                    "its messages are delivered again"
                ),
                count,
                lease.deadline_ms,
            )
        failures: list[PopMQError] = []
        new_deadline = now + round(invisible_s * 1000)
        for page in lease.pages:
            renewed: list[PoppedMessage] = []
            deadline = new_deadline
            for message in page.messages:
                try:
                    handle, until = await self._broker.change_invisible_time(
                        lease.group, message.receipt_handle, invisible_s
                    )
                except PopMQError as exc:
                    # This message keeps its old deadline, so the lease ends with it.
                    failures.append(exc)
                    renewed.append(message)
                    deadline = min(deadline, message.invisible_until_ms)
                    continue
                renewed.append(
                    dataclasses.replace(message, receipt_handle=handle, invisible_until_ms=until)
                )
                deadline = min(deadline, until)
            page.messages = renewed
            page.deadline_ms = deadline
        self._schedule(lease)
        error: PopMQError | None = None
        if failures:
            error = FailedPreconditionError(
                f"{len(failures)} of {count} messages of lease {lease.token!r} could not be "
                f"renewed: {failures[0]}"
            )
        return LeaseOutcome(lease.token, error, count, lease.deadline_ms)


def _unknown(token: str) -> NotFoundError:
    return NotFoundError(
        f"lease {token!r} is unknown: it expired, was never popped, or the proxy restarted "
        "(leases live in the proxy's memory)"
    )
