"""``PushConsumerOptions``: a push consumer's settings, checked once when they are made."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from types import MappingProxyType
from typing import Any, Literal

from popmq._gen.popmq.v1 import messaging_pb2
from popmq.sdk._channel import DEFAULT_TIMEOUT_S
from popmq.sdk.errors import InvalidArgumentError

DEFAULT_CONSUME_THREADS = 20
DEFAULT_MAX_CACHED_MESSAGES = 1024
DEFAULT_MAX_CACHED_BYTES = 64 * 1024 * 1024
"""RocketMQ's Python PushConsumer cache: 1024 messages, 64 MiB, 20 threads."""
DEFAULT_MAX_PROCESSING_S = 15 * 60.0
"""RocketMQ's consumeTimeout: 15 minutes."""
DEFAULT_INVISIBLE_DURATION_S = 30.0
DEFAULT_WAIT_S = 20.0
DEFAULT_RECEIVE_BATCH = 32
DEFAULT_HEARTBEAT_INTERVAL_S = 10.0
DEFAULT_ORDERLY_RETRY_DELAY_S = 1.0
DEFAULT_PULL_BATCH = 32

Mode = Literal["pop", "queue_exclusive"]
StrategyName = Literal[
    "average", "average_by_circle", "consistent_hash", "by_config", "by_machine_room"
]
STRATEGIES: Mapping[str, messaging_pb2.AssignmentStrategy] = MappingProxyType(
    {
        "average": messaging_pb2.ASSIGNMENT_STRATEGY_AVERAGE,
        "average_by_circle": messaging_pb2.ASSIGNMENT_STRATEGY_AVERAGE_BY_CIRCLE,
        "consistent_hash": messaging_pb2.ASSIGNMENT_STRATEGY_CONSISTENT_HASH,
        "by_config": messaging_pb2.ASSIGNMENT_STRATEGY_BY_CONFIG,
        "by_machine_room": messaging_pb2.ASSIGNMENT_STRATEGY_BY_MACHINE_ROOM,
    }
)

_COUNTS = (
    "consume_threads",
    "max_cached_messages",
    "max_cached_bytes",
    "receive_batch_size",
    "pull_batch_size",
)
_DURATIONS = (
    "invisible_duration_s",
    "max_processing_s",
    "heartbeat_interval_s",
    "orderly_retry_delay_s",
)


