"""The broker's clock: the system's by default; a ManualClock stands still until advanced,
and an advance wakes what sleeps until a deadline."""

from __future__ import annotations

import time

import pytest

from popmq.broker_core.clock import ManualClock, SystemClock


def test_the_system_clock_reads_the_wall_clock_in_milliseconds() -> None:
    before = time.time_ns() // 1_000_000
    now = SystemClock().now_ms()
    assert before <= now <= time.time_ns() // 1_000_000


def test_a_manual_clock_moves_only_when_advanced_and_calls_back_each_time() -> None:
    clock = ManualClock(start_ms=1_000)
    woken: list[int] = []
    clock.on_advance(lambda: woken.append(clock.now_ms()))
    assert clock.now_ms() == 1_000
    clock.advance(250)
    clock.advance(0)
    assert clock.now_ms() == 1_250
    assert woken == [1_250, 1_250]  # called after the time moved


def test_a_manual_clock_starts_at_the_system_time_and_never_goes_back() -> None:
    before = time.time_ns() // 1_000_000
    clock = ManualClock()
    assert before <= clock.now_ms() <= time.time_ns() // 1_000_000
    with pytest.raises(ValueError, match="only moves forward"):
        clock.advance(-1)
