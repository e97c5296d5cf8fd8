"""The send path: check a send, choose each message's queue, deduplicate, store in one batch.

A send is one write job: its messages' records, index entries and (for delayed messages)
timer entries are one batch, with offsets assigned inside it (crash-safety rule 1 in
broker.py); long pollers are woken only after the commit.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import zlib
from collections.abc import Callable, Sequence
from typing import Final

from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker_core import half_dedup, keys, message_index, validation
from popmq.broker_core.autocreate import AutoCreate
from popmq.broker_core.catalog import KIND_NORMAL, MESSAGE_TYPE_MIXED, Catalog, TopicInfo
from popmq.broker_core.clock import Clock
from popmq.broker_core.config import BrokerConfig
from popmq.broker_core.dedup import PendingDedup, duplicate_of
from popmq.broker_core.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
)
from popmq.broker_core.group_commit import GroupCommitWriter
from popmq.broker_core.long_polling import LongPolling
from popmq.broker_core.message_id import MessageIdGenerator
from popmq.broker_core.offsets import QueueOffsets
from popmq.broker_core.record_wire import length_delimited, varint
from popmq.broker_core.stats import BrokerStats
from popmq.broker_core.store import Batch, Store
from popmq.broker_core.timer import DelayedMessages, RecallCodec, RecallHandle
from popmq.broker_core.types import NewMessage, SendResult

log = logging.getLogger(__name__)

RECORD_OVERHEAD: Final = 1024
"""Bytes a send stores beyond its bodies, per message (record fields, index entries), as
`Store.check_room` counts them."""


class QueueChooser:
    """Which queue of a topic a new message goes to (sends, and redriven dead letters)."""

    def __init__(self) -> None:
        # topic_id -> next round-robin queue. Guarded by running on the loop thread only.
        self._send_rr: dict[int, int] = {}

    def choose(self, topic: TopicInfo, message_group: str) -> int:
        """A message group always goes to the same queue (stable hash); others round-robin."""
        if message_group:
            return zlib.crc32(message_group.encode()) % topic.queues
        queue_id = self._send_rr.get(topic.topic_id, 0) % topic.queues
        self._send_rr[topic.topic_id] = queue_id + 1
        return queue_id


class Sender:
    """Stores sent messages (and delayed ones as timers)."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        store: Store,
        catalog: Catalog,
        writer: GroupCommitWriter,
        create: AutoCreate,
        chooser: QueueChooser,
        timers: DelayedMessages,
        recall_codec: RecallCodec,
        polling: LongPolling,
        stats: BrokerStats,
        clock: Clock,
    ) -> None:
        self._config = config
        self._store = store
        self._catalog = catalog
        self._writer = writer
        self._create = create
        self._choose_queue = chooser.choose
        self._timers = timers
        self._recall_codec = recall_codec
        self._polling = polling
        # Read per queue a send wrote to: a topic absent from it has nothing to wake.
        self._held_topics = polling.held_topics
        self._stats = stats
        self._clock = clock
        self._ids = MessageIdGenerator()
        self._dedup = PendingDedup()

    async def send(self, messages: Sequence[NewMessage]) -> list[SendResult]:
        """Store the messages atomically; with sync flush, return after the fsync.

        A message whose dedup id was sent to the same topic within the dedup window is not
        stored again: its result is the first send's, with `duplicate` set. A message due in
        the future waits in the timers family and gets a recall handle instead of an offset.

        Per batch, not per message, where the messages of a send share it: a message given
        neither a message id nor a dedup id gets a new id, which no earlier or concurrent
        send can carry, so it is neither looked up nor claimed; the messages bound for one
        queue get their offsets in one allocation, and the send's arrivals are counted per
        queue before the write, so its commit announces them without a pass over them.
        """
        # `admit`, inline: a send to topics that exist (nearly every one) then awaits
        # nothing before its write, and no coroutine is made for the checks.
        stamp = self._checked(messages)
        topics = self._known_topics(messages)
        if topics is None:
            topics = await self._topics_for_send(messages)
        self._check_types(messages, topics, half=False)
        return await self.submit(messages, stamp, topics).results()

    def send_now(self, messages: Sequence[NewMessage]) -> SendTicket | None:
        """`send`, handed to group commit before this returns, its wait left to the caller
        (`SendTicket.results`); None when a topic of the send must be created first (then
        `send` it). A refused send raises here, as `send` would.

        The sends of a frame on the cluster hop (broker/service.py) are handed over this way
        one after the other, in the frame's order, and awaited by one task: each is stored,
        deduplicated and answered as if it had come alone, without a task and a wait each.
        """
        admitted = self.admit_now(messages, half=False)
        if admitted is None:
            return None
        return self.submit(messages, *admitted)

    def submit(
        self, messages: Sequence[NewMessage], stamp: int, topics: dict[str, TopicInfo]
    ) -> SendTicket:
        """Plan an admitted send (`admit`, `admit_now`: its stamp and topics), claim its
        dedup ids and hand it to group commit; its ticket waits for the write."""
        cfg = self._config.messages
        window_ms = round(cfg.dedup_window_s * 1000)
        results: list[SendResult | None] = [None] * len(messages)
        # One future for the whole send: a concurrent send repeating one of its dedup ids
        # waits on it and reads its entry (index into the stored list) from PendingDedup.
        # Nothing need be told when it fails unread: a failure is marked read as it is set
        # (`_settle`), not by a done-callback, which would cost every send a loop callback.
        done: asyncio.Future[list[SendResult]] = asyncio.get_running_loop().create_future()
        later: list[tuple[int, asyncio.Future[list[SendResult]], int]] = []
        mine: list[bytes] = []
        plan: list[_Planned] = []
        ids: list[str] = []
        # Each message's id encoded, once for its record, its index record and its id entry.
        raw_ids: list[bytes] = []
        # Each message's dedup_lookup_key, b"" for one given a new id (nothing to find), and
        # the keys to look up.
        lookup_keys: list[bytes] = []
        asked: list[bytes] = []
        for msg in messages:
            message_id = msg.message_id
            if message_id or msg.dedup_id:
                if not message_id:
                    message_id = self._ids.next(stamp)
                raw_id = message_id.encode()
                key = message_index.dedup_lookup_key_of(
                    topics[msg.topic].topic_id, msg.dedup_id or message_id, message_id, raw_id
                )
                asked.append(key)
            else:
                message_id = self._ids.next(stamp)
                raw_id = message_id.encode()
                key = b""
            ids.append(message_id)
            raw_ids.append(raw_id)
            lookup_keys.append(key)
        hits = message_index.find_duplicates(self._store, asked, stamp, window_ms) if asked else []
        asked_at = 0
        pending_sends = self._dedup
        # The stored messages by queue (key _queue_slot), in send order within each.
        queued: dict[int, list[_Planned]] = {}
        timed: list[_Planned] = []
        due_first = 0
        try:
            for i, msg in enumerate(messages):
                topic = topics[msg.topic]
                message_id = ids[i]
                lookup_key = lookup_keys[i]
                if lookup_key:
                    hit = hits[asked_at]
                    asked_at += 1
                    pending = pending_sends.waiting(lookup_key)
                    if pending is not None:
                        later.append((i, *pending))  # the same dedup id is being stored right now
                        continue
                    if hit is not None:
                        results[i] = SendResult(
                            hit.message_id, topic.name, hit.queue_id, hit.offset,
                            hit.recall_handle, duplicate=True,
                        )  # fmt: skip
                        continue
                    pending_sends.claim(lookup_key, done, len(plan))
                    mine.append(lookup_key)
                queue_id = (
                    self._choose_queue(topic, msg.message_group)
                    if msg.queue_id is None else msg.queue_id
                )  # fmt: skip
                due_ms = msg.deliver_at_ms
                timer_seq = self._timers.next_seq() if due_ms > stamp else 0
                raw_id = raw_ids[i]
                planned = _Planned(
                    i, topic, queue_id, msg, message_id, raw_id,
                    stored_record(msg, message_id, stamp, raw_id),
                    msg.dedup_id or message_id, lookup_key, timer_seq, len(plan),
                )  # fmt: skip
                plan.append(planned)
                if timer_seq:
                    timed.append(planned)
                    if not due_first or due_ms < due_first:
                        due_first = due_ms
                else:
                    slot = _queue_slot(topic.topic_id, queue_id)
                    group = queued.get(slot)
                    if group is None:
                        queued[slot] = [planned]
                    else:
                        group.append(planned)
        except BaseException as exc:
            # A claim left behind would hold every later repeat of its id for good.
            _settle(done, exc)
            pending_sends.release(mine, done)
            raise
        retention_ms = round(self._config.retention.retention_s * 1000)
        arrivals = [
            (group[0].topic.name, group[0].queue_id, len(group)) for group in queued.values()
        ]

        def apply(batch: Batch, offsets: QueueOffsets) -> list[SendResult]:
            batch.quorum = True
            out: list[SendResult | None] = [None] * len(plan)
            expiries = message_index.Expiries()
            for group in queued.values():
                self._store_queued(
                    batch, offsets, expiries, group, out, stamp, retention_ms, window_ms
                )
            for p in timed:
                out[p.slot] = self.store_one(
                    batch, offsets, expiries, topic=p.topic, queue_id=p.queue_id,
                    record=p.record, message_id=p.message_id,
                    deliver_at_ms=p.message.deliver_at_ms, message_keys=p.message.keys,
                    dedup_id=p.dedup_id, timer_seq=p.timer_seq, stamp_ms=stamp,
                    retention_ms=retention_ms, dedup_window_ms=window_ms,
                    lookup_key=p.lookup_key, raw_id=p.raw_id,
                )  # fmt: skip
            expiries.put(batch)
            return [result for result in out if result is not None]

        def committed(_stored: list[SendResult]) -> None:
            self.announce_arrivals(arrivals, due_first)

        sync = self._config.store.flush == "sync"
        try:
            # Announced in the commit itself: a held pop wakes before this send resumes, and
            # its answer need not wait behind this one's.
            stored: asyncio.Future[list[SendResult]] = self._writer.submit(
                apply, sync=sync, committed=committed
            )
        except BaseException as exc:
            _settle(done, exc)
            pending_sends.release(mine, done)
            raise
        return SendTicket(stored, done, mine, pending_sends, plan, results, later)

    def _store_queued(
        self,
        batch: Batch,
        offsets: QueueOffsets,
        expiries: message_index.Expiries,
        group: list[_Planned],
        out: list[SendResult | None],
        stamp_ms: int,
        retention_ms: int,
        dedup_window_ms: int,
    ) -> None:
        """Add the messages of a send bound for one queue to its write job, at the end of
        the queue in send order (their offsets allocated together), with their index
        entries; each one's result goes to `out` at its slot. A message stored this way
        is stored exactly as `store_one` stores it."""
        first = group[0]
        topic = first.topic
        topic_id = topic.topic_id
        queue_id = first.queue_id
        offset = offsets.allocate(topic_id, queue_id, len(group))
        records = message_index.QueueRecords(queue_id, stamp_ms)
        for p in group:
            batch.put("messages", keys.message_key(topic_id, queue_id, offset), p.record)
            message_index.write_entries(
                batch,
                expiries,
                topic_id=topic_id,
                queue_id=queue_id,
                offset=offset,
                message_id=p.message_id,
                dedup_id=p.dedup_id,
                message_keys=p.message.keys,
                stamp_ms=stamp_ms,
                retention_ms=retention_ms,
                dedup_window_ms=dedup_window_ms,
                lookup_key=p.lookup_key,
                raw_id=p.raw_id,
                value=records.record(offset, p.message_id, p.raw_id),
            )
            out[p.slot] = SendResult(p.message_id, topic.name, queue_id, offset)
            offset += 1

    @property
    def pending_dedup(self) -> PendingDedup:
        """The dedup ids being stored right now; half sends claim theirs here too
        (half_dedup.py), under keys of their own."""
        return self._dedup

    def lookup(
        self, topic: str, sent: Sequence[tuple[str, str]], *, stored_only: bool = False
    ) -> list[bool]:
        """Whether each sent message of `topic`, as (message id, dedup id or ""), is in the
        dedup window, as a message or as a half message: stored within it, or being stored
        by a send in flight. A send (or half send) of it now would be answered with the
        first copy's result and store nothing; so does this broker's answer to a repeat
        that a proxy routes here after asking (a read of the same index the send reads, on
        the loop: one multi-get).

        `stored_only`: durable copies only, what a broker reconciling its crash tail asks.

        Raises:
            UnavailableError: with `stored_only`, when the answer is not known yet: a send
                of one of them is in flight (written, but its fsync or its followers'
                acknowledgement may still fail: its claim lasts until both), or a failed
                write or a failed wait for the followers leaves the store in doubt. Retriable:
                the asker asks again.
        """
        info = self._catalog.topics.get(topic)
        if info is None or info.kind != KIND_NORMAL:
            return [False] * len(sent)  # no such topic here: none of its messages either
        window_ms = round(self._config.messages.dedup_window_s * 1000)
        lookup_keys = [
            message_index.dedup_lookup_key(info.topic_id, dedup_id or mid, mid)
            for mid, dedup_id in sent
        ]
        # Halves have entries of their own (half_dedup.py): a repeat of a half, or a
        # half in a crash tail, asks about them with the same call.
        lookup_keys += [half_dedup.lookup_key(info.topic_id, d, mid) for mid, d in sent]
        hits = message_index.find_duplicates(
            self._store, lookup_keys, self._clock.now_ms(), window_ms
        )
        pending = self._dedup
        count = len(sent)
        if stored_only:
            if self._store.read_only or self._writer.in_doubt():
                raise UnavailableError(
                    f"a write of this broker failed and what it stored since may not be "
                    f"durable yet: ask again once a write succeeds (topic {topic!r})"
                )
            if any(pending.waiting(key) is not None for key in lookup_keys):
                raise UnavailableError(
                    f"a send of one of these messages of topic {topic!r} is being stored "
                    "now: ask again once it is done"
                )
        found = [
            hit is not None or pending.waiting(key) is not None
            for hit, key in zip(hits, lookup_keys, strict=True)
        ]
        return [found[i] or found[count + i] for i in range(count)]

    def store_one(
        self,
        batch: Batch,
        offsets: QueueOffsets,
        expiries: message_index.Expiries,
        *,
        topic: TopicInfo,
        queue_id: int,
        record: bytes,
        message_id: str,
        deliver_at_ms: int,
        message_keys: Sequence[str],
        dedup_id: str,
        timer_seq: int,
        stamp_ms: int,
        retention_ms: int,
        dedup_window_ms: int,
        lookup_key: bytes = b"",
        raw_id: bytes = b"",
    ) -> SendResult:
        """Add one new message to a write job: at the end of its queue, or (`timer_seq`
        non-zero) as a timer due at its delivery time, with its index entries. Shared by
        sends and transaction commits, so a committed message is stored as a sent one is.
        `record` is the StoredMessage's bytes; `message_id`, `deliver_at_ms` and
        `message_keys` are its fields, as the caller already has them; `lookup_key` its
        message_index.dedup_lookup_key, and `raw_id` its id encoded, when the caller has
        those too."""
        recall = ""
        if timer_seq:
            recall = self._recall_codec.encode(
                RecallHandle(topic.topic_id, deliver_at_ms, timer_seq)
            )
            timer = records_pb2.TimerRecord(
                topic_id=topic.topic_id, queue_id=queue_id, message=record
            )
            batch.put("timers", keys.timer_key(deliver_at_ms, timer_seq), timer.SerializeToString())
            offset = -1
        else:
            offset = offsets.allocate(topic.topic_id, queue_id)
            batch.put("messages", keys.message_key(topic.topic_id, queue_id, offset), record)
        message_index.write_entries(
            batch,
            expiries,
            topic_id=topic.topic_id,
            queue_id=queue_id,
            offset=offset,
            message_id=message_id,
            dedup_id=dedup_id,
            message_keys=message_keys,
            stamp_ms=stamp_ms,
            retention_ms=retention_ms,
            dedup_window_ms=dedup_window_ms,
            recall_handle=recall,
            lookup_key=lookup_key,
            raw_id=raw_id,
        )
        return SendResult(message_id, topic.name, queue_id, offset, recall)

    def announce(self, stored: Sequence[tuple[SendResult, int]]) -> None:
        """After the write of new messages committed: count them, wake the pops held on
        their queues, and the timer loop for delayed ones. `stored` pairs each result with
        its timer's due time (0 for a message stored in its queue)."""
        arrivals: dict[tuple[str, int], int] = {}
        due_first = 0
        for result, due_ms in stored:
            if due_ms:
                if not due_first or due_ms < due_first:
                    due_first = due_ms
                continue
            grew = (result.topic, result.queue_id)
            arrivals[grew] = arrivals.get(grew, 0) + 1
        self.announce_arrivals(
            [(topic, queue_id, count) for (topic, queue_id), count in arrivals.items()],
            due_first,
        )

    def announce_arrivals(self, arrivals: Sequence[tuple[str, int, int]], due_ms: int) -> None:
        """`announce` for new messages counted already: (topic, queue id, messages stored
        there) for each queue that grew, and the earliest due time of the timers stored
        (0 for none)."""
        if due_ms:
            self._timers.due_at(due_ms)
        # Counted per topic from the few queues, not message by message, and into the
        # Counter item by item: Counter.update is interpreted Python even here.
        sent = self._stats.sent
        held = self._held_topics
        for topic_name, queue_id, count in arrivals:
            sent[topic_name] = sent.get(topic_name, 0) + count
            # Per queue, so a pop held on one queue is woken by what lands there and never
            # spends a wake-up meant for a pop held on another; and only where something is
            # held on the topic (notify runs as Python: about 3,600 instructions a call).
            if topic_name in held:
                self._polling.notify(topic_name, count, queue_id=queue_id)

    def next_message_id(self) -> str:
        return self._ids.next()

    def choose_queue(self, topic: TopicInfo, message_group: str) -> int:
        return self._choose_queue(topic, message_group)

    async def admit(
        self, messages: Sequence[NewMessage], *, half: bool
    ) -> tuple[int, dict[str, TopicInfo]]:
        """Check a send (or, `half`, a transactional half send) before anything is stored:
        sizes, fields, room on disk, the topics (created if allowed) and their message
        types. Returns the send's stamp (ms) and its topics by name."""
        stamp = self._checked(messages)
        topics = self._known_topics(messages)
        if topics is None:
            topics = await self._topics_for_send(messages)
        self._check_types(messages, topics, half=half)
        return stamp, topics

    def admit_now(
        self, messages: Sequence[NewMessage], *, half: bool
    ) -> tuple[int, dict[str, TopicInfo]] | None:
        """`admit` without a wait: None when a topic of the send is not one of this broker's
        normal topics (`admit` creates it, or says why not)."""
        # Topics first: a send whose topic must be created goes to `admit`, which checks
        # the room on disk itself; checked here too, it would claim that room twice.
        topics = self._known_topics(messages)
        if topics is None:
            return None
        stamp = self._checked(messages)
        self._check_types(messages, topics, half=half)
        return stamp, topics

    def _known_topics(self, messages: Sequence[NewMessage]) -> dict[str, TopicInfo] | None:
        """The send's topics by name, when all are this broker's normal topics; else None
        (`_topics_for_send` creates them, or says why not)."""
        topics: dict[str, TopicInfo] = {}
        known = self._catalog.topics
        for msg in messages:
            name = msg.topic
            if name not in topics:
                info = known.get(name)
                if info is None or info.kind != KIND_NORMAL:
                    return None
                topics[name] = info
        return topics

    async def _topics_for_send(self, messages: Sequence[NewMessage]) -> dict[str, TopicInfo]:
        """The send's topics by name, created where allowed (`_topic_for_send`)."""
        names = {msg.topic for msg in messages}
        return {name: await self._topic_for_send(name) for name in names}

    def _checked(self, messages: Sequence[NewMessage]) -> int:
        """Check a send's sizes and fields and the room on disk; returns its stamp (ms)."""
        stamp = self._clock.now_ms()
        validation.check_send(messages, stamp, self._config.messages.max_delay_s)
        # A full disk refuses sends first, keeping its last megabytes for acks and nacks.
        self._store.check_room(sum(len(msg.body) + RECORD_OVERHEAD for msg in messages))
        return stamp

    @staticmethod
    def _check_types(
        messages: Sequence[NewMessage], topics: dict[str, TopicInfo], *, half: bool
    ) -> None:
        """Refuse a message its topic's type does not take, or a queue it does not have."""
        # A send's messages are mostly of one topic and type: each pair is judged once.
        problems: dict[tuple[str, str], str] = {}
        for i, msg in enumerate(messages):
            kind = message_type(msg)
            topic = topics[msg.topic]
            pair = (msg.topic, kind)
            problem = problems.get(pair)
            if problem is None:
                problem = _half_problem(topic, kind) if half else _send_problem(topic, kind)
                problems[pair] = problem
            if problem:
                raise FailedPreconditionError(f"messages[{i}] {problem}")
            if msg.queue_id is not None and not 0 <= msg.queue_id < topic.queues:
                raise InvalidArgumentError(
                    f"messages[{i}].queue_id {msg.queue_id} is not a queue of topic "
                    f"{topic.name!r}, which has queues 0..{topic.queues - 1}",
                    field="message.queue_id",
                    value=msg.queue_id,
                    allowed=f"0..{topic.queues - 1}",
                )

    async def _topic_for_send(self, name: str) -> TopicInfo:
        info = self._catalog.topics.get(name)
        if info is not None and info.kind == KIND_NORMAL:
            return info
        if info is not None:
            raise InvalidArgumentError(
                f"topic {name!r} is a dead-letter topic; it can only be read"
            )
        if not self._config.auto_create_topics:
            raise NotFoundError(f"topic {name!r} does not exist; create it first")
        try:
            return await self._create.topic(
                name, self._config.default_topic_queues, KIND_NORMAL, MESSAGE_TYPE_MIXED
            )
        except AlreadyExistsError:
            return self._catalog.topic(name)


