"""Queue offsets: where each queue's messages start and end, and where groups read by offset.

`QueueOffsets` caches every queue's bounds (the writer assigns offsets inside its flush;
retention moves the min offset up) and finds offsets by store time. `OffsetReads` serves the
group-less reads by offset, offset commits and offset-at-time lookups, for readers that keep
their own position (the Spark connector's offset mode, queue-exclusive consumers).

Threading: everything here runs on the event loop; a store-time lookup is a binary search of
point reads (microseconds each).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker_core import jobs, keys, validation
from popmq.broker_core.budget import ResponseBudget
from popmq.broker_core.catalog import KIND_RETRY
from popmq.broker_core.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError
from popmq.broker_core.filters import parse_filter
from popmq.broker_core.record import MessageRecord
from popmq.broker_core.store import Store
from popmq.broker_core.types import ConsumerOffset, PulledMessages

if TYPE_CHECKING:  # the writer imports this module: these are for annotations only
    from popmq.broker_core.autocreate import AutoCreate
    from popmq.broker_core.catalog import Catalog, TopicInfo
    from popmq.broker_core.config import BrokerConfig
    from popmq.broker_core.consume_queue import ConsumeQueue
    from popmq.broker_core.consume_queues import ConsumeQueues
    from popmq.broker_core.group_commit import GroupCommitWriter
    from popmq.broker_core.lifecycle import Lifecycle
    from popmq.broker_core.long_polling import LongPolling
    from popmq.broker_core.pop.live_checkpoints import LiveCheckpoints

PULL_MAX_MESSAGES = 1024
"""Most messages one pull returns."""
PULL_DEFAULT_MESSAGES = 256
"""A pull stops once it read this many body bytes (it returns at least one message)."""
_PULL_CHUNK = 64
"""Keys read per multi_get of a pull, so 4 MiB bodies never pile up beyond the byte cap."""
NEWER_THAN_ALL = 2**63 - 1
"""`QueueOffsets.store_time` of an offset with no message stored at or after it."""


class QueueOffsets:
    """Next offset of every queue: committed (visible to readers) and tentative (in a flush)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        # committed[(topic_id, queue_id)]: offset the next stored message will get. Readers
        # never see beyond it. Guarded by running on the loop thread only.
        self._committed: dict[tuple[int, int], int] = {}
        self._tentative: dict[tuple[int, int], int] = {}
        # unsettled[(topic_id, queue_id)]: end of what writes in doubt (a failed fsync or
        # replication, and writes after it) may have left in the store past `_committed`.
        # Offsets are allocated past it, so no key is written twice; readers see only up to
        # `_committed` until `settle` or `reload_unsettled` (the writes proved durable, or
        # the store reopened).
        self._unsettled: dict[tuple[int, int], int] = {}
        # passed[(topic_id, queue_id)]: the end of writes a reopened replicating store lost
        # after they were shipped to its followers (`reload_unsettled`). Offsets are
        # allocated past it and never published below a write past it, so no key a follower
        # may hold is written again with another message.
        self._passed: dict[tuple[int, int], int] = {}
        # min[(topic_id, queue_id)]: smallest offset still stored (retention moves it up).
        self._min: dict[tuple[int, int], int] = {}

    def max_offset(self, topic_id: int, queue_id: int) -> int:
        """Offset the next message of the queue will get (= messages ever stored)."""
        key = (topic_id, queue_id)
        value = self._committed.get(key)
        if value is None:
            value = self._load(topic_id, queue_id)
            self._committed[key] = value
        return value

    def min_offset(self, topic_id: int, queue_id: int) -> int:
        """Smallest offset still stored (= max_offset for an empty queue)."""
        key = (topic_id, queue_id)
        value = self._min.get(key)
        if value is None:
            prefix = keys.queue_prefix(topic_id, queue_id)
            first = self._store.first_key(
                "messages", prefix, keys.queue_prefix(topic_id, queue_id + 1)
            )
            value = (
                self.max_offset(topic_id, queue_id) if first is None else keys.message_offset(first)
            )
            self._min[key] = value
        return value

    def set_min_offset(self, topic_id: int, queue_id: int, offset: int) -> None:
        """Record that retention deleted everything below `offset`."""
        self._min[(topic_id, queue_id)] = offset

    def allocate(self, topic_id: int, queue_id: int, count: int = 1) -> int:
        """Reserve `count` offsets in the current flush; returns the first."""
        key = (topic_id, queue_id)
        first = self._tentative.get(key)
        if first is None:
            first = self.max_offset(topic_id, queue_id)
            if self._unsettled:
                first = max(first, self._unsettled.get(key, first))
            if self._passed:
                first = max(first, self._passed.get(key, first))
        self._tentative[key] = first + count
        return first

    def commit(self) -> list[tuple[int, int]]:
        """Publish the flush's offsets; returns the queues that grew.

        A queue with an unsettled end keeps its published end: what the flush wrote there
        lies past writes in doubt, and a reader must not see past those before they settle.
        """
        if self._passed:
            for key in self._tentative:
                self._passed.pop(key, None)  # written past: published with what lies past it
        if self._unsettled:
            for key in [k for k in self._tentative if k in self._unsettled]:
                self._unsettled[key] = self._tentative.pop(key)
        grown = list(self._tentative)
        self._committed.update(self._tentative)
        self._tentative.clear()
        return grown

    def rollback(self) -> None:
        """Drop the flush's offsets: nothing of it was written."""
        self._tentative.clear()

    def unsettle(self) -> None:
        """The flush was written but not made durable (its fsync or replication failed).

        Its offsets stay allocated (the store may hold its keys) and unpublished (the store
        may lose them): later flushes allocate past them, readers do not see them.
        """
        self._unsettled.update(self._tentative)
        self._tentative.clear()

    @property
    def unsettled(self) -> bool:
        """Whether some queue holds writes in doubt past its published end."""
        return bool(self._unsettled)

    def settle(self) -> dict[tuple[int, int], int]:
        """Publish the unsettled ends (an fsync covered the writes in doubt, and the
        followers hold them); returns how many offsets each queue grew by.

        A write in doubt that the store lost leaves a gap below the end, which readers step
        over as they do over messages retention deleted; its offsets are never reused.
        """
        grown: dict[tuple[int, int], int] = {}
        for key, end in self._unsettled.items():
            committed = self._committed.get(key)
            if committed is None:
                continue  # its topic was deleted while the writes were in doubt
            grown[key] = end - committed
            self._committed[key] = end
        self._unsettled.clear()
        return grown

    def reload_unsettled(
        self, *, publish: bool, shipped: bool = False
    ) -> dict[tuple[int, int], int]:
        """The store reopened: make each unsettled end what the store holds now, and
        publish it when `publish`; returns how many offsets each published queue grew by.

        A reopen replays the WAL, and what a failed fsync did not make durable may be gone
        from it: an end kept from before would publish offsets the store no longer holds,
        which a group would step past and, past the queue's stored end, a restart would
        give to new messages under that group's offset. No reader was shown an offset held
        back, so the store's own end may be used again, unless the writes were `shipped`
        to followers as they were written (replication): a follower may hold the lost
        messages under those offsets, and a new message written there would overwrite one
        while its id, key and dedup entries stay, pointing at the other. Then the next
        message goes past the lost ones, and the gap it leaves is published with it (readers
        step over it as over what retention deleted), never before: an idle queue's end
        stays the store's own, so a restart finds the same end.
        """
        grown: dict[tuple[int, int], int] = {}
        for key in list(self._unsettled):
            committed = self._committed.get(key)
            if committed is None:
                del self._unsettled[key]  # its topic was deleted while the writes were in doubt
                continue
            end = max(committed, self._load(*key))
            if shipped and self._unsettled[key] > end:
                self._passed[key] = max(self._unsettled[key], self._passed.get(key, 0))
            if not publish:
                self._unsettled[key] = end
            elif end > committed:
                grown[key] = end - committed
                self._committed[key] = end
        if publish:
            self._unsettled.clear()
        return grown

    def forget_topic(self, topic_id: int) -> None:
        for table in (self._committed, self._min, self._unsettled, self._tentative, self._passed):
            for key in [k for k in table if k[0] == topic_id]:
                del table[key]

    def _load(self, topic_id: int, queue_id: int) -> int:
        prefix = keys.queue_prefix(topic_id, queue_id)
        last = self._store.last_key("messages", prefix, keys.queue_prefix(topic_id, queue_id + 1))
        end = 0 if last is None else keys.message_offset(last) + 1
        # Removing a crash tail (crash_tail.py), a purge or retention may have taken the
        # last stored messages: their offsets stay used.
        recorded = self._store.get("meta", keys.queue_end_key(topic_id, queue_id))
        return end if recorded is None else max(end, keys.decode_u64(recorded))

    def store_time(self, topic_id: int, queue_id: int, offset: int) -> int:
        """Store time of the message at `offset` or, when none is stored there, of the first
        one stored after it in the queue; `NEWER_THAN_ALL` when none is.

        Store times grow with offsets within a queue, so a missing offset (a gap a removed
        crash tail or a lost write left, or a head retention just deleted) sorts as the
        message after it, and a binary search over store times stays ordered across gaps.
        """
        found = self.stored_at_or_after(topic_id, queue_id, offset)
        return NEWER_THAN_ALL if found is None else found[1]

    def stored_at_or_after(
        self, topic_id: int, queue_id: int, offset: int
    ) -> tuple[int, int] | None:
        """(offset, store time) of the first message stored at or after `offset` in the
        queue, or None."""
        data = self._store.get("messages", keys.message_key(topic_id, queue_id, offset))
        if data is None:
            start = keys.message_key(topic_id, queue_id, offset)
            for key, value in self._store.scan(
                "messages", start, keys.queue_prefix(topic_id, queue_id + 1)
            ):
                offset, data = keys.message_offset(key), value
                break
            else:
                return None
        return offset, records_pb2.StoredMessage.FromString(data).store_time_ms

    def newest_store_time(self, topic_id: int, queue_id: int) -> int:
        """Store time of the last message stored in the queue; 0 when it holds none (its
        end may lie past its last message: a removed crash tail's offsets stay used)."""
        high = self.max_offset(topic_id, queue_id)
        last = self._store.last_key(
            "messages",
            keys.queue_prefix(topic_id, queue_id),
            keys.message_key(topic_id, queue_id, high),
        )
        if last is None:
            return 0
        data = self._store.get("messages", last)
        return 0 if data is None else records_pb2.StoredMessage.FromString(data).store_time_ms

    def offset_at(self, topic_id: int, queue_id: int, timestamp_ms: int) -> int:
        """First offset stored at or after timestamp_ms (max_offset when none is): store
        times grow with offsets within a queue, so a binary search of point reads (a gap
        counts as the message after it: `store_time`)."""
        end = self.max_offset(topic_id, queue_id)
        lo, hi = self.min_offset(topic_id, queue_id), end
        while lo < hi:
            mid = (lo + hi) // 2
            if self.store_time(topic_id, queue_id, mid) < timestamp_ms:
                lo = mid + 1
            else:
                hi = mid
        found = self.stored_at_or_after(topic_id, queue_id, lo) if lo < end else None
        # lo may be a gap before that message: answer the message's own offset.
        return end if found is None else min(found[0], end)


