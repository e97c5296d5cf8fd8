"""Reads by offset ranges: batch reads and the streaming `offset` mode.

The driver plans [start, end) ranges per queue from the queues' min/max offsets; executors
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
from datetime import UTC, datetime
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
    QueueOffsets,
    behind_latest,
    parse_offsets_option,
    split_by_backlog,
)
from popmq.spark.options import ReadOptions
from popmq.spark.schema import to_record_batch

__all__ = ["OffsetRange", "PopMQBatchReader", "PopMQOffsetStreamReader", "read_range"]

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


def _datetime(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def read_range(options: ReadOptions, part: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Executor side: pull [start, end) of one queue, one Arrow batch per pull."""
    puller = _clients.pull_consumer(options, part.topic, "")
    position = part.start
    while position < part.end:
        want = min(options.pull_batch_size, part.end - position)
        result = puller.pull(part.queue_id, position, want)
        first = result.messages[0].offset if result.messages else result.next_offset
        if first > position:
            lost_to = min(first, part.end)
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


def _bounds(options: ReadOptions) -> tuple[dict[int, int], dict[int, int]]:
    """(earliest, latest) offset per queue now."""
    puller = _clients.pull_consumer(options, options.topic, "")
    stats = puller.queue_offsets()
    return {s.queue_id: s.min_offset for s in stats}, {s.queue_id: s.max_offset for s in stats}


def _offsets_at(options: ReadOptions, ms: int) -> dict[int, int]:
    puller = _clients.pull_consumer(options, options.topic, "")
    return puller.offsets_at(_datetime(ms))


def _split(
    topic: str,
    start: Mapping[int, int],
    end: Mapping[int, int],
    options: ReadOptions,
    new_queues: frozenset[int] = frozenset(),
) -> list[OffsetRange]:
    """One partition per non-empty queue range, split every maxRecordsPerPartition."""
    parts = []
    size = options.max_records_per_partition
    for queue_id in sorted(end):
        low, high = start[queue_id], end[queue_id]
        for chunk in range(low, high, size):
            parts.append(
                OffsetRange(
                    topic,
                    queue_id,
                    chunk,
                    min(high, chunk + size),
                    options.fail_on_data_loss,
                    queue_id in new_queues,
                )
            )
    return parts


class PopMQBatchReader(DataSourceReader):
    """A batch read of offset ranges: startingOffsets/Timestamp to endingOffsets/Timestamp."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> list[OffsetRange]:
        o = self.options
        earliest, latest = _bounds(o)
        if o.starting_timestamp_ms is not None:
            start = _offsets_at(o, o.starting_timestamp_ms)
        else:
            start = parse_offsets_option(
                "startingOffsets", o.starting_offsets or "earliest", earliest, latest
            )
        if o.ending_timestamp_ms is not None:
            end = _offsets_at(o, o.ending_timestamp_ms)
        else:
            end = parse_offsets_option(
                "endingOffsets", o.ending_offsets or "latest", earliest, latest
            )
        for queue_id in sorted(end):
            if end[queue_id] < start[queue_id]:
                raise OptionError(
                    f"queue {queue_id}: the ending offset {end[queue_id]} is before the starting "
                    f"offset {start[queue_id]}"
                )
        return _split(o.topic, start, end, o)

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
        self._earliest: dict[int, int] = {}
        self._latest: dict[int, int] = {}
        self._fetched_at = float("-inf")
        self._target: dict[int, int] | None = None
        self._last_trigger_at = float("-inf")
        """When minMessagesPerTrigger last let a batch through: never, so the first trigger
        is not held back (Kafka starts its lastTriggerMillis at 0)."""
        self._group_committed: dict[int, int] | None = None
        self._planned: dict[int, int] | None = None
        """The end of the last batch latestOffset planned (its start when it planned none)."""

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.options = state["options"]
        self._init_runtime()

    def _bounds(
        self, max_age_s: float = _BOUNDS_MAX_AGE_S
    ) -> tuple[dict[int, int], dict[int, int]]:
        now = time.monotonic()
        if now - self._fetched_at >= max_age_s:
            self._earliest, self._latest = _bounds(self.options)
            self._fetched_at = now
        return self._earliest, self._latest

    def initialOffset(self) -> dict[str, Any]:
        # Spark calls this twice for a new checkpoint: answer the same both times.
        if self._initial is None:
            o = self.options
            earliest, latest = self._bounds(0)
            if o.starting_timestamp_ms is not None:
                start = _offsets_at(o, o.starting_timestamp_ms)
            else:
                start = parse_offsets_option(
                    "startingOffsets", o.starting_offsets or "latest", earliest, latest
                )
            self._initial = QueueOffsets(o.topic, start).to_json()
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
        begin = QueueOffsets.from_json(start, o.topic).queues
        # Spark asks for the next batch only once `start` is committed; at the end of
        # AvailableNow and when idle this is the only call that sees the last commit.
        self._commit_group(begin)
        earliest, latest = self._bounds()
        if self._target is not None:  # AvailableNow: nothing past the target
            latest = {q: min(latest[q], self._target.get(q, earliest[q])) for q in latest}
        effective: dict[int, int] = {}
        for queue_id in sorted(latest):
            if queue_id not in begin:
                effective[queue_id] = earliest[queue_id]  # a new queue: from its earliest
                continue
            at = begin[queue_id]
            if at < earliest[queue_id] or at > latest[queue_id]:
                reason = (
                    f"offsets [{at}, {earliest[queue_id]}) were deleted by retention"
                    if at < earliest[queue_id]
                    else f"the queue's max offset is {latest[queue_id]}, below the query's "
                    f"offset {at} (was the topic deleted and created again?)"
                )
                text = f"topic {o.topic!r} queue {queue_id}: {reason}"
                if o.fail_on_data_loss:
                    raise DataLossError(f"{text}. Set failOnDataLoss=false to skip what is gone")
                at = earliest[queue_id] if at < earliest[queue_id] else latest[queue_id]
                log.warning("%s; continuing at offset %d (failOnDataLoss=false)", text, at)
            effective[queue_id] = at
        for queue_id in sorted(set(begin) - set(latest)):
            text = f"topic {o.topic!r} has no queue {queue_id} any more"
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
        return QueueOffsets(o.topic, end).to_json()

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
        if not latest:
            return None
        report = QueueOffsets(self.options.topic, latest).to_json()
        if self._planned is not None:
            planned = self._planned
            behind = {str(q): max(0, latest[q] - planned.get(q, 0)) for q in sorted(latest)}
            report["behind"] = behind_latest(behind)
        return report

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[OffsetRange]:
        o = self.options
        begin = QueueOffsets.from_json(start, o.topic).queues
        finish = QueueOffsets.from_json(end, o.topic).queues
        new = frozenset(q for q in finish if q not in begin)
        # Pure in (start, end): a replay after a restart plans the same ranges.
        first = {q: begin.get(q, 0) for q in finish}
        return _split(o.topic, first, finish, o, new)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        return read_range(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        self._commit_group(QueueOffsets.from_json(end, self.options.topic).queues)

    def _commit_group(self, offsets: dict[int, int]) -> None:
        """With a group option: commit the query's progress there, for lag tools."""
        o = self.options
        if not o.group or offsets == self._group_committed:
            return
        puller = _clients.pull_consumer(o, o.topic, o.group)
        try:
            puller.commit_offsets(offsets)
        except PopMQError as exc:
            # Progress lives in Spark's checkpoint; the group offset is only for lag tools.
            log.warning("could not commit offsets of %s to group %s: %s", o.topic, o.group, exc)
            return
        self._group_committed = dict(offsets)