class SendTicket:
    """A send handed to group commit (`Sender.submit`): `results()` waits for its write and
    answers as `Sender.send` does. Once the write is done (or failed), concurrent repeats of
    the send's dedup ids get its outcome and its claims end, whether or not anyone waits for
    the results: a wait given up ends neither the write nor the claims."""

    __slots__ = (
        "_answer", "_done", "_later", "_mine", "_pending", "_plan", "_results", "_stored",
    )  # fmt: skip

    def __init__(
        self,
        stored: asyncio.Future[list[SendResult]],
        done: asyncio.Future[list[SendResult]],
        mine: list[bytes],
        pending: PendingDedup,
        plan: list[_Planned],
        results: list[SendResult | None],
        later: list[tuple[int, asyncio.Future[list[SendResult]], int]],
    ) -> None:
        self._stored = stored
        """The group-commit job's future: the stored messages' results, in plan order."""
        self._done = done
        """What concurrent repeats of the send's dedup ids wait on (PendingDedup)."""
        self._mine = mine
        self._pending = pending
        self._plan = plan
        self._results = results
        """One per message: a duplicate's already, the stored ones' once written."""
        self._later = later
        """(message index, the send storing its dedup id now, the index in its results)."""
        self._answer: asyncio.Future[None] | None = None
        """What `results` waits on while the write is under way; `_settled` resolves it."""
        stored.add_done_callback(self._settled)

    def _settled(self, stored: asyncio.Future[list[SendResult]]) -> None:
        if stored.cancelled():
            _settle(self._done, None)
        else:
            error = stored.exception()
            if error is None:
                if not self._done.done():
                    self._done.set_result(stored.result())
            else:
                _settle(self._done, error)
        self._pending.release(self._mine, self._done)
        answer = self._answer
        if answer is not None and not answer.done():
            answer.set_result(None)

    async def results(self) -> list[SendResult]:
        """The send's results, in message order, once its write is durable (and replicated
        where the shard needs it); raises what failed the write. Cancelling the wait gives
        up the send's answer, not its write, which goes ahead."""
        job = self._stored
        if not job.done():
            # A future of the wait's own, not the job's: cancelling the job's future would
            # end the send's dedup claims while its write still goes ahead, and a retry
            # arriving before that write would find neither a claim nor a stored copy, and
            # store the message twice. It does what asyncio.shield does, without shield's
            # second future, its two callbacks and its extra loop turn: `_settled`, which
            # runs first anyway, resolves it.
            answer = self._answer
            if answer is None or answer.done():  # a wait before this one was cancelled
                answer = self._answer = job.get_loop().create_future()
            await answer
        stored = job.result()  # what failed the write, before the sends it repeats
        for _, earlier, _ in self._later:
            if not earlier.done():
                # Shielded: `earlier` is another send's shared future, which cancelling
                # this wait must not cancel (its other repeats would be answered CANCELLED).
                await asyncio.shield(earlier)
        return self._collected(stored)

    def add_done_callback(
        self, callback: Callable[[object], object], context: contextvars.Context | None = None
    ) -> None:
        """Call `callback` (given an object to ignore) on the loop once the write has
        settled, after the send's dedup claims ended: `results_now` then answers, unless
        the send repeats a concurrent one still under way. A stream's sends are answered
        this way without a task each (proxy/send_stream.py). `context`: as for a
        future's (None: a copy of the current one, taken now)."""
        if context is None:
            self._stored.add_done_callback(callback)
        else:
            self._stored.add_done_callback(callback, context=context)

    def results_now(self) -> list[SendResult] | None:
        """What `results` returns (or raises), once the write and those of the concurrent
        sends this one repeats have settled; None while one is still under way (then await
        `results`)."""
        if not self._stored.done():
            return None
        for _, earlier, _ in self._later:
            if not earlier.done():
                return None
        return self._collected(self._stored.result())

    def _collected(self, stored: list[SendResult]) -> list[SendResult]:
        plan = self._plan
        if len(stored) != len(plan):
            # Indexing below would silently drop or misplace results: say so loudly (an
            # InternalError is a PopMQError, which callers log at debug only).
            log.error("a send stored %d message(s) of the %d it planned", len(stored), len(plan))
            raise InternalError(
                f"a send stored {len(stored)} message(s) of the {len(plan)} it planned"
            )
        results = self._results
        # Indexed, not zip(..., strict=True) (a keyword call, compiled): one stored result
        # per planned message, in plan order.
        for i, p in enumerate(plan):
            results[p.index] = stored[i]
        for i, earlier, j in self._later:
            results[i] = duplicate_of(earlier.result()[j])
        return [r for r in results if r is not None]


