"""Held pops woken by arrivals, their bounds, and tag filters evaluated in the broker."""

from __future__ import annotations

import asyncio

import pytest

from popmq.broker_core.config import LongPollingConfig
from popmq.broker_core.errors import ResourceExhaustedError
from popmq.broker_core.types import NewMessage
from tests.support.waiting import until
from tests.unit.conftest import OpenBroker


def _msg(body: bytes = b"x", tag: str = "", topic: str = "orders") -> NewMessage:
    return NewMessage(topic, body, tag=tag)


# -- long polling ---------------------------------------------------------------------------


def test_long_poll_is_woken_by_a_send(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 4)
            loop = asyncio.get_running_loop()
            started = loop.time()
            waiter = asyncio.create_task(broker.pop("g", "orders", wait_s=20))
            await until(lambda: broker.polling.held == 1, "1 pop held", 5.0)
            await broker.send([_msg(b"arrived")])
            (msg,) = await asyncio.wait_for(waiter, 5)
            assert msg.record.body == b"arrived"
            assert loop.time() - started < 10  # woken, not timed out
            assert broker.polling.held == 0

    asyncio.run(scenario())


def test_long_poll_returns_empty_after_its_timeout(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            loop = asyncio.get_running_loop()
            started = loop.time()
            assert await broker.pop("g", "orders", wait_s=0.3) == []
            assert loop.time() - started >= 0.29
            assert broker.polling.held == 0

    asyncio.run(scenario())


def test_a_send_wakes_a_long_poll_of_every_group(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            waiters = [
                asyncio.create_task(broker.pop(group, "orders", wait_s=20))
                for group in ("billing", "shipping")
            ]
            await until(lambda: broker.polling.held == 2, "2 pops held", 5.0)
            await broker.send([_msg(b"both")])
            results = await asyncio.wait_for(asyncio.gather(*waiters), 5)
            assert [[m.record.body for m in r] for r in results] == [[b"both"], [b"both"]]

    asyncio.run(scenario())


def test_one_message_is_delivered_to_one_of_the_groups_waiting_consumers(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            waiters = [asyncio.create_task(broker.pop("g", "orders", wait_s=0.5)) for _ in range(3)]
            await until(lambda: broker.polling.held == 3, "3 pops held", 5.0)
            await broker.send([_msg(b"only")])
            results = await asyncio.wait_for(asyncio.gather(*waiters), 5)
            assert sorted(len(r) for r in results) == [0, 0, 1]

    asyncio.run(scenario())


def test_held_pops_beyond_the_per_group_bound_are_resource_exhausted(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker(long_polling=LongPollingConfig(max_per_key=1)) as broker:
            await broker.create_topic("orders", 1)
            held = asyncio.create_task(broker.pop("g", "orders", wait_s=10))
            await until(lambda: broker.polling.held == 1, "1 pop held", 5.0)
            with pytest.raises(ResourceExhaustedError, match="at most 1 may wait"):
                await broker.pop("g", "orders", wait_s=10)
            assert await broker.pop("g", "orders", wait_s=0) == []  # a pop that does not wait
            other = asyncio.create_task(broker.pop("other", "orders", wait_s=10))
            await until(lambda: broker.polling.held == 2, "2 pops held", 5.0)
            await broker.send([_msg()])
            assert len(await asyncio.wait_for(held, 5)) == 1
            assert len(await asyncio.wait_for(other, 5)) == 1
            assert broker.polling.held == 0

    asyncio.run(scenario())


def test_close_ends_held_pops_with_an_empty_result(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            waiter = asyncio.create_task(broker.pop("g", "orders", wait_s=20))
            await until(lambda: broker.polling.held == 1, "1 pop held", 5.0)
        assert await asyncio.wait_for(waiter, 5) == []

    asyncio.run(scenario())


# -- filters --------------------------------------------------------------------------------


def test_filtered_out_messages_are_never_delivered_and_the_offset_moves_past_them(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            tags = ["A", "B", "B", "A", "", "C", "B"]
            await broker.send([_msg(b"%d" % i, tag) for i, tag in enumerate(tags)])
            popped = await broker.pop(
                "g", "orders", invisible_s=30, wait_s=0, filter_expression="A"
            )
            assert [(m.record.body, m.record.tag, m.offset) for m in popped] == [
                (b"0", "A", 0),
                (b"3", "A", 3),
            ]
            await broker.ack("g", [m.receipt_handle for m in popped])
            cq = broker.consume_queue("g", "orders", 0)
            assert cq is not None
            assert cq.committed == len(tags)  # past the B, C and untagged messages too
            # Filtered out for good: a later pop of this group without a filter gets nothing.
            assert await broker.pop("g", "orders", wait_s=0) == []
            # Other groups are unaffected.
            assert len(await broker.pop("other", "orders", wait_s=0)) == len(tags)

    asyncio.run(scenario())


def test_filter_with_alternatives_delivers_each_listed_tag(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg(tag=t) for t in ["A", "B", "C", "A"]])
            popped = await broker.pop("g", "orders", wait_s=0, filter_expression="A || C")
            assert [m.record.tag for m in popped] == ["A", "C", "A"]

    asyncio.run(scenario())


def test_pop_that_finds_only_filtered_out_messages_returns_empty_and_commits_them(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg(tag="B") for _ in range(100)])
            assert await broker.pop("g", "orders", wait_s=0, filter_expression="A") == []
            cq = broker.consume_queue("g", "orders", 0)
            assert cq is not None
            assert cq.committed == 100
            assert broker.live_checkpoints == 0
            (row,) = [r for r in await broker.group_lag("g", "orders") if not r.retry]
            assert row.lag == 0

    asyncio.run(scenario())


def test_filtered_long_poll_skips_non_matching_arrivals_and_wakes_for_a_match(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            waiter = asyncio.create_task(
                broker.pop("g", "orders", wait_s=10, filter_expression="A")
            )
            await until(lambda: broker.polling.held == 1, "1 pop held", 5.0)
            cq = broker.consume_queue("g", "orders", 0)
            assert cq is not None
            await broker.send([_msg(b"no", "B")])
            # the held pop looked and skipped it
            await until(lambda: cq.committed == 1, "the held pop to skip the message", 5.0)
            assert broker.polling.held == 1  # and parked again
            assert not waiter.done()
            await broker.send([_msg(b"yes", "A")])
            (msg,) = await asyncio.wait_for(waiter, 5)
            assert msg.record.body == b"yes"

    asyncio.run(scenario())
