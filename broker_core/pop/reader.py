"""Pop: read a group's next messages from a topic's queues and its retry queue.

A pop visits the queues in turn (the retry queue first every `retry_first_every` pops),
try-locking each: a queue another pop or an admin operation holds is skipped, not waited
for. Under the lock it delivers ready FIFO heads (fifo.py), then reads on from the queue's
pop offset and records one chained checkpoint for the range it passed (live_checkpoints.py;
it waits in checkpoint_buffer.py). With nothing to deliver it parks on the long-polling
table until an arrival or its wait ends.

Threading: on the event loop; a queue read is a few bounded iterator reads (max_scan_per_pop
bounds it; a run with a hole is read again by key, _read_run).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Sequence

from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker_core import keys, validation
from popmq.broker_core.autocreate import AutoCreate
from popmq.broker_core.budget import Reserve, ResponseBudget
from popmq.broker_core.catalog import Catalog, GroupInfo, TopicInfo
from popmq.broker_core.clock import Clock
from popmq.broker_core.config import BrokerConfig
from popmq.broker_core.consume_queues import ConsumeQueues
from popmq.broker_core.errors import AnswerBoundError
from popmq.broker_core.filters import RecordFilter, parse_filter
from popmq.broker_core.group_settings import GroupSettingsStore
from popmq.broker_core.lifecycle import Lifecycle
from popmq.broker_core.long_polling import LongPolling
from popmq.broker_core.offsets import QueueOffsets, check_queue_id
from popmq.broker_core.pop.checkpoint import Checkpoint
from popmq.broker_core.pop.checkpoint_buffer import CheckpointBuffer
from popmq.broker_core.pop.context import QueueRead
from popmq.broker_core.pop.fifo import Fifo
from popmq.broker_core.pop.live_checkpoints import LiveCheckpoints
from popmq.broker_core.pop.receipt import ReceiptCodec
from popmq.broker_core.pop.retry import Retries
from popmq.broker_core.queue_lock import QueueLocks
from popmq.broker_core.record import MessageRecord
from popmq.broker_core.record_wire import has_message_group
from popmq.broker_core.stats import BrokerStats
from popmq.broker_core.store import Store
from popmq.broker_core.types import PoppedMessage


class Reader:
    """Serves pops: checks them, reads queues under their try-locks, holds empty ones."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        store: Store,
        catalog: Catalog,
        offsets: QueueOffsets,
        checkpoints: LiveCheckpoints,
        buffer: CheckpointBuffer,
        queues: ConsumeQueues,
        fifo: Fifo,
        create: AutoCreate,
        retries: Retries,
        settings: GroupSettingsStore,
        codec: ReceiptCodec,
        locks: QueueLocks,
        polling: LongPolling,
        stats: BrokerStats,
        life: Lifecycle,
        clock: Clock,
    ) -> None:
        self._config = config
        self._store = store
        self._catalog = catalog
        self._offsets = offsets
        self._checkpoints = checkpoints
        self._buffer = buffer
        self._queues = queues
        self._fifo = fifo
        self._create = create
        self._retries = retries
        self._settings = settings
        self._codec = codec
        self._locks = locks
        self._polling = polling
        self._stats = stats
        self._life = life
        self._clock = clock
        # (group_id, topic_id) -> pops so far: rotates the first queue a pop visits.
        self._pop_count: dict[tuple[int, int], int] = {}

    def forget_group(self, group_id: int) -> None:
        """A deleted group's rotation counters go with it."""
        for count_key in [k for k in self._pop_count if k[0] == group_id]:
            del self._pop_count[count_key]

    async def pop(
        self,
        group: str,
        topic: str,
        *,
        max_messages: int | None = None,
        invisible_s: float | None = None,
        wait_s: float | None = None,
        filter_expression: str = "",
        filter_type: str = "tag",
        queue_id: int | None = None,
        max_bytes: int | None = None,
        reserve: Reserve | None = None,
        client_id: str = "",
    ) -> list[PoppedMessage]:
        """Pop up to max_messages; wait up to wait_s for an arrival when nothing is there.

        filter_type "tag" takes a tag expression, "sql" a SQL92 expression over properties.
        queue_id limits the pop to one queue of the topic plus the group's retry queue for
        it, whose copies belong to no queue (RocketMQ PopMessageRequestHeader.queueId);
        None pops every queue.

        max_bytes bounds what the answer takes (budget.py), the first message included:
        bytes the caller reserved for it (proxy/stream_session.py's admission); None is the
        usual ~4 MiB answer. A pop that finds messages none of which fit raises
        AnswerBoundError with the bytes needed, having taken nothing; so 0 makes a probe
        that takes nothing and answers once there is something to take.

        reserve (with max_bytes) is asked for more bytes when the first message found does
        not fit them (budget.py): a probe woken by an arrival then takes it at once. A pop
        that was granted bytes and still found nothing returns (empty) rather than wait
        holding them.

        client_id names the popping client ("" unknown): recorded on the checkpoints of the
        deliveries, so inspection and the delivery history can say who holds a message.
        """
        checked = validation.check_pop(
            self._config.pop,
            self._config.long_polling,
            group,
            topic,
            max_messages=max_messages,
            invisible_s=invisible_s,
            wait_s=wait_s,
            max_bytes=max_bytes,
        )
        validation.check_client_id(client_id)
        invisible, wait = checked.invisible_s, checked.wait_s
        filter_type, filter_expression = validation.pop_filter(
            self._settings, group, topic, filter_expression, filter_type
        )
        record_filter = parse_filter(filter_expression, filter_type)
        topic_info = self._catalog.topic(topic)
        if queue_id is not None:
            check_queue_id(topic_info, queue_id)
        group_info = await self._create.group(group)
        retry_info = await self._retries.retry_topic(group_info, topic_info)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + wait
        invisible_ms = round(invisible * 1000)
        while True:
            if self._life.closing:
                return []
            topic_info = self._catalog.topic(topic)  # raises if deleted while we waited
            if queue_id is not None:
                check_queue_id(topic_info, queue_id)  # recreated with fewer queues
            response = (
                ResponseBudget()
                if max_bytes is None
                else ResponseBudget(max_bytes, strict=True, reserve=reserve)
            )
            found, contended = self._pop_once(
                group_info,
                topic_info,
                retry_info,
                checked.max_messages,
                invisible_ms,
                record_filter,
                queue_id,
                response,
                client_id,
            )
            if not found and response.refused:
                raise AnswerBoundError(
                    f"the next message needs {response.refused} bytes: more than max_bytes "
                    f"{max_bytes}",
                    response.refused,
                )
            remaining = give_up - loop.time()
            if found:
                self._stats.popped[(group, topic)] += len(found)
            if found or remaining <= 0 or self._life.draining or response.reserved:
                return found
            # A queue skipped because its lock was held may have messages, and a FIFO head
            # held back by a nack's backoff becomes due without any arrival.
            retry_in = min(remaining, 0.005) if contended else remaining
            fifo_due = self._fifo.next_due(group_info, topic_info, queue_id)
            if fifo_due is not None:
                retry_in = min(retry_in, max(0.001, (fifo_due - self._clock.now_ms()) / 1000))
            # A timer handle resolving the parked future, not asyncio.wait: a held pop then
            # costs its future and one handle, not a coroutine, set, closure and future more.
            waiter = self._polling.park(group, topic, queue_id)
            timer = loop.call_later(retry_in, _resolve, waiter, context=_TIMER_CONTEXT)
            try:
                await waiter
            except asyncio.CancelledError:
                if not waiter.cancelled() and loop.time() < timer.when():
                    # Woken for an arrival, then cancelled before popping it: hand the
                    # wake-up on, so another held pop takes the message now.
                    self._polling.notify(topic, 1, group=group, queue_id=queue_id)
                raise
            finally:
                timer.cancel()
                self._polling.unpark(group, topic, waiter, queue_id)

    def _pop_once(
        self,
        group: GroupInfo,
        topic: TopicInfo,
        retry: TopicInfo,
        max_messages: int,
        invisible_ms: int,
        record_filter: RecordFilter,
        queue_id: int | None = None,
        response: ResponseBudget | None = None,
        client_id: str = "",
    ) -> tuple[list[PoppedMessage], bool]:
        count_key = (group.group_id, topic.topic_id)
        count = self._pop_count.get(count_key, 0)
        self._pop_count[count_key] = count + 1
        if queue_id is None:
            start = count % topic.queues
            order = [(topic, (start + i) % topic.queues) for i in range(topic.queues)]
        else:
            order = [(topic, queue_id)]
        if count % self._config.pop.retry_first_every == 0:
            order.insert(0, (retry, 0))
        else:
            order.append((retry, 0))
        found: list[PoppedMessage] = []
        contended = False
        now = self._clock.now_ms()
        deadline = now + invisible_ms
        if response is None:
            response = ResponseBudget()
        for source, source_queue in order:
            want = max_messages - len(found)
            # A reserved bound (strict) stops at its first refusal, not at the last byte.
            if want <= 0 or (response.refused if response.strict else response.left <= 0):
                break
            cq = self._queues.queue(group, source, source_queue)
            if not self._locks.try_acquire(cq.lock_key):
                contended = True
                continue
            read = QueueRead(
                cq, source, topic, now, deadline, record_filter, found, response, client_id
            )
            try:
                if cq.fifo_ready:
                    self._fifo.deliver_heads(read, want)
                    want = max_messages - len(found)
                if want > 0:
                    self._read_queue(read, want)
            finally:
                self._locks.release(cq.lock_key)
        return found, contended

    def _read_queue(self, read: QueueRead, want: int) -> None:
        """Read up to `want` matching messages of one queue under its lock; record a checkpoint.

        Stops before a message that does not fit the answer's byte budget (it stays for the
        next pop). A message of a FIFO message group gets its own checkpoint instead (see
        Fifo.take): delivered when its group has nothing in flight, held behind the group's
        head otherwise. Either way the chained checkpoint's range passes it.
        """
        cq, source, now, deadline = read.cq, read.source, read.now, read.deadline
        record_filter, response = read.record_filter, read.response
        start, limit = cq.read_window(self._offsets.max_offset(source.topic_id, cq.queue_id))
        if start >= limit:
            return
        oldest = self._offsets.min_offset(source.topic_id, cq.queue_id)
        if start < oldest:
            # Retention deleted [start, oldest) before this group read it: skip, and count it.
            gone = Checkpoint(
                ck_id=self._checkpoints.next_ck_id(),
                queue=cq,
                range_start=start,
                range_end=oldest,
                offsets=[],
                pop_time_ms=now,
                deadline_ms=deadline,
                chained=True,
            )
            cq.add(gone)
            cq.retention_skipped += oldest - start
            self._checkpoints.advance(cq)
            start = oldest
            if start >= limit:
                return
        store = self._store
        position = start
        budget = self._config.pop.max_scan_per_pop
        offsets: list[int] = []
        # Each delivered record's bytes, and the record parsed from them when it was (None:
        # a filter that matches everything needs only to know it is not FIFO, read off its
        # bytes; its delivery re-tags the bytes, and a field read later parses them then).
        raws: list[bytes] = []
        records: list[records_pb2.StoredMessage | None] = []
        whole = record_filter.matches_all
        delivered = 0
        stopped = False  # a FIFO group is full, or the answer is: stop before this message
        max_held = self._config.messages.fifo_max_held
        while position < limit and delivered < want and budget > 0 and not stopped:
            step = want - delivered if record_filter.matches_all else max(want, 64)
            chunk_end = min(limit, position + min(response.reads(step), budget))
            values = _read_run(store, source.topic_id, cq.queue_id, position, chunk_end)
            for offset, value in zip(range(position, chunk_end), values, strict=True):
                # None: deleted by retention after we looked at the max offset. In flight:
                # owned by a live checkpoint recovered after a crash (a nack's, a
                # ChangeInvisibleTime's or a FIFO one), and delivered from there.
                record = None
                take = False
                if value is not None:
                    response.saw(len(value))
                if value is not None and offset not in cq.inflight:
                    if not whole or _fifo_record(value):
                        record = records_pb2.StoredMessage.FromString(value)
                        if record.message_group in cq.fifo and cq.fifo_held >= max_held:
                            stopped = True  # stop before it: read on once groups move
                            break
                    take = record is None or record_filter.accepts(record)
                    if take and not response.take(len(value)):
                        stopped = True  # the answer is full: the next pop starts here
                        break
                position = offset + 1
                budget -= 1
                if not take:
                    continue
                assert value is not None  # taken: it was read
                if record is not None and record.message_group:
                    message = self._fifo.take(read, offset, record)
                    if message is not None:
                        read.found.append(message)
                        delivered += 1
                else:
                    offsets.append(offset)
                    records.append(record)
                    raws.append(value)
                    delivered += 1
                if delivered >= want:
                    break
        ck = Checkpoint(
            ck_id=self._checkpoints.next_ck_id(),
            queue=cq,
            range_start=start,
            range_end=position,
            offsets=offsets,
            pop_time_ms=now,
            deadline_ms=deadline,
            chained=True,
        )
        ck.client_id = read.client_id
        cq.add(ck)
        if not offsets:
            self._checkpoints.advance(cq)  # the range held only filtered-out or FIFO messages
            return
        self._checkpoints.track(ck)
        self._buffer.add(ck)
        self._checkpoints.history.popped(ck)
        topic_name = read.user_topic.name
        handles = self._codec.encode_checkpoint(
            cq.group_id, source.topic_id, cq.queue_id, offsets, ck.ck_id, deadline
        )
        append = read.found.append
        for offset, record, raw, handle in zip(offsets, records, raws, handles, strict=True):
            append(
                PoppedMessage(
                    topic_name, cq.queue_id, offset, MessageRecord(record, raw), handle, deadline
                )
            )


