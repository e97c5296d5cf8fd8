"""Helpers shared by the Spark tests."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 90.0) -> None:
    """Poll `predicate` until it holds (stream progress has no event to await)."""
    give_up = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > give_up:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(0.1)
