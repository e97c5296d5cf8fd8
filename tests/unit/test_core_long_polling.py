"""Parked pops: bounded per (group, topic) and in total, woken by arrivals."""

from __future__ import annotations

import asyncio

import pytest

from broker_core.config import LongPollingConfig
from broker_core.errors import ResourceExhaustedError
from broker_core.long_polling import LongPolling


def _polling(max_per_key: int = 1024, max_total: int = 100_000) -> LongPolling:
    return LongPolling(LongPollingConfig(max_per_key=max_per_key, max_total=max_total))


def test_parking_past_the_per_key_bound_is_resource_exhausted() -> None:
    async def scenario() -> None:
        polling = _polling(max_per_key=2)
        polling.park("g", "t")
        polling.park("g", "t")
        with pytest.raises(ResourceExhaustedError) as info:
            polling.park("g", "t")
        assert str(info.value) == (
            "too many held pops for group 'g' on topic 't': at most 2 may wait at once; retry later"
        )
        assert info.value.code == "RESOURCE_EXHAUSTED"
        assert info.value.retriable
        polling.park("other", "t")  # another group has its own bound
        polling.park("g", "t2")  # and so has another topic
        assert polling.held == 4

    asyncio.run(scenario())


def test_parking_past_the_total_bound_is_resource_exhausted() -> None:
    async def scenario() -> None:
        polling = _polling(max_per_key=10, max_total=3)
        polling.park("a", "t")
        polling.park("b", "t")
        polling.park("c", "u")
        with pytest.raises(ResourceExhaustedError) as info:
            polling.park("d", "v")
        assert str(info.value) == ("too many held pops on this server: at most 3; retry later")
        assert polling.held == 3

    asyncio.run(scenario())


def test_unpark_frees_capacity() -> None:
    async def scenario() -> None:
        polling = _polling(max_per_key=1, max_total=1)
        first = polling.park("g", "t")
        with pytest.raises(ResourceExhaustedError):
            polling.park("g", "t")
        polling.unpark("g", "t", first)
        assert polling.held == 0
        polling.park("g", "t")
        assert polling.held == 1

    asyncio.run(scenario())


def test_unpark_of_an_unknown_or_already_unparked_future_changes_nothing() -> None:
    async def scenario() -> None:
        polling = _polling()
        future = polling.park("g", "t")
        polling.unpark("g", "t", future)
        polling.unpark("g", "t", future)
        polling.unpark("nobody", "nowhere", future)
        assert polling.held == 0

    asyncio.run(scenario())


def test_notify_wakes_at_most_count_waiters_per_group_oldest_first() -> None:
    async def scenario() -> None:
        polling = _polling()
        g1 = [polling.park("g1", "t") for _ in range(3)]
        g2 = [polling.park("g2", "t") for _ in range(3)]
        other_topic = polling.park("g1", "u")
        assert polling.notify("t", 2) == 4
        assert [f.done() for f in g1] == [True, True, False]
        assert [f.done() for f in g2] == [True, True, False]
        assert not other_topic.done()

    asyncio.run(scenario())


def test_notify_does_not_count_waiters_woken_before() -> None:
    async def scenario() -> None:
        polling = _polling()
        waiters = [polling.park("g", "t") for _ in range(3)]
        assert polling.notify("t", 1) == 1
        assert polling.notify("t", 1) == 1  # the still-parked first one is skipped
        assert [f.done() for f in waiters] == [True, True, False]

    asyncio.run(scenario())


def test_notify_with_a_group_wakes_only_that_group() -> None:
    async def scenario() -> None:
        polling = _polling()
        mine = polling.park("g1", "t")
        theirs = polling.park("g2", "t")
        assert polling.notify("t", 5, group="g1") == 1
        assert mine.done()
        assert not theirs.done()
        assert polling.notify("t", 1, group="absent") == 0

    asyncio.run(scenario())


def test_notify_of_a_topic_nobody_waits_on_wakes_nothing() -> None:
    async def scenario() -> None:
        polling = _polling()
        waiter = polling.park("g", "t")
        assert polling.notify("u", 10) == 0
        assert not waiter.done()

    asyncio.run(scenario())


def test_notify_all_wakes_every_waiter_of_the_topic() -> None:
    async def scenario() -> None:
        polling = _polling()
        on_t = [polling.park(g, "t") for g in ("a", "a", "b")]
        on_u = polling.park("a", "u")
        polling.notify_all("t")
        assert all(f.done() for f in on_t)
        assert not on_u.done()

    asyncio.run(scenario())


def test_woken_waiter_resumes_the_awaiting_task() -> None:
    async def scenario() -> None:
        polling = _polling()
        future = polling.park("g", "t")
        woke = asyncio.Event()

        async def waiter() -> None:
            await future
            woke.set()

        task = asyncio.create_task(waiter())
        await asyncio.sleep(0)
        assert not woke.is_set()
        polling.notify("t")
        await asyncio.wait_for(task, 1)
        assert woke.is_set()

    asyncio.run(scenario())
