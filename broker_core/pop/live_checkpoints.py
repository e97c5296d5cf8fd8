"""Live checkpoints: the only owner of in-flight POP state.

It tracks every live checkpoint (by id, and on the revive timer), and writes persisted
checkpoints and moved consumer offsets through the writer's flush hook, so they ride along
with whatever batch goes next. A pop's chained checkpoint waits in the checkpoint buffer
(checkpoint_buffer.py) before it is persisted here, if it is not acked first.

It enforces crash-safety rule 2 (see broker.py): a consumer offset is written only in a
batch that also holds (or follows) the record of every persisted checkpoint it passes.
`persist` queues a checkpoint's record for the next flush before its queue may advance, and
`flush_state` writes records and offsets in the same batch.

Threading: all on the event loop.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

from popmq.broker_core import keys
from popmq.broker_core.catalog import Catalog
from popmq.broker_core.clock import Clock
from popmq.broker_core.consume_queue import ConsumeQueue
from popmq.broker_core.group_commit import GroupCommitWriter
from popmq.broker_core.long_polling import LongPolling
from popmq.broker_core.pop.checkpoint import Checkpoint
from popmq.broker_core.pop.checkpoint_buffer import CheckpointBuffer
from popmq.broker_core.pop.history import DeliveryHistory
from popmq.broker_core.store import Batch
from popmq.broker_core.wakeup import Wakeup

CK_SEQ_BITS = 40
"""Checkpoint ids (and timer sequences) are `epoch << CK_SEQ_BITS | sequence`."""


class LiveCheckpoints:
    """Live checkpoints by id and on the revive timer, and the state the next flush writes."""

    def __init__(
        self,
        *,
        writer: GroupCommitWriter,
        catalog: Catalog,
        polling: LongPolling,
        buffer: CheckpointBuffer,
        clock: Clock,
        epoch: int,
    ) -> None:
        self._writer = writer
        self._catalog = catalog
        self._polling = polling
        self.epoch = epoch
        """This boot's number: the high bits of every checkpoint id made now."""
        self._ck_seq = 0
        # Live checkpoints by id: every one that still owes a message.
        self._cks: dict[int, Checkpoint] = {}
        # Revive timer: (deadline_ms, ck_id) of live checkpoints; stale entries are skipped.
        self._revive_heap: list[tuple[int, int]] = []
        self._revive_wakeup = Wakeup()
        clock.on_advance(self._revive_wakeup.set)
        # Chained checkpoints not persisted yet: forgotten there when they finish first.
        self._buffer = buffer
        # State written by the next flush: persisted checkpoints to rewrite or delete, and
        # consume queues whose committed offset moved. See flush_state.
        self._dirty_cks: dict[int, Checkpoint] = {}
        self._dirty_queues: dict[tuple[int, int, int], ConsumeQueue] = {}
        self._in_flush: tuple[list[Checkpoint], list[ConsumeQueue]] = ([], [])
        self.history = DeliveryHistory()
        """Recent pops, moves and revives of these checkpoints' messages (pop/history.py)."""

    # -- ids ------------------------------------------------------------------------------

    def next_ck_id(self) -> int:
        self._ck_seq += 1
        return (self.epoch << CK_SEQ_BITS) | self._ck_seq

    def of_earlier_boot(self, ck_id: int) -> bool:
        """Whether a checkpoint id was made before this boot."""
        return ck_id >> CK_SEQ_BITS != self.epoch

    # -- lookups --------------------------------------------------------------------------

    def get(self, ck_id: int) -> Checkpoint | None:
        """The live checkpoint with this id, if any."""
        return self._cks.get(ck_id)

    def is_live(self, ck_id: int) -> bool:
        return ck_id in self._cks

    def select(self, wanted: Callable[[Checkpoint], bool]) -> list[Checkpoint]:
        """The live checkpoints `wanted` accepts (for deletes and resets)."""
        return [ck for ck in self._cks.values() if wanted(ck)]

    @property
    def live_count(self) -> int:
        return len(self._cks)

    # -- tracking -------------------------------------------------------------------------

    def recovered(self, ck: Checkpoint) -> None:
        """Track a checkpoint recovered from the store at start."""
        self._cks[ck.ck_id] = ck
        heapq.heappush(self._revive_heap, (ck.deadline_ms, ck.ck_id))

    def track(self, ck: Checkpoint) -> None:
        """Make a live checkpoint findable by id and put it on the revive timer."""
        self._cks[ck.ck_id] = ck
        if not self._revive_heap or ck.deadline_ms < self._revive_heap[0][0]:
            self._revive_wakeup.set()
        heapq.heappush(self._revive_heap, (ck.deadline_ms, ck.ck_id))

    def retry_later(self, ck: Checkpoint, delay_ms: int) -> None:
        """Put a checkpoint whose revive failed back on the timer, `delay_ms` later."""
        ck.deadline_ms += delay_ms
        heapq.heappush(self._revive_heap, (ck.deadline_ms, ck.ck_id))

    def due(self, now: int, max_messages: int) -> list[Checkpoint]:
        """Live checkpoints whose deadline passed, up to about `max_messages` messages."""
        due: list[Checkpoint] = []
        pending = 0
        while self._revive_heap and self._revive_heap[0][0] <= now and pending < max_messages:
            deadline, ck_id = heapq.heappop(self._revive_heap)
            ck = self._cks.get(ck_id)
            if ck is None or ck.deadline_ms != deadline or ck.done:
                continue
            due.append(ck)
            pending += len(ck.offsets)
        return due

    def earliest_deadline(self) -> int | None:
        """The earliest deadline of a live checkpoint on the revive timer, if any.

        Stale entries on top (finished or re-armed checkpoints) are dropped on the way, as
        `due` would drop them: amortized, each entry is dropped once."""
        heap = self._revive_heap
        while heap:
            deadline, ck_id = heap[0]
            ck = self._cks.get(ck_id)
            if ck is not None and ck.deadline_ms == deadline and not ck.done:
                return deadline
            heapq.heappop(heap)
        return None

    async def wait_due(self, now: int) -> None:
        """Sleep until the earliest revive deadline (at most 1 s), or a sooner one is set."""
        timeout = 1.0
        if self._revive_heap:
            timeout = min(timeout, max(0.0, (self._revive_heap[0][0] - now) / 1000))
        await self._revive_wakeup.wait(timeout)

    def persist(self, ck: Checkpoint) -> None:
        """Persist a buffered checkpoint in the next flush (record + revive entry).

        Its record is in the next batch, so the offset may pass it at once: an offset write
        is always in the same batch as, or a later one than, the checkpoints it passes.
        """
        self._buffer.discard(ck.ck_id)
        if ck.done or ck.persisted:
            return
        ck.persisted = True
        self._dirty_cks[ck.ck_id] = ck
        self._writer.request_flush()
        self.advance(ck.queue)

    def persist_new(self, ck: Checkpoint) -> None:
        """A checkpoint persisted from birth (FIFO ones): its record goes in the next flush."""
        ck.persisted = True
        self._dirty_cks[ck.ck_id] = ck
        self._writer.request_flush()

    def persist_buffered(self) -> None:
        """A clean shutdown keeps every in-flight deadline: persist what is still buffered."""
        for ck in self._buffer.drain():
            self.persist(ck)

    def advance(self, cq: ConsumeQueue) -> None:
        """Move the queue's consumer offset past finished checkpoints; flush it if it moved."""
        if cq.advance():
            self.queue_moved(cq)

    def queue_moved(self, cq: ConsumeQueue) -> None:
        """The queue's committed offset changed: the next flush writes it."""
        self._dirty_queues[(cq.group_id, cq.topic_id, cq.queue_id)] = cq
        self._writer.request_flush()

    def write_offset(self, cq: ConsumeQueue) -> None:
        """The next flush writes the queue's committed offset (the caller flushes or waits)."""
        self._dirty_queues[(cq.group_id, cq.topic_id, cq.queue_id)] = cq

    def finish(self, ck: Checkpoint) -> None:
        """A checkpoint's state changed: forget it when done, schedule its writes."""
        if ck.done:
            self._cks.pop(ck.ck_id, None)
            self._buffer.discard(ck.ck_id)
        if ck.persisted:
            self._dirty_cks[ck.ck_id] = ck
            self._writer.request_flush()
        if ck.chained:
            self.advance(ck.queue)
        elif ck.fifo_group and ck.done and ck.queue.fifo_remove(ck):
            # The group's next message may go now: wake a held pop of this group.
            cq = ck.queue
            self._polling.notify(self._catalog.user_topic_name(cq.topic_id), 1, group=cq.group)

    def untrack(self, ck: Checkpoint) -> None:
        """Stop finding a checkpoint by id (its group or topic is gone)."""
        self._cks.pop(ck.ck_id, None)

    def forget(self, ck: Checkpoint) -> None:
        """Stop tracking a checkpoint (its records, if any, are someone else's to delete)."""
        self._cks.pop(ck.ck_id, None)
        self._buffer.discard(ck.ck_id)

    def written(self, ck: Checkpoint) -> None:
        """The batch being built deletes the checkpoint's records: the flush need not."""
        self._dirty_cks.pop(ck.ck_id, None)

    def drop(self, cks: Sequence[Checkpoint]) -> None:
        """Forget checkpoints whose records a committed batch deleted."""
        for ck in cks:
            self._cks.pop(ck.ck_id, None)
            self._buffer.discard(ck.ck_id)
            self._dirty_cks.pop(ck.ck_id, None)

    def forget_queue(self, key: tuple[int, int, int]) -> None:
        """A deleted queue's offset is no longer written."""
        self._dirty_queues.pop(key, None)

    # -- flush hook -----------------------------------------------------------------------

    def flush_state(self, batch: Batch) -> None:
        """Flush hook: write dirty persisted checkpoints and moved offsets into this batch."""
        cks = list(self._dirty_cks.values())
        queues = list(self._dirty_queues.values())
        self._dirty_cks.clear()
        self._dirty_queues.clear()
        for ck in cks:
            ck_key = keys.checkpoint_key(ck.ck_id)
            if ck.done:
                batch.delete("checkpoints", ck_key)
                batch.delete("revive", keys.revive_key(ck.deadline_ms, ck.ck_id))
            else:
                batch.put("checkpoints", ck_key, ck.to_record())
                batch.put("revive", keys.revive_key(ck.deadline_ms, ck.ck_id), b"")
        for cq in queues:
            key = keys.offset_key(cq.group_id, cq.topic_id, cq.queue_id)
            batch.put("offsets", key, keys.encode_u64(cq.committed))
        self._in_flush = (cks, queues)

    def flush_failed(self) -> None:
        """The batch failed: what the hook took must be written by the next flush."""
        cks, queues = self._in_flush
        for ck in cks:
            self._dirty_cks.setdefault(ck.ck_id, ck)
        for cq in queues:
            self._dirty_queues.setdefault((cq.group_id, cq.topic_id, cq.queue_id), cq)
        self._in_flush = ([], [])
