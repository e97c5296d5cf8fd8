"""Lease tokens: idempotent pops for callers that may repeat a read (Spark tasks).

A lease is what the pops made under one (group, lease token) took: a list of pages, one per
LeasePop (a page larger than the broker's pop.max_batch is filled by several pops:
`page_popper`). Asking again for a page while the lease lives returns the same messages with their
current receipt handles, so a retried task, a re-run stage or a query restarted from its
checkpoint reads exactly what the first attempt read. AckLease and RenewLease act on every
message of a lease.

A lease lives until the earliest invisible deadline of its pages. After that the broker
delivers its unacknowledged messages again (to anyone), so an expired lease cannot be
replayed: it starts afresh at page 0.

Where leases live: in the coordinator (proxy/lease_store.py), not in the proxy. A lease
entry and one entry per page holding the page's receipt handles and deadlines, never the
bodies. So any proxy sharing the coordinator answers for any lease: when the proxy that
popped a page dies, a retried task asking another proxy for that page gets the same
messages, which that proxy reads back from their brokers by handle
(BrokerAPI.get_deliveries). Of two proxies popping the same page at once (a retried task
racing its zombie), the first to create the page entry wins; the other gives back what it
popped (a nack without delay) and answers with the winner's page. Entries expire a margin
after the lease's deadline. In a cluster the coordinator is etcd: a lease survives any
proxy's death, and costs etcd two round trips per new page (docs/cluster-consumers.md has the
measurements). `popmq serve` uses a LocalCoordinator, in its own memory: there a restart of
the server still forgets every lease, and their messages come back after their invisible
time like any other unacknowledged pop.

What a proxy keeps: the pages it popped itself, bodies included, so its own replays cost no
broker call (each replay still reads the page entry, to see renewals made elsewhere). That
cache is what LeaseConfig bounds: the leases this proxy popped pages of (`max_leases`), the
pages of one lease (`max_pages`) and the bytes of their messages (`max_bytes`), which also
bound what this proxy writes to the coordinator.

Every proxy acting on a lease's handles (renewing, acking, replaying) follows one the broker
calls superseded to the newest handle of its delivery (superseded_handles.py); renewals and
replays record what they found.

Each page has an identity (lease_store.PageId) that AckLease may name to ack exactly the
pages a reader read; for a reader that does (LeasePop `acks_by_page`), a proxy serves pages
from its memory while etcd is down and writes them when it is back (lease_outage.py); and
for a reader that sends every call on a token to this proxy (`pinned`), it also acks the
token by token from memory (lease_pinning.py).
Otherwise a coordinator that does not answer makes the call fail with a retriable
UNAVAILABLE naming etcd. A page popped but not recorded then stays with the broker: its
messages are invisible until their deadline and come back after it (not given back, since
the write may have landed).

Everything runs on the proxy's event loop. One asyncio.Lock per (group, token) serialises
this proxy's pops, renewals and acks of that lease; between proxies, the compare-and-set of
the coordinator does.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import heapq
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from popmq.broker_core import (
    MAX_HANDLES,
    BrokerAPI,
    FailedPreconditionError,
    InvalidArgumentError,
    PopMQError,
    PoppedMessage,
    ResourceExhaustedError,
)
from popmq.coordination.coordinator import Coordinator
from popmq.coordination.errors import ConflictError, CoordinationUnavailableError
from popmq.proxy.lease_config import LeaseConfig
from popmq.proxy.lease_outage import (
    HeldLease,
    HeldPage,
    WriteBack,
    held_bytes,
    outage_error,
    renew_held,
)
from popmq.proxy.lease_pages import (
    PageUnrecordedError,
    check_token,
    check_usable,
    page_content,
    parse_page_id,
    unknown_lease,
    unrecorded,
)
from popmq.proxy.lease_pinning import (
    check_new_page,
    held_outage_pages,
    not_whole,
    served_unlike_stored,
    whole_lease,
)
from popmq.proxy.lease_read_back import give_back, read_back
from popmq.proxy.lease_renewal import change_all, store_renewed
from popmq.proxy.lease_store import LeaseMeta, LeaseStore, PageId, PageRecord, new_incarnation
from popmq.proxy.superseded_handles import newest

log = logging.getLogger(__name__)

_R = TypeVar("_R")

_MAX_RACES = 8
"""Compare-and-set conflicts one call retries before it gives up (a conflict means another
proxy changed the lease meanwhile; a handful is already unusual)."""


@dataclass(frozen=True, slots=True)
class LeasePage:
    """One page of a lease, as LeasePop answers it."""

    messages: list[PoppedMessage]
    replayed: bool
    lease_until_ms: int
    page_id: str = ""
    """Its identity (lease_store.PageId); "" for a page an earlier release recorded."""


@dataclass(frozen=True, slots=True)
class LeaseOutcome:
    """The result of acking or renewing one lease token."""

    token: str
    error: PopMQError | None
    messages: int
    lease_until_ms: int


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class LeaseTable:
    """Leases by (group, token): their pages and deadlines in the coordinator, the pages
    this proxy popped in its memory (module docstring).

    Args:
        broker: Pops, acks, renewals, give-backs and replays by handle go to it (in a
            cluster, a BrokerAPI that routes each handle to the broker that issued it).
        coordinator: Where leases live; shared by every proxy that may see the same lease.
        config: Bounds.
    """

    def __init__(
        self, broker: BrokerAPI, coordinator: Coordinator, config: LeaseConfig | None = None
    ) -> None:
        self._broker = broker
        self.config = config or LeaseConfig()
        self._store = LeaseStore(coordinator, margin_s=self.config.expiry_margin_s)
        # (group, token) -> what this proxy caches of the lease; it leaves at the lease's
        # deadline (see _purge) or when the lease starts again.
        self._cached: dict[tuple[str, str], HeldLease] = {}
        # (deadline_ms, group, token) of cached leases, for _purge; stale entries are skipped.
        self._expiry: list[tuple[int, str, str]] = []
        # Sum of the held_bytes of every cached page.
        self.held_bytes = 0
        # (group, token) -> the lock serialising this proxy's calls on that lease; it goes
        # when its last user leaves.
        self._locks: dict[tuple[str, str], _LeaseLock] = {}
        self._write_back = WriteBack(
            self._store,
            self._locked,
            max_pages=self.config.max_outage_pages,
            max_lease_pages=self.config.max_pages,
            interval_s=self.config.write_back_interval_s,
        )
        """Pages popped while etcd was down, until they are written (lease_outage.py)."""

    async def close(self) -> None:
        """Stop writing back pages popped while etcd was down (lease_outage.py)."""
        await self._write_back.close()

    def __len__(self) -> int:
        return len(self._cached)

    # -- the cache -----------------------------------------------------------------------

    def _purge(self, now: int) -> None:
        """Forget cached leases whose deadline passed (their messages are the broker's)."""
        expiry = self._expiry
        while expiry and expiry[0][0] <= now:
            deadline, group, token = heapq.heappop(expiry)
            cached = self._cached.get((group, token))
            if cached is None or cached.deadline_ms != deadline:
                continue  # renewed or restarted since: a newer entry is on the heap
            if (group, token) in self._locks:
                heapq.heappush(expiry, (now + 1000, group, token))
                continue
            self._drop(cached)

    def _drop(self, cached: HeldLease) -> None:
        self._write_back.forget(cached)
        self._set_pages(cached, {})
        if self._cached.get((cached.group, cached.token)) is cached:
            del self._cached[(cached.group, cached.token)]

    def _set_pages(self, cached: HeldLease, pages: dict[int, HeldPage]) -> None:
        """Replace a lease's cached pages, keeping held_bytes in step."""
        old = sum(p.held_bytes for p in cached.pages.values())
        self.held_bytes += sum(p.held_bytes for p in pages.values()) - old
        cached.pages = pages

    def _cache(self, meta: LeaseMeta) -> HeldLease | None:
        """This proxy's cache of the lease `meta` reads, if it has one of that incarnation."""
        cached = self._cached.get((meta.group, meta.token))
        if cached is None:
            return None
        if cached.incarnation != meta.incarnation:
            self._drop(cached)  # the lease started again: the old pages are not its
            return None
        if meta.acked:  # acked (through any proxy): no more replays
            self._done(cached, meta.acked_messages)
        self._set_deadline(cached, meta.deadline_ms)
        return cached

    def _done(self, cached: HeldLease, count: int) -> None:
        """The lease was acknowledged: no bodies to keep for replays, no page popped
        elsewhere to guard, and a repeated ack answers `count`."""
        self._set_pages(cached, {})
        cached.elsewhere.clear()
        if cached.acked_messages is None:
            cached.acked_messages = count

    def _set_deadline(self, cached: HeldLease, deadline_ms: int) -> None:
        if cached.deadline_ms != deadline_ms:
            cached.deadline_ms = deadline_ms
            heapq.heappush(self._expiry, (deadline_ms, cached.group, cached.token))

    @contextlib.asynccontextmanager
    async def _locked(self, group: str, token: str) -> AsyncIterator[None]:
        key = (group, token)
        entry = self._locks.get(key)
        if entry is None:
            entry = self._locks[key] = _LeaseLock()
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._locks[key]

    # -- LeasePop --------------------------------------------------------------------------

    async def pop(
        self,
        group: str,
        topic: str,
        token: str,
        page: int,
        invisible_s: float,
        pop: Callable[[], Awaitable[list[PoppedMessage]]],
        *,
        by_page: bool = False,
        pinned: bool = False,
    ) -> LeasePage:
        """Return page `page` of the lease, popping it with `pop` when it is the next one.

        `invisible_s` is the invisible time `pop` asks for; an empty page lives that long.
        `by_page`: the caller acks this lease naming its pages, so while etcd is down a page
        may come from this proxy's memory (lease_outage.py); `pinned`: every call on this
        lease comes to this proxy, which then may too (lease_pinning.py).
        """
        check_token(token)
        if page < 0:
            raise InvalidArgumentError(f"page {page} is negative: pages count from 0")
        self._purge(_now_ms())
        async with self._locked(group, token):
            for _ in range(_MAX_RACES):
                try:
                    await self._flush(group, token)
                    got = await self._pop(group, topic, token, page, invisible_s, pop)
                except _Raced:
                    continue
                except PageUnrecordedError as exc:
                    if pinned:  # its write may have landed: never pop another in its place
                        self._elsewhere(group, token, topic, exc.incarnation, page, exc.until)
                    raise
                except CoordinationUnavailableError as exc:
                    if not (by_page or pinned):
                        raise
                    if pinned:
                        check_new_page(self._cached.get((group, token)), page, token, exc)
                    return await self._pop_held(
                        group, topic, token, page, invisible_s, pop, exc, pinned=pinned
                    )
                if pinned and got.replayed and (group, token) not in self._cached:
                    # Read back: another pop made this page (lease_pinning.py). Remembering
                    # it takes a place in the table like any lease: refused when it is full.
                    self._check_leases(
                        group, token, f" (to remember that its page {page} was popped elsewhere)"
                    )
                    pid = PageId.parse(got.page_id).incarnation if got.page_id else ""
                    self._elsewhere(group, token, topic, pid, page, got.lease_until_ms)
                return got
            raise FailedPreconditionError(
                f"lease {token!r} kept changing under concurrent calls; ask again"
            )

    async def _pop(
        self,
        group: str,
        topic: str,
        token: str,
        page: int,
        invisible_s: float,
        pop: Callable[[], Awaitable[list[PoppedMessage]]],
    ) -> LeasePage:
        cached = self._cached.get((group, token))
        record: PageRecord | None = None
        known = False  # whether `record` is what the lease read holds as page `page`
        if cached is not None:
            # This proxy popped pages of the lease: read the lease and the page at once.
            meta, record = await asyncio.gather(
                self._store.meta(group, token),
                self._store.page_of(group, token, cached.incarnation, page),
            )
            known = meta is not None and meta.incarnation == cached.incarnation
        else:
            meta = await self._store.meta(group, token)
        now = _now_ms()
        if meta is None or meta.deadline_ms <= now:
            if page != 0:
                if meta is None:
                    raise FailedPreconditionError(
                        f"lease {token!r} is unknown or expired (a restart of `popmq serve` "
                        f"forgets leases); read it again from page 0, not page {page}"
                    )
                raise FailedPreconditionError(
                    f"lease {token!r} expired {(now - meta.deadline_ms) / 1000:.3f}s ago and "
                    f"its messages are delivered again; read it again from page 0, not page "
                    f"{page}"
                )
            if meta is not None:
                log.info("lease %s of group %s expired; starting it afresh", token, group)
            return await self._start(group, topic, token, meta, invisible_s, pop)
        cached = self._cache(meta)
        check_usable(meta, topic)
        if not known:
            record = None
        if record is None:
            previous: PageRecord | None = None
            if page > 0 and (cached is None or page - 1 not in cached.pages):
                if known:
                    previous = await self._store.page(meta, page - 1)
                else:
                    record, previous = await asyncio.gather(
                        self._store.page(meta, page), self._store.page(meta, page - 1)
                    )
                if record is None and previous is None:
                    count = len(await self._store.pages(meta, limit=self.config.max_pages))
                    raise InvalidArgumentError(
                        f"page {page} of lease {token!r} cannot be popped yet: the lease has "
                        f"{count} pages, so the next one is page {count}"
                    )
            elif not known:
                record = await self._store.page(meta, page)
        if record is not None:
            return await self._replay(meta, record)
        self._check_room(group, token, page)
        messages, deadline = await self._pop_page(pop, invisible_s)
        return await self._add_page(meta, page, messages, deadline)

    async def _flush(self, group: str, token: str) -> None:
        """Write what this proxy popped (or acked) of the lease while etcd was down."""
        cached = self._cached.get((group, token))
        if cached is not None and (cached.unwritten or cached.ack_unwritten):
            await self._write_back.flush(cached)

    def _elsewhere(
        self, group: str, token: str, topic: str, incarnation: str, number: int, until: int
    ) -> None:
        """Mark page `number` as one this proxy did not pop but may be stored: a pinned
        reader is not given another in its place while etcd is down (lease_pinning.py).
        A lease entry made for the mark counts against max_leases: its room was checked
        before the pop whose write went unanswered, or by the read back's caller."""
        cached = self._cached.get((group, token))
        if cached is not None and (
            cached.deadline_ms <= _now_ms() or (incarnation and cached.incarnation != incarnation)
        ):
            self._drop(cached)  # another incarnation's, or expired: not this page's lease
            cached = None
        if cached is None:
            cached = HeldLease(group, token, topic, incarnation or new_incarnation(), until)
            self._cached[(group, token)] = cached
            heapq.heappush(self._expiry, (until, group, token))
        cached.elsewhere.add(number)

    async def _pop_held(
        self,
        group: str,
        topic: str,
        token: str,
        page: int,
        invisible_s: float,
        pop: Callable[[], Awaitable[list[PoppedMessage]]],
        error: CoordinationUnavailableError,
        *,
        pinned: bool,
    ) -> LeasePage:
        """LeasePop while etcd does not answer, from this proxy's memory (lease_outage.py)."""
        cached = self._cached.get((group, token))
        if cached is not None and cached.deadline_ms <= _now_ms():
            self._drop(cached)  # its messages are the broker's again
            cached = None
        if cached is not None:
            if cached.acked_messages is not None:
                raise FailedPreconditionError(
                    f"lease {token!r} was acknowledged, so its pages are not read again; "
                    "read new messages under a new token"
                )
            if cached.topic != topic:
                raise InvalidArgumentError(
                    f"lease {token!r} holds messages of topic {cached.topic!r}, not {topic!r}: "
                    f"read it from {cached.topic!r}, or {topic!r} under another token"
                )
            held = cached.pages.get(page)
            if held is not None:
                return LeasePage(
                    list(held.messages), True, cached.deadline_ms, cached.page_id(page)
                )
            if page == 0 or page - 1 not in cached.pages:
                before = f" (nor page {page - 1}, which comes first)" if page else ""
                raise outage_error(
                    f"page {page} of lease {token!r} is not held by this proxy{before}",
                    error,
                ) from error
        elif page != 0:
            raise outage_error(
                f"page {page} of lease {token!r} is not held by this proxy (another may hold it)",
                error,
            ) from error
        self._write_back.check_room()
        self._check_room(group, token, page)
        messages, deadline = await self._pop_page(pop, invisible_s)
        if cached is None:
            cached = HeldLease(group, token, topic, new_incarnation(), deadline, stored=False)
            self._cached[(group, token)] = cached
            heapq.heappush(self._expiry, (deadline, group, token))
        held = cached.pages[page] = HeldPage(
            list(messages), 0, held_bytes(messages), new_incarnation()
        )
        self.held_bytes += held.held_bytes
        cached.pinned |= pinned
        self._set_deadline(cached, min(cached.deadline_ms, deadline))
        self._write_back.hold(cached, page)
        return LeasePage(list(messages), False, cached.deadline_ms, cached.page_id(page))

    async def _start(
        self,
        group: str,
        topic: str,
        token: str,
        previous: LeaseMeta | None,
        invisible_s: float,
        pop: Callable[[], Awaitable[list[PoppedMessage]]],
    ) -> LeasePage:
        """Start the lease with page 0 (it is unknown, or it expired).

        The lease entry (a new incarnation) and page 0 are written at once: one round trip
        instead of two. If another proxy started the lease first, the page written under
        the incarnation that lost is nobody's (it expires) and this one joins the winner's.
        """
        self._check_room(group, token, 0)
        messages, deadline = await self._pop_page(pop, invisible_s)
        incarnation, nonce = new_incarnation(), new_incarnation()
        created, written = await asyncio.gather(
            self._store.create(
                group, token, topic, deadline, previous=previous, incarnation=incarnation
            ),
            self._store.create_page_of(
                group, token, incarnation, 0, *page_content(messages), deadline, nonce=nonce
            ),
            return_exceptions=True,
        )
        if isinstance(created, ConflictError):
            # Another proxy started it first (a retried task racing its zombie): join it,
            # unless it is not one this pop can join (then start over, which says why).
            joined = await self._store.meta(group, token)
            if (
                joined is None
                or joined.deadline_ms <= _now_ms()
                or joined.acked
                or joined.topic != topic
            ):
                await give_back(self._broker, group, messages)
                raise _Raced from None
            return await self._add_page(joined, 0, messages, deadline)
        if isinstance(created, CoordinationUnavailableError):
            raise unrecorded(token, 0, created, incarnation, deadline) from created
        if isinstance(created, BaseException):
            raise created
        return await self._added(created, 0, messages, deadline, written, nonce)

    async def _pop_page(
        self, pop: Callable[[], Awaitable[list[PoppedMessage]]], invisible_s: float
    ) -> tuple[list[PoppedMessage], int]:
        started = _now_ms()
        messages = await pop()
        # Every message of one pop shares its deadline; an empty page lives as long as if it
        # had popped something, so a replay answers it (empty) the same way.
        deadline = min((m.invisible_until_ms for m in messages), default=None)
        if deadline is None:
            deadline = started + round(invisible_s * 1000)
        return messages, deadline

    def _check_room(self, group: str, token: str, page: int) -> None:
        """The bounds a new page must fit in (LeaseConfig)."""
        self._check_leases(group, token, "")
        if page >= self.config.max_pages:
            raise ResourceExhaustedError(
                f"lease {token!r} has {page} pages, the most one lease may have "
                f"(leases.max_pages); ack it and read on under a new token"
            )
        if self.held_bytes >= self.config.max_bytes:
            raise ResourceExhaustedError(
                f"leases hold {self.held_bytes} bytes of messages, the most this proxy holds "
                f"({self.config.max_bytes}); ack leases or let them expire, then retry"
            )

    def _check_leases(self, group: str, token: str, why: str) -> None:
        """Refuse a lease new to the table when it is full (LeaseConfig.max_leases): leases
        with pages here, and those kept only to mark pages popped elsewhere, alike."""
        if (group, token) not in self._cached and len(self._cached) >= self.config.max_leases:
            raise ResourceExhaustedError(
                f"this proxy holds {len(self._cached)} leases, the most it may "
                f"(leases.max_leases), and lease {token!r} would be one more{why}; ack "
                "leases or let them expire, then retry"
            )

    async def _add_page(
        self, meta: LeaseMeta, number: int, messages: list[PoppedMessage], deadline: int
    ) -> LeasePage:
        """Record a page this proxy popped; if another proxy recorded it first, give these
        messages back and answer with that one's."""
        nonce = new_incarnation()
        try:
            written: PageRecord | BaseException = await self._store.create_page(
                meta, number, *page_content(messages), deadline, nonce=nonce
            )
        except (ConflictError, CoordinationUnavailableError) as exc:
            written = exc
        return await self._added(meta, number, messages, deadline, written, nonce)

    async def _added(
        self,
        meta: LeaseMeta,
        number: int,
        messages: list[PoppedMessage],
        deadline: int,
        written: PageRecord | BaseException,
        nonce: str,
    ) -> LeasePage:
        """Answer with a page whose entry this proxy tried to create (`written`: the entry or
        why not; `nonce`: its identity's)."""
        if isinstance(written, ConflictError):
            await give_back(self._broker, meta.group, messages)
            winner = await self._store.page(meta, number)
            if winner is None:
                raise _Raced from None  # it expired meanwhile: start over
            return await self._replay(meta, winner)
        if isinstance(written, CoordinationUnavailableError):
            raise unrecorded(meta.token, number, written, meta.incarnation, deadline) from written
        if isinstance(written, BaseException):
            raise written
        key = (meta.group, meta.token)
        cached = self._cache(meta)
        if cached is None:
            cached = self._cached[key] = HeldLease(
                meta.group, meta.token, meta.topic, meta.incarnation, meta.deadline_ms
            )
            heapq.heappush(self._expiry, (meta.deadline_ms, meta.group, meta.token))
        held = held_bytes(messages)
        cached.pages[number] = HeldPage(list(messages), written.revision, held, nonce)
        self.held_bytes += held
        if deadline < meta.deadline_ms:
            meta = await self._move_deadline(meta, deadline, lower_only=True)
            self._set_deadline(cached, meta.deadline_ms)
        return LeasePage(
            list(messages), False, min(meta.deadline_ms, deadline), cached.page_id(number)
        )

    async def _replay(self, meta: LeaseMeta, record: PageRecord) -> LeasePage:
        """A page popped before: from this proxy's cache, else read back from the broker."""
        if record.deadline_ms < meta.deadline_ms:
            # The proxy that recorded the page could not lower the lease's deadline to it.
            meta = await self._move_deadline(meta, record.deadline_ms, lower_only=True)
        cached = self._cache(meta)
        page = cached.pages.get(record.number) if cached is not None else None
        if page is not None and page.nonce != record.page_id:
            page = None  # another pop's page at this number (lease_outage.py)
        if page is not None and page.revision != record.revision:
            if len(page.messages) == len(record.handles):  # renewed elsewhere: new handles
                page.messages = [
                    dataclasses.replace(m, receipt_handle=h, invisible_until_ms=u)
                    for m, h, u in zip(page.messages, record.handles, record.until_ms, strict=True)
                ]
                page.revision = record.revision
            else:
                page = None
        if page is not None:
            messages = list(page.messages)
        else:
            messages = await read_back(self._broker, self._store, meta, record)
            if cached is not None:
                cached.elsewhere.add(record.number)
        page_id = str(PageId(meta.incarnation, record.number, record.page_id))
        return LeasePage(messages, True, meta.deadline_ms, page_id if record.page_id else "")

    async def _move_deadline(
        self, meta: LeaseMeta, deadline_ms: int, *, lower_only: bool = False
    ) -> LeaseMeta:
        """Set the lease's deadline (only lower it, with `lower_only`), re-reading after a
        conflicting write of another proxy."""
        for _ in range(_MAX_RACES):
            if lower_only and meta.deadline_ms <= deadline_ms:
                return meta
            try:
                return await self._store.update(meta, deadline_ms=deadline_ms)
            except ConflictError:
                current = await self._store.meta(meta.group, meta.token)
                if current is None or current.incarnation != meta.incarnation:
                    return meta  # expired or started again: nothing of ours to move
                meta = current
        raise FailedPreconditionError(
            f"lease {meta.token!r} kept changing under concurrent calls; ask again"
        )

    # -- AckLease ----------------------------------------------------------------------------

    async def ack(
        self,
        group: str,
        tokens: Sequence[str],
        pages: Mapping[str, Sequence[str]] | None = None,
        *,
        pinned: bool = False,
    ) -> list[LeaseOutcome]:
        """Acknowledge every message of each lease, or for a token in `pages` exactly the
        pages its ids name (lease_outage.py); one outcome per token. `pinned`: every call
        on these leases came to this proxy, so while etcd is down a lease it holds whole is
        acked from memory, and another one's outcome is the retriable UNAVAILABLE naming
        etcd (lease_pinning.py)."""
        if not tokens:
            raise InvalidArgumentError("lease_tokens is empty: give at least one token")
        for token in tokens:
            check_token(token)
        named: dict[str, list[PageId]] = {}
        for token, ids in (pages or {}).items():
            if token not in tokens:
                raise InvalidArgumentError(
                    f"read_pages names lease {token!r}, which lease_tokens does not list: "
                    "list every token read_pages names in lease_tokens too"
                )
            if not ids:
                raise InvalidArgumentError(
                    f"read_pages of lease {token!r} names no page: name the ids of the pages "
                    "read, or leave the token out of read_pages to ack it whole"
                )
            named[token] = [parse_page_id(i) for i in ids]
        self._purge(_now_ms())
        outcomes = []
        for token in tokens:
            async with self._locked(group, token):
                if token in named:
                    outcomes.append(await self._ack_pages(group, token, named[token]))
                elif not pinned:
                    await self._flush(group, token)
                    outcomes.append(await self._ack(group, token))
                else:
                    try:
                        await self._flush(group, token)
                        outcomes.append(await self._ack(group, token, pinned=True))
                    except CoordinationUnavailableError as exc:
                        try:
                            outcomes.append(await self._ack_held(group, token, exc))
                        except CoordinationUnavailableError as refused:
                            # This token's outcome: the tokens before it may be acked.
                            outcomes.append(LeaseOutcome(token, refused, 0, 0))
        return outcomes

    async def _ack_held(
        self, group: str, token: str, error: CoordinationUnavailableError
    ) -> LeaseOutcome:
        """A pinned ack by token while etcd does not answer: every page, from memory, of a
        lease this proxy holds whole (lease_pinning.py)."""
        cached = self._cached.get((group, token))
        if cached is not None and cached.acked_messages is not None:
            return LeaseOutcome(token, None, cached.acked_messages, cached.deadline_ms)
        now = _now_ms()
        if cached is not None and cached.deadline_ms <= now:
            return LeaseOutcome(token, unknown_lease(token), 0, 0)  # the broker's again
        ids = whole_lease(cached, now)
        if cached is None or ids is None:
            why = not_whole(cached)
            raise outage_error(f"lease {token!r} is not held whole by this proxy: {why}", error)
        outcome = await self._ack_pages(group, token, ids)
        self._write_back.acked(cached)
        return outcome

    async def _ack_served(self, group: str, token: str, held: HeldLease) -> LeaseOutcome:
        """A pinned ack by token, with etcd up, of a lease whose pages this proxy popped from
        memory are not what etcd stores: exactly the pages it served, by identity, when it
        holds the lease whole, the lease entry then marked acked (lease_pinning.py)."""
        ids = whole_lease(held, _now_ms())
        if ids is None:
            error = FailedPreconditionError(
                f"lease {token!r} has pages this proxy popped while etcd was down that etcd "
                f"does not store, and is not held whole here ({not_whole(held)}): nothing was "
                "acknowledged; its messages are delivered again after their invisible time"
            )
            return LeaseOutcome(token, error, 0, held.deadline_ms)
        outcome = await self._ack_pages(group, token, ids)
        self._write_back.acked(held)
        with contextlib.suppress(CoordinationUnavailableError):  # else the loop writes it
            await self._write_back.flush(held)
        return outcome

    async def _ack_pages(self, group: str, token: str, ids: list[PageId]) -> LeaseOutcome:
        """Ack exactly the pages `ids` name: held here, or stored (by identity)."""
        with contextlib.suppress(CoordinationUnavailableError):
            await self._flush(group, token)  # what is held is acked from memory anyway
        cached = self._cached.get((group, token))
        incarnations = {i.incarnation for i in ids}
        if cached is not None and cached.incarnation not in incarnations:
            cached = None
        if cached is not None and cached.acked_messages is not None:
            return LeaseOutcome(token, None, cached.acked_messages, cached.deadline_ms)
        handles: list[str] = []
        acked: list[int] = []  # held page numbers
        missing: list[PageId] = []
        for pid in ids:
            held = cached.pages.get(pid.number) if cached is not None else None
            if held is not None and held.nonce == pid.nonce:
                handles += [m.receipt_handle for m in held.messages]
                acked.append(pid.number)
            else:
                missing.append(pid)
        meta: LeaseMeta | None = None
        try:
            meta = await self._store.meta(group, token)
            if meta is not None and meta.acked and meta.incarnation in incarnations:
                return LeaseOutcome(token, None, meta.acked_messages, meta.deadline_ms)
            records = await asyncio.gather(
                *(self._store.page_by_id(group, token, pid) for pid in missing)
            )
        except CoordinationUnavailableError as exc:
            if missing:
                raise outage_error(
                    f"{len(missing)} of the {len(ids)} pages named for lease {token!r} are not "
                    "held by this proxy",
                    exc,
                ) from exc
            meta, records = None, []
        unknown = [pid for pid, record in zip(missing, records, strict=True) if record is None]
        handles += [h for record in records if record is not None for h in record.handles]
        failures = await self._ack_handles(group, handles)
        count, deadline = len(handles), 0
        if cached is not None:
            self._write_back.forget(cached, acked)
            self._set_pages(cached, {n: p for n, p in cached.pages.items() if n not in acked})
            if not unknown:  # done: replays are refused, a repeated ack answers this count
                self._done(cached, count)
            deadline = cached.deadline_ms
        if meta is not None and meta.incarnation in incarnations and not unknown:
            with contextlib.suppress(CoordinationUnavailableError):
                meta = await self._mark_acked(meta, count)
            deadline = meta.deadline_ms
        error: PopMQError | None = None
        if unknown:
            error = FailedPreconditionError(
                f"{len(unknown)} of the {len(ids)} pages named for lease {token!r} are not "
                f"stored as its pages ({unknown[0]} is not): nothing of them was "
                "acknowledged, and their messages are delivered again after their invisible "
                f"time; {count} messages of the other pages were acknowledged"
            )
        elif failures:
            error = FailedPreconditionError(
                f"{len(failures)} of {count} messages of lease {token!r} could not be "
                f"acknowledged and are delivered again: {failures[0]}"
            )
        return LeaseOutcome(token, error, count, deadline)

    async def _ack_handles(self, group: str, handles: Sequence[str]) -> list[PopMQError]:
        """Ack `handles` (superseded ones followed); what failed."""
        failures: list[PopMQError] = []
        for start in range(0, len(handles), MAX_HANDLES):
            chunk = handles[start : start + MAX_HANDLES]
            results = await newest(self._broker, group, chunk, self._broker.ack)
            failures += [error for error in results if error is not None]
        return failures

    async def _mark_acked(self, meta: LeaseMeta, count: int) -> LeaseMeta:
        """Record the lease as acked (replays are refused), re-reading after conflicts."""
        for _ in range(_MAX_RACES):
            try:
                return await self._store.update(meta, acked_messages=count)
            except ConflictError:
                current = await self._store.meta(meta.group, meta.token)
                if current is None or current.incarnation != meta.incarnation:
                    return meta  # it expired meanwhile
                meta = current
        return meta

    async def _ack(self, group: str, token: str, *, pinned: bool = False) -> LeaseOutcome:
        meta = await self._store.meta(group, token)
        now = _now_ms()
        live = meta is not None and meta.deadline_ms > now
        held = self._cached.get((group, token))
        pages: list[PageRecord] | None = None
        # Acked by token: the commit's ack. What this proxy served since was not committed.
        acked = meta is not None and live and meta.acked
        served = held if held is not None and held.pinned and held.pages else None
        if pinned and not acked and served is not None and served.deadline_ms > now:
            # Before _cache drops it: its pages may not be the ones etcd stores.
            if meta is not None and live:
                pages = await self._store.pages(meta, limit=self.config.max_pages)
            if served.acked_messages is None and served_unlike_stored(
                served, meta, pages or [], now
            ):
                return await self._ack_served(group, token, served)
        if meta is None or not live:
            return LeaseOutcome(token, unknown_lease(token), 0, 0)
        cached = self._cache(meta)
        if meta.acked:
            return LeaseOutcome(token, None, meta.acked_messages, meta.deadline_ms)
        if pages is None:
            pages = await self._store.pages(meta, limit=self.config.max_pages)
        if any(page.outage for page in pages) and not (pinned and held_outage_pages(cached, pages)):
            return LeaseOutcome(
                token,
                FailedPreconditionError(
                    f"lease {token!r} has pages popped while etcd was down: ack it naming the "
                    "pages read (read_pages); nothing was acknowledged"
                ),
                0,
                meta.deadline_ms,
            )
        handles = [h for page in pages for h in page.handles]
        failures = await self._ack_handles(group, handles)
        # Done either way: what could not be acked is the broker's to deliver again. The
        # acknowledged lease stays until its deadline, to refuse replays, without bodies.
        count = len(handles)
        meta = await self._mark_acked(meta, count)
        if cached is not None:
            self._done(cached, count)
        error: PopMQError | None = None
        if failures:
            error = FailedPreconditionError(
                f"{len(failures)} of {count} messages of lease {token!r} could not be "
                f"acknowledged and are delivered again: {failures[0]}"
            )
        return LeaseOutcome(token, error, count, meta.deadline_ms)

    # -- RenewLease --------------------------------------------------------------------------

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
            async with self._locked(group, token):
                try:
                    await self._flush(group, token)
                    outcomes.append(await self._renew(group, token, invisible_s))
                except CoordinationUnavailableError as exc:
                    outcomes.append(await self._renew_held(group, token, invisible_s, exc))
        return outcomes

    async def _renew_held(
        self, group: str, token: str, invisible_s: float, error: CoordinationUnavailableError
    ) -> LeaseOutcome:
        """RenewLease while etcd does not answer: the pages this proxy holds, at the broker
        (not written: a stored page's handles are followed later, lease_outage.py)."""
        cached = self._cached.get((group, token))
        now = _now_ms()
        if cached is None or cached.deadline_ms <= now or not cached.pages:
            raise outage_error(f"lease {token!r} is not held by this proxy", error) from error
        if cached.acked_messages is not None:
            return LeaseOutcome(
                token,
                FailedPreconditionError(
                    f"lease {token!r} was acknowledged, so it is not renewed; renew only "
                    "leases not yet acknowledged"
                ),
                cached.acked_messages,
                cached.deadline_ms,
            )
        self._write_back.renewed(cached)
        count, failures, deadline = await renew_held(
            cached,
            now + round(invisible_s * 1000),
            lambda hs: newest(
                self._broker, group, hs, lambda g, h: change_all(self._broker, g, h, invisible_s)
            ),
        )
        self._set_deadline(cached, deadline)
        outcome_error: PopMQError | None = None
        if failures:
            outcome_error = FailedPreconditionError(
                f"{len(failures)} of {count} messages of lease {token!r} could not be "
                f"renewed: {failures[0]}"
            )
        return LeaseOutcome(token, outcome_error, count, deadline)

    async def _renew(self, group: str, token: str, invisible_s: float) -> LeaseOutcome:
        meta = await self._store.meta(group, token)
        now = _now_ms()
        if meta is None or meta.deadline_ms <= now:
            return LeaseOutcome(token, unknown_lease(token), 0, 0)
        cached = self._cache(meta)
        if meta.acked:
            return LeaseOutcome(
                token,
                FailedPreconditionError(
                    f"lease {token!r} was acknowledged, so it is not renewed; renew only "
                    "leases not yet acknowledged"
                ),
                meta.acked_messages,
                meta.deadline_ms,
            )
        pages = await self._store.pages(meta, limit=self.config.max_pages)
        count = sum(len(page.handles) for page in pages)
        failures: list[PopMQError] = []
        new_deadline = now + round(invisible_s * 1000)
        lease_deadline = new_deadline
        for record in pages:
            results = await newest(
                self._broker,
                group,
                record.handles,
                lambda g, hs: change_all(self._broker, g, hs, invisible_s),
            )
            moved: dict[int, tuple[str, int]] = {}  # message index -> (new handle, until)
            for index, result in enumerate(results):
                if isinstance(result, PopMQError):
                    # This message keeps its old deadline, so the lease ends with it.
                    failures.append(result)
                else:
                    moved[index] = result
            record = await store_renewed(self._store, meta, record, moved, new_deadline)
            lease_deadline = min(lease_deadline, record.deadline_ms)
            page = cached.pages.get(record.number) if cached is not None else None
            if page is not None and page.nonce != record.page_id:
                page = None  # another pop's page at this number: not these messages
            if page is not None and len(page.messages) == len(record.handles):
                page.messages = [
                    dataclasses.replace(m, receipt_handle=h, invisible_until_ms=u)
                    for m, h, u in zip(page.messages, record.handles, record.until_ms, strict=True)
                ]
                page.revision = record.revision
        meta = await self._move_deadline(meta, lease_deadline)
        if cached is not None:
            self._set_deadline(cached, meta.deadline_ms)
        error: PopMQError | None = None
        if failures:
            error = FailedPreconditionError(
                f"{len(failures)} of {count} messages of lease {token!r} could not be "
                f"renewed: {failures[0]}"
            )
        return LeaseOutcome(token, error, count, meta.deadline_ms)


class _LeaseLock:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()  # guards one lease's calls on this proxy (their reads,
        # pops and writes of its entries, and its cache entry)
        self.users = 0
        """Calls holding or waiting for the lock."""


class _Raced(Exception):
    """The lease changed under this call (another proxy restarted or expired it): the call
    starts over from reading it."""