def _settle(done: asyncio.Future[list[SendResult]], error: BaseException | None) -> None:
    """Fail a send's `done` with `error`, or (None, or no Exception) as a cancelled send."""
    if not done.done():
        done.set_exception(
            error if isinstance(error, Exception) else UnavailableError("the send was cancelled")
        )
        # Marked read: a repeat waiting on it raises it; with none, nobody need be told.
        done.exception()


class _Planned:
    """One message of a send that will be stored (not a duplicate). A plain class: a
    dataclass's generated __init__ runs as Python even compiled."""

    __slots__ = (
        "dedup_id", "index", "lookup_key", "message", "message_id", "queue_id", "raw_id",
        "record", "slot", "timer_seq", "topic",
    )  # fmt: skip

    def __init__(
        self,
        index: int,
        topic: TopicInfo,
        queue_id: int,
        message: NewMessage,
        message_id: str,
        raw_id: bytes,
        record: bytes,
        dedup_id: str,
        lookup_key: bytes,
        timer_seq: int,
        slot: int,
    ) -> None:
        self.index = index
        self.topic = topic
        self.queue_id = queue_id
        self.message = message
        self.message_id = message_id
        self.raw_id = raw_id
        """`message_id` encoded (UTF-8)."""
        self.record = record
        """The StoredMessage's bytes (`stored_record`)."""
        self.dedup_id = dedup_id
        self.lookup_key = lookup_key
        """Its message_index.dedup_lookup_key (looked up, then written); b"" for a message
        given a new id (nothing to look up; its id entry is encoded when written)."""
        self.timer_seq = timer_seq
        """Non-zero for a delayed message: its timers-family sequence."""
        self.slot = slot
        """Its place among the send's stored messages (its PendingDedup index)."""


