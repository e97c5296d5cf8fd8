"""Spark-style leases through a coordinator (etcd) outage: pages served from this proxy's
memory and written to the lease store when etcd is back.

The hazard (docs/cluster.md "Spark leases during an outage"): a reader may run one read
twice under one lease token (a Spark task retry, a speculative copy), possibly through two
proxies. With etcd the first proxy to create page N wins and every attempt reads the winner's
page, so an ack by token acknowledges what every attempt read. Without etcd two proxies can
each pop a different page N; an ack by token would then acknowledge whichever was stored,
perhaps not the one the committed attempt read: messages acknowledged unprocessed, lost.

The design:

1. Every page has an identity (lease_store.PageId: lease incarnation, number, a random
   nonce per pop), answered with the page and the same in every replay of it. AckLease may
   name the pages its reader read (`read_pages`); such an ack acknowledges exactly the pages
   named, found in this proxy's memory or in the lease store by identity, and never another
   page of the lease. A named page nobody stored fails that token with FAILED_PRECONDITION
   (nothing of it acked; its messages come back after their invisible time).
2. Only a reader that promised to ack that way (LeasePop `acks_by_page`), or to send every
   call on the token to this proxy (`pinned`, lease_pinning.py, whose ack by token is then
   safe), is served from memory while etcd does not answer; others get the retriable
   UNAVAILABLE naming etcd, as before. So a lease with a page popped from memory is acked
   by token only through the proxy it is pinned to, which acks what it served of it
   (lease_pinning.py), as long as every attempt under one token runs the same client (true
   of Spark's tasks) and every proxy is of this release (an earlier one ignores
   `read_pages`; the pages written back have schema 2, which it refuses to read, but a page
   another proxy stored at that number is schema 1): upgrade the proxies first.
3. While etcd is down, this proxy answers a LeasePop with `acks_by_page`:
   - a page it holds (popped before the outage or during it): from memory, a replay;
   - page 0 of a lease it holds nothing live of, or page N of a lease whose page N - 1 it
     holds: popped from the broker and held, to be written back; a page 0 starts a new
     incarnation of the lease in memory;
   - anything else: the retriable UNAVAILABLE naming etcd (another proxy may hold it).
   The pages held for writing back are bounded by LeaseConfig.max_outage_pages (and their
   bytes by max_bytes, as every cached page's): past it a new page is the same retriable
   UNAVAILABLE, so the memory held stays bounded however long etcd is away.
4. When etcd answers again (a background loop tries every `write_back_interval_s`, and
   every lease call flushes its lease first), each held page is written: at its number if
   that is free (a lease started in memory gets its lease entry first, taking over an entry
   that expired), else as a shadow under its nonce. Either way an ack naming it finds it,
   and a replay finds the page at its number, whoever stored it. A pinned lease's pages
   take over instead of becoming shadows (lease_pinning.py): an ack naming the page they
   replaced then finds nothing and acks nothing of it, so its messages come back.
5. AckLease naming pages this proxy holds acks them from memory; naming one it does not hold
   while etcd is down fails the call with the retriable UNAVAILABLE naming etcd. RenewLease
   while etcd is down renews the pages this proxy holds at the broker and fails with
   UNAVAILABLE for a lease it holds nothing of; the new handles and the lease's later
   deadline are written when etcd is back (a stored page whose new handles were never
   written, the proxy having died, is what follow_handles already repairs).

Why two proxies never ack a page the committed attempt did not read: an ack of a lease with
a page popped from memory names pages (2), and each name is one pop's nonce, which the
committing reader got only from the LeasePop answers it read; a proxy acknowledges the
messages of a page only when the page it finds (in memory, or stored at the number or the
shadow the name gives) carries that nonce. A page another attempt popped has another nonce,
so nothing of it is acked: its messages come back after their invisible time (read twice,
never lost). If the proxy holding pages dies during the outage, they are never written:
nobody can ack them, and their messages come back after their invisible time.

A second attempt through another proxy during the outage therefore reads the same page (the
same proxy), a page of its own (another proxy, which cannot know the first one's: it is
not acked by the committed attempt's ack, so it comes back), or gets the retriable
UNAVAILABLE.

Everything runs on the proxy's event loop, under the lease table's per-lease locks; the
write-back loop takes each lease's lock in turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from popmq.broker_core import MESSAGE_OVERHEAD_BYTES, PopMQError, PoppedMessage
from popmq.coordination.errors import ConflictError, CoordinationUnavailableError
from popmq.proxy.lease_store import LeaseMeta, LeaseStore, PageId

__all__ = ["HeldLease", "HeldPage", "WriteBack", "held_bytes", "outage_error", "renew_held"]

log = logging.getLogger(__name__)


def held_bytes(messages: Sequence[PoppedMessage]) -> int:
    """What a page's messages count against LeaseConfig.max_bytes."""
    # The stored record's length, not the body's: reading `body` parses the whole record,
    # which cost a LeasePop as much as the lease's own bookkeeping.
    return sum(m.record.stored_size + MESSAGE_OVERHEAD_BYTES for m in messages)


