"""The harness's waits (tests/support/waiting.py): they return once the predicate holds, and
fail naming what they waited for and how long, so a test over them can fail."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from tests.support.waiting import until, wait_until


def test_wait_until_returns_once_the_predicate_holds() -> None:
    looks = itertools.count(1)
    wait_until(lambda: next(looks) >= 3, "the third look", 5.0, interval_s=0.001)
    assert next(looks) == 4


def test_wait_until_fails_naming_what_and_the_time_waited() -> None:
    with pytest.raises(AssertionError, match=r"timed out after 0\.\ds waiting for nothing"):
        wait_until(lambda: False, "nothing", 0.05, interval_s=0.01)


def test_until_awaits_a_coroutine_predicate() -> None:
    looks = itertools.count(1)

    async def third() -> bool:
        return next(looks) >= 3

    asyncio.run(until(third, "the third look", 5.0, interval_s=0.001))
    assert next(looks) == 4


def test_until_fails_naming_what_and_the_time_waited() -> None:
    with pytest.raises(AssertionError, match=r"timed out after 0\.\ds waiting for nothing"):
        asyncio.run(until(lambda: False, "nothing", 0.05, interval_s=0.01))
