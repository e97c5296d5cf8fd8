"""Broker numbers: each broker's place, for good, in the routes derived from the broker list.

A group's dead-letter topic lives on every broker (each dead-letters what it revives into
its own `%DLQ%<group>`), so its route is derived rather than stored: one queue per broker.
Its global queue ids must not move when a broker joins, so brokers are placed by a number
each is given once, not by name. The numbers are one entry, `numbers/brokers`
(`{"brokers": {name: number}}`), written by compare-and-set: a broker without one gets the
next free number from whichever proxy sees it first, two proxies never hand out the same
number, and a number is never taken back.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from popmq.coordination.coordinator import Coordinator, Entry
from popmq.coordination.errors import ConflictError, CorruptValueError

logger = logging.getLogger(__name__)

NUMBERS_FOLDER = "numbers/"
NUMBERS_PATH = NUMBERS_FOLDER + "brokers"
"""The one entry that holds every broker's number."""
CAS_ATTEMPTS = 16
"""Compare-and-set attempts before giving up (other proxies numbering other brokers)."""


def decode_numbers(entry: Entry | None) -> dict[str, int]:
    """Broker name -> number from the entry (empty when absent); CorruptValueError if it
    is not the JSON this module writes."""
    if entry is None:
        return {}
    brokers: Any = entry.value.get("brokers")
    if not isinstance(brokers, Mapping) or not all(
        isinstance(name, str) and type(number) is int and number >= 0
        for name, number in brokers.items()
    ):
        raise CorruptValueError(
            f"{entry.path} must be {{'brokers': {{name: number >= 0}}}}, not {dict(entry.value)}"
        )
    return dict(brokers)


async def number_brokers(coordinator: Coordinator, names: Iterable[str]) -> dict[str, int]:
    """Give each of `names` without a number the next free one (in name order among them);
    returns every broker's number. ConflictError after CAS_ATTEMPTS lost races;
    CoordinationUnavailableError while the coordinator is unreachable."""
    wanted = set(names)
    revision = 0
    for _ in range(CAS_ATTEMPTS):
        entry = await coordinator.get(NUMBERS_PATH)
        revision = entry.revision if entry is not None else 0
        numbers = decode_numbers(entry)
        missing = sorted(wanted - numbers.keys())
        if not missing:
            return numbers
        following = max(numbers.values(), default=-1) + 1
        for offset, name in enumerate(missing):
            numbers[name] = following + offset
        try:
            await coordinator.compare_and_set(
                NUMBERS_PATH,
                {"brokers": numbers},
                revision=revision,
            )
        except ConflictError:
            continue  # another proxy numbered a broker meanwhile: read again
        logger.info("numbered brokers %s", {name: numbers[name] for name in missing})
        return numbers
    raise ConflictError(
        f"could not number brokers {sorted(wanted)}: {NUMBERS_PATH} changed under "
        f"{CAS_ATTEMPTS} attempts in a row; retry",
        key=NUMBERS_PATH,
        current_revision=revision,
    )


def by_number(known: Iterable[str], numbers: Mapping[str, int]) -> tuple[str, ...]:
    """Every numbered broker by number, then the `known` brokers not numbered yet by name.

    A numbered broker keeps its place even while it is down or named by no route, so the
    places before a broker never change; one not numbered yet (seconds after it joined)
    goes last until it is.
    """
    numbered = sorted(numbers, key=lambda name: (numbers[name], name))
    rest = sorted(set(known) - numbers.keys())
    return (*numbered, *rest)
