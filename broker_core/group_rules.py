"""What a group create or update produces, as pure functions over the group's current state.

A broker (groups.py) applies them to its catalog; a cluster-mode proxy applies the same
functions to the group record it keeps in etcd (coordination/groups.py), so a group's settings
are checked and merged by one set of rules whichever process changes them.

No I/O: whether a subscribed topic exists is asked of the caller (`topic_exists`, which
raises NotFoundError for a topic the caller does not know).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from popmq.broker_core import validation
from popmq.broker_core.config import GroupDefaults
from popmq.broker_core.errors import InvalidArgumentError
from popmq.broker_core.filters import parse_filter
from popmq.broker_core.group_settings import CONSUME_FROM_CODES
from popmq.broker_core.types import ExponentialBackoff, GroupSettings, Subscription

TopicCheck = Callable[[str], object]
"""Raises NotFoundError when the named topic does not exist (its result is ignored)."""


@dataclass(frozen=True, slots=True)
class GroupState:
    """Everything an admin sets on a group (its id and creation time aside)."""

    max_delivery_attempts: int
    retry_backoff_ms: tuple[int, ...]
    """Nack delay by delivery attempt, in ms (the last entry repeats)."""
    settings: GroupSettings


def backoff_delays(
    retry_backoff_s: Sequence[float] | None,
    exponential: ExponentialBackoff | None,
    *,
    max_invisible_s: float,
) -> tuple[float, ...] | None:
    """The nack delay list from a list or an exponential policy; None when neither."""
    if retry_backoff_s and exponential is not None:
        raise InvalidArgumentError(
            "give either retry_backoff (a list) or exponential_backoff, not both"
        )
    if exponential is None:
        return tuple(retry_backoff_s) if retry_backoff_s else None
    top = max_invisible_s
    validation.check_range("exponential_backoff.initial", exponential.initial_s, 1, top, "s")
    validation.check_range(
        "exponential_backoff.max", exponential.max_s, exponential.initial_s, top, "s"
    )
    validation.check_range("exponential_backoff.multiplier", exponential.multiplier, 1, 10)
    delays: list[float] = []
    delay = exponential.initial_s
    # The last entry repeats, so the list stops at the cap (RocketMQ: 32 exponents).
    while len(delays) < validation.MAX_BACKOFF_ENTRIES:
        delays.append(min(delay, exponential.max_s))
        if delay >= exponential.max_s or exponential.multiplier == 1:
            break
        delay *= exponential.multiplier
    return tuple(delays)


def check_backoff(backoff: Sequence[float], *, max_invisible_s: float) -> None:
    if len(backoff) > validation.MAX_BACKOFF_ENTRIES:
        raise InvalidArgumentError(
            f"retry_backoff has {len(backoff)} entries: at most "
            f"{validation.MAX_BACKOFF_ENTRIES} are allowed"
        )
    for i, delay in enumerate(backoff):
        validation.check_range(
            f"retry_backoff[{i}]", delay, 1, max_invisible_s, "s", field="retry_backoff"
        )


def check_group_settings(settings: GroupSettings, topic_exists: TopicCheck) -> GroupSettings:
    """Validate subscriptions and consume_from; returns them with subscriptions sorted."""
    seen: set[str] = set()
    for i, sub in enumerate(settings.subscriptions):
        validation.check_name(f"subscriptions[{i}].topic", sub.topic, allow_dlq=True)
        if sub.topic in seen:
            raise InvalidArgumentError(
                f"topic {sub.topic!r} is subscribed twice: give each topic once"
            )
        seen.add(sub.topic)
        topic_exists(sub.topic)
        parse_filter(sub.expression, sub.filter_type)
    if settings.consume_from not in CONSUME_FROM_CODES:
        raise InvalidArgumentError(
            f"consume_from {settings.consume_from!r} is not one of {', '.join(CONSUME_FROM_CODES)}"
        )
    if settings.consume_from == "timestamp" and settings.consume_from_ms <= 0:
        raise InvalidArgumentError("consume_from timestamp needs consume_from_time")
    return dataclasses.replace(
        settings, subscriptions=tuple(sorted(settings.subscriptions, key=lambda s: s.topic))
    )


def new_group_state(
    *,
    max_delivery_attempts: int | None,
    retry_backoff_s: Sequence[float] | None,
    settings: GroupSettings | None,
    defaults: GroupDefaults,
    max_invisible_s: float,
    topic_exists: TopicCheck,
) -> GroupState:
    """The state of a group created with these arguments (None: the default)."""
    checked = check_group_settings(settings or GroupSettings(), topic_exists)
    attempts = (
        defaults.max_delivery_attempts if max_delivery_attempts is None else max_delivery_attempts
    )
    validation.check_range("max_delivery_attempts", attempts, 1, validation.MAX_DELIVERY_ATTEMPTS)
    backoff = (
        backoff_delays(
            retry_backoff_s, checked.exponential_backoff, max_invisible_s=max_invisible_s
        )
        or defaults.retry_backoff_s
    )
    check_backoff(backoff, max_invisible_s=max_invisible_s)
    return GroupState(attempts, tuple(round(d * 1000) for d in backoff), checked)


def updated_group_state(
    name: str,
    current: GroupState,
    *,
    max_delivery_attempts: int | None = None,
    retry_backoff_s: Sequence[float] | None = None,
    exponential_backoff: ExponentialBackoff | None = None,
    fifo: bool | None = None,
    set_subscriptions: Sequence[Subscription] = (),
    remove_subscriptions: Sequence[str] = (),
    consume_from: str | None = None,
    consume_from_ms: int = 0,
    max_invisible_s: float,
    topic_exists: TopicCheck,
) -> GroupState:
    """The state of group `name` after an update; None / empty arguments keep a value."""
    old = current.settings
    attempts = (
        current.max_delivery_attempts if max_delivery_attempts is None else max_delivery_attempts
    )
    validation.check_range("max_delivery_attempts", attempts, 1, validation.MAX_DELIVERY_ATTEMPTS)
    backoff_ms = current.retry_backoff_ms
    exponential = old.exponential_backoff
    delays = backoff_delays(retry_backoff_s, exponential_backoff, max_invisible_s=max_invisible_s)
    if delays is not None:
        check_backoff(delays, max_invisible_s=max_invisible_s)
        backoff_ms = tuple(round(d * 1000) for d in delays)
        exponential = exponential_backoff
    subs = {s.topic: s for s in old.subscriptions}
    for topic in remove_subscriptions:
        if topic not in subs:
            raise InvalidArgumentError(
                f"group {name!r} does not subscribe to topic {topic!r}; it subscribes to "
                f"{', '.join(sorted(subs)) or 'nothing'}"
            )
        del subs[topic]
    for i, sub in enumerate(set_subscriptions):
        if any(s.topic == sub.topic for s in set_subscriptions[:i]):
            raise InvalidArgumentError(
                f"topic {sub.topic!r} is subscribed twice: give each topic once"
            )
        subs[sub.topic] = sub
    settings = check_group_settings(
        GroupSettings(
            fifo=old.fifo if fifo is None else fifo,
            subscriptions=tuple(subs.values()),
            consume_from=old.consume_from if consume_from is None else consume_from,
            consume_from_ms=old.consume_from_ms if consume_from is None else consume_from_ms,
            exponential_backoff=exponential,
        ),
        topic_exists,
    )
    return GroupState(attempts, backoff_ms, settings)
