"""`[gc]`: the start-up heap frozen once a server serves, the young threshold, their bounds."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from popmq.runtime import settings
from popmq.runtime.collector import (
    MAX_YOUNG_THRESHOLD,
    CollectorConfig,
    configure_collector,
    freeze_start_up_heap,
)


@pytest.fixture
def collector() -> Iterator[None]:
    """Give the test process its collector back as it was (thresholds, nothing frozen)."""
    threshold = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


class _Cycle:
    """One object in a reference cycle with itself; counts how many are alive."""

    alive = 0
    most_alive = 0

    def __init__(self) -> None:
        self.me = self
        _Cycle.alive += 1
        _Cycle.most_alive = max(_Cycle.most_alive, _Cycle.alive)

    def __del__(self) -> None:
        _Cycle.alive -= 1


def test_the_defaults_freeze_and_raise_the_young_threshold() -> None:
    config = settings.load().gc
    assert config == CollectorConfig(freeze_after_start=True, young_threshold=10_000)


def test_the_settings_are_read_from_the_gc_section() -> None:
    config = settings.load(
        environ={"POPMQ_GC_FREEZE_AFTER_START": "false"},
        flags={"gc.young_threshold": "700"},
    ).gc
    assert config == CollectorConfig(freeze_after_start=False, young_threshold=700)


@pytest.mark.parametrize("value", ["0", "99", "100001"])
def test_a_young_threshold_out_of_range_is_refused_saying_the_range(value: str) -> None:
    with pytest.raises(
        settings.SettingsError,
        match=rf"\[gc\] is not valid: gc.young_threshold {value} is out of range: 100..100000",
    ):
        settings.load(flags={"gc.young_threshold": value})


@pytest.mark.usefixtures("collector")
def test_configuring_sets_the_young_threshold_and_keeps_the_older_ones() -> None:
    _, older, oldest = gc.get_threshold()
    configure_collector(CollectorConfig(young_threshold=5_000))
    assert gc.get_threshold() == (5_000, older, oldest)


@pytest.mark.usefixtures("collector")
def test_freezing_moves_the_live_heap_out_of_the_walks_and_collects_its_garbage_first() -> None:
    gc.collect()
    _Cycle.alive = 0
    held = _Cycle()
    dropped = _Cycle()
    del dropped
    frozen = freeze_start_up_heap(CollectorConfig())
    assert frozen > 1000  # the test process's modules and classes at least
    assert gc.get_objects(generation=2) == []  # nothing left for a full collection to walk
    assert _Cycle.alive == 1  # the start's garbage was collected, not frozen
    del held


@pytest.mark.usefixtures("collector")
def test_without_the_freeze_setting_nothing_is_frozen() -> None:
    assert freeze_start_up_heap(CollectorConfig(freeze_after_start=False)) == 0
    assert gc.get_freeze_count() == 0


@pytest.mark.usefixtures("collector")
def test_garbage_cycles_made_after_the_freeze_stay_bounded_at_the_highest_threshold() -> None:
    """The memory bound the setting relies on: with the heap frozen and the young threshold
    at its maximum, cyclic garbage never piles up past a few young generations' worth."""
    configure_collector(CollectorConfig(young_threshold=MAX_YOUNG_THRESHOLD))
    freeze_start_up_heap(CollectorConfig())
    _Cycle.alive = _Cycle.most_alive = 0
    for _ in range(20 * MAX_YOUNG_THRESHOLD):
        _Cycle()
    assert _Cycle.most_alive <= 2 * MAX_YOUNG_THRESHOLD
    gc.collect()
    assert _Cycle.alive == 0