@dataclass(slots=True)
class HeldPage:
    """A page this proxy popped, with its messages (the cache a replay answers from)."""

    messages: list[PoppedMessage]
    revision: int
    """The page entry's revision these messages (their handles) match (0: not stored)."""
    held_bytes: int
    nonce: str
    """The nonce of its identity (PageId)."""


@dataclass(slots=True, eq=False)
class HeldLease:
    """What this proxy keeps of a lease it popped pages of."""

    group: str
    token: str
    topic: str
    incarnation: str
    deadline_ms: int
    """The lease's deadline as this proxy last saw it: the cache goes after it."""
    pages: dict[int, HeldPage] = field(default_factory=dict)
    unwritten: set[int] = field(default_factory=set)
    """Pages popped while etcd was down and not written yet (changed only through WriteBack,
    which keeps their count)."""
    stored: bool = True
    """Whether the lease entry of `incarnation` was written (False: started in memory)."""
    renewed: bool = False
    """Renewed while etcd was down: its stored pages' new handles and its deadline are
    still to be written."""
    acked_messages: int | None = None
    """Set once this proxy acknowledged pages of it by identity while etcd was down."""
    ack_unwritten: bool = False
    """Acked by token from memory (lease_pinning.py): the lease entry is still to be marked
    acked."""
    elsewhere: set[int] = field(default_factory=set)
    """Pages of it this proxy did not pop that may be stored (lease_pinning.py)."""
    pinned: bool = False
    """Pages of it were popped from memory for a pinned reader (lease_pinning.py): what
    this proxy holds, not what etcd stores, is what that reader read."""

    def page_id(self, number: int) -> str:
        return str(PageId(self.incarnation, number, self.pages[number].nonce))


async def renew_held(
    lease: HeldLease,
    deadline_ms: int,
    change: Callable[[Sequence[str]], Awaitable[Sequence[tuple[str, int] | PopMQError]]],
) -> tuple[int, list[PopMQError], int]:
    """Renew the pages this proxy holds of `lease` with `change` (ChangeInvisibleTime of each
    handle, superseded ones followed), in memory only: (messages, failures, the lease's new
    deadline, which a message that could not be renewed keeps at its own)."""
    count, failures = 0, list[PopMQError]()
    for page in lease.pages.values():
        results = await change([m.receipt_handle for m in page.messages])
        renewed = []
        for message, result in zip(page.messages, results, strict=True):
            if isinstance(result, PopMQError):
                failures.append(result)
                renewed.append(message)
                deadline_ms = min(deadline_ms, message.invisible_until_ms)
            else:
                handle, until = result
                renewed.append(
                    dataclasses.replace(message, receipt_handle=handle, invisible_until_ms=until)
                )
        page.messages = renewed
        count += len(renewed)
    return count, failures, deadline_ms


def outage_error(
    text: str, error: CoordinationUnavailableError | None = None
) -> CoordinationUnavailableError:
    """The retriable UNAVAILABLE naming etcd for what needs it while it is down."""
    why = f": {error}" if error is not None else ""
    return CoordinationUnavailableError(
        f"{text} while etcd does not answer{why}; retry once etcd is back"
    )