def check_queue_id(info: TopicInfo, queue_id: int) -> None:
    """INVALID_ARGUMENT unless `queue_id` is one of the topic's queues."""
    validation.check_queue_id(info.name, info.queues, queue_id)


class OffsetReads:
    """Group-less reads by offset, offset commits and offset-at-time lookups."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        store: Store,
        catalog: Catalog,
        offsets: QueueOffsets,
        writer: GroupCommitWriter,
        checkpoints: LiveCheckpoints,
        queues: ConsumeQueues,
        create: AutoCreate,
        polling: LongPolling,
        life: Lifecycle,
    ) -> None:
        self._config = config
        self._store = store
        self._catalog = catalog
        self._offsets = offsets
        self._writer = writer
        self._checkpoints = checkpoints
        self._queues = queues
        self._create = create
        self._polling = polling
        self._life = life
        writer.add_settle_listener(self._settled)

    def _settled(self, grown: Mapping[tuple[int, int], int]) -> None:
        """Messages held back after a failed fsync became visible: wake what waits for them
        (the sends that stored them woke nothing, being visible to nobody then)."""
        for (topic_id, queue_id), count in grown.items():
            info = self._catalog.topics_by_id.get(topic_id)
            if info is None:
                continue
            if info.kind == KIND_RETRY:
                # A group's pops of the user topic read its retry topic (as revive wakes them).
                self._polling.notify(info.owner_topic, count, group=info.owner_group)
            else:
                self._polling.notify(info.name, count, queue_id=queue_id)

    def pull(
        self, topic: str, queue_id: int, offset: int, max_messages: int = PULL_DEFAULT_MESSAGES
    ) -> PulledMessages:
        """Read one queue from `offset` on, without a group and without changing any state.

        Stops after max_messages, at the end of the queue, or before the message that would
        pass the answer's byte budget (budget.py: always at least one message), so a client
        with gRPC's default receive limit can read the answer.
        A read below the queue's min offset (deleted by retention) starts at the min offset;
        the caller compares and decides whether that is data loss.
        """
        validation.check_name("topic", topic, allow_dlq=True)
        info = self._catalog.topic(topic)
        check_queue_id(info, queue_id)
        validation.check_range("max_messages", max_messages, 1, PULL_MAX_MESSAGES)
        low = self._offsets.min_offset(info.topic_id, queue_id)
        high = self._offsets.max_offset(info.topic_id, queue_id)
        validation.check_offset(topic, queue_id, offset, high)
        position = max(offset, low)
        end = min(high, position + max_messages)
        found: list[tuple[int, MessageRecord]] = []
        response = ResponseBudget()
        full = False
        while position < end and not full:
            chunk_end = min(end, position + response.reads(_PULL_CHUNK))
            values = self._store.multi_get(
                "messages",
                [keys.message_key(info.topic_id, queue_id, o) for o in range(position, chunk_end)],
            )
            for at, value in zip(range(position, chunk_end), values, strict=True):
                if value is not None:
                    response.saw(len(value))
                if value is not None and not response.take(len(value)):
                    full = True  # the answer is full: next_offset is this message
                    break
                position = at + 1
                if value is None:
                    continue  # deleted by retention after we read the min offset
                found.append((at, MessageRecord.from_bytes(value)))
        return PulledMessages(
            topic=info.name,
            queue_id=queue_id,
            messages=found,
            min_offset=low,
            max_offset=high,
            next_offset=position,
        )

    async def await_messages(
        self, topic: str, positions: Mapping[int, int], wait_s: float
    ) -> list[tuple[int, int]]:
        """Wait until a queue of `topic` holds messages past its position in `positions`
        (queue id -> offset), or `wait_s` passed; returns (queue id, max offset) of each
        queue that did, in queue order (empty after the wait).

        The whole request is checked before any waiting; a wake-up checks only the queues
        that received messages (LongPolling.watch), so many held calls cost a send only
        the calls that watch its queue.
        """
        validation.check_name("topic", topic, allow_dlq=True)
        info = self._catalog.topic(topic)
        validation.check_range(
            "long_polling_timeout", wait_s, 0, self._config.long_polling.max_timeout_s, "s"
        )
        if not positions:
            raise InvalidArgumentError("positions is empty: give at least one queue and offset")
        for queue_id, offset in positions.items():
            if not 0 <= queue_id < info.queues:
                raise InvalidArgumentError(
                    f"positions has queue id {queue_id}: the topic's queues are "
                    f"0..{info.queues - 1}"
                )
            if offset < 0:
                raise InvalidArgumentError(f"positions has offset {offset}: use >= 0")

        def ready(queue_ids: Iterable[int]) -> list[tuple[int, int]]:
            found = []
            for queue_id in queue_ids:
                high = self._offsets.max_offset(info.topic_id, queue_id)
                if high > positions[queue_id]:
                    found.append((queue_id, high))
            return found

        found = ready(sorted(positions))
        if found or wait_s <= 0 or self._life.draining:
            return found
        loop = asyncio.get_running_loop()
        give_up = loop.time() + wait_s
        # No await between the check above and watching: an arrival cannot slip between.
        watch = self._polling.watch(topic, positions)
        try:
            while not found:
                remaining = give_up - loop.time()
                if remaining <= 0 or self._life.draining:
                    break
                await asyncio.wait([watch.future], timeout=remaining)
                if self._catalog.topics.get(topic) is not info:
                    raise NotFoundError(f"topic {topic!r} was deleted while waiting")
                found = ready(watch.take_moved())
        finally:
            self._polling.unwatch(watch)
        return found

    async def pull_wait(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_messages: int,
        *,
        wait_s: float,
        filter_expression: str,
        filter_type: str,
    ) -> PulledMessages:
        """`pull`, keeping only the records that pass the filter, and waiting up to `wait_s`
        for an arrival when the queue holds nothing from `offset` on.

        A read that found records none of which pass still answers at once (with its
        next_offset), so the caller moves past them. The wait watches only this queue (an
        arrival watch, as AwaitMessages), so a send to another queue does not wake it.
        """
        record_filter = parse_filter(filter_expression, filter_type)
        validation.check_range(
            "long_polling_timeout", wait_s, 0, self._config.long_polling.max_timeout_s, "s"
        )
        loop = asyncio.get_running_loop()
        give_up = loop.time() + wait_s
        while True:
            result = self.pull(topic, queue_id, offset, max_messages)
            left = give_up - loop.time()
            if result.messages or left <= 0 or self._life.draining:
                break
            if not await self.await_messages(topic, {queue_id: result.max_offset}, left):
                break
        kept = [(o, r) for o, r in result.messages if record_filter.accepts(r)]
        return dataclasses.replace(result, messages=kept)

    async def commit_offsets(
        self, group: str, topic: str, offsets: Sequence[tuple[int, int]]
    ) -> None:
        """Set the group's offset in some queues of a topic, all or none, durably.

        For groups that read by offset. A queue where the group has popped messages still in
        flight is refused: moving its offset would break the POP bookkeeping of those.
        """
        validation.check_name("group", group)
        validation.check_name("topic", topic, allow_dlq=True)
        if not offsets:
            raise InvalidArgumentError("a commit needs at least one queue offset")
        info = self._catalog.topic(topic)
        seen: set[int] = set()
        for queue_id, offset in offsets:
            check_queue_id(info, queue_id)
            if queue_id in seen:
                raise InvalidArgumentError(
                    f"queue {queue_id} appears twice; commit one offset per queue"
                )
            seen.add(queue_id)
            high = self._offsets.max_offset(info.topic_id, queue_id)
            validation.check_range(f"offset of queue {queue_id}", offset, 0, high, field="offset")
        group_info = await self._create.group(group)
        info = self._catalog.topic(topic)  # deleted while the group was created?
        moves: list[tuple[ConsumeQueue, int]] = []
        for queue_id, offset in offsets:
            cq = self._queues.queue(group_info, info, queue_id)
            if cq.chain or cq.inflight:
                raise FailedPreconditionError(
                    f"group {group!r} has popped messages in flight in topic {topic!r} queue "
                    f"{queue_id}; commit offsets only where the group reads by offset, not "
                    "by Pop"
                )
            moves.append((cq, offset))
        for cq, offset in moves:
            cq.committed = cq.pop_offset = offset
            cq.recovered.clear()
            self._checkpoints.write_offset(cq)
        await self._writer.submit(jobs.noop, sync=True)

    def get_offsets(self, group: str, topic: str) -> list[ConsumerOffset]:
        """The group's offset in every queue of the topic (where it would start if none)."""
        validation.check_name("group", group)
        validation.check_name("topic", topic, allow_dlq=True)
        group_info = self._catalog.group(group)
        info = self._catalog.topic(topic)
        result = []
        for queue_id in range(info.queues):
            cq = self._queues.get(group_info.group_id, info.topic_id, queue_id)
            if cq is None:
                result.append(
                    ConsumerOffset(
                        queue_id, self._offsets.min_offset(info.topic_id, queue_id), False
                    )
                )
            else:
                result.append(ConsumerOffset(queue_id, cq.committed, True))
        return result

    def offsets_at(self, topic: str, timestamp_ms: int) -> list[tuple[int, int]]:
        """(queue_id, first offset stored at or after timestamp_ms) per queue (RocketMQ
        searchOffset); max_offset when nothing is. A binary search of point reads per queue:
        store times grow with offsets within a queue.
        """
        validation.check_name("topic", topic, allow_dlq=True)
        validation.check_range("timestamp_ms", timestamp_ms, 0, keys.MAX_OFFSET)
        info = self._catalog.topic(topic)
        return [
            (queue_id, self._offsets.offset_at(info.topic_id, queue_id, timestamp_ms))
            for queue_id in range(info.queues)
        ]