def _read_run(
    store: Store, topic_id: int, queue_id: int, start: int, end: int
) -> Sequence[bytes | None]:
    """The records at offsets [start, end) of one queue, None where one is missing.

    One bounded iterator reads the run (keys are big-endian, so a queue's offsets are
    adjacent keys): every key in the range is one of its offsets, so as many values as
    offsets means each is there, in order. Fewer (retention, a topic's deletion or an
    admin's removal of one message raced the read) reads the run again by key, to say
    which are missing."""
    values = store.values_between(
        "messages",
        keys.message_key(topic_id, queue_id, start),
        keys.message_key(topic_id, queue_id, end),
    )
    if len(values) == end - start:
        return values
    return store.multi_get(
        "messages", [keys.message_key(topic_id, queue_id, o) for o in range(start, end)]
    )


def _fifo_record(stored: bytes) -> bool:
    """Whether a stored record names a message group; a malformed one is parsed, to fail
    as parsing it fails."""
    try:
        return has_message_group(stored)
    except ValueError:
        return True


def _resolve(future: asyncio.Future[None]) -> None:
    """A held pop's timer fired: it pops again, and returns if its wait is over."""
    if not future.done():
        future.set_result(None)


_TIMER_CONTEXT = contextvars.Context()
"""The context of held pops' timers: _resolve reads no context variable, so they share one
instead of each copying the current context (a held pop's memory, see docs/pop-stream.md)."""
