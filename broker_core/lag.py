"""Consumer lag: per queue, what a group has not consumed yet, with in-flight counts, the age
of the oldest unacked message and the depth of its dead-letter topic."""

from __future__ import annotations

from popmq.broker_core import dlq_holes, validation
from popmq.broker_core.catalog import Catalog, GroupInfo, TopicInfo, dlq_topic_name
from popmq.broker_core.consume_queues import ConsumeQueues
from popmq.broker_core.offsets import NEWER_THAN_ALL, QueueOffsets
from popmq.broker_core.store import Store
from popmq.broker_core.types import LagReport, QueueBacklog, QueueLag, TopicBacklog


class Lag:
    """Lag reports; they read memory and a few store times, never write."""

    def __init__(
        self, *, catalog: Catalog, offsets: QueueOffsets, queues: ConsumeQueues, store: Store
    ) -> None:
        self._catalog = catalog
        self._offsets = offsets
        self._queues = queues
        self._store = store  # for the holes of a dead-letter queue (dlq_holes.py)

    def group_lag(self, group: str, topic: str = "") -> list[QueueLag]:
        validation.check_name("group", group)
        group_info = self._catalog.group(group)
        if topic:
            validation.check_name("topic", topic, allow_dlq=True)
            topics = [self._catalog.topic(topic)]
        else:
            ids = {tid for (gid, tid, _) in self._queues if gid == group_info.group_id}
            topics = sorted(
                (t for t in self._catalog.topics.values() if t.topic_id in ids),
                key=lambda t: t.name,
            )
        rows: list[QueueLag] = []
        for info in topics:
            for queue_id in range(info.queues):
                rows.append(self._lag_row(group_info, info, info, queue_id, retry=False))
            retry = self._catalog.retry_topics.get((group_info.group_id, info.topic_id))
            if retry is not None:
                rows.append(self._lag_row(group_info, retry, info, 0, retry=True))
        return rows

    def _lag_row(
        self, group: GroupInfo, source: TopicInfo, user: TopicInfo, queue_id: int, *, retry: bool
    ) -> QueueLag:
        cq = self._queues.get(group.group_id, source.topic_id, queue_id)
        max_offset = self._offsets.max_offset(source.topic_id, queue_id)
        oldest = self._offsets.min_offset(source.topic_id, queue_id)
        committed = cq.committed if cq else oldest
        inflight = len(cq.inflight) if cq else 0
        skipped = (cq.retention_skipped if cq else 0) + max(0, oldest - committed)
        return QueueLag(user.name, queue_id, retry, committed, max_offset, inflight, skipped)

    def lag_report(self, group: str, topic: str = "") -> LagReport:
        """Lag per queue with the age of the oldest unacked message, per-topic sums (with
        the retry backlog) and the depth of the group's dead-letter topic."""
        rows = self.group_lag(group, topic)
        info = self._catalog.group(group)
        gid = info.group_id
        backlog: list[QueueBacklog] = []
        for row in rows:
            user = self._catalog.topics[row.topic]
            source = (
                self._catalog.retry_topics.get((gid, user.topic_id)) if row.retry else user
            ) or user
            cq = self._queues.get(gid, source.topic_id, row.queue_id)
            candidates = [min(cq.inflight)] if cq is not None and cq.inflight else []
            low = self._offsets.min_offset(source.topic_id, row.queue_id)
            if row.consumer_offset < row.max_offset:
                candidates.append(max(row.consumer_offset, low))
            oldest = 0
            if candidates:
                # An offset on a gap (a removed crash tail) counts as the message after it.
                born = self._offsets.store_time(source.topic_id, row.queue_id, min(candidates))
                oldest = 0 if born == NEWER_THAN_ALL else born
            backlog.append(QueueBacklog(row, oldest))
        topics: list[TopicBacklog] = []
        for name in sorted({row.topic for row in rows}):
            mine = [b for b in backlog if b.lag.topic == name]
            ages = [b.oldest_unacked_ms for b in mine if b.oldest_unacked_ms]
            topics.append(
                TopicBacklog(
                    topic=name,
                    lag=sum(b.lag.lag for b in mine if not b.lag.retry),
                    inflight=sum(b.lag.inflight for b in mine),
                    retry_backlog=sum(b.lag.lag for b in mine if b.lag.retry),
                    oldest_unacked_ms=min(ages) if ages else 0,
                )
            )
        dlq = self._catalog.topics.get(dlq_topic_name(group))
        depth = 0
        if dlq is not None:
            depth = dlq_holes.depth(
                self._store,
                dlq.topic_id,
                self._offsets.min_offset(dlq.topic_id, 0),
                self._offsets.max_offset(dlq.topic_id, 0),
            )
        return LagReport(group, backlog, topics, depth)
