"""Queue offsets: where each queue's messages start and end, and where groups read by offset.

`QueueOffsets` caches every queue's bounds (the writer assigns offsets inside its flush;
retention moves the min offset up) and finds offsets by store time. `OffsetReads` serves the
group-less reads by offset, offset commits and offset-at-time lookups, for readers that keep
their own position (the Spark connector's offset mode, queue-exclusive consumers).

Threading: everything here runs on the event loop; a store-time lookup is a binary search of
point reads (microseconds each).
"""

from __future__ import annotations

from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker_core import keys
from popmq.broker_core.store import Store


class QueueOffsets:
    """Next offset of every queue: committed (visible to readers) and tentative (in a flush)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        # committed[(topic_id, queue_id)]: offset the next stored message will get. Readers
        # never see beyond it. Guarded by running on the loop thread only.
        self._committed: dict[tuple[int, int], int] = {}
        self._tentative: dict[tuple[int, int], int] = {}
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
        self._tentative[key] = first + count
        return first

    def commit(self) -> list[tuple[int, int]]:
        """Publish the flush's offsets; returns the queues that grew."""
        grown = list(self._tentative)
        self._committed.update(self._tentative)
        self._tentative.clear()
        return grown

    def rollback(self) -> None:
        self._tentative.clear()

    def forget_all(self) -> None:
        """Drop every cached offset: the next use of a queue reads its bounds from the store."""
        self._committed.clear()
        self._min.clear()

    def forget_topic(self, topic_id: int) -> None:
        for table in (self._committed, self._min):
            for key in [k for k in table if k[0] == topic_id]:
                del table[key]

    def _load(self, topic_id: int, queue_id: int) -> int:
        prefix = keys.queue_prefix(topic_id, queue_id)
        last = self._store.last_key("messages", prefix, keys.queue_prefix(topic_id, queue_id + 1))
        return 0 if last is None else keys.message_offset(last) + 1

    def store_time(self, topic_id: int, queue_id: int, offset: int) -> int:
        """Store time of one message; -1 when it is already gone (treated as old)."""
        data = self._store.get("messages", keys.message_key(topic_id, queue_id, offset))
        if data is None:
            return -1  # already gone: treat as old
        return records_pb2.StoredMessage.FromString(data).store_time_ms

    def offset_at(self, topic_id: int, queue_id: int, timestamp_ms: int) -> int:
        """First offset stored at or after timestamp_ms (max_offset when none is): store
        times grow with offsets within a queue, so a binary search of point reads."""
        lo = self.min_offset(topic_id, queue_id)
        hi = self.max_offset(topic_id, queue_id)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.store_time(topic_id, queue_id, mid) < timestamp_ms:
                lo = mid + 1
            else:
                hi = mid
        return lo
