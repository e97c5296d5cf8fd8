"""Parked pops: bounded per (group, topic) and in total, woken by arrivals, per queue."""

from __future__ import annotations

import asyncio

import pytest

from popmq.broker_core.config import LongPollingConfig
from popmq.broker_core.errors import ResourceExhaustedError
from popmq.broker_core.long_polling import LongPolling


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


# -- pops limited to one queue --------------------------------------------------------------


def test_an_arrival_on_a_queue_wakes_its_waiters_first_then_those_of_every_queue() -> None:
    async def scenario() -> None:
        polling = _polling()
        everywhere = polling.park("g", "t")  # the oldest
        on_zero = polling.park("g", "t", 0)
        on_one = [polling.park("g", "t", 1) for _ in range(2)]
        assert polling.notify("t", 2, queue_id=1) == 2
        assert [f.done() for f in on_one] == [True, True]
        assert not everywhere.done() and not on_zero.done()
        assert polling.notify("t", 2, queue_id=0) == 2  # its one waiter, then an all-queue one
        assert on_zero.done() and everywhere.done()
        assert polling.notify("t", 1, queue_id=3) == 0  # nobody waits there or everywhere

    asyncio.run(scenario())


def test_a_notify_without_a_queue_wakes_count_waiters_of_each_queue_and_of_every_queue() -> None:
    async def scenario() -> None:
        polling = _polling()
        waiters = {key: [polling.park("g", "t", key) for _ in range(2)] for key in (None, 0, 1)}
        theirs = polling.park("h", "t", 0)
        assert polling.notify("t", 1, group="g") == 3
        assert {key: [f.done() for f in fs] for key, fs in waiters.items()} == {
            None: [True, False],
            0: [True, False],
            1: [True, False],
        }
        assert not theirs.done()
        assert polling.notify("t", 5) == 4  # the rest of g, and h
        assert all(f.done() for fs in waiters.values() for f in fs) and theirs.done()

    asyncio.run(scenario())


def test_the_per_key_bound_counts_the_waiters_of_every_queue() -> None:
    async def scenario() -> None:
        polling = _polling(max_per_key=2)
        polling.park("g", "t", 0)
        polling.park("g", "t", 1)
        with pytest.raises(ResourceExhaustedError):
            polling.park("g", "t")
        assert polling.held == 2

    asyncio.run(scenario())


def test_unpark_needs_the_queue_the_future_was_parked_on() -> None:
    async def scenario() -> None:
        polling = _polling()
        future = polling.park("g", "t", 2)
        polling.unpark("g", "t", future)  # parked on queue 2, not on every queue
        polling.unpark("g", "t", future, 1)
        assert polling.held == 1
        polling.unpark("g", "t", future, 2)
        assert polling.held == 0
        assert polling.notify("t", 1, queue_id=2) == 0

    asyncio.run(scenario())


def test_notify_all_wakes_queue_limited_waiters_too() -> None:
    async def scenario() -> None:
        polling = _polling()
        waiters = [polling.park("g", "t", q) for q in (None, 0, 0, 3)]
        polling.notify_all("t")
        assert all(f.done() for f in waiters)

    asyncio.run(scenario())


def test_an_arrival_wakes_only_the_watches_of_its_queue() -> None:
    """AwaitMessages: waking costs O(watches of that queue), not O(every held call)."""

    async def scenario() -> None:
        polling = _polling()
        others = [polling.watch("t", [1, 2]) for _ in range(2000)]
        mine = polling.watch("t", [0, 2])
        pops = polling.park("g", "t")
        assert polling.watches == 2001 and polling.held == 2002
        polling.notify("t", 1, queue_id=0)
        assert mine.future.done() and mine.take_moved() == (0,)
        assert not any(w.future.done() for w in others)
        assert pops.done()  # pops of every queue wake as before
        assert not mine.future.done()  # re-armed by take_moved
        polling.notify("t", 1, queue_id=2)
        assert mine.take_moved() == (2,) and all(w.future.done() for w in others)
        polling.notify("t", 1)  # no queue named: every watched queue may have moved
        assert mine.take_moved() == (0, 2)
        for watch in [*others, mine]:
            polling.unwatch(watch)
            polling.unwatch(watch)  # idempotent
        assert polling.watches == 0 and polling._watches == {}

    asyncio.run(scenario())


def test_watches_are_bounded_by_held_calls_and_by_watched_queues() -> None:
    async def scenario() -> None:
        polling = LongPolling(LongPollingConfig(max_total=2, max_watched_queues=5))
        polling.watch("t", range(3))
        with pytest.raises(ResourceExhaustedError, match=r"at most 5 .queue, call. pairs"):
            polling.watch("t", range(3))
        polling.watch("t", range(2))
        with pytest.raises(ResourceExhaustedError, match="too many held calls"):
            polling.watch("t", [0])
        with pytest.raises(ResourceExhaustedError, match="too many held pops"):
            polling.park("g", "t")

    asyncio.run(scenario())


def test_held_topics_names_exactly_the_topics_something_waits_on() -> None:
    """A send skips waking a topic absent from held_topics, so it must never miss one."""

    async def scenario() -> None:
        polling = _polling()
        held = polling.held_topics
        first = polling.park("g", "t", 0)
        second = polling.park("h", "t")
        watch = polling.watch("u", [1, 2])
        assert held == {"t": 2, "u": 1}
        polling.notify("t", 2, queue_id=0)  # waking does not release: unpark does
        assert held == {"t": 2, "u": 1}
        polling.unpark("g", "t", first, 0)
        polling.unpark("g", "t", first, 0)  # twice: counted once
        assert held == {"t": 1, "u": 1}
        polling.unpark("h", "t", second)
        polling.unwatch(watch)
        polling.unwatch(watch)
        assert held == {}
        assert polling.held_topics is held  # the dict a sender keeps stays the registry's

    asyncio.run(scenario())


def test_a_watch_of_no_queues_is_released_by_unwatch() -> None:
    """It counts toward the bounds and held_topics while held, so unwatch must free it."""

    async def scenario() -> None:
        polling = LongPolling(LongPollingConfig(max_total=1, max_watched_queues=5))
        empty = polling.watch("t", [])
        assert polling.watches == 1 and polling.held_topics == {"t": 1}
        polling.unwatch(empty)
        polling.unwatch(empty)  # idempotent
        assert polling.watches == 0 and polling.held_topics == {} and polling._watches == {}
        polling.unwatch(polling.watch("t", [0]))  # its slot is free again

    asyncio.run(scenario())
