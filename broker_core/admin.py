"""Admin operations beyond create/get/list: topic growth, guarded deletes, purges, offset
resets, peeks and dead-letter redrive.

Each checks everything first, writes one batch (redrive: one per chunk) and changes memory
only after that batch committed. Queues an operation changes are try-locked meanwhile, so
pops skip them instead of reading state that is about to move.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker_core import dlq_holes, jobs, keys, validation
from popmq.broker_core.budget import ResponseBudget
from popmq.broker_core.catalog import KIND_NORMAL, Catalog, TopicInfo, dlq_topic_name
from popmq.broker_core.clock import Clock
from popmq.broker_core.config import BrokerConfig
from popmq.broker_core.consume_queues import ConsumeQueues
from popmq.broker_core.errors import FailedPreconditionError, InvalidArgumentError
from popmq.broker_core.group_commit import GroupCommitWriter
from popmq.broker_core.long_polling import LongPolling
from popmq.broker_core.offsets import OffsetReads, QueueOffsets
from popmq.broker_core.pop.live_checkpoints import LiveCheckpoints
from popmq.broker_core.pop.retry import redriven
from popmq.broker_core.pop.superseded import SupersededHandles
from popmq.broker_core.queue_lock import QueueLocks
from popmq.broker_core.record import MessageRecord
from popmq.broker_core.send import QueueChooser
from popmq.broker_core.store import Batch, Store
from popmq.broker_core.to_the_end import runs_to_the_end, to_the_end
from popmq.broker_core.topics import Topics
from popmq.broker_core.types import (
    OffsetChange,
    PeekedMessage,
    QueueDetails,
    RedriveOutcome,
    RedriveResult,
    ResetResult,
)

log = logging.getLogger(__name__)

_PEEK_MAX = 256
"""Most messages one peek returns."""
_REDRIVE_CHUNK = 256
"""Dead letters moved per write batch."""
_REDRIVE_MAX = 1_000_000
"""Most dead letters one redrive call moves."""


class Admin:
    """The AdminService operations on topics, offsets and messages."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        store: Store,
        catalog: Catalog,
        writer: GroupCommitWriter,
        offsets: QueueOffsets,
        offset_reads: OffsetReads,
        queues: ConsumeQueues,
        checkpoints: LiveCheckpoints,
        superseded: SupersededHandles,
        topics: Topics,
        chooser: QueueChooser,
        locks: QueueLocks,
        polling: LongPolling,
        clock: Clock,
    ) -> None:
        self._config = config
        self._store = store
        self._catalog = catalog
        self._writer = writer
        self._offsets = offsets
        self._offset_reads = offset_reads
        self._queues = queues
        self._checkpoints = checkpoints
        self._superseded = superseded
        self._topics = topics
        self._chooser = chooser
        self._locks = locks
        self._polling = polling
        self._clock = clock

    def inflight_count(self, *, group: str | None = None, topic: str | None = None) -> int:
        """Messages popped and neither acked nor redelivered yet, for one group and/or one
        topic (a topic's count includes its retry queues)."""
        group_id = self._catalog.group(group).group_id if group is not None else None
        topic_ids = self._topic_ids(self._catalog.topic(topic)) if topic is not None else None
        return sum(
            len(cq.inflight)
            for (gid, tid, _), cq in self._queues.items()
            if (group_id is None or gid == group_id) and (topic_ids is None or tid in topic_ids)
        )

    def _topic_ids(self, info: TopicInfo) -> set[int]:
        """A user topic's id plus the ids of its retry topics."""
        ids = {info.topic_id}
        ids.update(
            retry.topic_id
            for (_, tid), retry in self._catalog.retry_topics.items()
            if tid == info.topic_id
        )
        return ids

    @runs_to_the_end
    async def update_topic(self, name: str, queues: int) -> TopicInfo:
        """Grow a topic to `queues` queues. Queues are never removed: that would strand the
        messages stored in them and the offsets groups hold there."""
        validation.check_name("topic", name)
        info = self._catalog.topic(name)
        if queues < info.queues:
            raise InvalidArgumentError(
                f"queues {queues} is below the topic's current {info.queues}: queues can only "
                "be added (removing one would strand its messages)"
            )
        validation.check_range("queues", queues, 1, validation.MAX_QUEUES)
        if queues == info.queues:
            return info
        grown = dataclasses.replace(info, queues=queues)
        await self._writer.submit(lambda b, _: self._catalog.write_topic(b, grown), sync=True)
        if self._catalog.topics.get(name) is not info:
            raise FailedPreconditionError(f"topic {name!r} changed while it grew; retry")
        self._catalog.register_topic(grown)
        log.info("topic %s grown from %d to %d queues", name, info.queues, queues)
        return grown

    async def delete_topic_guarded(self, name: str, *, force: bool = False) -> None:
        """Delete a topic, refusing while groups have its messages in flight unless forced."""
        validation.check_name("topic", name, allow_dlq=True)
        info = self._catalog.topic(name)
        ids = self._topic_ids(info)
        busy: dict[str, int] = {}
        for (gid, tid, _), cq in self._queues.items():
            group = self._catalog.groups_by_id.get(gid)
            if tid in ids and cq.inflight and group is not None:
                busy[group.name] = busy.get(group.name, 0) + len(cq.inflight)
        if busy and not force:
            detail = ", ".join(f"{g} ({n})" for g, n in sorted(busy.items()))
            raise FailedPreconditionError(
                f"topic {name!r} has messages in flight for groups {detail}; wait until they "
                "are acked or redelivered, or delete with force"
            )
        await self._topics.delete_topic(name)

    def describe_topic(self, name: str) -> tuple[TopicInfo, list[QueueDetails], list[str]]:
        """A topic, its queues (offsets, count, newest store time) and the groups that read it."""
        validation.check_name("topic", name, allow_dlq=True)
        info = self._catalog.topic(name)
        queues = []
        for queue_id in range(info.queues):
            low = self._offsets.min_offset(info.topic_id, queue_id)
            high = self._offsets.max_offset(info.topic_id, queue_id)
            last = self._offsets.newest_store_time(info.topic_id, queue_id) if high > low else 0
            queues.append(QueueDetails(queue_id, low, high, last))
        ids = self._topic_ids(info)
        groups = sorted(
            {
                self._catalog.groups_by_id[gid].name
                for (gid, tid, _) in self._queues
                if tid in ids and gid in self._catalog.groups_by_id
            }
        )
        return info, queues, groups

    @runs_to_the_end
    async def purge(self, topic: str, queue_id: int | None = None) -> int:
        """Delete every stored message of one queue (or all queues); returns how many.

        Offsets stay: a group behind the purge point skips what was purged, exactly as after
        retention (counted in its retention_skipped). Messages sent meanwhile are kept.
        """
        validation.check_name("topic", topic, allow_dlq=True)
        info = self._catalog.topic(topic)
        if queue_id is not None:
            validation.check_queue_id(topic, info.queues, queue_id)
        tid = info.topic_id
        queue_ids = [queue_id] if queue_id is not None else list(range(info.queues))
        cuts = [
            (q, self._offsets.min_offset(tid, q), self._offsets.max_offset(tid, q))
            for q in queue_ids
        ]
        cuts = [(q, low, high) for q, low, high in cuts if high > low]
        if not cuts:
            return 0

        def apply(batch: Batch, _: QueueOffsets) -> None:
            for q, low, high in cuts:
                batch.delete_range(
                    "messages", keys.message_key(tid, q, low), keys.message_key(tid, q, high)
                )
                # Emptied (unless sends came meanwhile): a restart finds its end here, not
                # at 0, so the purged offsets never go to new messages a group skips.
                batch.put("meta", keys.queue_end_key(tid, q), keys.encode_u64(high))

        await self._writer.submit(apply, sync=True)
        if tid in self._catalog.topics_by_id:
            for q, _, high in cuts:
                if self._offsets.min_offset(tid, q) < high:
                    self._offsets.set_min_offset(tid, q, high)
        purged = sum(high - low for _, low, high in cuts)
        log.info("purged %d messages of topic %s (queues %s)", purged, topic, queue_ids)
        return purged

    async def reset_offsets(
        self,
        group: str,
        topic: str,
        *,
        target: str,
        timestamp_ms: int = 0,
        offsets: dict[int, int] | None = None,
        force: bool = False,
    ) -> ResetResult:
        """Move a group's consumer offsets in a topic's queues (its retry queue is untouched).

        target: "earliest", "latest", "timestamp" (first message stored at or after
        timestamp_ms) or "offsets" (explicit, per queue id). Refused while the group has
        messages of the topic in flight, unless forced: then those deliveries are dropped and
        their receipt handles are refused from then on.
        """
        validation.check_name("group", group)
        validation.check_name("topic", topic, allow_dlq=True)
        group_info = self._catalog.group(group)
        info = self._catalog.topic(topic)
        tid = info.topic_id
        bounds = {
            q: (self._offsets.min_offset(tid, q), self._offsets.max_offset(tid, q))
            for q in range(info.queues)
        }
        if target == "earliest":
            new = {q: low for q, (low, _) in bounds.items()}
        elif target == "latest":
            new = {q: high for q, (_, high) in bounds.items()}
        elif target == "timestamp":
            if timestamp_ms <= 0:
                raise InvalidArgumentError("a reset to a timestamp needs the timestamp")
            new = dict(self._offset_reads.offsets_at(topic, timestamp_ms))
        elif target == "offsets":
            if not offsets:
                raise InvalidArgumentError("a reset to explicit offsets needs at least one")
            new = {}
            for q, offset in sorted(offsets.items()):
                if q not in bounds:
                    validation.check_queue_id(topic, info.queues, q)
                low, high = bounds[q]
                if not low <= offset <= high:
                    raise InvalidArgumentError(
                        f"offset {offset} of queue {q} is outside {low}..{high} (the "
                        "queue's min and max offsets)"
                    )
                new[q] = offset
        else:
            raise InvalidArgumentError(
                f"reset target {target!r} is not one of earliest, latest, timestamp, offsets"
            )
        queues = {q: self._queues.queue(group_info, info, q) for q in new}
        retry = self._catalog.retry_topics.get((group_info.group_id, tid))
        retry_cq = self._queues.get(group_info.group_id, retry.topic_id, 0) if retry else None
        held = sum(len(cq.inflight) for cq in queues.values())
        held += len(retry_cq.inflight) if retry_cq is not None else 0
        if held and not force:
            raise FailedPreconditionError(
                f"group {group!r} has {held} messages of topic {topic!r} in flight; wait until "
                "they are acked or redelivered, or reset with force (their receipt handles "
                "then stop working)"
            )
        owned = {id(cq) for cq in queues.values()}
        cks = self._checkpoints.select(lambda ck: id(ck.queue) in owned)
        dropped = [(ck, index) for ck in cks for index in ck.unresolved()]
        old = {q: cq.committed for q, cq in queues.items()}
        gid = group_info.group_id
        locked = self._locks.acquire_all(cq.lock_key for cq in queues.values())
        try:

            def apply(batch: Batch, _: QueueOffsets) -> None:
                for q, offset in new.items():
                    batch.put("offsets", keys.offset_key(gid, tid, q), keys.encode_u64(offset))
                for ck in cks:
                    if ck.persisted:
                        batch.delete("checkpoints", keys.checkpoint_key(ck.ck_id))
                        batch.delete("revive", keys.revive_key(ck.deadline_ms, ck.ck_id))
                for ck, index in dropped:
                    # Refused until its old deadline, across restarts, like a superseded one.
                    SupersededHandles.write(batch, ck.ck_id, index, ck.deadline_ms)

            def reset(_: object) -> None:
                # In the flush's callback: it runs even when this call was cancelled
                # meanwhile (a gRPC handler whose client went away), so memory never keeps
                # the offsets and checkpoints the store no longer has.
                self._checkpoints.drop(cks)
                for ck, index in dropped:
                    self._superseded.remember(ck.ck_id, index, ck.deadline_ms)
                for q, cq in queues.items():
                    cq.reset(new[q])
                    self._checkpoints.write_offset(cq)
                self._writer.request_flush()

            written = self._writer.submit(apply, sync=True, committed=reset)
            await asyncio.shield(written)  # a cancelled call does not cancel its write
        finally:
            for lock_key in locked:
                self._locks.release(lock_key)
        self._polling.notify(topic, self._config.long_polling.max_per_key, group=group)
        log.info(
            "reset group %s on topic %s to %s (%d in-flight dropped)",
            group,
            topic,
            target,
            len(dropped),
        )
        return ResetResult(
            [OffsetChange(q, old[q], new[q]) for q in sorted(new)], dropped_inflight=len(dropped)
        )

    def peek(
        self,
        topic: str,
        *,
        queue_id: int | None = None,
        offset: int | None = None,
        group: str = "",
        max_messages: int = 16,
    ) -> list[PeekedMessage]:
        """Read stored messages without consuming them: no checkpoint, no offset change.

        Starts at `offset` (one queue only), else at the group's consumer offset when a
        group is given, else at each queue's min offset.
        """
        validation.check_name("topic", topic, allow_dlq=True)
        validation.check_range("max_messages", max_messages, 1, _PEEK_MAX)
        info = self._catalog.topic(topic)
        group_info = None
        if group:
            validation.check_name("group", group)
            group_info = self._catalog.group(group)
        if queue_id is not None:
            validation.check_queue_id(topic, info.queues, queue_id)
        if offset is not None and queue_id is None:
            raise InvalidArgumentError("an offset needs a queue_id: offsets are per queue")
        tid = info.topic_id
        found: list[PeekedMessage] = []
        response = ResponseBudget()
        for q in [queue_id] if queue_id is not None else range(info.queues):
            low, high = self._offsets.min_offset(tid, q), self._offsets.max_offset(tid, q)
            start = low
            if offset is not None:
                if not 0 <= offset <= high:
                    raise InvalidArgumentError(
                        f"offset {offset} is outside 0..{high} (queue {q}'s max offset)"
                    )
                start = max(offset, low)
            elif group_info is not None:
                cq = self._queues.get(group_info.group_id, tid, q)
                start = max(cq.committed, low) if cq is not None else low
            end = min(high, start + max_messages - len(found))
            while start < end:
                chunk_end = start + response.reads(end - start)
                values = self._store.multi_get(
                    "messages", [keys.message_key(tid, q, o) for o in range(start, chunk_end)]
                )
                for at, value in zip(range(start, chunk_end), values, strict=True):
                    if value is None:
                        continue
                    response.saw(len(value))
                    if not response.take(len(value)):
                        return found  # the answer is full (budget.py)
                    found.append(PeekedMessage(info.name, q, at, MessageRecord.from_bytes(value)))
                start = chunk_end
            if len(found) >= max_messages:
                break
        return found

    async def redrive(
        self, group: str, *, max_messages: int | None = None, only: Sequence[tuple[int, int]] = ()
    ) -> RedriveResult:
        """Move messages of `%DLQ%<group>` back to the topics they were first sent to (SQS
        redrive), oldest first, as new messages with delivery_attempt 1 (pop/retry.py).

        Each chunk is one atomic batch: the copies and the removal from the dead-letter
        topic, so a crash neither loses nor duplicates a message. A message whose topic was
        deleted is removed and counted as dropped (its topic's messages are gone too).

        `only` names the dead letters to move instead, as (queue_id, offset), at most
        validation.REDRIVE_SELECTED_MAX, each once; the answer says for each what became of it.
        """
        validation.check_name("group", group)
        if max_messages is not None:
            validation.check_range("max_messages", max_messages, 1, _REDRIVE_MAX)
        if only:
            validation.check_redrive_selection(max_messages, only)
        dlq = self._catalog.topics.get(dlq_topic_name(group))
        if dlq is None:
            self._catalog.group(group)  # NOT_FOUND for an unknown group
            for queue_id, _ in only:
                validation.check_queue_id(dlq_topic_name(group), 1, queue_id)
            return RedriveResult(0, 0, 0, tuple(RedriveOutcome(q, o, "not_found") for q, o in only))
        for queue_id, _ in only:
            validation.check_queue_id(dlq.name, dlq.queues, queue_id)
        tid = dlq.topic_id
        lock = f"{dlq.name}@redrive"
        if not self._locks.try_acquire(lock):
            raise FailedPreconditionError(f"a redrive of {dlq.name} is already running")
        if only:
            # One batch: run to its end even when the caller leaves (to_the_end.py).
            return await to_the_end(self._redrive_selected(dlq, only, lock))
        moved = dropped = 0
        retention_ms = round(self._config.retention.retention_s * 1000)
        # The chunk whose write this call waits for: if it is cancelled meanwhile, the lock
        # is released only when that write ends, so a redrive started at once cannot read
        # and copy the chunk again before it is removed.
        writing: asyncio.Future[Any] | None = None
        try:
            position = self._offsets.min_offset(tid, 0)
            limit = self._offsets.max_offset(tid, 0)
            if max_messages is not None:
                limit = min(limit, position + max_messages)
            while position < limit and tid in self._catalog.topics_by_id:
                end = min(limit, position + _REDRIVE_CHUNK)
                values = self._store.multi_get(
                    "messages", [keys.message_key(tid, 0, o) for o in range(position, end)]
                )
                stamp = self._clock.now_ms()
                copies: list[tuple[TopicInfo, int, records_pb2.StoredMessage]] = []
                for value in values:
                    if value is None:
                        continue
                    record = records_pb2.StoredMessage.FromString(value)
                    target = self._catalog.topics.get(record.origin_topic)
                    if target is None or target.kind != KIND_NORMAL:
                        dropped += 1
                        continue
                    queue_id = record.origin_queue_id
                    if not 0 <= queue_id < target.queues:
                        queue_id = self._chooser.choose(target, "")
                    redriven(record, stamp)
                    copies.append((target, queue_id, record))
                start_key = keys.message_key(tid, 0, position)
                end_key = keys.message_key(tid, 0, end)

                def apply(
                    batch: Batch,
                    offsets: QueueOffsets,
                    copies: list[tuple[TopicInfo, int, records_pb2.StoredMessage]] = copies,
                    start_key: bytes = start_key,
                    end_key: bytes = end_key,
                    stamp: int = stamp,
                    start: int = position,
                    end: int = end,
                ) -> None:
                    for target, queue_id, record in copies:
                        # Query by id and key finds the live copy, not only the dead letter.
                        jobs.store_indexed(
                            batch, offsets, target.topic_id, queue_id, record, stamp, retention_ms
                        )
                    batch.delete_range("messages", start_key, end_key)
                    dlq_holes.forget(batch, tid, start, end)

                def advanced(
                    _: object,
                    copies: list[tuple[TopicInfo, int, records_pb2.StoredMessage]] = copies,
                    end: int = end,
                ) -> None:
                    # In the flush's callback: it runs even when this call was cancelled.
                    if tid in self._catalog.topics_by_id and self._offsets.min_offset(tid, 0) < end:
                        self._offsets.set_min_offset(tid, 0, end)
                    self._notify_copies(copies)

                writing = self._writer.submit(
                    apply, sync=self._config.store.flush == "sync", committed=advanced
                )
                await asyncio.shield(writing)  # a cancelled call does not cancel its write
                writing = None
                moved += len(copies)
                position = end
        finally:
            if writing is not None and not writing.done():
                writing.add_done_callback(lambda _: self._locks.release(lock))
            else:
                self._locks.release(lock)
        remaining = 0
        if tid in self._catalog.topics_by_id:
            remaining = self._dlq_depth(tid)
        log.info(
            "redrove %s: %d moved, %d dropped (topic gone), %d remaining",
            dlq.name,
            moved,
            dropped,
            remaining,
        )
        return RedriveResult(moved, dropped, remaining)

    def _notify_copies(
        self, copies: list[tuple[TopicInfo, int, records_pb2.StoredMessage]]
    ) -> None:
        """Wake the pops held on the topics redriven copies went to."""
        counts: dict[str, int] = {}
        for target, _, _ in copies:
            counts[target.name] = counts.get(target.name, 0) + 1
        for name, count in counts.items():
            self._polling.notify(name, count)

    def _dlq_depth(self, topic_id: int) -> int:
        """Dead letters stored in the dead-letter topic's queue 0, holes left out."""
        return dlq_holes.depth(
            self._store,
            topic_id,
            self._offsets.min_offset(topic_id, 0),
            self._offsets.max_offset(topic_id, 0),
        )

    async def _redrive_selected(
        self, dlq: TopicInfo, selected: Sequence[tuple[int, int]], lock: str
    ) -> RedriveResult:
        """Move the named dead letters in one batch; releases the redrive lock `lock`."""
        try:
            return await self._moved_selected(dlq, selected)
        finally:
            self._locks.release(lock)

    async def _moved_selected(
        self, dlq: TopicInfo, selected: Sequence[tuple[int, int]]
    ) -> RedriveResult:
        """`_redrive_selected`'s work, the lock held."""
        tid = dlq.topic_id
        retention_ms = round(self._config.retention.retention_s * 1000)
        low = self._offsets.min_offset(tid, 0)
        high = self._offsets.max_offset(tid, 0)
        # Below the min offset a key may linger until retention's range delete lands; such a
        # message is gone already, so only offsets in [min, max) are read.
        wanted = [(q, o) for q, o in selected if low <= o < high]
        values = self._store.multi_get("messages", [keys.message_key(tid, q, o) for q, o in wanted])
        found = {ref: value for ref, value in zip(wanted, values, strict=True) if value}
        stamp = self._clock.now_ms()
        copies: list[tuple[TopicInfo, int, records_pb2.StoredMessage]] = []
        outcome: dict[tuple[int, int], str] = {}
        for ref, value in found.items():
            record = records_pb2.StoredMessage.FromString(value)
            target = self._catalog.topics.get(record.origin_topic)
            if target is None or target.kind != KIND_NORMAL:
                outcome[ref] = "dropped"
                continue
            queue_id = record.origin_queue_id
            if not 0 <= queue_id < target.queues:
                queue_id = self._chooser.choose(target, "")
            redriven(record, stamp)
            copies.append((target, queue_id, record))
            outcome[ref] = "moved"
        if found:

            def apply(batch: Batch, offsets: QueueOffsets) -> None:
                for target, queue_id, record in copies:
                    jobs.store_indexed(
                        batch, offsets, target.topic_id, queue_id, record, stamp, retention_ms
                    )
                for q, o in found:
                    batch.delete("messages", keys.message_key(tid, q, o))
                    dlq_holes.mark(batch, tid, o)

            await self._writer.submit(apply, sync=self._config.store.flush == "sync")
            if tid in self._catalog.topics_by_id:
                # The head moves past the removed run at its front; removed offsets behind
                # it are holes (dlq_holes.py), which the depth leaves out.
                first = self._store.first_key(
                    "messages",
                    keys.message_key(tid, 0, self._offsets.min_offset(tid, 0)),
                    keys.queue_prefix(tid, 1),
                )
                head = keys.message_offset(first) if first is not None else high
                if head > self._offsets.min_offset(tid, 0):
                    self._offsets.set_min_offset(tid, 0, head)
            self._notify_copies(copies)
        remaining = self._dlq_depth(tid) if tid in self._catalog.topics_by_id else 0
        outcomes = tuple(
            RedriveOutcome(q, o, outcome.get((q, o), "not_found")) for q, o in selected
        )
        moved = sum(1 for o in outcomes if o.outcome == "moved")
        dropped = sum(1 for o in outcomes if o.outcome == "dropped")
        log.info(
            "redrove %d selected of %s: %d moved, %d dropped (topic gone), %d not found",
            len(selected),
            dlq.name,
            moved,
            dropped,
            len(selected) - moved - dropped,
        )
        return RedriveResult(moved, dropped, remaining, outcomes)