@dataclass(frozen=True, kw_only=True)
class PushConsumerOptions:
    """How a push consumer receives, holds and hands out messages.

    ``PushConsumer(..., options=PushConsumerOptions(...))`` is the same as passing these as
    keywords. Every field is checked here, so a bad value fails where it was written.

    Raises:
        InvalidArgumentError: A field is out of range; the message names what is allowed.
    """

    consume_threads: int = DEFAULT_CONSUME_THREADS
    """Listener calls running at once (the thread pool of a sync listener)."""
    max_cached_messages: int = DEFAULT_MAX_CACHED_MESSAGES
    """Messages held at most (received and not yet settled); receiving pauses at this count."""
    max_cached_bytes: int = DEFAULT_MAX_CACHED_BYTES
    """Body bytes held at most; receiving pauses at this size (one batch may pass it)."""
    mode: Mode = "pop"
    """``"pop"`` (RocketMQ 5's push consumer) or ``"queue_exclusive"`` (classic, by offset)."""
    invisible_duration_s: float = DEFAULT_INVISIBLE_DURATION_S
    """POP: invisible time of a receive and of each renewal."""
    max_processing_s: float = DEFAULT_MAX_PROCESSING_S
    """POP: a message is renewed for at most this long after receipt, then released."""
    receive_batch_size: int = DEFAULT_RECEIVE_BATCH
    """POP: messages per receive at most."""
    wait_s: float = DEFAULT_WAIT_S
    """Long-polling time of a receive (POP) or an idle queue's wait (queue-exclusive)."""
    strategy: StrategyName = "average"
    """Queue-exclusive: how the group splits queues (every member must agree)."""
    heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S
    """Heartbeat pace asked of the server (queue-exclusive: also of assignment checks)."""
    consume_from: Literal["last", "first"] | datetime = "last"
    """Queue-exclusive: where a queue with no committed group offset starts: ``"last"``,
    ``"first"`` or an aware ``datetime``."""
    orderly_retry_delay_s: float = DEFAULT_ORDERLY_RETRY_DELAY_S
    """Queue-exclusive: pause before a failed message is retried in place."""
    machine_room: str = ""
    """This consumer's machine room (strategy ``"by_machine_room"``)."""
    configured_queues: Mapping[str, Sequence[int]] | None = None
    """Strategy ``"by_config"``: ``topic -> queue ids`` to consume (kept read-only)."""
    pull_batch_size: int = DEFAULT_PULL_BATCH
    """Queue-exclusive: messages read per queue per call."""
    client_id: str | None = None
    """Identifies the consumer to the server; None makes a unique ``host@pid@random``."""
    timeout_s: float = DEFAULT_TIMEOUT_S
    """Timeout of each call (a receive waits ``wait_s`` longer)."""

    def __post_init__(self) -> None:
        for name in _COUNTS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgumentError(f"{name} must be an integer >= 1, got {value!r}")
        for name in _DURATIONS:
            check_positive(name, getattr(self, name))
        wait_s = self.wait_s
        if isinstance(wait_s, bool) or not isinstance(wait_s, int | float) or not wait_s >= 0:
            raise InvalidArgumentError(f"wait_s must be >= 0, got {wait_s!r}")
        if self.mode not in ("pop", "queue_exclusive"):
            raise InvalidArgumentError(
                f"mode {self.mode!r} is unknown: use 'pop' or 'queue_exclusive'"
            )
        if self.strategy not in STRATEGIES:
            raise InvalidArgumentError(
                f"strategy {self.strategy!r} is unknown: use one of {', '.join(STRATEGIES)}"
            )
        if isinstance(self.consume_from, datetime):
            if self.consume_from.tzinfo is None:
                raise InvalidArgumentError("consume_from must be timezone-aware")
        elif self.consume_from not in ("last", "first"):
            raise InvalidArgumentError(
                f"consume_from {self.consume_from!r} is unknown: use 'last', 'first' or a datetime"
            )
        for name in (*_DURATIONS, "wait_s"):  # one type for seconds from here on
            object.__setattr__(self, name, float(getattr(self, name)))
        if not self.timeout_s > 0:  # the same check, and error, as every client's
            raise ValueError(f"timeout_s must be positive, got {self.timeout_s}")
        if self.configured_queues and self.strategy != "by_config":
            raise InvalidArgumentError("configured_queues is only for strategy 'by_config'")
        if self.configured_queues is not None:
            # A frozen copy: the caller's dict may change later, these options must not.
            queues = {t: tuple(q) for t, q in self.configured_queues.items()}
            object.__setattr__(self, "configured_queues", MappingProxyType(queues))


def resolve_options(
    options: PushConsumerOptions | None, keywords: Mapping[str, Any]
) -> PushConsumerOptions:
    """A consumer's options, given as ``options=`` or as the same settings in keywords.

    Raises:
        TypeError: Both were given (a keyword that differs from its default), since one
            would silently win; or ``options`` is not a ``PushConsumerOptions``.
    """
    if options is None:
        return PushConsumerOptions(**keywords)
    if not isinstance(options, PushConsumerOptions):
        raise TypeError(f"options must be a PushConsumerOptions, got {type(options).__name__}")
    defaults = {f.name: f.default for f in fields(PushConsumerOptions)}
    both = sorted(k for k, v in keywords.items() if v != defaults[k])
    if both:
        raise TypeError(
            f"{', '.join(both)} given both as keywords and through options=: give the "
            "settings one way, e.g. dataclasses.replace(options, ...)"
        )
    return options


def check_positive(name: str, value: float) -> None:
    """Raise unless ``value`` is a positive, finite number (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise InvalidArgumentError(f"{name} must be a positive number, got {value!r}")
    if not math.isfinite(value):
        raise InvalidArgumentError(f"{name} must be finite, got {value!r}")
