"""Helpers shared by the Spark tests."""

from __future__ import annotations

from collections.abc import Callable

from tests.support.waiting import wait_until


def wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 90.0) -> None:
    """Poll `predicate` until it holds (stream progress has no event to await); every 0.1 s,
    as each look asks the JVM for a query's progress."""
    wait_until(predicate, what, timeout_s, interval_s=0.1)
