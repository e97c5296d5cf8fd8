"""The leader's side of replication: log positions, the in-memory log, the in-sync wait.

`ReplicationLog` is the leader store's WriteTap: every write gets the next log position
(lsn) and the leader's epoch, stored in the same write (oplog.POSITION_KEY), and its
encoded changes go to an in-memory log that the followers' streams read. The log keeps the
last `buffer_bytes`; a follower further behind is sent a snapshot instead.

The in-sync set (ISR) is the followers that hold every acknowledged send. A batch that
stores sends (or any synced batch) completes only once every ISR member acknowledged it;
sends are refused while the ISR has fewer than `min_insync` followers. The ISR changes as
Kafka's does: a follower joins once it has caught up with the log (it is counted before
etcd is told, so no batch is acknowledged without it from then on) and leaves when its
stream ends or it lags more than `lag_timeout_s` (etcd is told first, so a follower that
may lack an acknowledged send is never electable). `persist` writes the set to etcd.

Fencing: `fenced()` says why this leader must not write (its lease lapsed, as far as its
own clock can tell, and an in-sync follower's promise ran out; or it lost the election);
then every write is refused before it is made, and a batch waiting for followers fails
rather than completing.

Lease promises: the streams carry heartbeats (service.py); a follower that answers one
promises not to campaign for the lease window after it received it (replica.py), and the
leader counts that promise from when it SENT the heartbeat, shortened by a margin for the
two clocks' rates (`promise_s`). `promised(now)` says whether every follower that etcd may
name in sync (`_etcd_isr`, a superset kept through failed writes, plus the ISR in memory)
has a promise running at `now`: then no replica but this one can be elected before `now`
(docs/replication.md, "The leader lease"), so the leader may write without etcd.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any

from popmq.broker.replication import oplog
from popmq.broker_core.api import FollowerReplication, ReplicationSnapshot
from popmq.broker_core.errors import (
    NotEnoughReplicasError,
    OutcomeUnknownError,
    PopMQError,
    UnavailableError,
)
from popmq.broker_core.store import Batch, Store

log = logging.getLogger(__name__)


@dataclass(slots=True)
class LogEntry:
    lsn: int
    epoch: int
    ops: bytes
    written_at: float
    """Monotonic time of its write: how long a follower that lacks it has been behind."""


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one connected follower."""

    name: str
    acked: int
    connected_at: float
    beats: dict[int, float] = field(default_factory=dict)
    """Heartbeats sent on its stream and not answered yet: id -> monotonic send time."""


@dataclass(slots=True)
class _Wait:
    lsn: int
    quorum: bool
    future: asyncio.Future[None]
    required: set[str] = field(default_factory=set)


