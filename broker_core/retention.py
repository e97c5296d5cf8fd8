"""Retention: delete messages older than retention_s, or the oldest ones while the stored
data exceeds max_disk_bytes, and sweep index entries past their lifetime.

A pass costs one binary search of point reads and one range tombstone per queue, so it never
holds the loop for long. It runs as one of the broker's background tasks.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import logging

from popmq.broker_core import jobs, keys, message_index
from popmq.broker_core.catalog import Catalog, TopicInfo
from popmq.broker_core.clock import Clock
from popmq.broker_core.config import BrokerConfig
from popmq.broker_core.errors import PopMQError
from popmq.broker_core.group_commit import GroupCommitWriter
from popmq.broker_core.offsets import QueueOffsets
from popmq.broker_core.store import Store

log = logging.getLogger(__name__)

_KEY_OVERHEAD = 16
"""Bytes of a message key, added to each record in the stored-size estimate."""


class Retention:
    """The retention loop and the passes it runs (also callable on their own)."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        store: Store,
        catalog: Catalog,
        offsets: QueueOffsets,
        writer: GroupCommitWriter,
        clock: Clock,
    ) -> None:
        self._config = config
        self._store = store
        self._catalog = catalog
        self._offsets = offsets
        self._writer = writer
        self._clock = clock
        # The store generation and the expiry time below which every marker is deleted:
        # where the next sweep's scan starts (`_sweep_start`).
        self._swept: tuple[int, int] | None = None

    async def loop(self) -> None:
        interval = self._config.retention.check_interval_s
        while True:
            await asyncio.sleep(interval)
            try:
                await self.apply_retention()
                await self.apply_size_limit()
                await self.sweep_index()
            except PopMQError as exc:
                log.warning("retention pass failed, will retry: %s", exc)

    async def apply_retention(self, now: int | None = None) -> int:
        """Delete messages stored before now - retention_s, one range per queue.

        Returns the number of messages deleted. Each queue costs one binary search of point
        reads and one delete_range, whatever the number of messages removed, so a pass never
        holds the loop for long and sends wait at most one small write.
        """
        cutoff = (now if now is not None else self._clock.now_ms()) - round(
            self._config.retention.retention_s * 1000
        )
        deleted = 0
        for topic in list(self._catalog.topics_by_id.values()):
            for queue_id in range(topic.queues):
                cut = self._retention_cut(topic.topic_id, queue_id, cutoff)
                if cut is None:
                    continue
                deleted += await self._delete_head(topic, queue_id, cut, "retention_s")
        return deleted

    async def _delete_head(self, topic: TopicInfo, queue_id: int, cut: int, why: str) -> int:
        """Delete [min offset, cut) of one queue with one range tombstone; returns the count."""
        low = self._offsets.min_offset(topic.topic_id, queue_id)
        if cut <= low:
            return 0
        start_key = keys.message_key(topic.topic_id, queue_id, low)
        end_key = keys.message_key(topic.topic_id, queue_id, cut)
        # Emptied: a restart finds its end recorded, not at 0, so the deleted offsets never
        # go to new messages, which a group that read up to there would skip.
        emptied = cut >= self._offsets.max_offset(topic.topic_id, queue_id)
        queue_end = (keys.queue_end_key(topic.topic_id, queue_id), cut) if emptied else None
        await self._writer.submit(
            jobs.delete_range(start_key, end_key, queue_end=queue_end), sync=False
        )
        if self._catalog.topics_by_id.get(topic.topic_id) is topic:
            self._offsets.set_min_offset(topic.topic_id, queue_id, cut)
        log.info("%s: deleted %s queue %d offsets [%d, %d)", why, topic.name, queue_id, low, cut)
        return cut - low

    def stored_bytes_estimate(self) -> int:
        """Bytes of stored messages, estimated per queue as count x sampled record size.

        RocksDB's own size figures lag deletes until compaction reclaims the space, so
        max_disk_bytes is enforced on this estimate of the live data instead.
        """
        return sum(count * size for _, _, count, size in self._queue_sizes())

    def _queue_sizes(self) -> list[tuple[TopicInfo, int, int, int]]:
        """(topic, queue, message count, mean record bytes from head and tail samples)."""
        sizes = []
        for topic in list(self._catalog.topics_by_id.values()):
            for queue_id in range(topic.queues):
                low = self._offsets.min_offset(topic.topic_id, queue_id)
                high = self._offsets.max_offset(topic.topic_id, queue_id)
                if low >= high:
                    continue
                samples = self._store.multi_get(
                    "messages",
                    [keys.message_key(topic.topic_id, queue_id, o) for o in {low, high - 1}],
                )
                lengths = [len(v) for v in samples if v is not None]
                size = (sum(lengths) // len(lengths) if lengths else 0) + _KEY_OVERHEAD
                sizes.append((topic, queue_id, high - low, size))
        return sizes

    async def apply_size_limit(self) -> int:
        """When stored messages exceed retention.max_disk_bytes, delete the oldest first.

        Oldest across all queues: the queue whose head is oldest loses its messages up to the
        next-oldest head (or what the excess needs), and so on. Returns messages deleted.
        """
        limit = self._config.retention.max_disk_bytes
        if not limit:
            return 0
        sizes = self._queue_sizes()
        excess = sum(count * size for _, _, count, size in sizes) - limit
        if excess <= 0:
            return 0
        heads: list[tuple[int, int, int, TopicInfo, int]] = []
        for topic, queue_id, _, size in sizes:
            low = self._offsets.min_offset(topic.topic_id, queue_id)
            born = self._offsets.store_time(topic.topic_id, queue_id, low)
            heads.append((born, topic.topic_id, queue_id, topic, size))
        heapq.heapify(heads)
        deleted = 0
        while excess > 0 and heads:
            _, _, queue_id, topic, size = heapq.heappop(heads)
            low = self._offsets.min_offset(topic.topic_id, queue_id)
            high = self._offsets.max_offset(topic.topic_id, queue_id)
            cut = min(high, low + max(1, -(-excess // size)))
            if heads:  # stop at the next-oldest head so deletion stays oldest first
                by_time = self._retention_cut(topic.topic_id, queue_id, heads[0][0] + 1)
                cut = min(cut, by_time if by_time is not None else low + 1)
            cut = max(cut, low + 1)
            removed = await self._delete_head(topic, queue_id, cut, "max_disk_bytes")
            deleted += removed
            excess -= removed * size
            if cut < high:
                born = self._offsets.store_time(topic.topic_id, queue_id, cut)
                heapq.heappush(heads, (born, topic.topic_id, queue_id, topic, size))
        return deleted

    def _retention_cut(self, topic_id: int, queue_id: int, cutoff_ms: int) -> int | None:
        """First offset stored at or after cutoff_ms, when something below it can go."""
        low = self._offsets.min_offset(topic_id, queue_id)
        high = self._offsets.max_offset(topic_id, queue_id)
        if low >= high or self._offsets.store_time(topic_id, queue_id, low) >= cutoff_ms:
            return None
        # Store times grow with offsets within a queue (a gap counts as the message after
        # it: store_time): binary search the first one to keep.
        lo, hi = low + 1, high
        while lo < hi:
            mid = (lo + hi) // 2
            if self._offsets.store_time(topic_id, queue_id, mid) < cutoff_ms:
                lo = mid + 1
            else:
                hi = mid
        return lo

    async def sweep_index(self, now: int | None = None) -> int:
        """Delete index entries past their lifetime (retention or dedup window); returns count."""
        now = self._clock.now_ms() if now is None else now
        ttl = {
            b"i": round(self._config.retention.retention_s * 1000),
            b"k": round(self._config.retention.retention_s * 1000),
            b"d": round(self._config.messages.dedup_window_s * 1000),
            b"h": round(self._config.messages.dedup_window_s * 1000),
        }
        removed = 0
        while True:
            start = self._sweep_start()
            markers = message_index.expired_entries(self._store, now, start)
            if not markers:
                return removed
            generation = self._store.generation
            await self._writer.submit(
                functools.partial(jobs.sweep, self._store, markers, now, ttl), sync=False
            )
            removed += sum(len(entries) for _, entries in markers)
            self._swept = (generation, swept_below_ms(markers, self._clock.now_ms()))

    def _sweep_start(self) -> bytes:
        """The first marker key worth reading: past those this broker's sweeps deleted.

        A deleted marker stays in RocksDB as a tombstone until compactions drop it, and a
        scan from the first possible key steps over every one of them, on the loop: once
        600,000 entries were swept, the scan of a pass with nothing left to find took 2.4 to
        6.9 ms against 0.02 to 0.04 from here, the sweep's longest 12 to 14 ms against 3.1
        to 3.8 (`python -m bench.index_sweep`). Markers sort by expiry time, the sweeps
        delete them in that order, and a marker written from now on expires after now: so
        every marker that expires before both the last one deleted and the clock's time then
        is gone for good, unless the clock went back (the scan then starts from the first
        key again, as after a reopen of the store)."""
        swept = self._swept
        if swept is None:
            return message_index.EXPIRY_START
        generation, below_ms = swept
        if generation != self._store.generation or self._clock.now_ms() < below_ms:
            self._swept = None
            return message_index.EXPIRY_START
        return keys.expiry_key(below_ms, b"")


def swept_below_ms(markers: list[tuple[bytes, list[bytes]]], clock_ms: int) -> int:
    """The expiry time below which no marker is left once `markers` (a scan's, in key order)
    are deleted at `clock_ms`: the last one's time, or the clock's if earlier (a marker
    written from then on expires after it). A scan resumes at `keys.expiry_key(it, b"")`."""
    return min(keys.parse_expiry_key(markers[-1][0])[0], clock_ms)
