"""Fencing: a broker that may have been replaced writes nothing.

Proxies route to a broker through its registration in etcd (`brokers/<name>`), whose create
revision is its **epoch** (the fencing token): registering again, after a lost session, a
restart or a shard's failover, makes a new key with a larger epoch. A broker whose
registration is gone may have been replaced already, so it stops changing its store until
it holds one again. Nobody tells it to: it notices itself, here.

- `WriteFence` is what BrokerService (service.py) asks before every call that changes the
  store. While fenced, such a call fails with a retriable UNAVAILABLE naming why; on a
  replica that follows its shard's leader, with NOT_LEADER (its store is a copy that
  replication writes). Reads are never fenced (a follower's go to its read view).
- `start_fencing` runs the fencing task of a cluster broker (`popmq broker --etcd`,
  server.py): it follows the etcd session, fences when the session is lost (its lease
  expired or was revoked, or etcd was unreachable for a whole TTL) and unfences once the
  session has registered again by itself, with a new epoch. If the task dies, nothing
  follows the registration any more: writes stay fenced for good and the broker reports
  the failure (its health turns NOT_SERVING).
- `leader_lease` says why a shard's leader must stop writing (replication/replica.py): its
  term's lease was lost (etcd says so), or lapsed as far as its own clock can tell (a
  paused process that wakes after its TTL writes nothing before etcd is asked). The
  replication log (replication/log.py) asks it before each write and before a batch
  completes; the replica fences its BrokerService when the term ends.

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
from collections.abc import Callable

from popmq.broker_core import NotLeaderError, UnavailableError
from popmq.coordination.coordinator import Session
from popmq.coordination.etcd import LeaseKeeper

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

    def fence(self, reason: str) -> None:
        """Refuse writes (retriable UNAVAILABLE naming `reason`) until unfence()."""
        self.reason = reason

    def unfence(self) -> None:
        self.reason = None

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
    """Start the fencing task of a registered broker: `writes` fenced while `session` is
    lost. The caller holds the task and cancels it when it stops; should the task end any
    other way, writes are fenced for good and `failed(why)` reports it."""
    task = asyncio.get_running_loop().create_task(
        _fence_while_lost(session, writes), name="popmq-broker-fencing"
    )
    task.add_done_callback(functools.partial(_fencing_ended, writes, failed))
    return task


async def _fence_while_lost(session: Session, writes: WriteFence) -> None:
    """Refuse writes while the registration is lost; take them again once it is back."""
    while True:
        epoch = await session.wait_registered()
        writes.unfence()
        reason = await session.wait_lost(epoch)
        log.warning("etcd session lost (%s): refusing writes until registered again", reason)
        writes.fence(f"its etcd registration was lost ({reason})")


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


def leader_lease(keeper: LeaseKeeper) -> Callable[[], str | None]:
    """Why the leader of a term kept by `keeper` must not write now, or None (the replication
    log's `fenced`). Call it on the event loop the lease is kept on."""
    loop = asyncio.get_running_loop()

    def fenced() -> str | None:
        if keeper.lost:
            return "its leader lease was lost"
        if loop.time() >= keeper.expires_at:
            return "its leader lease lapsed by its own clock"
        return None

    return fenced