_QUEUE_SPAN: Final = 1 << 20
"""More than any topic's queue count (validation.MAX_QUEUES): `_queue_slot` keys one."""


def _queue_slot(topic_id: int, queue_id: int) -> int:
    """One queue of one topic as an int key (a tuple would be built and hashed per
    message)."""
    return topic_id * _QUEUE_SPAN + queue_id


def stored_record(msg: NewMessage, message_id: str, stamp_ms: int, raw_id: bytes = b"") -> bytes:
    """The bytes of the popmq.store.v1.StoredMessage a sent message is stored as: its
    fields written one by one in field-number order, as upb serializes the message built
    from them (tests/unit/broker_core/test_stored_record.py checks them against it).

    Building the message to serialize it cost about 11,000 instructions a message compiled
    (upb converts every field set from Python); writing the fields costs a tenth of that.
    The times a send's messages share (born, when the producer gave none, and stored) are
    encoded about once a send (`_LastTimes`). `raw_id` is `message_id` encoded, when the
    caller has it (a send encodes each id once).
    """
    message_id_bytes = raw_id or message_id.encode()
    body = msg.body
    parts: list[bytes] = [
        _MESSAGE_ID, varint(len(message_id_bytes)), message_id_bytes,
        _BODY, varint(len(body)), body,
    ]  # fmt: skip
    if msg.tag:
        tag = msg.tag.encode()
        parts.append(_TAG)
        parts.append(varint(len(tag)))
        parts.append(tag)
    for key in msg.keys:
        encoded = key.encode()
        parts.append(_KEYS)
        parts.append(varint(len(encoded)))
        parts.append(encoded)
    if msg.properties:
        for name, value in msg.properties.items():
            entry = _entry(name.encode(), value.encode())
            parts.append(_PROPERTIES)
            parts.append(varint(len(entry)))
            parts.append(entry)
    parts.append(_TIMES.encode(msg.born_time_ms or stamp_ms, stamp_ms))
    if msg.message_group:
        parts.append(length_delimited(_MESSAGE_GROUP, msg.message_group.encode()))
    if msg.deliver_at_ms:
        parts.append(_DELIVER_AT)
        parts.append(varint(msg.deliver_at_ms))
    if msg.body_encoding:
        parts.append(length_delimited(_BODY_ENCODING, msg.body_encoding.encode()))
    if msg.dedup_id:
        parts.append(length_delimited(_DEDUP_ID, msg.dedup_id.encode()))
    if msg.born_host:
        parts.append(length_delimited(_BORN_HOST, msg.born_host.encode()))
    return b"".join(parts)


