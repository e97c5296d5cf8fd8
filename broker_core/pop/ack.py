"""Ack, nack, change-invisible-time and dead-letter: what a consumer does with a delivery.

Each resolves a receipt handle to the live checkpoint entry it names (`resolve_handle`,
which also tells a stale, superseded, expired or lost handle apart). A move (nack, change
invisible time) makes a fresh persisted single-message checkpoint and records the old handle
as superseded in the same batch; memory changes only after that batch committed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker_core import jobs, keys, validation
from popmq.broker_core.catalog import Catalog, GroupInfo
from popmq.broker_core.clock import Clock
from popmq.broker_core.config import BrokerConfig
from popmq.broker_core.consume_queues import ConsumeQueues
from popmq.broker_core.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    InvalidReceiptHandleError,
    NotFoundError,
    PopMQError,
    ReceiptHandleExpiredError,
    ReceiptHandleLostError,
    ReceiptHandleSupersededError,
)
from popmq.broker_core.group_commit import GroupCommitWriter
from popmq.broker_core.long_polling import LongPolling
from popmq.broker_core.offsets import QueueOffsets
from popmq.broker_core.pop.checkpoint import Checkpoint
from popmq.broker_core.pop.fifo import Fifo
from popmq.broker_core.pop.history import CHANGE_INVISIBLE_TIME, DEAD_LETTER, NACK
from popmq.broker_core.pop.live_checkpoints import LiveCheckpoints
from popmq.broker_core.pop.receipt import ReceiptCodec, ReceiptHandle
from popmq.broker_core.pop.retry import Retries, redelivery_copy, store_copy
from popmq.broker_core.pop.superseded import SupersededHandles
from popmq.broker_core.stats import BrokerStats
from popmq.broker_core.store import Batch, Store


class Acks:
    """Resolves receipt handles and applies a consumer's verdict on each delivery."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        store: Store,
        catalog: Catalog,
        writer: GroupCommitWriter,
        checkpoints: LiveCheckpoints,
        queues: ConsumeQueues,
        superseded: SupersededHandles,
        fifo: Fifo,
        retries: Retries,
        codec: ReceiptCodec,
        polling: LongPolling,
        stats: BrokerStats,
        clock: Clock,
    ) -> None:
        self._config = config
        self._store = store
        self._catalog = catalog
        self._writer = writer
        self._checkpoints = checkpoints
        self._queues = queues
        self._superseded = superseded
        self._fifo = fifo
        self._retries = retries
        self._codec = codec
        self._polling = polling
        self._stats = stats
        self._clock = clock

    def resolve_handle(
        self, group: GroupInfo, text: str, now: int
    ) -> tuple[Checkpoint, int] | None:
        """The live checkpoint and index a handle refers to; None when already acked.

        Reads only (deliveries.py looks deliveries up with it, changing nothing); raises
        the error an ack of the handle answers when it is stale, superseded, expired or lost.
        """
        return self._resolve(group, self._codec.decode(text), now)

    def _resolve(
        self, group: GroupInfo, handle: ReceiptHandle, now: int
    ) -> tuple[Checkpoint, int] | None:
        """resolve_handle of a handle already decoded."""
        self._check_group(handle, group)
        if (handle.ck_id, handle.ck_index) in self._superseded:
            raise _superseded()
        if handle.topic_id not in self._catalog.topics_by_id:
            raise FailedPreconditionError(
                "the topic of this receipt handle was deleted; there is nothing to acknowledge"
            )
        cq = self._queues.get(handle.group_id, handle.topic_id, handle.queue_id)
        owner = cq.inflight.get(handle.offset) if cq is not None else None
        ck = self._checkpoints.get(handle.ck_id)
        if (
            ck is None
            or handle.ck_index >= len(ck.offsets)
            or ck.offsets[handle.ck_index] != handle.offset
        ):
            # No live checkpoint. In this boot that means finished (acked, or moved and then
            # superseded above). A handle of an earlier boot may instead name a checkpoint
            # the crash lost before it was persisted: then the consumer offset never passed
            # the message and it will be popped again, so "acked" would be a lie.
            earlier_boot = self._checkpoints.of_earlier_boot(handle.ck_id)
            if owner is not None:
                raise _lost() if earlier_boot else _superseded()
            if handle.deadline_ms <= now:
                raise _expired(now - handle.deadline_ms)
            if earlier_boot and (cq is None or handle.offset >= cq.committed):
                raise _lost()
            return None
        bit = 1 << handle.ck_index
        if ck.acked & bit:
            return None  # acked before: a repeated ack is idempotent
        if ck.revived & bit:
            raise _expired(now - handle.deadline_ms)
        if ck.resolved & bit or owner is not ck:
            raise _superseded()
        if handle.deadline_ms <= now:
            raise _expired(now - handle.deadline_ms)
        return ck, handle.ck_index

    def _check_group(self, handle: ReceiptHandle, group: GroupInfo) -> None:
        if handle.group_id != group.group_id:
            other = self._catalog.groups_by_id.get(handle.group_id)
            raise InvalidReceiptHandleError(
                f"receipt handle belongs to group {other.name if other else '(deleted)'!r}, "
                f"not {group.name!r}"
            )

    def follow_handle(self, group: GroupInfo, text: str, now: int) -> tuple[str, int]:
        """The newest handle of the delivery `text` names, and its deadline; reads only.

        A handle ChangeInvisibleTime superseded leads, link by link (superseded.py), to the
        handle the last ChangeInvisibleTime of the same delivery returned; any other handle
        is its own newest. The newest must still name that delivery as an ack would take
        it, in flight or acknowledged (its ack then answers "acked before"): a delivery
        given back by a Nack, redelivered after its deadline or lost in a restart raises
        the error an ack of it gets. Only proxies call this (a lease's renewal, ack and
        replay, proxy/leases.py): a client's old handle stays refused as superseded.
        """
        handle = self._codec.decode(text)
        self._check_group(handle, group)
        ck_id, index, deadline = handle.ck_id, handle.ck_index, handle.deadline_ms
        if (ck_id, index) in self._superseded:
            # Checkpoint ids only grow along a delivery's moves, so the walk ends.
            link = self._superseded.successor((ck_id, index))
            while link is not None:
                ck_id, deadline = link
                index = 0
                link = self._superseded.successor((ck_id, 0))
            if (ck_id, index) in self._superseded:
                raise ReceiptHandleSupersededError(
                    "receipt handle was superseded by a Nack (or an offset reset): the "
                    "delivery was given back, so it has no newer handle to follow"
                )
            text = self._codec.encode(
                ReceiptHandle(
                    handle.group_id, handle.topic_id, handle.queue_id, handle.offset,
                    ck_id, 0, deadline,
                )
            )  # fmt: skip
        self.resolve_handle(group, text, now)
        return text, deadline

    async def ack(self, group: str, handles: Sequence[str]) -> list[PopMQError | None]:
        """Acknowledge deliveries; one result per handle (None = acked, or acked before)."""
        validation.check_name("group", group)
        if not handles:
            raise InvalidArgumentError("ack needs at least one receipt handle")
        group_info = self._catalog.group(group)
        now = self._clock.now_ms()
        results: list[PopMQError | None] = []
        touched: dict[int, Checkpoint] = {}
        acked: dict[int, int] = {}  # topic id -> acks
        # Decoded together: their base64 in one pass (ReceiptCodec.decode_all).
        for handle in self._codec.decode_all(handles):
            if isinstance(handle, InvalidReceiptHandleError):
                results.append(handle)
                continue
            try:
                found = self._resolve(group_info, handle, now)
            except PopMQError as exc:
                results.append(exc)
                continue
            results.append(None)
            if found is None:
                continue
            ck, index = found
            topic_id = ck.queue.topic_id
            acked[topic_id] = acked.get(topic_id, 0) + 1
            ck.resolved |= 1 << index
            ck.acked |= 1 << index
            ck.queue.release(ck, index)
            touched[ck.ck_id] = ck
        for topic_id, count in acked.items():
            self._stats.acked[(group, self._catalog.user_topic_name(topic_id))] += count
        must_write = any(ck.persisted for ck in touched.values())
        for ck in touched.values():
            self._checkpoints.finish(ck)
        if must_write:
            await self._writer.submit(jobs.noop, sync=False)
        return results

    async def change_invisible_time(
        self, group: str, handle: str, invisible_s: float
    ) -> tuple[str, int]:
        """Give one delivery a new deadline; returns (new handle, invisible_until_ms).

        Unlike a pop's, the new invisible time may be below the minimum, down to 0 s
        (visible at once), as RocketMQ's ChangeInvisibleDuration allows: clients use it to
        give a failed message back with a short retry delay.
        """
        validation.check_name("group", group)
        validation.check_invisible(invisible_s, 0, self._config.pop.max_invisible_s)
        return await self._move(
            self._catalog.group(group), handle, round(invisible_s * 1000), CHANGE_INVISIBLE_TIME
        )

    async def nack(self, group: str, handle: str, delay_s: float | None = None) -> int:
        """Redeliver after delay_s, or after the group's backoff; returns the redeliver time."""
        validation.check_name("group", group)
        group_info = self._catalog.group(group)
        if delay_s is not None:
            validation.check_range("delay", delay_s, 0, self._config.pop.max_invisible_s, "s")
            delay_ms = round(delay_s * 1000)
        else:
            found = self.resolve_handle(group_info, handle, self._clock.now_ms())
            if found is None:
                raise FailedPreconditionError("the message was already acknowledged")
            ck, index = found
            data = self._store.get(
                "messages",
                keys.message_key(ck.queue.topic_id, ck.queue.queue_id, ck.offsets[index]),
            )
            attempt = records_pb2.StoredMessage.FromString(data).delivery_attempt if data else 1
            if ck.fifo_group:
                attempt = ck.attempt  # redelivered in place: the record keeps the first
            delay_ms = group_info.backoff_ms(attempt)
        _, until = await self._move(group_info, handle, delay_ms, NACK)
        topic_name = self._catalog.user_topic_name(self._codec.decode(handle).topic_id)
        self._stats.nacked[(group, topic_name)] += 1
        return until

    async def dead_letter(self, group: str, handle: str) -> str:
        """Move one delivery to `%DLQ%<group>` now (RocketMQ ForwardMessageToDeadLetterQueue,
        pop/retry.py).

        The copy is written first and the delivery resolved after the write commits, so a
        failure leaves the message with its consumer; returns the DLQ topic's name.
        """
        validation.check_name("group", group)
        group_info = self._catalog.group(group)
        found = self.resolve_handle(group_info, handle, self._clock.now_ms())
        if found is None:
            raise FailedPreconditionError("the message was already acknowledged")
        ck, index = found
        cq = ck.queue
        offset = ck.offsets[index]
        data = self._store.get("messages", keys.message_key(cq.topic_id, cq.queue_id, offset))
        source = self._catalog.topics_by_id.get(cq.topic_id)
        if data is None or source is None:
            raise NotFoundError("the message was deleted (retention or topic deletion)")
        copy = redelivery_copy(data, source.name, cq.queue_id, offset, self._clock.now_ms())
        target = await self._retries.dead_letter(group_info, copy)
        payload = copy.SerializeToString()

        copied: list[int] = []

        def apply(batch: Batch, offsets: QueueOffsets) -> None:
            copied[:] = [store_copy(batch, offsets, target, payload)]

        def resolved(_: object) -> None:
            # In the flush's callback: it runs even when this call was cancelled meanwhile
            # (a gRPC handler whose client went away), and the copy is stored by then, so
            # the delivery must end here too (or its revive would make a second copy).
            self._checkpoints.history.copied(
                self._clock.now_ms(),
                DEAD_LETTER,
                ck,
                offset,
                ck.attempt,
                (target.topic_id, copied[0]),
            )
            bit = 1 << index
            if not ck.resolved & bit and cq.inflight.get(offset) is ck:
                self._stats.dead_lettered[(group, self._catalog.user_topic_name(cq.topic_id))] += 1
                if ck.fifo_group:
                    ck.revived = ck.full
                    self._fifo.finish(ck, acked=False)
                else:
                    ck.resolved |= bit
                    ck.revived |= bit
                    cq.release(ck, index)
                    self._checkpoints.finish(ck)
            self._polling.notify(target.name, 1)

        written = self._writer.submit(
            apply, sync=self._config.store.flush == "sync", committed=resolved
        )
        await asyncio.shield(written)  # a cancelled call does not cancel its write
        return target.name

    async def _move(
        self, group: GroupInfo, text: str, invisible_ms: int, kind: str
    ) -> tuple[str, int]:
        """Move one delivery to a new single-message checkpoint with a new deadline.

        Like RocketMQ's ChangeInvisibleTime: a fresh checkpoint, persisted at once, then the
        old entry resolved. Until the write commits the old entry is "moving": its handle is
        already refused, but the offset cannot pass it yet.
        """
        now = self._clock.now_ms()
        found = self.resolve_handle(group, text, now)
        if found is None:
            raise FailedPreconditionError("the message was already acknowledged")
        old, index = found
        bit = 1 << index
        offset = old.offsets[index]
        cq = old.queue
        new = Checkpoint(
            ck_id=self._checkpoints.next_ck_id(),
            queue=cq,
            range_start=offset,
            range_end=offset + 1,
            offsets=[offset],
            pop_time_ms=now,
            deadline_ms=now + invisible_ms,
            chained=False,
        )
        new.persisted = True
        new.fifo_group = old.fifo_group
        new.attempt = old.attempt
        new.client_id = old.client_id  # the same consumer still holds the delivery
        cq.inflight[offset] = new  # refuses the old handle from now on (superseded)
        record = new.to_record()
        successor = (new.ck_id, new.deadline_ms) if kind == CHANGE_INVISIBLE_TIME else None

        def apply(batch: Batch, _: QueueOffsets) -> None:
            batch.put("checkpoints", keys.checkpoint_key(new.ck_id), record)
            batch.put("revive", keys.revive_key(new.deadline_ms, new.ck_id), b"")
            # Remembered across restarts until the old deadline: a stale handle stays refused
            # (and, moved by ChangeInvisibleTime, leads to the new one: follow_handle).
            SupersededHandles.write(batch, old.ck_id, index, old.deadline_ms, successor)

        def moved(_: object) -> None:
            # In the flush's callback, not when this call resumes: the batch commits even
            # when the call was cancelled meanwhile (a gRPC handler whose client went away),
            # and a move left half-made would leave the offset owned by a checkpoint nobody
            # tracks and the old handle neither live nor followable, in flight for good.
            old.resolved |= bit
            self._superseded.remember(old.ck_id, index, old.deadline_ms, successor)
            self._checkpoints.track(new)
            self._checkpoints.history.moved(kind, new)
            if old.fifo_group:
                cq.fifo_replace(old, new)  # the group stays blocked behind the moved delivery
            self._checkpoints.finish(old)

        def undone(written: asyncio.Future[Any]) -> None:
            # A failed write (or one the writer dropped): the delivery stays where it was.
            failed = written.cancelled() or written.exception() is not None
            if failed and cq.inflight.get(offset) is new:
                cq.inflight[offset] = old

        try:
            written = self._writer.submit(apply, sync=False, committed=moved)
        except PopMQError:  # writes are refused: nothing was queued
            if cq.inflight.get(offset) is new:
                cq.inflight[offset] = old
            raise
        written.add_done_callback(undone)  # before this call resumes, with the error
        await asyncio.shield(written)  # a cancelled call does not cancel its write
        handle = self._codec.encode(
            ReceiptHandle(
                cq.group_id, cq.topic_id, cq.queue_id, offset, new.ck_id, 0, new.deadline_ms
            )
        )
        return handle, new.deadline_ms


def _superseded() -> ReceiptHandleSupersededError:
    return ReceiptHandleSupersededError(
        "receipt handle was superseded by ChangeInvisibleTime or Nack; use the newest handle"
    )


def _lost() -> ReceiptHandleLostError:
    return ReceiptHandleLostError(
        "this delivery is no longer tracked (the server restarted before recording it); the "
        "message is delivered again with a new handle"
    )


def _expired(ago_ms: int) -> ReceiptHandleExpiredError:
    return ReceiptHandleExpiredError(
        f"receipt handle expired {ago_ms / 1000:.3f}s ago (its invisible time passed); the "
        "message is delivered again with a new handle"
    )
