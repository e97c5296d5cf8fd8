"""The broker's wall clock, in milliseconds since the epoch: deadlines and store times.

The core reads the time only through the `Clock` given to `Broker` (`SystemClock` unless
told otherwise): invisible times and deadlines, store times, revive, the checkpoint
buffer's ageing, retry backoff, delayed messages, the dedup window, retention, superseded
handles and transaction checks. A test gives it a `ManualClock` and moves time on with
`advance` instead of sleeping. Waits measured on the event loop's own clock (a long poll's
wait_s, the pause before a failed write is tried again) decide no deadline and stay there.

A background loop sleeps until its next deadline by this clock, at most a second at a time
(Wakeup); it also asks the clock to wake it when the time jumps (`on_advance`), which only a
ManualClock does, so an advance is seen at once.

Threading: read and advanced on the event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol


class Clock(Protocol):
    """What the core reads the time from."""

    def now_ms(self) -> int:
        """Milliseconds since the epoch."""
        ...

    def on_advance(self, callback: Callable[[], None]) -> None:
        """Call `callback` whenever the time jumps forward (a loop sleeping until a deadline
        looks again); a clock that only runs never calls it."""
        ...


class SystemClock:
    """The system's wall clock (time.time_ns), the default."""

    def now_ms(self) -> int:
        return now_ms()

    def on_advance(self, callback: Callable[[], None]) -> None:
        """Never called: the time runs, and loops never sleep past their next deadline."""


class ManualClock:
    """A clock that stands still until `advance` moves it (tests).

    Shared by the brokers of one test, so a restart continues its time. Callbacks of a
    closed broker stay registered: they only set a wake-up nobody waits on.
    """

    def __init__(self, start_ms: int | None = None) -> None:
        """`start_ms`: the time it shows first; the system time now by default, so store
        times and ids made from the system clock look alike."""
        self._now_ms = now_ms() if start_ms is None else start_ms
        # Called after each advance: the wake-ups of loops sleeping until a deadline.
        self._on_advance: list[Callable[[], None]] = []

    def now_ms(self) -> int:
        return self._now_ms

    def on_advance(self, callback: Callable[[], None]) -> None:
        self._on_advance.append(callback)

    def advance(self, ms: int) -> None:
        """Move the time `ms` milliseconds on, and wake what sleeps until a deadline (it
        runs once the caller yields to the event loop)."""
        if ms < 0:
            raise ValueError(f"a clock only moves forward: advance({ms})")
        self._now_ms += ms
        for callback in self._on_advance:
            callback()


def now_ms() -> int:
    """The system clock's reading (SystemClock's), for code outside the core."""
    return time.time_ns() // 1_000_000
