"""Transactional messages: half messages, their resolution, and the check-back schedule.

Storage (meta family, keys.py):
- `txn:<seq>` -> TransactionRecord: the half message and the transaction's state. A half
  message is in no queue: pop, pull, peek and queries of its topic never see it (RocketMQ
  keeps it in RMQ_SYS_TRANS_HALF_TOPIC, which no consumer subscribes to; here nothing can).
  It is written by the group-commit writer like a send (same batch, same fsync).
- `txc:<due><seq>`: every open transaction's next check (or, once checked check_max times,
  its discard), so a range scan finds what is due.
- `txx:<expiry><seq>`: when a resolved or discarded record is deleted.
- `txd:<seq>`: the discarded ones, for their listing.
- In the index family, each half's dedup entry for the dedup window (half_dedup.py): a
  repeated half send is answered with the first transaction's id and stores nothing.

A commit stores the message through the send path (`Sender.store_one`: the queue chosen at
the half send, a message group's queue for FIFO, a timer for a delivery time still ahead)
and marks the record committed in the same batch, so the message becomes visible exactly
once, atomically; a rollback only marks it. Both drop the body and keep the record for
`resolved_ttl_s`, so a repeated resolution is answered as the first was and a contrary one
is refused (RocketMQ #8158, #5574: double commits, a commit after a rollback).

Every change of one transaction (resolution, check claim, discard, resume, expiry) runs
while it holds the transaction's entry in `_busy`, so concurrent EndTransactions (a client
and a check answer) are serialized and the second sees the first's state.

Checks: `due_checks` hands out due checks and advances their schedule (attempt + 1, next due
one interval later) in one write before returning them, so two proxies never send the same
check (RocketMQ #1519) and an attempt is spent whether or not a producer answers, as in
RocketMQ: a transaction whose producer is gone is discarded after check_max checks instead
of being checked forever. That write is not fsynced: a crash can forget a claim, and the
check is then sent once more. Nothing is checked once resolved: the schedule entry is
deleted in the resolution's batch (RocketMQ #8158, #6107). The background `loop` discards
transactions checked check_max times when their next check would be due (a copy goes to the
read-only topic `rmq_sys_TRANS_DISCARDED`, where `peek` shows it, and `resume_discarded`
reopens it) and deletes expired records.

Threading: everything runs on the loop; scans read at most a chunk (or `limit`) of keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import time
from collections.abc import AsyncIterator, Collection, Sequence

from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker_core import half_dedup, jobs, keys, message_index, validation
from popmq.broker_core.autocreate import AutoCreate
from popmq.broker_core.catalog import KIND_DLQ, Catalog, TopicInfo
from popmq.broker_core.clock import Clock
from popmq.broker_core.config import BrokerConfig
from popmq.broker_core.dedup import duplicate_of
from popmq.broker_core.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PopMQError,
    UnavailableError,
)
from popmq.broker_core.group_commit import GroupCommitWriter
from popmq.broker_core.lifecycle import Lifecycle
from popmq.broker_core.log_limit import RepeatedWarning
from popmq.broker_core.long_polling import LongPolling
from popmq.broker_core.offsets import QueueOffsets
from popmq.broker_core.pop.live_checkpoints import CK_SEQ_BITS
from popmq.broker_core.record import MessageRecord
from popmq.broker_core.send import Sender, stored_record
from popmq.broker_core.stats import BrokerStats
from popmq.broker_core.store import Batch, Store
from popmq.broker_core.timer import DelayedMessages
from popmq.broker_core.to_the_end import to_the_end
from popmq.broker_core.transaction_id import TransactionIdCodec
from popmq.broker_core.types import (
    TRANSACTION_SOURCES,
    NewMessage,
    SendResult,
    TransactionCheck,
    TransactionInfo,
)
from popmq.broker_core.wakeup import Wakeup

log = logging.getLogger(__name__)

Record = records_pb2.TransactionRecord
_OPEN = Record.STATE_OPEN
_COMMITTED = Record.STATE_COMMITTED
_ROLLED_BACK = Record.STATE_ROLLED_BACK
_DISCARDED = Record.STATE_DISCARDED
_STATE_NAMES = {
    _OPEN: "open",
    _COMMITTED: "committed",
    _ROLLED_BACK: "rolled_back",
    _DISCARDED: "discarded",
}
TRANSACTION_ID_PROPERTY = "__transactionId__"
"""Property naming the transaction of a copy in the discarded-transactions topic (RocketMQ's
PROPERTY_TRANSACTION_ID), so an operator who peeks at it can resume it."""
MAX_CHECKS_PER_CALL = 1024
"""Ceiling of due_checks' max_checks."""
MAX_LIST = 1000
"""Ceiling of list_transactions' limit."""
NEVER = 2**63 - 1
_CHUNK = 128
"""Discards or expiries per write batch, so the loop stays free for sends and pops."""
_SCAN = 4096
"""Due check entries one claim or discard pass reads at most (overdue checks nobody claims,
with no front end running, are skipped by every discard pass: this bounds that work)."""
_RETRY_S = 1.0
"""Delay before the loop retries after a failed write (a full disk)."""
_UNCLAIMED_GRACE_S = 10.0
"""Least time a due check stays unclaimed before it counts as an unanswered attempt."""
_OVERDUE_POLL_S = 1.0
"""How often a caller waiting for checks looks again while only checks it did not ask for
are overdue (new checks of its topics wake it sooner through the waiters)."""
_MIN_POLL_S = 0.01
"""Shortest sleep of a waiting due_checks: a due entry waiting for its discard is skipped."""


