"""Which topics a read covers, and their queues' offsets now (driver side).

A read names its topics in one of three ways, as Kafka's source does: option topic (one),
subscribe (a comma-separated list) or subscribePattern (a regular expression over topic
names). A pattern is matched against the server's topic list when the query starts and
again at every trigger, so topics created later are read too (from their earliest offset,
as Kafka reads partitions it discovers). Dead-letter topics (``%DLQ%<group>``) are never
matched by a pattern, as Kafka leaves out its internal topics: name them with topic or
subscribe.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from popmq import NotFoundError
from popmq.spark import _clients
from popmq.spark.errors import OptionError
from popmq.spark.offsets import QueueKey
from popmq.spark.options import ReadOptions

__all__ = ["describe", "offsets_at", "queue_bounds", "topics_now"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def describe(options: ReadOptions) -> str:
    """How the read names its topics, for messages."""
    if options.topic:
        return f"topic {options.topic!r}"
    if options.subscribe:
        return f"topics {', '.join(options.subscribe)} (subscribe)"
    return f"the topics matching subscribePattern {options.subscribe_pattern!r}"


def topics_now(options: ReadOptions) -> list[str]:
    """The topics the read covers now, by name: a pattern asks the server's topic list
    (ListTopics, which needs LIST on topics where authorization is on)."""
    if options.topic:
        return [options.topic]
    if options.subscribe:
        return sorted(options.subscribe)
    pattern = re.compile(options.subscribe_pattern)
    listed = _clients.admin(options).list_topics()
    return sorted(t.name for t in listed if t.kind == "normal" and pattern.fullmatch(t.name))


def queue_bounds(
    options: ReadOptions, topics: list[str], *, missing_ok: bool = False
) -> tuple[dict[QueueKey, int], dict[QueueKey, int]]:
    """(earliest, latest) offset of every queue of `topics` now.

    A named topic that does not exist fails the read (NotFoundError) unless `missing_ok`
    (a running stream, which reports a topic that went away as data loss); one a pattern
    matched that was deleted since is left out (as if it had not matched).
    """
    admin = _clients.admin(options)
    earliest: dict[QueueKey, int] = {}
    latest: dict[QueueKey, int] = {}
    for topic in topics:
        try:
            queues = admin.get_topic(topic).queues
        except NotFoundError:
            if not (missing_ok or options.subscribe_pattern):
                raise
            continue
        for q in queues:
            earliest[(topic, q.queue_id)] = q.min_offset
            latest[(topic, q.queue_id)] = q.max_offset
    return earliest, latest


def offsets_at(options: ReadOptions, name: str, times: dict[QueueKey, int]) -> dict[QueueKey, int]:
    """Per queue, the first offset stored at or after its time (epoch ms), or the queue's
    max offset when nothing is (GetOffsetsAtTime, RocketMQ's searchOffset): one call per
    distinct (topic, time)."""
    admin = _clients.admin(options)
    asked: dict[tuple[str, int], dict[int, int]] = {}
    result: dict[QueueKey, int] = {}
    for (topic, queue_id), ms in sorted(times.items()):
        if (topic, ms) not in asked:
            at = _EPOCH + timedelta(milliseconds=ms)
            try:
                asked[(topic, ms)] = admin.offsets_at(topic, at)
            except NotFoundError as exc:
                raise OptionError(f"option {name}: topic {topic!r} does not exist") from exc
        result[(topic, queue_id)] = asked[(topic, ms)][queue_id]
    return result