class WriteBack:
    """The pages popped while etcd was down, and the loop that writes them when it is back.

    Args:
        store: Where they go.
        locked: The lease table's per-lease lock (an async context manager factory).
        max_pages: Most pages held unwritten (LeaseConfig.max_outage_pages).
        max_lease_pages: Most pages of one lease (LeaseConfig.max_pages).
        interval_s: How often the loop tries while pages wait.
    """

    def __init__(
        self,
        store: LeaseStore,
        locked: Callable[[str, str], contextlib.AbstractAsyncContextManager[None]],
        *,
        max_pages: int,
        max_lease_pages: int,
        interval_s: float,
    ) -> None:
        self._store = store
        self._locked = locked
        self.max_pages = max_pages
        self._max_lease_pages = max_lease_pages
        self._interval_s = interval_s
        # Leases with unwritten pages (their `unwritten` sets) or renewals, guarded by the
        # event loop: changed only between awaits.
        self._leases: dict[tuple[str, str], HeldLease] = {}
        # The sum of len(lease.unwritten) over _leases, kept as they change: check_room runs
        # on every pop during an outage, and a sum would cost one step per lease held.
        self._held = 0
        self._task: asyncio.Task[None] | None = None

    def count(self) -> int:
        """Pages held unwritten."""
        return self._held

    def check_room(self) -> None:
        """Refuse a new page past the bound (the module docstring, point 3)."""
        held = self.count()
        if held >= self.max_pages:
            raise outage_error(
                f"this proxy holds {held} lease pages popped while etcd is down, the most it "
                "may (leases.max_outage_pages); a new page is refused"
            )

    def hold(self, lease: HeldLease, number: int) -> None:
        """Remember page `number` of `lease` for writing, and start the loop."""
        self._register(lease)
        if number not in lease.unwritten:
            lease.unwritten.add(number)
            self._held += 1

    def acked(self, lease: HeldLease) -> None:
        """Remember that `lease` was acked by token in memory, for marking its entry acked
        (lease_pinning.py), and start the loop."""
        lease.ack_unwritten = True
        self._register(lease)

    def renewed(self, lease: HeldLease) -> None:
        """Remember that `lease` was renewed in memory, for writing, and start the loop."""
        lease.renewed = True
        self._register(lease)

    def _register(self, lease: HeldLease) -> None:
        key = (lease.group, lease.token)
        replaced = self._leases.get(key)
        if replaced is not None and replaced is not lease:
            self.forget(replaced)  # another incarnation's: the lease started again
        self._leases[key] = lease
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._loop(), name="popmq-lease-write-back")
            self._task.add_done_callback(_log_failure)

    def forget(self, lease: HeldLease, numbers: Sequence[int] | None = None) -> None:
        """Stop holding pages of `lease` (all of them when `numbers` is None): acked, or
        past their deadline (their messages are the broker's again)."""
        before = len(lease.unwritten)
        if numbers is None:
            lease.unwritten.clear()
            lease.renewed = lease.ack_unwritten = False
        else:
            lease.unwritten.difference_update(numbers)
        self._held -= before - len(lease.unwritten)
        if (
            not lease.unwritten
            and not lease.renewed
            and not lease.ack_unwritten
            and self._leases.get((lease.group, lease.token)) is lease
        ):
            del self._leases[(lease.group, lease.token)]

    async def close(self) -> None:
        """Stop the loop (pages not written then are never acked: their messages come back
        after their invisible time)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _loop(self) -> None:
        while self._leases:
            await asyncio.sleep(self._interval_s)
            for key, lease in list(self._leases.items()):
                try:
                    async with self._locked(*key):
                        await self.flush(lease)
                except CoordinationUnavailableError:
                    break  # still down: try again later
                except Exception:
                    # One lease's failure (a corrupt entry, say) must not stop the others'.
                    log.exception(
                        "lease %s of group %s: writing it back failed; it is tried again later",
                        key[1],
                        key[0],
                    )

    async def flush(self, lease: HeldLease) -> None:
        """Write `lease`'s unwritten pages (the caller holds its lock); raises
        CoordinationUnavailableError while etcd is down (what was written stays written)."""
        if not lease.unwritten and not lease.renewed and not lease.ack_unwritten:
            return
        taken = False  # the lease entry is another incarnation's: every page is a shadow
        if not lease.stored and lease.unwritten:
            taken = await self._write_lease(lease)
            lease.stored = True
            log.info(
                "lease %s of group %s, started while etcd was down from page %d: written%s",
                lease.token,
                lease.group,
                min(lease.unwritten),
                " (another proxy had started it: its pages are shadows)" if taken else "",
            )
        for number in sorted(lease.unwritten):
            if number in lease.pages:  # else acked, or the lease was acked elsewhere
                await self._write(lease, number, taken)
            self.forget(lease, (number,))
        if lease.ack_unwritten:
            await self._write_ack(lease)
        elif lease.renewed and not taken:
            await self._write_renewal(lease)
        lease.renewed = lease.ack_unwritten = False
        self.forget(lease, ())

    async def _write_lease(self, lease: HeldLease) -> bool:
        """Create the entry of a lease started in memory; whether another incarnation's
        live entry is left in place (then this one's pages are shadows). An expired entry is
        taken over (its messages are the broker's again), and so is a live one, unless
        acked, for a pinned lease (lease_pinning.py)."""
        previous: LeaseMeta | None = None
        for _ in range(4):  # a conflict: another write of the entry meanwhile; read again
            try:
                await self._store.create(
                    lease.group,
                    lease.token,
                    lease.topic,
                    lease.deadline_ms,
                    previous=previous,
                    incarnation=lease.incarnation,
                )
            except ConflictError:
                previous = await self._store.meta(lease.group, lease.token)
            else:
                return False
            if previous is not None and previous.incarnation == lease.incarnation:
                return False  # written by an earlier try whose answer was lost
            if (
                previous is not None
                and previous.deadline_ms > _now_ms()
                and (previous.acked or not lease.pinned)
            ):
                return True
            if previous is not None:
                log.info(
                    "lease %s of group %s: taking over its entry of incarnation %s (%s)",
                    lease.token,
                    lease.group,
                    previous.incarnation,
                    "expired" if previous.deadline_ms <= _now_ms() else "pinned here",
                )
        if lease.pinned:
            # Never left as shadows: the proxy's next call on the lease would read etcd's
            # incarnation, drop the pages it served and renew or ack the other's instead.
            raise CoordinationUnavailableError(
                f"lease {lease.token!r} of group {lease.group!r}: its entry changed under each "
                "of 4 writes while it was written back; it is written back later"
            )
        return True

    async def _write_ack(self, lease: HeldLease) -> None:
        """Mark the lease entry acked after an ack by token from memory, so a repeated ack
        through any proxy acknowledges nothing more and replays are refused. An entry of
        another incarnation (this proxy restarted since it was stored) is marked too: the
        ack answered what the last attempt read, and that entry's pages come back after
        their invisible time. Nothing is written for a lease past its deadline."""
        count = lease.acked_messages or 0
        for _ in range(4):  # a conflict: another write of the entry meanwhile; read again
            meta = await self._store.meta(lease.group, lease.token)
            live = meta is not None and meta.deadline_ms > _now_ms()
            if (live and meta is not None and meta.acked) or (
                not live and lease.deadline_ms <= _now_ms()
            ):
                return
            try:
                if meta is None or not live:
                    meta = await self._store.create(
                        lease.group,
                        lease.token,
                        lease.topic,
                        lease.deadline_ms,
                        previous=meta,
                        incarnation=lease.incarnation,
                    )
                await self._store.update(meta, acked_messages=count)
            except ConflictError:
                continue
            return
        log.warning("lease %s of group %s: its ack was not recorded", lease.token, lease.group)

    async def _write_renewal(self, lease: HeldLease) -> None:
        """Write the handles a renewal in memory gave the stored pages this proxy holds, and
        move the lease's deadline to the earliest of its pages' (so the lease is not taken
        for expired while its messages are still invisible). A page rewritten elsewhere
        since is left alone: its handles are as new, or followed later."""
        meta = await self._store.meta(lease.group, lease.token)
        if meta is None or meta.incarnation != lease.incarnation or meta.acked:
            return  # another incarnation's or done: the renewals stay at the broker alone
        deadline = lease.deadline_ms
        for record in await self._store.pages(meta, limit=self._max_lease_pages):
            page = lease.pages.get(record.number)
            if page is None or page.nonce != record.page_id or page.revision != record.revision:
                deadline = min(deadline, record.deadline_ms)
                continue
            until = [m.invisible_until_ms for m in page.messages]
            try:
                written = await self._store.update_page(
                    meta,
                    record,
                    [m.receipt_handle for m in page.messages],
                    until,
                    min(until, default=lease.deadline_ms),
                )
            except ConflictError:
                deadline = min(deadline, record.deadline_ms)
                continue
            page.revision = written.revision
        if deadline > meta.deadline_ms:
            with contextlib.suppress(ConflictError):  # moved elsewhere meanwhile
                await self._store.update(meta, deadline_ms=deadline)

    async def _write(self, lease: HeldLease, number: int, taken: bool) -> None:
        page = lease.pages[number]
        handles = [m.receipt_handle for m in page.messages]
        until = [m.invisible_until_ms for m in page.messages]
        deadline = min(until, default=lease.deadline_ms)
        for _ in range(0 if taken else 4):
            try:
                record = await self._store.create_page_of(
                    lease.group,
                    lease.token,
                    lease.incarnation,
                    number,
                    handles,
                    until,
                    deadline,
                    nonce=page.nonce,
                    outage=True,
                )
            except ConflictError:
                if not lease.pinned:
                    break  # another proxy stored page `number` meanwhile: ours is a shadow
            else:
                page.revision = record.revision
                return
            # Pinned: the page the reader read takes the number over (lease_pinning.py).
            other = await self._store.page_of(lease.group, lease.token, lease.incarnation, number)
            if other is None:
                continue  # it expired meanwhile: create again
            if other.page_id == page.nonce:
                page.revision = other.revision  # written by an earlier try
                return
            with contextlib.suppress(ConflictError):
                record = await self._store.replace_page_of(
                    lease.group,
                    lease.token,
                    lease.incarnation,
                    other,
                    handles,
                    until,
                    deadline,
                    nonce=page.nonce,
                )
                page.revision = record.revision
                return
        with contextlib.suppress(ConflictError):  # written already by an earlier try
            await self._store.create_shadow(
                lease.group, lease.token, number, handles, until, deadline, nonce=page.nonce
            )


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("the lease write-back loop failed", exc_info=task.exception())
