"""Fencing: a broker that may have been replaced writes nothing.

Proxies route to a broker through its registration in etcd (`brokers/<name>`), whose create
revision is its **epoch** (the fencing token): registering again, after a restart or a
shard's failover, makes a new key with a larger epoch. A broker that may have been replaced
stops changing its store until it is sure again. Nobody tells it to: it notices itself, here.

- `WriteFence` is what BrokerService (service.py) asks before every call that changes the
  store. While fenced, such a call fails with a retriable UNAVAILABLE naming why; on a
  replica that follows its shard's leader, with NOT_LEADER (its store is a copy that
  replication writes). Reads are never fenced (a follower's go to its read view).
  `LookupSends` is admitted as a write, but a broker fenced only while it reconciles its
  crash tail (crash_tail_sync.py) answers those of messages outside that tail
  (`check_lookup`).
- `start_fencing` runs the fencing task of a standalone broker (`popmq broker --etcd`,
  server.py). A standalone broker keeps taking writes while its etcd session is lost (etcd
  down or unreachable for longer than the TTL): no other process can serve its queues
  meanwhile (below), so refusing would buy no safety and cost the cluster its writes.
  It refuses writes only when re-registering finds its name held by another live member
  (the session's `rival`): that process may be serving its queues now, so it refuses until
  it holds the name again. If the task dies, writes stay fenced for good and the broker
  reports the failure (its health turns NOT_SERVING).
- `leader_lease` says why a shard's leader must stop writing (replication/replica.py): its
  term's lease was lost (etcd says so), or lapsed as far as its own clock can tell (a
  paused process that wakes after its TTL writes nothing before etcd is asked). The
  replication log (replication/log.py) asks it before each write and before a batch
  completes; the replica fences its BrokerService when the term ends. A shard's leader
  whose lease is gone keeps writing while every in-sync follower's lease promise runs
  (replication/log.py: a follower that answered a heartbeat campaigns for no replica for
  the lease window after; only the last leader and in-sync followers are electable), and
  fences once one runs out: cut off from etcd and from a follower, an in-sync follower
  may take its queues over once its promise has ended.

**Why a standalone broker may write while cut off from etcd.** Its queues are named by
its broker name in the routes (`topics/<topic>` segments name brokers, never addresses),
and handles name it too; a proxy reaches those queues through `brokers/<name>` only
(RouteCache.writable_queues, readable_queues and broker_addr keep live members only, and,
for a short grace, one whose registration vanished while the proxy's connection to it is up:
an etcd resumed after a pause revokes every lease at once).
Nothing moves a route's queues to another broker: a broker whose registration lapses
keeps its segments and global ids, and its queues are simply not served until it is back
(routes.py; FIFO groups hashed to them fail retriably). So the only way another process
serves these queues is to register `brokers/<name>` itself, which needs the key to be
absent in etcd, and a process that reaches etcd: never while etcd is down; while this
broker alone is cut off, only if an operator starts another broker under the same name
(or a replicated shard of that name). That process has its own store, so nothing this
broker acknowledged is lost either way; this broker learns of it as soon as it reaches
etcd again (its re-registration meets the rival) and refuses writes from then on.

The epoch fences replication itself too, where its stream is: a follower refuses a leader
older than the newest epoch it has seen (replication/follower.py), a leader refuses a
follower that knows a newer one (replication/service.py), and a leader changes the in-sync
set only while etcd still names it the leader of its epoch (replication/election.py).

Everything runs on the event loop; nothing here blocks it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence

from popmq.broker_core import NotLeaderError, UnavailableError
from popmq.coordination.coordinator import Session
from popmq.coordination.etcd_streams import LeaseKeeper

log = logging.getLogger(__name__)


class WriteFence:
    """Whether a broker's BrokerService may change its store now, and why not.

    Args:
        name: The broker's name (a replica's shard), which the refusals name.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.reason: str | None = None
        """Why writes are refused right now (see fence()), or None."""
        self.following: str | None = None
        """Set on a replica that follows its shard's leader (its role, at which epoch):
        every write is refused (its store is a copy being written by replication)."""
        # Fenced for the crash tail's reconciliation alone, and that tail's (topic, id)
        # pairs once selected: lookups of other messages are answered (`check_lookup`).
        self._reconciling = False
        self._tail: frozenset[tuple[str, str]] | None = None

    def fence(self, reason: str, *, reconciling: bool = False) -> None:
        """Refuse writes (retriable UNAVAILABLE naming `reason`) until unfence();
        `reconciling`: the fence holds while the crash tail is reconciled, nothing else.
        One reason at a time: a fence replaces the one before, and unfence() ends any
        (its callers never fence concurrently: a standalone broker's fencing task starts
        after the reconciliation, and a replica's other fences end its term)."""
        self.reason = reason
        self._reconciling = reconciling
        self._tail = None

    def unfence(self) -> None:
        self.reason = None
        self._reconciling = False
        self._tail = None

    def reconciles(self, tail: frozenset[tuple[str, str]] | None) -> None:
        """The crash tail being reconciled now, as (topic, message id or dedup id) pairs;
        None once done. Ignored unless fenced for the reconciliation alone."""
        if self._reconciling:
            self._tail = tail

    def check_lookup(self, topic: str, sent: Sequence[tuple[str, str]]) -> None:
        """Return when a lookup of these (message id, dedup id or "") of `topic` may be
        answered: as a write, but for a broker fenced only while it reconciles its crash
        tail. Its store changes meanwhile only by removals from that tail, so it answers
        about every other message (two brokers reconciling at once ask each other) and
        refuses, retriably, a lookup naming a message of its tail (its answer could change;
        two brokers that each hold a copy must not both remove theirs).

        Raises:
            NotLeaderError, UnavailableError: as check(), or the lookup names a message of
                the tail being reconciled.
        """
        tail = self._tail
        if self.following is not None or not self._reconciling or tail is None:
            self.check()
            return
        for message_id, dedup_id in sent:
            if (topic, dedup_id or message_id) in tail:
                raise UnavailableError(
                    f"broker {self.name!r} is checking its crash tail, which holds a send "
                    f"of {dedup_id or message_id!r} (topic {topic!r}): ask again once it "
                    "takes writes"
                )

    def check(self) -> None:
        """Return when a write may go ahead.

        Raises:
            NotLeaderError: This replica follows its shard's leader (ask the leader).
            UnavailableError: Writes are fenced (retriable), saying why.
        """
        if self.following is not None:
            raise NotLeaderError(
                f"this replica of shard {self.name!r} does not lead it now "
                f"({self.following}); ask the shard's leader"
            )
        if self.reason is not None:
            raise UnavailableError(
                f"broker {self.name!r} refuses writes: {self.reason}; retry later"
            )