class Transactions:
    """Half messages, their commit or rollback, check-back, discard and resume."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        store: Store,
        catalog: Catalog,
        writer: GroupCommitWriter,
        sender: Sender,
        timers: DelayedMessages,
        create: AutoCreate,
        codec: TransactionIdCodec,
        polling: LongPolling,
        stats: BrokerStats,
        life: Lifecycle,
        epoch: int,
        clock: Clock,
    ) -> None:
        self._config = config
        self._cfg = config.transactions
        self._store = store
        self._catalog = catalog
        self._writer = writer
        self._sender = sender
        self._timers = timers
        self._create = create
        self._codec = codec
        self._polling = polling
        self._stats = stats
        self._life = life
        self._epoch = epoch
        self._clock = clock
        self._seq = 0
        # Transactions being changed right now (sequence -> future resolved when done):
        # guards each transaction's record, so one change at a time sees the last one's state.
        self._busy: dict[int, asyncio.Future[None]] = {}
        # The loop's wake-up, and the due_checks calls waiting for a check to come due.
        self._wakeup = Wakeup()
        self._waiters: set[asyncio.Future[None]] = set()
        clock.on_advance(self._wakeup.set)
        clock.on_advance(self._wake_waiters)
        self._warning = RepeatedWarning(log)
        self.open_count = sum(
            1 for _ in store.scan("meta", *_prefix_range(keys.TRANSACTION_CHECK_PREFIX))
        )
        """Open transactions (half messages waiting for a resolution): a gauge."""

    # -- half messages ----------------------------------------------------------------------

    async def send_half(
        self,
        messages: Sequence[NewMessage],
        *,
        producer_group: str = "",
        check_first_s: float | None = None,
    ) -> list[SendResult]:
        """Store half messages, one transaction each, invisible until committed.

        Checked as a send is (sizes, fields, topic), except that the topic must take
        transactional messages: transaction and mixed topics take any, a fifo topic those
        with a message group, a delay topic those with a delivery time. `check_first_s`
        (the message's orphaned-transaction recovery duration) replaces
        transactions.check_first_s for these messages. Each result has offset -1 and the
        transaction's id.

        Deduplicated as a send is, among half messages (half_dedup.py): a message whose
        dedup id (else message id) was sent as a half to the same topic within the dedup
        window, or is being stored as one now, is not stored again; its result is the
        first half's (its transaction id), marked duplicate, whether that transaction is
        open or ended since.
        """
        cfg = self._cfg
        if producer_group:
            validation.check_name("group", producer_group)
        first_s = cfg.check_first_s if check_first_s is None else check_first_s
        if not 0 < first_s <= cfg.max_check_first_s:
            raise InvalidArgumentError(
                f"check_first_s {first_s} is outside (0, {cfg.max_check_first_s}] seconds "
                "(transactions.max_check_first_s)",
                field="orphaned_transaction_recovery_duration",
                value=first_s,
                allowed=f"(0, {cfg.max_check_first_s}]",
            )
        stamp, topics = await self._sender.admit(messages, half=True)
        due = stamp + round(first_s * 1000)
        window_ms = round(self._config.messages.dedup_window_s * 1000)
        # A message given an id (or a dedup id) may repeat a half of the window, stored
        # (its `h` entry) or being stored now (its claim); one given none gets a new id,
        # which nothing can repeat (half_dedup.py).
        lookup_keys: list[bytes] = []
        ids: list[str] = []
        for msg in messages:
            message_id = msg.message_id or self._sender.next_message_id()
            ids.append(message_id)
            given = msg.message_id or msg.dedup_id
            topic_id = topics[msg.topic].topic_id
            key = half_dedup.lookup_key(topic_id, msg.dedup_id, message_id) if given else b""
            lookup_keys.append(key)
        asked = [key for key in lookup_keys if key]
        hits = iter(half_dedup.find(self._store, asked, stamp, window_ms) if asked else [])
        pending = self._sender.pending_dedup
        done: asyncio.Future[list[SendResult]] = asyncio.get_running_loop().create_future()
        results: list[SendResult | None] = [None] * len(messages)
        later: list[tuple[int, asyncio.Future[list[SendResult]], int]] = []
        mine: list[bytes] = []
        # (message index, transaction sequence, topic, record, its `h` entry or b"").
        planned: list[tuple[int, int, TopicInfo, Record, bytes]] = []
        try:
            for i, msg in enumerate(messages):
                topic = topics[msg.topic]
                key = lookup_keys[i]
                if key:
                    hit = next(hits)
                    waiting = pending.waiting(key)
                    if waiting is not None:
                        later.append((i, *waiting))  # the same half is being stored now
                        continue
                    if hit is not None:
                        results[i] = half_dedup.repeat_result(hit, topic.name, self._codec)
                        continue
                    pending.claim(key, done, len(planned))
                    mine.append(key)
                queue_id = (
                    self._sender.choose_queue(topic, msg.message_group)
                    if msg.queue_id is None
                    else msg.queue_id
                )
                record = Record(
                    state=_OPEN,
                    topic_id=topic.topic_id,
                    topic=topic.name,
                    queue_id=queue_id,
                    message=stored_record(msg, ids[i], stamp),
                    message_id=ids[i],
                    producer_group=producer_group,
                    created_ms=stamp,
                    next_check_ms=due,
                )
                planned.append((i, self._next_seq(), topic, record, key))
        except BaseException as exc:
            _fail(done, exc)  # a claim left behind would hold every later repeat for good
            pending.release(mine, done)
            raise

        def apply(batch: Batch, offsets: QueueOffsets) -> None:
            batch.quorum = True
            expiries = message_index.Expiries()
            for _, seq, _, record, key in planned:
                batch.put("meta", keys.transaction_key(seq), record.SerializeToString())
                batch.put("meta", keys.transaction_check_key(due, seq), b"")
                if key:
                    half_dedup.write_entry(
                        batch, expiries, key, queue_id=record.queue_id,
                        message_id=record.message_id, seq=seq, stamp_ms=stamp,
                        window_ms=window_ms,
                    )  # fmt: skip
            expiries.put(batch)

        stored = [
            SendResult(
                record.message_id,
                topic.name,
                record.queue_id,
                -1,
                transaction_id=self._codec.encode(seq),
            )
            for _, seq, topic, record, _ in planned
        ]

        def settled(job: asyncio.Future[None]) -> None:
            # When the write ends, whether or not anyone still waits for it: a wait given up
            # (the call cancelled) ends neither the write nor its claims before the write
            # does, or a repeat arriving meanwhile would store a second transaction.
            error = asyncio.CancelledError() if job.cancelled() else job.exception()
            if error is not None:
                _fail(done, error)
            else:
                done.set_result(stored)
                if planned:
                    self.open_count += len(planned)
                    self._stats.half_sent.update(topic.name for _, _, topic, _, _ in planned)
                    self._wake_waiters()
            pending.release(mine, done)

        try:
            # Written even when every message repeats a half: a repeat of a first send whose
            # sync failed (its outcome unknown) is answered once that half is durable.
            job = self._writer.submit(apply, sync=self._config.store.flush == "sync")
        except BaseException as exc:
            _fail(done, exc)
            pending.release(mine, done)
            raise
        job.add_done_callback(settled)
        await asyncio.shield(job)
        for (i, *_), result in zip(planned, stored, strict=True):
            results[i] = result
        for i, earlier, j in later:
            # Shielded: another send's shared future, which cancelling this wait must not
            # cancel (its other repeats would be answered CANCELLED).
            first = await asyncio.shield(earlier)
            results[i] = duplicate_of(first[j])
        return [result for result in results if result is not None]

    # -- resolution -------------------------------------------------------------------------

    async def end_transaction(
        self,
        transaction_id: str,
        *,
        commit: bool,
        source: str = "client",
        topic: str = "",
        message_id: str = "",
    ) -> TransactionInfo:
        """Commit (store the message in its queue) or roll back (discard it) an open
        transaction; returns its state after.

        Final and idempotent: the resolution it already has is a success that changes
        nothing; the other one, or any resolution of a discarded transaction, is refused
        with FailedPreconditionError naming its state. `topic` and `message_id`, when
        given, must be the transaction's (EndTransactionRequest carries both).
        """
        if source not in TRANSACTION_SOURCES:
            raise InvalidArgumentError(
                f"source {source!r} is not one of {', '.join(TRANSACTION_SOURCES)}",
                field="source",
                value=source,
                allowed=", ".join(TRANSACTION_SOURCES),
            )
        seq = self._codec.decode(transaction_id)
        # Not cut short by a cancelled caller: its hold must last until its write commits, or
        # a repeat waiting for it would load the record still open and store it twice.
        return await to_the_end(self._end(seq, transaction_id, commit, source, topic, message_id))

    async def _end(
        self, seq: int, transaction_id: str, commit: bool, source: str, topic: str, message_id: str
    ) -> TransactionInfo:
        async with self._exclusive(seq):
            record = self._load(seq, transaction_id)
            if topic and topic != record.topic:
                raise InvalidArgumentError(
                    f"transaction {transaction_id} belongs to topic {record.topic!r}, not {topic!r}"
                )
            if message_id and message_id != record.message_id:
                raise InvalidArgumentError(
                    f"transaction {transaction_id} is message {record.message_id!r}, "
                    f"not {message_id!r}"
                )
            wanted = _COMMITTED if commit else _ROLLED_BACK
            if record.state == wanted:
                # Maybe a retry after its resolution's fsync or replication failed (the
                # caller was told the outcome is unknown): answered once that is durable.
                await self._writer.submit(jobs.confirm, sync=self._config.store.flush == "sync")
                return self._info(seq, record)
            if record.state != _OPEN:
                raise FailedPreconditionError(
                    f"transaction {transaction_id} cannot be "
                    f"{'committed' if commit else 'rolled back'}: {_describe(record)}"
                    + ("; resume it first (resume_discarded)" if record.state == _DISCARDED else "")
                )
            if commit:
                await self._commit(seq, record, source)
            else:
                await self._rollback(seq, record, source)
            self.open_count -= 1
            self._stats.transaction_resolutions[("commit" if commit else "rollback", source)] += 1
            return self._info(seq, record)

    async def _commit(self, seq: int, record: Record, source: str) -> None:
        """Store the message in its queue and mark the record committed, in one batch."""
        topic = self._catalog.topics_by_id.get(record.topic_id)
        if topic is None:
            raise NotFoundError(
                f"topic {record.topic!r} of the transaction was deleted; roll it back"
            )
        message = records_pb2.StoredMessage.FromString(record.message)
        stamp = self._clock.now_ms()
        # Stored now: a queue's store times follow its offsets (offsets_at searches them).
        message.store_time_ms = stamp
        timer_seq = self._timers.next_seq() if message.deliver_at_ms > stamp else 0
        messages_cfg, retention = self._config.messages, self._config.retention
        old_check = keys.transaction_check_key(record.next_check_ms, seq)
        resolved = _resolved(record, _COMMITTED, source, stamp, self._cfg.resolved_ttl_s)

        def apply(batch: Batch, offsets: QueueOffsets) -> SendResult:
            batch.quorum = True
            expiries = message_index.Expiries()
            result = self._sender.store_one(
                batch,
                offsets,
                expiries,
                topic=topic,
                queue_id=record.queue_id % topic.queues,
                record=message.SerializeToString(),
                message_id=message.message_id,
                deliver_at_ms=message.deliver_at_ms,
                message_keys=message.keys,
                dedup_id=message.dedup_id or message.message_id,
                timer_seq=timer_seq,
                stamp_ms=stamp,
                retention_ms=round(retention.retention_s * 1000),
                dedup_window_ms=round(messages_cfg.dedup_window_s * 1000),
            )
            expiries.put(batch)
            resolved.offset = result.offset
            resolved.recall_handle = result.recall_handle
            batch.put("meta", keys.transaction_key(seq), resolved.SerializeToString())
            batch.delete("meta", old_check)
            batch.put("meta", keys.transaction_expiry_key(resolved.expire_ms, seq), b"")
            return result

        def committed(result: SendResult) -> None:
            self._sender.announce([(result, message.deliver_at_ms if timer_seq else 0)])

        # Announced in the commit itself, as a send's (broker_core/send.py).
        await self._writer.submit(
            apply, sync=self._config.store.flush == "sync", committed=committed
        )
        record.CopyFrom(resolved)
        self._wakeup.set()

    async def _rollback(self, seq: int, record: Record, source: str) -> None:
        stamp = self._clock.now_ms()
        old_check = keys.transaction_check_key(record.next_check_ms, seq)
        resolved = _resolved(record, _ROLLED_BACK, source, stamp, self._cfg.resolved_ttl_s)

        def apply(batch: Batch, offsets: QueueOffsets) -> None:
            batch.quorum = True
            batch.put("meta", keys.transaction_key(seq), resolved.SerializeToString())
            batch.delete("meta", old_check)
            batch.put("meta", keys.transaction_expiry_key(resolved.expire_ms, seq), b"")

        await self._writer.submit(apply, sync=self._config.store.flush == "sync")
        record.CopyFrom(resolved)
        self._wakeup.set()

    # -- checks -----------------------------------------------------------------------------

    async def due_checks(
        self,
        max_checks: int = 32,
        *,
        wait_s: float = 0.0,
        topics: Collection[str] | None = None,
    ) -> list[TransactionCheck]:
        """Claim up to `max_checks` due checks, waiting up to `wait_s` for one to come due.

        Each returned check is counted (its attempt) and its next one scheduled an interval
        later before this returns, so no other caller gets it meanwhile; a caller that
        finds no producer to ask has spent that attempt (as RocketMQ's broker does).

        With `topics`, only checks of those topics are claimed: each proxy claims the checks
        it has an online producer for. A check nobody claimed for a whole check interval
        (at least 10 s) after it came due counts as an attempt no producer answered (and is
        rescheduled), so a transaction whose producer never returns is still discarded after
        check_max.
        """
        validation.check_range("max_checks", max_checks, 1, MAX_CHECKS_PER_CALL)
        longest = self._config.long_polling.max_timeout_s
        if not 0 <= wait_s <= longest:
            raise InvalidArgumentError(
                f"wait_s {wait_s} is outside 0..{longest} (long_polling.max_timeout_s)",
                field="wait_s",
                value=wait_s,
                allowed=f"0..{longest}",
            )
        give_up = time.monotonic() + wait_s
        while True:
            checks = await self._claim(max_checks, topics)
            left = give_up - time.monotonic()
            if checks or left <= 0 or self._life.draining:
                return checks
            first = self._store.first_key("meta", *_prefix_range(keys.TRANSACTION_CHECK_PREFIX))
            until_due = left
            if first is not None:
                due_ms, _ = keys.parse_transaction_timed_key(first)
                # Overdue and not claimed: of a topic this caller has no producer for; it
                # will not change soon, so look again in a second, not at once.
                ahead_s = (due_ms - self._clock.now_ms()) / 1000
                until_due = max(_MIN_POLL_S, ahead_s) if ahead_s > 0 else _OVERDUE_POLL_S
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.add(waiter)
            try:
                await asyncio.wait([waiter], timeout=min(left, until_due))
            finally:
                self._waiters.discard(waiter)

    async def _claim(
        self, max_checks: int, topics: Collection[str] | None
    ) -> list[TransactionCheck]:
        now = self._clock.now_ms()
        interval_ms = round(self._cfg.check_interval_s * 1000)
        # How long a due check may wait unclaimed before it counts as unanswered: an
        # interval, and at least long enough for a proxy's check loop to ask again with
        # its producers' topics (its long poll is 5 s).
        unclaimed_after_ms = max(interval_ms, round(_UNCLAIMED_GRACE_S * 1000))
        start, _ = _prefix_range(keys.TRANSACTION_CHECK_PREFIX)
        claimed: list[tuple[int, Record]] = []
        # Due for a whole interval and of no topic a caller asked for: counted as unanswered.
        unclaimed: list[tuple[int, Record]] = []
        scan = self._store.scan("meta", start, keys.transaction_check_key(now + 1, 0))
        for key, _ in itertools.islice(scan, _SCAN):
            due_ms, seq = keys.parse_transaction_timed_key(key)
            if seq in self._busy:
                continue
            data = self._store.get("meta", keys.transaction_key(seq))
            if data is None:
                continue  # its record expired or vanished: the loop drops such entries
            record = Record.FromString(data)
            if record.state != _OPEN or record.next_check_ms != due_ms:
                continue
            if record.checks >= self._cfg.check_max:
                continue  # checked enough: the loop discards it
            if topics is not None and record.topic not in topics:
                if due_ms + unclaimed_after_ms <= now:
                    unclaimed.append((seq, record))
                continue
            claimed.append((seq, record))
            if len(claimed) >= max_checks:
                break
        if not claimed and not unclaimed:
            return []
        next_due = now + interval_ms
        updated = []
        for _, record in claimed + unclaimed:
            copy = Record()
            copy.CopyFrom(record)
            copy.checks += 1
            copy.next_check_ms = next_due
            updated.append(copy)

        def apply(batch: Batch, offsets: QueueOffsets) -> None:
            for (seq, old), new in zip(claimed + unclaimed, updated, strict=True):
                batch.put("meta", keys.transaction_key(seq), new.SerializeToString())
                batch.delete("meta", keys.transaction_check_key(old.next_check_ms, seq))
                batch.put("meta", keys.transaction_check_key(next_due, seq), b"")

        seqs = [seq for seq, _ in claimed + unclaimed]

        async def claim() -> None:
            async with self._holding(seqs):
                await self._writer.submit(apply, sync=False)

        # Held until its write ends even when this caller leaves: a claim started meanwhile
        # would read the checks still due and claim them a second time.
        await to_the_end(claim())
        self._wakeup.set()  # the last checks of some may now be due for their discard
        checks = []
        for (seq, _), record in zip(claimed, updated[: len(claimed)], strict=True):
            self._stats.transaction_checks[record.topic] += 1
            checks.append(
                TransactionCheck(
                    topic=record.topic,
                    transaction_id=self._codec.encode(seq),
                    message_id=record.message_id,
                    producer_group=record.producer_group,
                    message=MessageRecord(records_pb2.StoredMessage.FromString(record.message)),
                    attempt=record.checks,
                    queue_id=record.queue_id,
                )
            )
        return checks

    # -- discard, resume, expiry ------------------------------------------------------------

    async def resume_discarded(self, transaction_id: str) -> TransactionInfo:
        """Reopen a discarded transaction with a fresh check count: its copy leaves the
        discarded-transactions topic, and it is checked again after check_first_s."""
        seq = self._codec.decode(transaction_id)
        return await to_the_end(self._resume(seq, transaction_id))

    async def _resume(self, seq: int, transaction_id: str) -> TransactionInfo:
        async with self._exclusive(seq):
            record = self._load(seq, transaction_id)
            if record.state != _DISCARDED:
                raise FailedPreconditionError(
                    f"transaction {transaction_id} is not discarded: {_describe(record)}"
                )
            stamp = self._clock.now_ms()
            reopened = Record()
            reopened.CopyFrom(record)
            reopened.state = _OPEN
            reopened.checks = 0
            reopened.next_check_ms = stamp + round(self._cfg.check_first_s * 1000)
            for name in ("resolved_ms", "resolved_by", "discard_offset", "expire_ms"):
                reopened.ClearField(name)
            discard = self._catalog.topics.get(validation.TRANSACTION_DISCARD_TOPIC)

            def apply(batch: Batch, offsets: QueueOffsets) -> None:
                batch.quorum = True
                if discard is not None:
                    batch.delete(
                        "messages", keys.message_key(discard.topic_id, 0, record.discard_offset)
                    )
                batch.put("meta", keys.transaction_key(seq), reopened.SerializeToString())
                batch.delete("meta", keys.transaction_discarded_key(seq))
                batch.delete("meta", keys.transaction_expiry_key(record.expire_ms, seq))
                batch.put("meta", keys.transaction_check_key(reopened.next_check_ms, seq), b"")

            await self._writer.submit(apply, sync=self._config.store.flush == "sync")
            self.open_count += 1
            self._wake_waiters()
            return self._info(seq, reopened)

    async def loop(self) -> None:
        """Discard transactions checked check_max times once their next check is due, and
        delete expired records; sleeps until the next of either (at most 1 s)."""
        while True:
            try:
                more = await self._discard_due(self._clock.now_ms())
                more = await self._expire_due(self._clock.now_ms()) or more
            except PopMQError as exc:
                self._warning.warn("transaction discard or expiry failed, retrying: %s", exc)
                await asyncio.sleep(_RETRY_S)
                continue
            if more:
                continue
            await self._wakeup.wait(self._seconds_to_next())

    def _seconds_to_next(self) -> float:
        """Until the next check entry comes due (it may be a discard) or the first expiry,
        at most 1 s. Overdue entries were just scanned: they wait for a claim, not for
        this loop, which would otherwise spin on them."""
        now = self._clock.now_ms()
        soonest = now + 1000
        _, check_end = _prefix_range(keys.TRANSACTION_CHECK_PREFIX)
        first = self._store.first_key("meta", keys.transaction_check_key(now + 1, 0), check_end)
        if first is not None:
            soonest = min(soonest, keys.parse_transaction_timed_key(first)[0])
        first = self._store.first_key("meta", *_prefix_range(keys.TRANSACTION_EXPIRY_PREFIX))
        if first is not None:
            # An overdue one is held by a change in progress: look again shortly.
            soonest = min(soonest, max(keys.parse_transaction_timed_key(first)[0], now + 10))
        return max(0.0, (soonest - now) / 1000)

    async def _discard_due(self, now: int) -> bool:
        """Discard one chunk of exhausted transactions that are due; True when more may be."""
        start, _ = _prefix_range(keys.TRANSACTION_CHECK_PREFIX)
        due: list[tuple[int, Record]] = []
        stale: list[bytes] = []
        scan = self._store.scan("meta", start, keys.transaction_check_key(now + 1, 0))
        for key, _ in itertools.islice(scan, _SCAN):
            due_ms, seq = keys.parse_transaction_timed_key(key)
            if seq in self._busy:
                continue
            data = self._store.get("meta", keys.transaction_key(seq))
            record = Record.FromString(data) if data is not None else None
            if record is None or record.state != _OPEN or record.next_check_ms != due_ms:
                stale.append(key)  # left by a crash between writes that never happen apart
            elif record.checks >= self._cfg.check_max:
                due.append((seq, record))
            if len(due) + len(stale) >= _CHUNK:
                break
        if not due and not stale:
            return False
        # Held from here (no await since the scan), so no resolution slips in between.
        async with self._holding([seq for seq, _ in due]):
            await self._discard(due, stale)
        return len(due) + len(stale) >= _CHUNK

    async def _discard(self, due: list[tuple[int, Record]], stale: list[bytes]) -> None:
        discard = await self._discard_topic() if due else None
        stamp = self._clock.now_ms()
        retention_ms = round(self._config.retention.retention_s * 1000)
        updated: list[Record] = []
        for _, record in due:
            copy = Record()
            copy.CopyFrom(record)
            copy.state = _DISCARDED
            copy.resolved_ms = stamp
            copy.resolved_by = "check_max"
            copy.expire_ms = stamp + retention_ms
            updated.append(copy)

        def apply(batch: Batch, offsets: QueueOffsets) -> None:
            batch.quorum = True
            for key in stale:
                batch.delete("meta", key)
            for (seq, old), new in zip(due, updated, strict=True):
                assert discard is not None
                message = records_pb2.StoredMessage.FromString(old.message)
                message.store_time_ms = stamp
                message.origin_topic = old.topic
                message.origin_queue_id = old.queue_id
                message.origin_offset = -1
                message.properties[TRANSACTION_ID_PROPERTY] = self._codec.encode(seq)
                new.discard_offset = jobs.store_indexed(
                    batch, offsets, discard.topic_id, 0, message, stamp, retention_ms
                )
                batch.put("meta", keys.transaction_key(seq), new.SerializeToString())
                batch.delete("meta", keys.transaction_check_key(old.next_check_ms, seq))
                batch.put("meta", keys.transaction_discarded_key(seq), b"")
                batch.put("meta", keys.transaction_expiry_key(new.expire_ms, seq), b"")

        await self._writer.submit(apply, sync=self._config.store.flush == "sync")
        for (seq, _), new in zip(due, updated, strict=True):
            log.warning(
                "transaction %s of topic %s discarded after %d unanswered checks",
                self._codec.encode(seq),
                new.topic,
                new.checks,
            )
            self._stats.transactions_discarded[new.topic] += 1
        self.open_count -= len(due)
        if due:
            self._polling.notify(validation.TRANSACTION_DISCARD_TOPIC, len(due), queue_id=0)

    async def _expire_due(self, now: int) -> bool:
        """Delete one chunk of expired records; True when more may be due."""
        start, _ = _prefix_range(keys.TRANSACTION_EXPIRY_PREFIX)
        found: list[tuple[bytes, int, bool]] = []
        for key, _ in self._store.scan("meta", start, keys.transaction_expiry_key(now + 1, 0)):
            expire_ms, seq = keys.parse_transaction_timed_key(key)
            if seq in self._busy:
                continue
            data = self._store.get("meta", keys.transaction_key(seq))
            record = Record.FromString(data) if data is not None else None
            # A record reopened or re-resolved since carries another expiry: keep it.
            found.append((key, seq, record is not None and record.expire_ms == expire_ms))
            if len(found) >= _CHUNK:
                break
        if not found:
            return False

        def apply(batch: Batch, offsets: QueueOffsets) -> None:
            for key, seq, drop in found:
                batch.delete("meta", key)
                if drop:
                    batch.delete("meta", keys.transaction_key(seq))
                    batch.delete("meta", keys.transaction_discarded_key(seq))

        async with self._holding([seq for _, seq, _ in found]):
            await self._writer.submit(apply, sync=False)
        return len(found) >= _CHUNK

    async def _discard_topic(self) -> TopicInfo:
        name = validation.TRANSACTION_DISCARD_TOPIC
        info = self._catalog.topics.get(name)
        if info is not None:
            return info
        try:
            return await self._create.topic(name, 1, KIND_DLQ)
        except AlreadyExistsError:
            return self._catalog.topic(name)

    # -- reads ------------------------------------------------------------------------------

    async def get_transaction(self, transaction_id: str, *, half: bool = False) -> TransactionInfo:
        """The transaction's state; NotFoundError once its record expired. With `half`, an
        open or discarded one also has its half message (body and properties)."""
        seq = self._codec.decode(transaction_id)
        record = self._load(seq, transaction_id)
        info = self._info(seq, record)
        if half and record.state in (_OPEN, _DISCARDED) and record.message:
            message = MessageRecord(records_pb2.StoredMessage.FromString(record.message))
            return dataclasses.replace(info, half_message=message)
        return info

    async def list_transactions(
        self, state: str, *, topic: str | None = None, limit: int = 100
    ) -> list[TransactionInfo]:
        """Open transactions (soonest check first) or discarded ones (oldest first), of one
        topic or all, at most `limit`."""
        if state not in ("open", "discarded"):
            raise InvalidArgumentError(
                f"state {state!r} is not one of open, discarded",
                field="state",
                value=state,
                allowed="open, discarded",
            )
        validation.check_range("limit", limit, 1, MAX_LIST)
        if topic is not None:
            validation.check_name("topic", topic)
        found: list[TransactionInfo] = []
        open_ = state == "open"
        prefix = keys.TRANSACTION_CHECK_PREFIX if open_ else keys.TRANSACTION_DISCARDED_PREFIX
        for key, _ in self._store.scan("meta", *_prefix_range(prefix)):
            seq = keys.parse_transaction_timed_key(key)[1] if open_ else (
                keys.parse_transaction_seq(key)
            )  # fmt: skip
            data = self._store.get("meta", keys.transaction_key(seq))
            if data is None:
                continue
            record = Record.FromString(data)
            if record.state != (_OPEN if open_ else _DISCARDED):
                continue
            if topic is not None and record.topic != topic:
                continue
            found.append(self._info(seq, record))
            if len(found) >= limit:
                break
        return found

    def forget_open(self, count: int) -> None:
        """`count` open transactions were removed with their records (half messages of a
        crash tail that another broker holds: crash_tail.py); the gauge follows."""
        self.open_count -= count

    # -- helpers ----------------------------------------------------------------------------

    def release(self) -> None:
        """Answer waiting due_checks calls now (shutdown is coming)."""
        self._wake_waiters()

    def _wake_waiters(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _next_seq(self) -> int:
        self._seq += 1
        return (self._epoch << CK_SEQ_BITS) | self._seq

    def _load(self, seq: int, transaction_id: str) -> Record:
        data = self._store.get("meta", keys.transaction_key(seq))
        if data is None:
            raise NotFoundError(
                f"transaction {transaction_id} is unknown: it was resolved more than "
                f"transactions.resolved_ttl_s ({self._cfg.resolved_ttl_s:g} s) ago, or "
                "never existed on this broker"
            )
        return Record.FromString(data)

    def _info(self, seq: int, record: Record) -> TransactionInfo:
        open_ = record.state == _OPEN
        return TransactionInfo(
            transaction_id=self._codec.encode(seq),
            topic=record.topic,
            message_id=record.message_id,
            producer_group=record.producer_group,
            state=_STATE_NAMES[record.state],
            created_ms=record.created_ms,
            checks=record.checks,
            next_check_ms=record.next_check_ms if open_ else 0,
            resolved_ms=record.resolved_ms,
            resolved_by=record.resolved_by,
            queue_id=record.queue_id,
            offset=record.offset if record.state == _COMMITTED else -1,
            recall_handle=record.recall_handle,
            discard_offset=record.discard_offset if record.state == _DISCARDED else -1,
        )

    @contextlib.asynccontextmanager
    async def _exclusive(self, seq: int) -> AsyncIterator[None]:
        """Hold transaction `seq`, after whoever holds it now."""
        while (pending := self._busy.get(seq)) is not None:
            await asyncio.shield(pending)
        async with self._holding([seq]):
            yield

    @contextlib.asynccontextmanager
    async def _holding(self, seqs: Sequence[int]) -> AsyncIterator[None]:
        """Hold transactions nobody holds (the caller skipped held ones)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for seq in seqs:
            self._busy[seq] = done
        try:
            yield
        finally:
            for seq in seqs:
                del self._busy[seq]
            done.set_result(None)


def _fail(done: asyncio.Future[list[SendResult]], error: BaseException) -> None:
    """Fail a half send's shared future (its concurrent repeats raise it), marked read."""
    if not done.done():
        done.set_exception(
            error
            if isinstance(error, Exception)
            else UnavailableError("the half send was cancelled")
        )
        done.exception()


def _resolved(record: Record, state: int, source: str, stamp: int, ttl_s: float) -> Record:
    """The record of a transaction resolved now: its body dropped, its expiry set."""
    resolved = Record()
    resolved.CopyFrom(record)
    resolved.ClearField("message")
    resolved.state = state  # type: ignore[assignment]
    resolved.resolved_ms = stamp
    resolved.resolved_by = source
    resolved.expire_ms = stamp + round(ttl_s * 1000)
    return resolved


def _describe(record: Record) -> str:
    if record.state == _DISCARDED:
        return f"it was discarded after {record.checks} unanswered checks"
    if record.state == _OPEN:
        return "it is open"
    done = "committed" if record.state == _COMMITTED else "rolled back"
    return f"it was {done} already (by {record.resolved_by or 'unknown'})"


def _prefix_range(prefix: bytes) -> tuple[bytes, bytes]:
    return prefix, keys.prefix_end(prefix)
