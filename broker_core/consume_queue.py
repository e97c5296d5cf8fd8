"""A group's position in one queue: committed offset, pop offset, checkpoint chain.

The consumer offset advances past a chained checkpoint only when that checkpoint and every
earlier one is done (all messages resolved) or persisted (RocketMQ PopBufferMergeService
rule). So a crash can lose only buffered checkpoints, whose messages are then popped again:
redelivery, never loss.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterator

from popmq.broker_core.pop.checkpoint import Checkpoint


class ConsumeQueue:
    """State of (group, topic, queue), named by its lock key `topic@group@queueId`."""

    __slots__ = (
        "chain",
        "committed",
        "fifo",
        "fifo_held",
        "fifo_ready",
        "group",
        "group_id",
        "inflight",
        "lock_key",
        "pop_offset",
        "queue_id",
        "recovered",
        "retention_skipped",
        "topic",
        "topic_id",
    )

    def __init__(
        self, *, group: str, group_id: int, topic: str, topic_id: int, queue_id: int, committed: int
    ) -> None:
        self.group = group
        self.group_id = group_id
        self.topic = topic
        self.topic_id = topic_id
        self.queue_id = queue_id
        self.lock_key = f"{topic}@{group}@{queue_id}"
        self.committed = committed
        """Consumer offset: every message below it is finished with (or owned by revive)."""
        self.pop_offset = committed
        """Next offset a pop reads."""
        self.chain: deque[Checkpoint] = deque()
        """Chained checkpoints not yet passed by `committed`, by range_start."""
        self.inflight: dict[int, Checkpoint] = {}
        """offset -> the checkpoint that currently owns that message's delivery."""
        self.recovered: list[tuple[int, int]] = []
        """Ranges above pop_offset covered by checkpoints recovered at startup (sorted)."""
        self.retention_skipped = 0
        """Messages retention deleted before this group read them (since start-up)."""
        self.fifo: dict[str, deque[Checkpoint]] = {}
        """message group -> its FIFO checkpoints in offset order; the head is the one
        delivered (or, when held, the next to deliver)."""
        self.fifo_ready: dict[str, None] = {}
        """Groups whose head is held, so a pop may deliver it (oldest first)."""
        self.fifo_held = 0
        """Held (read but not delivered) FIFO messages; bounds how far a pop reads ahead."""

    # -- FIFO message groups ---------------------------------------------------------------

    def fifo_enqueue(self, ck: Checkpoint) -> bool:
        """Queue a FIFO checkpoint behind its group; True when it is the group's head."""
        lane = self.fifo.setdefault(ck.fifo_group, deque())
        if lane and lane[-1].queue_offset() > ck.queue_offset():
            # Only after a crash can a lower offset arrive late; keep offset order.
            items = sorted([*lane, ck], key=lambda c: c.queue_offset())
            lane.clear()
            lane.extend(items)
        else:
            lane.append(ck)
        if ck.held:
            self.fifo_held += 1
        if lane[0].held:
            self.fifo_ready[ck.fifo_group] = None
        return lane[0] is ck

    def fifo_replace(self, old: Checkpoint, new: Checkpoint) -> None:
        """`new` takes `old`'s place in its group (a delivery, redelivery, move or re-hold)."""
        lane = self.fifo[old.fifo_group]
        for i, ck in enumerate(lane):
            if ck is old:
                lane[i] = new
                break
        self.fifo_held += int(new.held) - int(old.held)
        if lane[0].held:
            self.fifo_ready[new.fifo_group] = None
        else:
            self.fifo_ready.pop(new.fifo_group, None)

    def fifo_remove(self, ck: Checkpoint) -> bool:
        """Drop a finished FIFO checkpoint; True when its group has a next message ready."""
        lane = self.fifo.get(ck.fifo_group)
        if lane is None or ck not in lane:
            return False
        lane.remove(ck)
        if ck.held:
            self.fifo_held -= 1
        if not lane:
            del self.fifo[ck.fifo_group]
            self.fifo_ready.pop(ck.fifo_group, None)
            return False
        if lane[0].held:
            self.fifo_ready[ck.fifo_group] = None
            return True
        return False

    def fifo_ready_heads(self, now_ms: int) -> Iterator[Checkpoint]:
        """Held heads that may be delivered now, oldest ready group first."""
        for group in list(self.fifo_ready):
            lane = self.fifo.get(group)
            if not lane or not lane[0].held:
                self.fifo_ready.pop(group, None)
                continue
            if lane[0].not_before_ms <= now_ms:
                yield lane[0]

    def read_window(self, max_offset: int) -> tuple[int, int]:
        """[start, limit) a pop may read now, skipping ranges recovered checkpoints own."""
        start = self.pop_offset
        while self.recovered and self.recovered[0][0] <= start:
            start = max(start, self.recovered.pop(0)[1])
        self.pop_offset = start
        limit = min(max_offset, self.recovered[0][0]) if self.recovered else max_offset
        return start, limit

    def add(self, ck: Checkpoint) -> None:
        """Register a checkpoint made by a pop of this queue (or recovered at startup)."""
        for i, offset in enumerate(ck.offsets):
            if not ck.resolved >> i & 1:
                self.inflight[offset] = ck
        if not ck.chained:
            return
        if not self.chain or self.chain[-1].range_start <= ck.range_start:
            self.chain.append(ck)
        else:
            starts = [c.range_start for c in self.chain]
            self.chain.insert(bisect.bisect(starts, ck.range_start), ck)
        if ck.range_end > self.pop_offset and ck.range_start <= self.pop_offset:
            self.pop_offset = ck.range_end

    def release(self, ck: Checkpoint, index: int) -> None:
        """Forget that `ck` owns offsets[index] (acked, superseded or revived)."""
        offset = ck.offsets[index]
        if self.inflight.get(offset) is ck:
            del self.inflight[offset]

    def advance(self) -> bool:
        """Move `committed` past finished chained checkpoints; True when it moved."""
        moved = False
        while self.chain:
            head = self.chain[0]
            if head.range_start > self.committed or not (head.done or head.persisted):
                break
            self.chain.popleft()
            if head.range_end > self.committed:
                self.committed = head.range_end
                moved = True
        return moved

    def reset(self, offset: int) -> None:
        """Start over at `offset` with nothing in flight (a forced offset reset, whose batch
        deleted this queue's checkpoints)."""
        self.chain.clear()
        self.inflight.clear()
        self.recovered.clear()
        self.fifo.clear()
        self.fifo_ready.clear()
        self.fifo_held = 0
        self.committed = self.pop_offset = offset

    def __repr__(self) -> str:
        return (
            f"ConsumeQueue({self.lock_key}, committed={self.committed}, "
            f"pop_offset={self.pop_offset}, chain={len(self.chain)}, inflight={len(self.inflight)})"
        )
