"""Reads by offset ranges: batch reads and the streaming `offset` mode.

The driver plans [start, end) ranges per queue of the read's topics (topics.py) from the
queues' min/max offsets; executors
read each range with PullMessages. Nothing on the server changes, so a range read twice
gives the same rows: the source is exactly-once, and a query restarted from its checkpoint
replays exactly what its uncommitted batch held.

Where things run (see docs/spark.md): partitions(), latestOffset() and commit() on the
driver; read() on executors, on a pickled copy of the reader that carries only options.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from popmq import PopMQError
from popmq.spark import _clients
from popmq.spark.errors import DataLossError, OptionError
from popmq.spark.offsets import (
    QueueKey,
    QueueOffsets,
    behind_latest,
    parse_offsets_option,
    plan_ranges,
    queue_label,
    split_by_backlog,
    times_per_queue,
)
from popmq.spark.options import ReadOptions
from popmq.spark.schema import to_record_batch
from popmq.spark.topics import describe, offsets_at, queue_bounds, topics_now

__all__ = [
    "OffsetRange",
    "PopMQBatchReader",
    "PopMQOffsetStreamReader",
    "read_range",
    "resolve_positions",
]

log = logging.getLogger(__name__)

_BOUNDS_MAX_AGE_S = 0.25
"""Spark polls latestOffset about 60 times a second when idle; the queues' offsets are
fetched at most this often."""


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One Spark partition: offsets [start, end) of one queue."""

    topic: str
    queue_id: int
    start: int
    end: int
    fail_on_data_loss: bool
    new_queue: bool = False
    """The queue appeared after the query started: it is read from its earliest offset,
    and what retention deleted before is not data loss."""


