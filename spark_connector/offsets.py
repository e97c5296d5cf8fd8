"""Streaming offsets (the JSON Spark checkpoints) and the arithmetic of planning ranges.

Spark writes offsets to its offsets log with ``json.dumps`` and compares them as JSON
strings, so every offset is built with a fixed key order (queues by id). Each carries a
format version ``v`` and its mode, so a checkpoint written by another format or mode is
refused with a clear error instead of being misread.

offset mode: ``{"v": 1, "mode": "offset", "topic": T, "queues": {"0": next, "1": next}}``
pop mode:    ``{"v": 1, "mode": "pop", "run": R, "batch": n, "parts": k, "max": m}``
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from popmq.spark.errors import OffsetFormatError, OptionError

__all__ = [
    "EARLIEST",
    "LATEST",
    "VERSION",
    "PopOffset",
    "QueueOffsets",
    "behind_latest",
    "lease_token",
    "parse_offsets_option",
    "split_by_backlog",
]

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


@dataclass(frozen=True)
class QueueOffsets:
    """offset mode: the next offset to read in each queue of one topic."""

    topic: str
    queues: dict[int, int]

    def to_json(self) -> dict[str, Any]:
        return {
            "v": VERSION,
            "mode": "offset",
            "topic": self.topic,
            "queues": {str(q): self.queues[q] for q in sorted(self.queues)},
        }

    @classmethod
    def from_json(cls, offset: Mapping[str, Any], topic: str) -> QueueOffsets:
        _check_version(offset, "offset")
        if offset.get("topic") != topic:
            raise OffsetFormatError(
                f"checkpointed offsets are of topic {offset.get('topic')!r}, but the query "
                f"reads topic {topic!r}; use a new checkpoint location for another topic"
            )
        queues = offset.get("queues")
        if not isinstance(queues, dict):
            raise OffsetFormatError(f"checkpointed offset {json.dumps(offset)} has no queues")
        return cls(topic, {int(q): int(o) for q, o in queues.items()})


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

    def to_json(self) -> dict[str, Any]:
        return {
            "v": VERSION,
            "mode": "pop",
            "run": self.run,
            "batch": self.batch,
            "parts": self.parts,
            "max": self.max,
        }

    @classmethod
    def from_json(cls, offset: Mapping[str, Any]) -> PopOffset:
        _check_version(offset, "pop")
        try:
            return cls(
                run=str(offset["run"]),
                batch=int(offset["batch"]),
                parts=int(offset["parts"]),
                max=int(offset["max"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise OffsetFormatError(
                f"checkpointed offset {json.dumps(offset)} is malformed"
            ) from exc

    def tokens(self) -> list[str]:
        """The lease tokens of the batch this offset ends (none before the first batch)."""
        if self.batch < 0:
            return []
        return [lease_token(self.run, self.batch, i) for i in range(self.parts)]


def lease_token(run: str, batch: int, partition: int) -> str:
    """The lease token of one partition of one micro-batch: a pure function of the offsets."""
    return f"spark/{run}/{batch}/{partition}"


def parse_offsets_option(
    name: str, text: str, earliest: Mapping[int, int], latest: Mapping[int, int]
) -> dict[int, int]:
    """Resolve startingOffsets/endingOffsets: earliest, latest or JSON per queue.

    `earliest` and `latest` are the queues' min and max offsets now. JSON must name every
    queue; -2 means earliest and -1 latest, as Kafka's options do.
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
        raise OptionError(
            f"option {name}={text!r} is not earliest, latest, or a JSON object "
            '{"<queue id>": offset, ...} (-2 = earliest, -1 = latest)'
        )
    result: dict[int, int] = {}
    for key, value in parsed.items():
        try:
            queue_id = int(key)
        except ValueError:
            raise OptionError(f"option {name}: {key!r} is not a queue id") from None
        if queue_id not in latest:
            raise OptionError(
                f"option {name} names queue {queue_id}, but the topic has queues "
                f"0..{len(latest) - 1}"
            )
        if isinstance(value, bool) or not isinstance(value, int):
            raise OptionError(f"option {name}: the offset of queue {queue_id} is not an integer")
        if value == EARLIEST:
            value = earliest[queue_id]
        elif value == LATEST:
            value = latest[queue_id]
        elif not 0 <= value <= latest[queue_id]:
            raise OptionError(
                f"option {name}: offset {value} of queue {queue_id} is outside "
                f"0..{latest[queue_id]} (its max offset); -2 = earliest, -1 = latest"
            )
        result[queue_id] = value
    missing = sorted(set(latest) - set(result))
    if missing:
        raise OptionError(
            f"option {name} must give every queue an offset; missing queues {missing} "
            "(-2 = earliest, -1 = latest)"
        )
    return result


def split_by_backlog(
    start: Mapping[int, int], latest: Mapping[int, int], limit: int
) -> dict[int, int]:
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
