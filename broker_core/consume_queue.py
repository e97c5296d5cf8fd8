"""A group's position in one queue: committed offset, pop offset, checkpoint chain.

The consumer offset advances past a chained checkpoint only when that checkpoint and every
earlier one is done (all messages resolved) or persisted (RocketMQ PopBufferMergeService
rule). So a crash can lose only buffered checkpoints, whose messages are then popped again:
redelivery, never loss.
"""

from __future__ import annotations

import bisect
from collections import deque

from broker_core.pop.checkpoint import Checkpoint


class ConsumeQueue:
    """State of (group, topic, queue), named by its lock key `topic@group@queueId`."""

    __slots__ = (
        "chain",
        "committed",
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

    def __repr__(self) -> str:
        return (
            f"ConsumeQueue({self.lock_key}, committed={self.committed}, "
            f"pop_offset={self.pop_offset}, chain={len(self.chain)}, inflight={len(self.inflight)})"
        )