def read_range(options: ReadOptions, part: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Executor side: pull [start, end) of one queue, one Arrow batch per pull."""
    puller = _clients.pull_consumer(options, part.topic, "")
    position = part.start
    while position < part.end:
        want = min(options.pull_batch_size, part.end - position)
        result = puller.pull(part.queue_id, position, want)
        first = result.messages[0].offset if result.messages else result.next_offset
        # Below the queue's start: deleted by retention. Above it, a hole is offsets that
        # never held an acknowledged message (a failed write's, stepped over as pull does).
        lost_to = min(first, part.end, result.min_offset)
        if lost_to > position:
            text = (
                f"topic {part.topic!r} queue {part.queue_id}: offsets [{position}, {lost_to}) "
                f"were deleted (retention) before this query read them; the queue now starts "
                f"at {result.min_offset}"
            )
            if part.new_queue:
                log.info("%s (a queue new to the query; it starts at its earliest)", text)
            elif part.fail_on_data_loss:
                raise DataLossError(f"{text}. Set failOnDataLoss=false to skip what is gone")
            else:
                log.warning("%s; skipped (failOnDataLoss=false)", text)
        messages = [m for m in result.messages if m.offset < part.end]
        if messages:
            yield to_record_batch(messages)
        if result.next_offset <= position:
            raise DataLossError(
                f"topic {part.topic!r} queue {part.queue_id} ends at offset "
                f"{result.max_offset}, before the planned end {part.end}: was the topic "
                "deleted and created again? Use a new checkpoint for the new topic"
            )
        position = result.next_offset


def _time_bounds(
    o: ReadOptions, queues: Mapping[QueueKey, int]
) -> tuple[tuple[str, dict[QueueKey, int]] | None, tuple[str, dict[QueueKey, int]] | None]:
    """(option name, time per queue) of the start and the end, when a time option gives
    them: startingTimestamp wins over startingOffsetsByTimestamp (and both over
    startingOffsets), as in Kafka; the same for the end."""
    start: tuple[str, dict[QueueKey, int]] | None = None
    end: tuple[str, dict[QueueKey, int]] | None = None
    if o.starting_timestamp_ms is not None:
        start = ("startingTimestamp", dict.fromkeys(queues, o.starting_timestamp_ms))
    elif o.starting_offsets_by_timestamp is not None:
        name = "startingOffsetsByTimestamp"
        start = (name, times_per_queue(name, o.starting_offsets_by_timestamp, queues))
    if o.ending_timestamp_ms is not None:
        end = ("endingTimestamp", dict.fromkeys(queues, o.ending_timestamp_ms))
    elif o.ending_offsets_by_timestamp is not None:
        name = "endingOffsetsByTimestamp"
        end = (name, times_per_queue(name, o.ending_offsets_by_timestamp, queues))
    return start, end


@dataclass(frozen=True)
class _Resolved:
    """Where a read starts (and, for a batch read, ends), with the bounds it saw."""

    start: dict[QueueKey, int]
    end: dict[QueueKey, int]
    earliest: dict[QueueKey, int]
    latest: dict[QueueKey, int]


def resolve_positions(o: ReadOptions, topics: list[str], default_start: str) -> _Resolved:
    """The start and end offset of every queue of `topics` from the options.

    A start time after a queue's newest message (or in an empty queue) has no offset:
    startingOffsetsByTimestampStrategy says what then, error (Kafka's default: the read
    fails naming the queues) or latest (the queue starts at its end). An end time after the
    newest message ends at the queue's end, as Kafka's endingOffsetsByTimestamp.
    """
    earliest, latest = queue_bounds(o, topics)
    start_times, end_times = _time_bounds(o, latest)
    start_at = offsets_at(o, *start_times) if start_times else None
    end_at = offsets_at(o, *end_times) if end_times else None
    if start_at is not None or end_at is not None:
        # After the lookups: a time with no message answers the max offset it saw, which is
        # at or past what an earlier look would say.
        earliest, latest = queue_bounds(o, topics)
    if start_times is not None and start_at is not None:
        after = sorted(k for k in start_at if k in latest and start_at[k] >= latest[k])
        if after and o.starting_timestamp_strategy == "error":
            named = ", ".join(queue_label(k, True) for k in after)
            raise OptionError(
                f"option {start_times[0]}: no message is stored at or after the given time in "
                f"queues [{named}] (each is empty, or its newest message is older); set "
                "startingOffsetsByTimestampStrategy=latest to start such queues at their end"
            )
        start = {k: min(start_at.get(k, earliest[k]), latest[k]) for k in latest}
    else:
        start = parse_offsets_option(
            "startingOffsets", o.starting_offsets or default_start, earliest, latest, o.topic
        )
    if end_at is not None:
        end = {k: min(end_at.get(k, latest[k]), latest[k]) for k in latest}
    else:
        end = parse_offsets_option(
            "endingOffsets", o.ending_offsets or "latest", earliest, latest, o.topic
        )
    return _Resolved(start, end, earliest, latest)


def _split(
    start: Mapping[QueueKey, int],
    end: Mapping[QueueKey, int],
    options: ReadOptions,
    new_queues: frozenset[QueueKey] = frozenset(),
) -> list[OffsetRange]:
    """The batch's ranges (plan_ranges: maxRecordsPerPartition, minPartitions) as
    partitions."""
    return [
        OffsetRange(
            topic, queue_id, low, high, options.fail_on_data_loss, (topic, queue_id) in new_queues
        )
        for (topic, queue_id), low, high in plan_ranges(
            start, end, options.max_records_per_partition, options.min_partitions
        )
    ]


class PopMQBatchReader(DataSourceReader):
    """A batch read of offset ranges, from startingOffsets / startingOffsetsByTimestamp /
    startingTimestamp to endingOffsets / endingOffsetsByTimestamp / endingTimestamp."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> list[OffsetRange]:
        o = self.options
        topics = topics_now(o)
        if not topics:
            raise OptionError(
                f"subscribePattern {o.subscribe_pattern!r} matches no topic (dead-letter "
                "topics are never matched): a batch read would read nothing"
            )
        positions = resolve_positions(o, topics, "earliest")
        start, end = positions.start, positions.end
        for key in sorted(end):
            if end[key] < start[key]:
                raise OptionError(
                    f"queue {queue_label(key, o.by_topic)}: the ending offset {end[key]} is "
                    f"before the starting offset {start[key]}"
                )
        return _split(start, end, o)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        return read_range(self.options, partition)


class PopMQOffsetStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streaming `offset` mode: Kafka-shaped, exactly-once source, admission control."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._init_runtime()

    def _init_runtime(self) -> None:
        # Driver-side state; never pickled (read() needs only the options).
        self._initial: dict[str, Any] | None = None
        self._earliest: dict[QueueKey, int] = {}
        self._latest: dict[QueueKey, int] = {}
        self._fetched_at = float("-inf")
        self._target: dict[QueueKey, int] | None = None
        self._last_trigger_at = float("-inf")
        """When minMessagesPerTrigger last let a batch through: never, so the first trigger
        is not held back (Kafka starts its lastTriggerMillis at 0)."""
        self._group_committed: dict[QueueKey, int] | None = None
        self._planned: dict[QueueKey, int] | None = None
        """The end of the last batch latestOffset planned (its start when it planned none)."""

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.options = state["options"]
        self._init_runtime()

    def _offsets(self, queues: dict[QueueKey, int]) -> dict[str, Any]:
        return QueueOffsets(queues, self.options.topic).to_json()

    def _queues(self, offset: dict[str, Any]) -> dict[QueueKey, int]:
        return QueueOffsets.from_json(offset, self.options.topic).queues

    def _bounds(
        self, max_age_s: float = _BOUNDS_MAX_AGE_S
    ) -> tuple[dict[QueueKey, int], dict[QueueKey, int]]:
        """The queues' offsets, with a subscribePattern matched again: Kafka's discovery of
        new topics, at most every 250 ms as the offsets."""
        now = time.monotonic()
        if now - self._fetched_at >= max_age_s:
            topics = topics_now(self.options)
            self._earliest, self._latest = queue_bounds(self.options, topics, missing_ok=True)
            self._fetched_at = now
        return self._earliest, self._latest

    def initialOffset(self) -> dict[str, Any]:
        # Spark calls this twice for a new checkpoint: answer the same both times.
        if self._initial is None:
            o = self.options
            positions = resolve_positions(o, topics_now(o), "latest")
            self._earliest, self._latest = positions.earliest, positions.latest
            self._fetched_at = time.monotonic()
            self._initial = self._offsets(positions.start)
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        o = self.options
        if o.max_messages_per_trigger is not None:
            return ReadMaxRows(o.max_messages_per_trigger)
        if o.min_messages_per_trigger is not None:
            return ReadMinRows(o.min_messages_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        _, latest = self._bounds(0)
        self._target = dict(latest)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        o = self.options
        begin = self._queues(start)
        # Spark asks for the next batch only once `start` is committed; at the end of
        # AvailableNow and when idle this is the only call that sees the last commit.
        self._commit_group(begin)
        earliest, latest = self._bounds()
        if self._target is not None:  # AvailableNow: nothing past the target
            latest = {q: min(latest[q], self._target.get(q, earliest[q])) for q in latest}
        effective: dict[QueueKey, int] = {}
        for key in sorted(latest):
            if key not in begin:
                effective[key] = earliest[key]  # a new queue or topic: from its earliest
                continue
            at = begin[key]
            if at < earliest[key] or at > latest[key]:
                reason = (
                    f"offsets [{at}, {earliest[key]}) were deleted by retention"
                    if at < earliest[key]
                    else f"the queue's max offset is {latest[key]}, below the query's "
                    f"offset {at} (was the topic deleted and created again?)"
                )
                text = f"topic {key[0]!r} queue {key[1]}: {reason}"
                if o.fail_on_data_loss:
                    raise DataLossError(f"{text}. Set failOnDataLoss=false to skip what is gone")
                at = earliest[key] if at < earliest[key] else latest[key]
                log.warning("%s; continuing at offset %d (failOnDataLoss=false)", text, at)
            effective[key] = at
        gone = sorted(set(begin) - set(latest))
        gone_topics = sorted({t for t, _ in gone} - {t for t, _ in latest})
        for topic in gone_topics:
            text = (
                f"topic {topic!r} of the checkpoint is not read any more: it was deleted, or "
                f"is no longer among {describe(o)}"
            )
            if o.fail_on_data_loss:
                raise DataLossError(f"{text}. Set failOnDataLoss=false to skip what is gone")
            log.warning("%s; it is dropped from the query", text)
        for topic, queue_id in gone:
            if topic in gone_topics:
                continue
            text = f"topic {topic!r} has no queue {queue_id} any more"
            if o.fail_on_data_loss:
                raise DataLossError(f"{text}. Set failOnDataLoss=false to skip what is gone")
            log.warning("%s; it is dropped from the query", text)
        backlog = sum(max(0, latest[q] - effective[q]) for q in latest)
        self._planned = begin
        if self._held_back(limit, backlog):
            return start
        if backlog == 0 and begin == effective:
            return start
        if isinstance(limit, ReadMaxRows):
            end = split_by_backlog(effective, latest, limit.max_rows)
        else:
            end = {q: max(effective[q], latest[q]) for q in latest}
        self._planned = end
        return self._offsets(end)

    def _held_back(self, limit: ReadLimit, backlog: int) -> bool:
        """minMessagesPerTrigger: hold the batch back while fewer messages wait and less
        than maxTriggerDelay passed since the last batch it let through (Kafka's delayBatch).

        Never under AvailableNow: a trigger that plans nothing ends the query there, and
        AvailableNow promises everything up to the ends recorded at its start.
        """
        o = self.options
        if isinstance(limit, ReadMinRows):
            min_rows = limit.min_rows
        elif isinstance(limit, ReadMaxRows) and o.min_messages_per_trigger is not None:
            min_rows = o.min_messages_per_trigger  # no composite limit in Python: both set
        else:
            return False
        if self._target is not None:
            return False
        now = time.monotonic()
        if now - self._last_trigger_at >= o.max_trigger_delay_s or backlog >= min_rows:
            self._last_trigger_at = now
            return False
        return True

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The queues' ends (unclamped) and, once a batch was planned, the lag behind them.

        Fetched here if need be: a restart replays its uncommitted batch without calling
        latestOffset first.
        """
        _, latest = self._bounds()
        if not latest and self.options.topic:
            return None
        report = self._offsets(latest)
        if self._planned is not None:
            planned, by_topic = self._planned, self.options.by_topic
            behind = {
                queue_label(k, by_topic): max(0, latest[k] - planned.get(k, 0))
                for k in sorted(latest)
            }
            report["behind"] = behind_latest(behind)
        return report

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[OffsetRange]:
        begin = self._queues(start)
        finish = self._queues(end)
        new = frozenset(q for q in finish if q not in begin)
        # Pure in (start, end): a replay after a restart plans the same ranges.
        first = {q: begin.get(q, 0) for q in finish}
        return _split(first, finish, self.options, new)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        return read_range(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        self._commit_group(self._queues(end))

    def _commit_group(self, offsets: dict[QueueKey, int]) -> None:
        """With a group option: commit the query's progress there, per topic, for lag
        tools."""
        o = self.options
        if not o.group or offsets == self._group_committed:
            return
        per_topic: dict[str, dict[int, int]] = {}
        for (topic, queue_id), offset in sorted(offsets.items()):
            per_topic.setdefault(topic, {})[queue_id] = offset
        for topic, queues in per_topic.items():
            puller = _clients.pull_consumer(o, topic, o.group)
            try:
                puller.commit_offsets(queues)
            except PopMQError as exc:
                # Progress lives in Spark's checkpoint; the group offset is only for lag tools.
                log.warning("could not commit offsets of %s to group %s: %s", topic, o.group, exc)
                return
        self._group_committed = dict(offsets)
