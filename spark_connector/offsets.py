"""Streaming offsets (the JSON Spark checkpoints) and the arithmetic of planning ranges.

Spark writes offsets to its offsets log with ``json.dumps`` and compares them as JSON
strings, so every offset is built with a fixed key order (queues by id). Each carries a
format version ``v`` and its mode, so a checkpoint written by another format or mode is
refused with a clear error instead of being misread.

offset mode: ``{"v": 1, "mode": "offset", "topic": T, "queues": {"0": next, "1": next}}``
    (option topic), ``{"v": 1, "mode": "offset", "topics": {T: {"0": next}}}`` (subscribe,
    subscribePattern)
pop mode:    ``{"v": 1, "mode": "pop", "run": R, "batch": n, "parts": k, "max": m}``, with
    ``"topics": {T: k_T}`` (partitions per topic, summing to k) under subscribe or
    subscribePattern
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from popmq.spark.errors import OffsetFormatError, OptionError

__all__ = [
    "EARLIEST",
    "LATEST",
    "VERSION",
    "PopOffset",
    "QueueKey",
    "QueueOffsets",
    "behind_latest",
    "lease_token",
    "parse_offsets_option",
    "plan_ranges",
    "queue_label",
    "split_by_backlog",
    "times_per_queue",
]

_K = TypeVar("_K", int, tuple[str, int], str)

VERSION = 1
EARLIEST = -2
"""In a startingOffsets/endingOffsets JSON: the queue's earliest retained offset (Kafka's)."""
LATEST = -1
"""In a startingOffsets/endingOffsets JSON: the queue's max offset (Kafka's)."""


def _check_version(offset: Mapping[str, Any], mode: str) -> None:
    version = offset.get("v")
    if version != VERSION:
        raise OffsetFormatError(
            f"checkpointed offset {json.dumps(offset)} has format version {version!r}; this "
            f"connector reads version {VERSION}. Start the query with a new checkpoint"
        )
    if offset.get("mode") != mode:
        raise OffsetFormatError(
            f"checkpointed offset {json.dumps(offset)} was written in mode "
            f"{offset.get('mode')!r}, but the query now runs in mode {mode!r}; a checkpoint "
            "cannot change modes: use a new checkpoint location"
        )


QueueKey = tuple[str, int]
"""A queue of a read: (topic, queue id). Offset-mode planning works on these, so one query
over several topics plans as one over several queues."""


def queue_label(key: QueueKey, by_topic: bool) -> str:
    """How a queue is named in the progress: "<queue>", or "<topic>/<queue>" by topic."""
    return f"{key[0]}/{key[1]}" if by_topic else str(key[1])


@dataclass(frozen=True)
class QueueOffsets:
    """offset mode: the next offset to read in each queue of the read's topics.

    Two JSON forms: with option topic ``{"topic": T, "queues": {"0": n}}`` (the original
    one, kept so existing checkpoints keep working); with subscribe or subscribePattern
    ``{"topics": {T: {"0": n}}}``. Either is read back in both kinds of query, as long as
    a topic-option query finds its own topic and nothing else there.
    """

    queues: dict[QueueKey, int]
    topic: str = ""
    """The topic of a query with option topic (the first form); "" when keyed by topic."""

    def to_json(self) -> dict[str, Any]:
        if self.topic:
            return {
                "v": VERSION,
                "mode": "offset",
                "topic": self.topic,
                "queues": {str(q): self.queues[(t, q)] for t, q in sorted(self.queues)},
            }
        topics: dict[str, dict[str, int]] = {}
        for t, q in sorted(self.queues):
            topics.setdefault(t, {})[str(q)] = self.queues[(t, q)]
        return {"v": VERSION, "mode": "offset", "topics": topics}

    @classmethod
    def from_json(cls, offset: Mapping[str, Any], topic: str = "") -> QueueOffsets:
        """Read a checkpointed offset; `topic` is the query's option topic ("" for subscribe
        and subscribePattern, whose checkpoints may hold topics no longer read: the reader
        decides what that means)."""
        _check_version(offset, "offset")
        try:
            if "topics" in offset:
                by_topic = offset["topics"]
                queues = {
                    (str(t), int(q)): int(o) for t, qs in by_topic.items() for q, o in qs.items()
                }
            else:
                queues = {
                    (str(offset["topic"]), int(q)): int(o) for q, o in offset["queues"].items()
                }
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise OffsetFormatError(
                f"checkpointed offset {json.dumps(offset)} is malformed"
            ) from exc
        if topic:
            others = sorted({t for t, _ in queues} - {topic})
            if others:
                raise OffsetFormatError(
                    f"checkpointed offsets are of topic {', '.join(map(repr, others))}, but "
                    f"the query reads topic {topic!r}; use a new checkpoint location for "
                    "another topic"
                )
        return cls(queues, topic)


@dataclass(frozen=True)
class PopOffset:
    """pop mode: a synthetic position, the number of the last planned micro-batch.

    Lease tokens are derived from it alone (see lease_token), so a replayed batch pops
    under the same tokens and gets the same messages while its leases live.
    """

    run: str
    """Unique per query (from its first initialOffset): tokens of two queries never meet."""
    batch: int
    """The batch this offset ends; -1 before the first."""
    parts: int
    """Partitions (lease tokens) of that batch."""
    max: int
    """Messages one partition of that batch takes at most."""
    topics: tuple[tuple[str, int], ...] = ()
    """subscribe / subscribePattern: (topic, partitions) of that batch, by name; the
    partitions are numbered across them in that order. Empty with option topic: every
    partition pops the query's one topic."""

    def to_json(self) -> dict[str, Any]:
        offset: dict[str, Any] = {
            "v": VERSION,
            "mode": "pop",
            "run": self.run,
            "batch": self.batch,
            "parts": self.parts,
            "max": self.max,
        }
        if self.topics:
            offset["topics"] = dict(self.topics)
        return offset

    @classmethod
    def from_json(cls, offset: Mapping[str, Any]) -> PopOffset:
        _check_version(offset, "pop")
        try:
            topics = tuple(sorted((str(t), int(n)) for t, n in offset.get("topics", {}).items()))
            parsed = cls(
                run=str(offset["run"]),
                batch=int(offset["batch"]),
                parts=int(offset["parts"]),
                max=int(offset["max"]),
                topics=topics,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise OffsetFormatError(
                f"checkpointed offset {json.dumps(offset)} is malformed"
            ) from exc
        if topics and sum(n for _, n in topics) != parsed.parts:
            raise OffsetFormatError(
                f"checkpointed offset {json.dumps(offset)} is malformed: its topics' "
                "partitions do not add up to parts"
            )
        return parsed

    def partition_topics(self, topic: str) -> list[str]:
        """The topic each partition of this batch pops, by partition number (`topic`: the
        query's option topic, for offsets without topics)."""
        if not self.topics:
            return [topic] * self.parts
        return [t for t, n in self.topics for _ in range(n)]

    def tokens(self) -> list[str]:
        """The lease tokens of the batch this offset ends (none before the first batch)."""
        if self.batch < 0:
            return []
        return [lease_token(self.run, self.batch, i) for i in range(self.parts)]


def lease_token(run: str, batch: int, partition: int) -> str:
    """The lease token of one partition of one micro-batch: a pure function of the offsets."""
    return f"spark/{run}/{batch}/{partition}"


_JSON_SHAPE = '{"<topic>": {"<queue id>": offset, ...}, ...}'
_FLAT_SHAPE = '{"<queue id>": offset, ...}'


def _queues_of(
    name: str, parsed: Mapping[str, Any], known: Mapping[QueueKey, int], topic: str
) -> dict[QueueKey, Any]:
    """The per-queue values of an offsets or timestamps JSON, keyed by queue, checked
    against the queues the read has now (`known`); every queue must be named, as Kafka's."""
    nested = all(isinstance(v, dict) for v in parsed.values())
    if not nested:
        if not topic:
            raise OptionError(
                f"option {name}: with subscribe or subscribePattern give an object per topic: "
                f"{_JSON_SHAPE}"
            )
        parsed = {topic: parsed}
    topics = sorted({t for t, _ in known})
    result: dict[QueueKey, Any] = {}
    for t, values in parsed.items():
        if t not in topics:
            reading = ", ".join(topics) if topics else "no topic (none matches yet)"
            raise OptionError(f"option {name} names topic {t!r}; the query reads {reading}")
        if not isinstance(values, dict):
            raise OptionError(f"option {name}: topic {t!r} must map to {_FLAT_SHAPE}")
        count = sum(1 for kt, _ in known if kt == t)
        where = f"topic {t!r} " if not topic else ""
        for key, value in values.items():
            try:
                queue_id = int(key)
            except ValueError:
                raise OptionError(f"option {name}: {key!r} is not a queue id") from None
            if (t, queue_id) not in known:
                raise OptionError(
                    f"option {name} names {where}queue {queue_id}, but the "
                    f"topic{f' {t!r}' if not topic else ''} has queues 0..{count - 1}"
                )
            result[(t, queue_id)] = value
    missing = sorted(set(known) - set(result))
    if missing:
        named = [queue_label(k, not topic) for k in missing]
        raise OptionError(
            f"option {name} must name every queue; missing queues [{', '.join(named)}]"
        )
    return result


def parse_offsets_option(
    name: str,
    text: str,
    earliest: Mapping[QueueKey, int],
    latest: Mapping[QueueKey, int],
    topic: str = "",
) -> dict[QueueKey, int]:
    """Resolve startingOffsets/endingOffsets: earliest, latest or JSON per queue.

    `earliest` and `latest` are the queues' min and max offsets now. JSON must name every
    queue; -2 means earliest and -1 latest, as Kafka's options do. With option topic
    (`topic` given) the JSON may leave out the topic level: ``{"0": 5, "1": -2}``.
    """
    lowered = text.strip().lower()
    if lowered == "earliest":
        return dict(earliest)
    if lowered == "latest":
        return dict(latest)
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        shapes = f"{_FLAT_SHAPE} or {_JSON_SHAPE}" if topic else _JSON_SHAPE
        raise OptionError(
            f"option {name}={text!r} is not earliest, latest, or a JSON object "
            f"{shapes} (-2 = earliest, -1 = latest)"
        )
    result: dict[QueueKey, int] = {}
    for key, value in _queues_of(name, parsed, latest, topic).items():
        where = f"queue {queue_label(key, not topic)}"
        if isinstance(value, bool) or not isinstance(value, int):
            raise OptionError(f"option {name}: the offset of {where} is not an integer")
        if value == EARLIEST:
            value = earliest[key]
        elif value == LATEST:
            value = latest[key]
        elif not 0 <= value <= latest[key]:
            raise OptionError(
                f"option {name}: offset {value} of {where} is outside "
                f"0..{latest[key]} (its max offset); -2 = earliest, -1 = latest"
            )
        result[key] = value
    return result


def times_per_queue(
    name: str, times: Mapping[str, Mapping[int, int]], queues: Mapping[QueueKey, int]
) -> dict[QueueKey, int]:
    """A startingOffsetsByTimestamp / endingOffsetsByTimestamp value (already checked for
    shape), keyed by queue and checked against the read's queues now: every queue of every
    topic read, and nothing else."""
    return dict(_queues_of(name, times, queues, ""))


def split_by_backlog(
    start: Mapping[_K, int], latest: Mapping[_K, int], limit: int
) -> dict[_K, int]:
    """End offsets that read at most `limit` messages, shared in proportion to each queue's
    backlog (Kafka's maxOffsetsPerTrigger rule), by the largest-remainder method so the
    shares add up exactly and any queue with a backlog gets its fair part.
    """
    backlog = {q: max(0, latest[q] - start[q]) for q in latest}
    total = sum(backlog.values())
    if total <= limit:
        return {q: max(start[q], latest[q]) for q in latest}
    shares = {q: limit * b // total for q, b in backlog.items()}
    left = limit - sum(shares.values())
    # Hand out the rest by largest remainder; ties go to the lower queue id.
    order = sorted(backlog, key=lambda q: (-(limit * backlog[q] % total), q))
    for q in order[:left]:
        shares[q] += 1
    return {q: start[q] + shares[q] for q in latest}


def plan_ranges(
    start: Mapping[QueueKey, int],
    end: Mapping[QueueKey, int],
    max_records: int,
    min_partitions: int | None = None,
) -> list[tuple[QueueKey, int, int]]:
    """The [start, end) ranges of a batch, one Spark partition each; pure in its arguments.

    Every non-empty queue range is cut every `max_records` offsets. When that gives fewer
    than `min_partitions` ranges, the large ones are split further in proportion to their
    size, as Kafka's minPartitions does (KafkaOffsetRangeCalculator): a range that would get
    one part keeps it, the others share what is left of `min_partitions`. The count is
    approximately `min_partitions` (rounding), never a range of fewer than one offset.
    """
    ranges = [
        (key, low, min(end[key], low + max_records))
        for key in sorted(end)
        for low in range(start[key], end[key], max_records)
    ]
    if not ranges or min_partitions is None or len(ranges) >= min_partitions:
        return ranges

    def parts(size: int, total: int, wanted: int) -> int:
        return max(math.floor(size / total * wanted + 0.5), 1)  # round half up, as Scala's

    total = sum(high - low for _, low, high in ranges)
    whole = [parts(high - low, total, min_partitions) == 1 for _, low, high in ranges]
    split_total = total - sum(
        high - low for (_, low, high), w in zip(ranges, whole, strict=True) if w
    )
    split_wanted = max(min_partitions - sum(whole), 1)
    result = []
    for (key, low, high), keep in zip(ranges, whole, strict=True):
        count = 1 if keep else min(parts(high - low, split_total, split_wanted), high - low)
        at, left = low, high - low
        for part in range(count):
            size = left // (count - part)  # the last parts take the remainders
            result.append((key, at, at + size))
            at, left = at + size, left - size
    return result


def behind_latest(per_queue: Mapping[str, int]) -> dict[str, Any]:
    """Lag for the query progress: messages behind the queues' ends, per queue and in total.

    Python sources have no metrics hook (Kafka reports min/avg/max offsets behind latest
    there), so the readers put this into what reportLatestOffset returns, which Spark shows
    as ``sources[].latestOffset``.
    """
    values = list(per_queue.values())
    return {
        "total": sum(values),
        "max": max(values, default=0),
        "queues": dict(per_queue),
    }