class ReplicationLog:
    """The leader store's tap (module docstring).

    Args:
        store: The leader's store (its position and epoch history are read from it).
        shard: The shard's name (for messages).
        replica: This (leader) replica's name.
        terms: Times this replica process became leader, this term included.
        epoch: This leadership's fencing epoch.
        isr: The in-sync followers etcd names at election.
        min_insync: Followers a send needs.
        wait_for_followers: Sync replication (False: async, nothing waits for followers).
        buffer_bytes: How much of the log is kept for followers.
        lag_timeout_s: A follower behind for this long leaves the ISR.
        fenced: Why writes must stop now, or None.
        persist: Writes the ISR to etcd (raises when it cannot).
        promise_s: How long after sending a heartbeat the follower that answers it is
            bound not to campaign, by this leader's clock (0: no heartbeats).
    """

    def __init__(
        self,
        store: Store,
        *,
        shard: str,
        replica: str = "",
        terms: int = 1,
        epoch: int,
        isr: Iterable[str],
        min_insync: int,
        wait_for_followers: bool = True,
        buffer_bytes: int,
        lag_timeout_s: float,
        fenced: Callable[[], str | None],
        persist: Callable[[frozenset[str]], Awaitable[None]],
        promise_s: float = 0.0,
    ) -> None:
        self.shard = shard
        self.replica = replica
        self.terms = terms
        self.epoch = epoch
        self.min_insync = min_insync
        self.wait_for_followers = wait_for_followers
        self._buffer_bytes = buffer_bytes
        self.lag_timeout_s = lag_timeout_s
        self._fenced = fenced
        self._persist = persist
        _, self.lsn = oplog.read_position(store)
        self.epochs = oplog.read_epochs(store)
        if not self.epochs or self.epochs[-1][0] != epoch:
            self.epochs.append((epoch, self.lsn + 1))
        self._history_saved = False
        self._entries: deque[LogEntry] = deque()
        self._bytes = 0
        self.written_bytes = 0
        """Bytes of encoded batches since this leadership began (metrics)."""
        # Followers waiting for the log to grow (or, once closing, for the last wait to end).
        self._grown = asyncio.Event()
        self.closing = False
        """Set by `close_streams`: the followers' streams end once nothing is owed to them."""
        self.releases = True
        """Whether a stream that ends on a stop releases its follower (tells it this leader
        stopped cleanly): not while a takeover's reconciliation is unfinished, or the
        follower, taking over next, would skip it (replica.py)."""
        self.isr: set[str] = set(isr)
        # The followers etcd may name in sync: what the last ISR write that surely landed
        # says, plus every set whose write failed (it may have landed all the same).
        self._etcd_isr: set[str] = set(self.isr)
        self.promise_s = promise_s
        self.heartbeat_s = promise_s / 5 if promise_s > 0 else 1.0
        """How often the streams carry a heartbeat (a few per promise window)."""
        self.promised_until: dict[str, float] = {}
        self.promises_waived = False
        """Follower -> monotonic time its latest promise runs out (on this clock)."""
        self.followers: dict[str, FollowerState] = {}
        self._waits: list[_Wait] = []
        self.acknowledged_lsn = self.lsn
        """The last batch whose wait completed: a follower that joins the ISR must hold it
        (every batch up to it may have acknowledged sends without that follower). It starts
        at the store's end: an earlier term may have acknowledged all of it."""
        # The last batch a wait was made for, and the last whose wait completed, in this
        # term. The store's end starts owed: an earlier term may not have had all of it
        # acknowledged, and this term's followers may lack it (see `barrier`).
        self._owed_lsn = self.lsn
        self._confirmed_lsn = 0
        # The last batch whose follower wait failed (any wait: a send's, a revive's, a DLQ
        # move's), and the last batch of sends (a quorum wait) whose wait completed, in this
        # term. A wait that is not a send's completes with however few followers are in sync
        # (none, even), so it advances `_confirmed_lsn` without proving that `min_insync`
        # followers hold what a failed wait left in doubt.
        self._failed_wait_lsn = 0
        self._quorum_confirmed_lsn = 0
        self.joined: Callable[[], None] | None = None
        """Called when a follower joined the in-sync set (the writer then confirms the sends
        a failed wait held back, so they need no new send to become visible)."""
        # ISR changes run one at a time, in order (etcd first for a removal).
        self._isr_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self.failure: str | None = None

    # -- WriteTap -------------------------------------------------------------------------

    def stamp(self, batch: Batch) -> None:
        reason = self._ended()
        if reason is not None:
            raise UnavailableError(
                f"shard {self.shard!r}: this replica is no longer its leader ({reason}); "
                "nothing was written, retry (the new leader takes it)"
            )
        batch.lsn = self.lsn + 1
        batch.put("meta", oplog.POSITION_KEY, oplog.encode_position(self.epoch, batch.lsn))
        if not self._history_saved:
            batch.put("meta", oplog.EPOCHS_KEY, oplog.encode_epochs(self.epochs))

    def written(self, batch: Batch) -> None:
        assert batch.ops is not None
        self.lsn = batch.lsn
        self._history_saved = True
        data = oplog.encode(batch.ops)
        self._entries.append(LogEntry(batch.lsn, self.epoch, data, time.monotonic()))
        self._bytes += len(data)
        self.written_bytes += len(data)
        while self._bytes > self._buffer_bytes and len(self._entries) > 1:
            self._bytes -= len(self._entries.popleft().ops)
        self._grown.set()
        self._grown = asyncio.Event()

    def unwritten(self, batch: Batch) -> None:
        batch.lsn = 0

    def admit_send(self) -> None:
        reason = self._ended()
        if reason is not None:
            raise UnavailableError(
                f"shard {self.shard!r}: this replica is no longer its leader ({reason}); "
                "nothing was written, retry"
            )
        if self.wait_for_followers and len(self.isr) < self.min_insync:
            raise NotEnoughReplicasError(
                f"shard {self.shard!r} has {len(self.isr)} in-sync follower(s) "
                f"({', '.join(sorted(self.isr)) or 'none'}) and sends need "
                f"replication.min_insync = {self.min_insync}; nothing was written, retry "
                "(another shard, or once a follower has caught up)"
            )

    # -- the writer's barrier -------------------------------------------------------------

    def barrier(self, batch: Batch, synced: bool) -> asyncio.Future[None] | None:
        """What a written batch's jobs wait for: every ISR member's acknowledgement.

        For an empty batch of sends (nothing written: repeats answered as duplicates of
        earlier writes), the acknowledgement of the last batch owed to the followers: None
        when its wait completed and no send's wait failed since a send's wait last completed
        (the common case), else a new wait for it as a send's, refused as a send would be
        with too few in-sync followers or once fenced. The first copy may be in a batch
        whose wait failed, or in what an earlier term left unacknowledged; a later batch
        that is not a send's, acknowledged by however few followers were in sync, does not
        vouch for it.
        """
        if not self.wait_for_followers:
            return None
        lsn = batch.lsn
        if lsn == 0:
            if not batch.quorum or (
                self._confirmed_lsn >= self._owed_lsn
                and self._quorum_confirmed_lsn >= self._failed_wait_lsn
            ):
                return None
            lsn = self._owed_lsn
        elif synced or batch.quorum:
            self._owed_lsn = lsn
        else:
            return None
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        wait = _Wait(lsn, batch.quorum, future, set(self.isr))
        if batch.quorum and len(wait.required) < self.min_insync:
            self._fail_wait(wait, self._too_few(lsn))
            return future
        self._waits.append(wait)
        self._settle()
        return future

    def _ended(self) -> str | None:
        """Why this replica may not take writes or complete waits as leader: fenced, or its
        leadership ended (`fail_all`: nothing settles a wait made after that); else None."""
        return self.failure or self._fenced()

    def _too_few(self, lsn: int) -> PopMQError:
        return OutcomeUnknownError(
            f"shard {self.shard!r} lost in-sync followers while batch {lsn} was replicated "
            f"({len(self.isr)} left, replication.min_insync = {self.min_insync}): it may or "
            "may not be stored; retry (a retried send is deduplicated)"
        )

    def _settle(self) -> None:
        """Complete the waits whose required followers all acknowledged them."""
        if not self._waits:
            return
        reason = self._ended()
        keep: list[_Wait] = []
        for wait in self._waits:
            if wait.future.done():
                continue
            if reason is not None:
                self._fail_wait(
                    wait,
                    OutcomeUnknownError(
                        f"shard {self.shard!r}: this replica lost its leadership ({reason}) "
                        f"before batch {wait.lsn} was replicated; it may or may not be "
                        "stored, retry (a retried send is deduplicated)"
                    ),
                )
                continue
            # Still owed by ISR members that have not acknowledged it (a disconnected one
            # stays owed until it has left the ISR).
            wait.required = {
                name
                for name in wait.required
                if name in self.isr
                and ((state := self.followers.get(name)) is None or state.acked < wait.lsn)
            }
            if wait.quorum and len(self.isr) < self.min_insync:
                self._fail_wait(wait, self._too_few(wait.lsn))
            elif not wait.required:
                wait.future.set_result(None)
                self.acknowledged_lsn = max(self.acknowledged_lsn, wait.lsn)
                self._confirmed_lsn = max(self._confirmed_lsn, wait.lsn)
                if wait.quorum:
                    self._quorum_confirmed_lsn = max(self._quorum_confirmed_lsn, wait.lsn)
            else:
                keep.append(wait)
        self._waits = keep
        if self.closing and not keep:
            self._wake()  # the last write owed to the followers is done: streams may end

    def _fail_wait(self, wait: _Wait, error: PopMQError) -> None:
        # Any failed wait (a revive's or a DLQ move's too) leaves its batch held by the
        # writer: the next confirm must then wait for the followers, not answer at once.
        self._failed_wait_lsn = max(self._failed_wait_lsn, wait.lsn)
        wait.future.set_exception(error)

    def close_streams(self) -> None:
        """The replica is stopping and its server takes no new call: each follower's
        stream ends once it has sent every batch and no write waits for the followers
        (`streams_may_end`), so that the writes in flight still complete, and the server's
        stop does not wait its whole grace for streams that would never end."""
        self.closing = True
        self._wake()

    def settled(self) -> bool:
        """Whether nothing written in this term is in doubt: not failed nor fenced, no
        batch waiting for its followers, and none whose wait failed left unvouched for
        (a stopping leader writes its clean stop down only then: replica.py)."""
        return (
            self.failure is None
            and self._fenced() is None
            and all(wait.future.done() for wait in self._waits)
            and self._quorum_confirmed_lsn >= self._failed_wait_lsn
        )

    def streams_may_end(self, next_lsn: int) -> bool:
        """Whether a stream whose next batch is `next_lsn` may end now (`close_streams`)."""
        return self.closing and next_lsn > self.lsn and not self._waits

    def _wake(self) -> None:
        self._grown.set()
        self._grown = asyncio.Event()

    def fail_all(self, reason: str) -> None:
        """Leadership ended: every waiting batch fails, no follower stream goes on."""
        self.failure = reason
        self._settle()
        for wait in self._waits:
            if not wait.future.done():
                self._fail_wait(
                    wait,
                    OutcomeUnknownError(
                        f"{reason}; a write still waiting for its followers may or may not "
                        "be stored, retry (a retried send is deduplicated)"
                    ),
                )
        self._waits = []
        self._grown.set()
        for task in self._tasks:
            task.cancel()

    # -- lease promises -------------------------------------------------------------------

    def heartbeat_answered(self, state: FollowerState, beat: int) -> None:
        """`state`'s follower answered heartbeat `beat`: its promise runs `promise_s` from
        when the heartbeat was sent (the earlier ones in flight are answered by it too)."""
        sent_at = state.beats.pop(beat, None)
        for older in [b for b in state.beats if b < beat]:
            del state.beats[older]
        if sent_at is None or self.promise_s <= 0:
            return
        until = sent_at + self.promise_s
        if until > self.promised_until.get(state.name, 0.0):
            self.promised_until[state.name] = until

    def waive_promises(self) -> None:
        """Count on no promise from now on (a stopping leader releases its followers)."""
        self.promises_waived = True

    def promised(self, now: float) -> str | None:
        """None when every follower etcd may name in sync has a promise running at `now`
        (monotonic); else which one does not. With none in sync, only this leader is
        electable: None."""
        if self.promise_s <= 0:
            return "its followers make no lease promises"
        if self.promises_waived:
            return "it released its followers from their lease promises (it is stopping)"
        for name in sorted(self.isr | self._etcd_isr):
            if self.promised_until.get(name, 0.0) <= now:
                return f"in-sync follower {name}'s lease promise ran out"
        return None

    def settle(self) -> None:
        """Fail the waiting batches if this leader is fenced now (called periodically: a
        promise that runs out while no follower acknowledges anything ends them too)."""
        self._settle()

    async def _record(self, isr: frozenset[str]) -> None:
        """Write the ISR to etcd, keeping `_etcd_isr` a superset of what etcd holds."""
        try:
            await self._persist(isr)
        except BaseException:
            self._etcd_isr |= isr  # the write may have landed
            raise
        self._etcd_isr = set(isr)

    # -- status ---------------------------------------------------------------------------

    def replication_snapshot(self) -> ReplicationSnapshot:
        """What `popmq cluster status` and the metrics show of this shard (Broker reads it)."""
        followers = [
            FollowerReplication(
                replica=state.name,
                in_sync=state.name in self.isr,
                acked_lsn=state.acked,
                lag_batches=self.lag_batches(state),
                lag_bytes=self.lag_bytes(state),
                lag_s=round(self.lag_s(state), 3),
            )
            for state in self.followers.values()
        ]
        followers += [
            FollowerReplication(name, True, 0, self.lsn, 0, 0.0)
            for name in self.isr - self.followers.keys()
        ]
        return ReplicationSnapshot(
            replica=self.replica,
            epoch=self.epoch,
            lsn=self.lsn,
            mode="sync" if self.wait_for_followers else "async",
            min_insync=self.min_insync,
            followers=tuple(sorted(followers, key=lambda f: f.replica)),
            written_bytes=self.written_bytes,
            terms=self.terms,
        )

    # -- followers ------------------------------------------------------------------------

    def entries_from(self, lsn: int) -> list[LogEntry] | None:
        """The log from `lsn` on (empty when the follower has it all); None when the
        in-memory log no longer reaches back to it (the follower needs a snapshot)."""
        if lsn > self.lsn:
            return []
        if not self._entries or self._entries[0].lsn > lsn:
            return None
        # The lsns are dense, so these are the last `count` entries. Taken from the right:
        # a follower that keeps up costs O(its lag) per batch, not O(the whole buffer)
        # (64 MiB of small batches is 100k+ entries, milliseconds to copy on every batch).
        count = self._entries[-1].lsn - lsn + 1
        tail = list(itertools.islice(reversed(self._entries), count))
        tail.reverse()
        return tail

    async def wait_grown(self, beyond: int) -> None:
        """Return once the log goes beyond `beyond` (or leadership ended, or the streams
        may end)."""
        while self.lsn <= beyond and self.failure is None and not self.streams_may_end(beyond + 1):
            await self._grown.wait()

    def connected(self, name: str, acked: int) -> FollowerState:
        state = FollowerState(name, acked, time.monotonic())
        self.followers[name] = state
        return state

    def acked(self, state: FollowerState, lsn: int) -> None:
        state.acked = max(state.acked, lsn)
        self._settle()
        if self.failure is None and state.name not in self.isr and self._caught_up(state):
            self._spawn(self._join(state.name))

    def _caught_up(self, state: FollowerState) -> bool:
        """Whether it holds every batch a wait completed without it (so it may join)."""
        return state.acked >= self.acknowledged_lsn and self.lag_s(state) == 0.0

    def lag_s(self, state: FollowerState) -> float:
        """How long it has lacked a batch written more than a moment ago: the age of the
        oldest batch it has not acknowledged (0 when it holds the whole log). Batches in
        flight to a healthy follower are milliseconds old, so this stays near 0 under load,
        unlike "has it ever held the whole log", which a busy log never lets it."""
        if state.acked >= self.lsn:
            return 0.0
        entries = self._entries
        if not entries:
            return 0.0
        first = entries[0].lsn
        index = max(0, state.acked + 1 - first)
        if index >= len(entries):
            return 0.0
        age = time.monotonic() - entries[index].written_at
        # A batch younger than a tenth of the timeout is in flight, not a lag.
        return age if age > self.lag_timeout_s / 10 else 0.0

    def lag_batches(self, state: FollowerState) -> int:
        return max(0, self.lsn - state.acked)

    def lag_bytes(self, state: FollowerState) -> int:
        """Bytes of the batches it lacks (as far as the in-memory log reaches)."""
        return sum(len(entry.ops) for entry in self._entries if entry.lsn > state.acked)

    def disconnected(self, state: FollowerState, why: str) -> None:
        """A follower's stream ended: it leaves the ISR now (in a task of its own, so the
        cancelled stream handler cannot interrupt the etcd write; check_lag retries)."""
        if self.followers.get(state.name) is state:
            del self.followers[state.name]
        # A stopping leader keeps its followers in sync (and so electable): a stream ends
        # then once nothing is owed to it, and the one to take over must be one of them.
        if state.name in self.isr and not self.closing:
            self._spawn(self._leave(state.name, f"its stream ended ({why})"))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("shard %s: in-sync set change failed: %s", self.shard, task.exception())

    async def check_lag(self) -> None:
        """Followers behind for lag_timeout_s, and in-sync followers with no stream, leave
        the ISR (called periodically); not once the leader is stopping (`disconnected`)."""
        if self.closing:
            return
        for name in sorted(self.isr - self.followers.keys()):
            await self._leave(name, "it has no stream to this leader")
        for state in list(self.followers.values()):
            lag = self.lag_s(state)
            if state.name in self.isr and lag > self.lag_timeout_s:
                await self._leave(
                    state.name,
                    f"it has lacked a batch for {lag:.1f}s "
                    f"(replication.lag_timeout_s = {self.lag_timeout_s:g})",
                )
            elif state.name not in self.isr and self._caught_up(state):
                await self._join(state.name)

    async def _join(self, name: str) -> None:
        async with self._isr_lock:
            state = self.followers.get(name)
            if name in self.isr or state is None or not self._caught_up(state):
                return
            # Counted first: from now on no batch completes without it (the batches still
            # waiting that it lacks wait for it too); etcd learns it next, and only then
            # may it be elected.
            self.isr.add(name)
            for wait in self._waits:
                if wait.lsn > state.acked:
                    wait.required.add(name)
            try:
                await self._record(frozenset(self.isr))
            except Exception as exc:  # noqa: BLE001 - it rejoins on a later ack
                log.warning(
                    "shard %s: could not add %s to the in-sync set: %s", self.shard, name, exc
                )
                self.isr.discard(name)
                self._settle()
                return
            log.info(
                "shard %s: follower %s joined the in-sync set at lsn %d", self.shard, name, self.lsn
            )
            # Only a set that can pass a send's barrier may publish what a failed one held
            # (below min_insync the confirm would fail, and every job in its batch with it),
            # and only while this term still leads.
            if (
                self.joined is not None
                and self.failure is None
                and len(self.isr) >= self.min_insync
            ):
                self.joined()

    async def _leave(self, name: str, why: str) -> None:
        async with self._isr_lock:
            if name not in self.isr:
                return
            remaining = frozenset(self.isr - {name})
            # etcd first: until it has the smaller set, the follower stays electable, so
            # batches keep waiting for it (a failure here leaves them waiting, and the
            # leader's lease, which etcd is also failing to renew, fences it).
            await self._record(remaining)
            self.isr.discard(name)
            log.warning("shard %s: follower %s left the in-sync set: %s", self.shard, name, why)
            self._settle()