def start_fencing(
    session: Session, writes: WriteFence, *, failed: Callable[[str], None]
) -> asyncio.Task[None]:
    """Start the fencing task of a registered standalone broker: `writes` fenced while
    another live member holds its name (module docstring). The caller holds the task and
    cancels it when it stops; should the task end any other way, writes are fenced for good
    and `failed(why)` reports it."""
    task = asyncio.get_running_loop().create_task(
        _fence_while_rivalled(session, writes), name="popmq-broker-fencing"
    )
    task.add_done_callback(functools.partial(_fencing_ended, writes, failed))
    return task


async def _fence_while_rivalled(session: Session, writes: WriteFence) -> None:
    """Follow the session: writes go on while it is lost, and stop while a rival holds the
    name; take them again once registered."""
    lost = False
    while True:
        rival = session.rival
        if rival is not None:
            if writes.reason is None:
                log.error(
                    "broker %r: another live member holds its etcd registration (%s): "
                    "refusing writes until it holds the name again",
                    writes.name,
                    rival,
                )
            writes.fence(
                f"another process holds its etcd registration ({rival}) and may serve its queues"
            )
        else:
            if writes.reason is not None:
                log.info("broker %r takes writes again", writes.name)
            writes.unfence()
            if not session.alive and not lost:
                log.warning(
                    "broker %r lost its etcd session: it keeps taking writes (a standalone "
                    "broker's queues are served by no other process meanwhile) and registers "
                    "again once etcd answers",
                    writes.name,
                )
            lost = not session.alive
        await session.wait_changed()


def _fencing_ended(
    writes: WriteFence, failed: Callable[[str], None], task: asyncio.Task[None]
) -> None:
    """The fencing task ended without being cancelled: nothing follows the registration
    any more, so writes are refused for good and the failure is reported."""
    if task.cancelled():
        return
    error = task.exception()
    why = f"{error!r}" if error is not None else "it returned"
    log.error("the fencing loop died: %s", why, exc_info=error)
    writes.fence(f"its fencing loop died ({why})")
    failed(f"its fencing loop died ({why})")


def leader_lease(
    keeper: LeaseKeeper | Callable[[], LeaseKeeper],
    promised: Callable[[float], str | None] | None = None,
) -> Callable[[], str | None]:
    """Why the leader of a term kept by `keeper` must not write now, or None (the replication
    log's `fenced`). Call it on the event loop the lease is kept on.

    `keeper` may be a function returning the term's current keeper (the leader moves its
    registration to a new lease after an etcd outage). `promised(now)`, when given, says
    why the in-sync followers' lease promises do not cover `now` (None: they all do, so no
    other replica can be elected before they run out): the leader writes while its etcd
    lease is held OR the promises run."""
    loop = asyncio.get_running_loop()
    current = keeper if callable(keeper) else (lambda: keeper)

    def fenced() -> str | None:
        lease = current()
        now = loop.time()
        if lease.lost:
            why = "its leader lease was lost"
        elif now >= lease.expires_at:
            why = "its leader lease lapsed by its own clock"
        else:
            return None
        if promised is None:
            return why
        unpromised = promised(now)
        if unpromised is None:
            return None
        return f"{why}, and {unpromised}"

    return fenced