# StoredMessage's tags (protos/popmq/store/v1/records.proto): message_id 1, body 2, tag 3,
# keys 4, properties 5 (entries: key 1, value 2), born_time_ms 6, store_time_ms 7,
# delivery_attempt 8, message_group 12, deliver_at_ms 13, body_encoding 14, dedup_id 15,
# born_host 16.
_MESSAGE_ID: Final = b"\x0a"
_BODY: Final = b"\x12"
_TAG: Final = b"\x1a"
_KEYS: Final = b"\x22"
_PROPERTIES: Final = b"\x2a"
_BORN_TIME: Final = b"\x30"
_STORE_TIME: Final = b"\x38"
_FIRST_ATTEMPT: Final = b"\x40\x01"
_MESSAGE_GROUP: Final = b"\x62"
_DELIVER_AT: Final = b"\x68"
_BODY_ENCODING: Final = b"\x72"
_DEDUP_ID: Final = b"\x7a"
_BORN_HOST: Final = b"\x82\x01"


def _entry(name: bytes, value: bytes) -> bytes:
    """A map<string, string> entry: key 1, value 2."""
    return b"".join((b"\x0a", varint(len(name)), name, b"\x12", varint(len(value)), value))


class _LastTimes:
    """born_time_ms, store_time_ms and delivery_attempt 1, encoded, for the last pair of
    times asked for: the messages of a send share them, so a send encodes them about once."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        # (born, stored, their encoding), replaced as one reference.
        self._last: tuple[int, int, bytes] = (-1, -1, b"")

    def encode(self, born_ms: int, stored_ms: int) -> bytes:
        last = self._last
        if last[0] == born_ms and last[1] == stored_ms:
            return last[2]
        encoded = b""
        if born_ms:  # proto3 leaves zeros out
            encoded = _BORN_TIME + varint(born_ms)
        if stored_ms:
            encoded += _STORE_TIME + varint(stored_ms)
        encoded += _FIRST_ATTEMPT
        self._last = (born_ms, stored_ms, encoded)
        return encoded


_TIMES: Final = _LastTimes()


def _send_problem(topic: TopicInfo, kind: str) -> str:
    """Why a plain send of a `kind` message may not go to `topic` ("" when it may)."""
    if topic.accepts(kind):
        return ""
    name = topic.message_type_name
    if name == "transaction":
        return (
            f"is a {kind} message but topic {topic.name!r} is a transaction topic and "
            "accepts only transactional (half) messages"
        )
    return f"is a {kind} message but topic {topic.name!r} is a {name} topic" + (
        f" and accepts only {name} messages" if name != "mixed" else ""
    )


def _half_problem(topic: TopicInfo, kind: str) -> str:
    """Why a half message of base type `kind` may not go to `topic` ("" when it may).

    Transaction and mixed topics take half messages of every base type; a fifo or delay
    topic takes them when they are of its type (a message group, a delivery time), so a
    committed message keeps its topic's semantics. A normal topic takes none (RocketMQ's
    topic message-type check refuses TRANSACTION there too).
    """
    name = topic.message_type_name
    if name in ("transaction", "mixed") or (name != "normal" and topic.accepts(kind)):
        return ""
    if name == "normal":
        return (
            f"is a transactional message but topic {topic.name!r} is a normal topic; "
            "send it to a transaction or mixed topic"
        )
    return (
        f"is a transactional {kind} message but topic {topic.name!r} is a {name} topic "
        f"and accepts only {name} messages"
    )


def message_type(msg: NewMessage) -> str:
    """RocketMQ's rule: a message group makes it FIFO, a delivery time makes it DELAY."""
    if msg.message_group:
        return "fifo"
    if msg.deliver_at_ms:
        return "delay"
    return "normal"
