"""Pops limited to one queue (RocketMQ PopMessageRequestHeader.queueId) and their long polls.

A queue-limited pop reads that queue plus the group's retry queue for the topic. Its long
poll is woken by sends to that queue and by group-wide events (retry copies, FIFO groups
released), and a send to another queue never spends the wake-up it needs.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from popmq.broker_core.broker import Broker
from popmq.broker_core.errors import AnswerBoundError, InvalidArgumentError
from popmq.broker_core.types import NewMessage, PoppedMessage
from popmq.broker_core.validation import MAX_RESPONSE_BYTES
from tests.support.waiting import until
from tests.unit.conftest import OpenBroker

PROMPT_S = 5.0
"""A woken pop returns well within this; every held pop here waits 20 s or more."""


def _bodies(messages: list[PoppedMessage]) -> list[bytes]:
    return [m.record.body for m in messages]


def _hold(broker: Broker, queue_id: int, wait_s: float = 20) -> asyncio.Task[list[PoppedMessage]]:
    return asyncio.create_task(broker.pop("g", "orders", queue_id=queue_id, wait_s=wait_s))


async def _returns_promptly(task: asyncio.Task[list[PoppedMessage]]) -> list[PoppedMessage]:
    loop = asyncio.get_running_loop()
    started = loop.time()
    found = await asyncio.wait_for(task, PROMPT_S * 2)
    assert loop.time() - started < PROMPT_S, "woken only when its wait ran out"
    return found


def test_a_queue_limited_pop_returns_only_that_queue_and_the_retry_queue(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 4)
            sent = await broker.send([NewMessage("orders", f"m{i}".encode()) for i in range(8)])
            on = {q: sorted(f"m{i}".encode() for i, r in enumerate(sent) if r.queue_id == q)
                  for q in range(4)}  # fmt: skip
            assert all(len(bodies) == 2 for bodies in on.values())
            two = await broker.pop("g", "orders", queue_id=2, max_messages=32, wait_s=0)
            assert sorted(_bodies(two)) == on[2]
            assert {m.queue_id for m in two} == {2}
            assert await broker.pop("g", "orders", queue_id=2, wait_s=0) == []
            three = await broker.pop("g", "orders", queue_id=3, max_messages=32, wait_s=0)
            assert sorted(_bodies(three)) == on[3]
            # A message of queue 0 comes back as a retry copy: any queue's pop may take it.
            (first,) = await broker.pop("g", "orders", queue_id=0, max_messages=1, wait_s=0)
            await broker.nack("g", first.receipt_handle, delay_s=0)
            (retried,) = await broker.pop("g", "orders", queue_id=3, wait_s=20)
            assert retried.record.body == first.record.body
            assert retried.delivery_attempt == 2
            assert retried.record.origin_queue_id == 0
            rest = await broker.pop("g", "orders", queue_id=0, max_messages=32, wait_s=0)
            assert sorted([*_bodies(rest), first.record.body]) == on[0]

    asyncio.run(scenario())


@pytest.mark.parametrize("queue_id", [4, -1])
def test_a_queue_id_outside_the_topic_is_refused_with_its_range(
    open_broker: OpenBroker, queue_id: int
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 4)
            with pytest.raises(InvalidArgumentError) as info:
                await broker.pop("g", "orders", queue_id=queue_id, wait_s=20)
            assert str(info.value) == (
                f"queue_id {queue_id} is outside 0..3: topic 'orders' has 4 queues"
            )
            assert broker.polling.held == 0

    asyncio.run(scenario())


def test_a_send_wakes_the_pop_held_on_its_queue_not_one_held_on_another(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 2)
            on_one = _hold(broker, 1)  # the older waiter: oldest-first must not pick it
            await until(lambda: broker.polling.held == 1, "1 pop held", 5.0)
            on_zero = _hold(broker, 0)
            await until(lambda: broker.polling.held == 2, "2 pops held", 5.0)
            (to_zero,) = await broker.send([NewMessage("orders", b"for zero")])
            assert to_zero.queue_id == 0  # round-robin starts at queue 0
            assert _bodies(await _returns_promptly(on_zero)) == [b"for zero"]
            await asyncio.sleep(0.2)
            assert not on_one.done()  # not woken, and still held
            assert broker.polling.held == 1
            (to_one,) = await broker.send([NewMessage("orders", b"for one")])
            assert to_one.queue_id == 1
            (got,) = await _returns_promptly(on_one)
            assert (got.record.body, got.queue_id) == (b"for one", 1)
            assert broker.polling.held == 0

    asyncio.run(scenario())


def test_a_pop_of_every_queue_is_woken_by_a_send_to_any_queue(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 2)
            on_one = _hold(broker, 1)
            everywhere = asyncio.create_task(broker.pop("g", "orders", wait_s=20))
            await until(lambda: broker.polling.held == 2, "2 pops held", 5.0)
            (sent,) = await broker.send([NewMessage("orders", b"any")])
            assert sent.queue_id == 0
            assert _bodies(await _returns_promptly(everywhere)) == [b"any"]
            assert not on_one.done()
            on_one.cancel()
            with pytest.raises(asyncio.CancelledError):
                await on_one

    asyncio.run(scenario())


def test_a_retry_copy_wakes_a_pop_held_on_another_queue(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 2)
            (sent,) = await broker.send([NewMessage("orders", b"again")])
            (first,) = await broker.pop("g", "orders", queue_id=sent.queue_id, wait_s=0)
            other = 1 - sent.queue_id
            held = _hold(broker, other)
            await until(lambda: broker.polling.held == 1, "1 pop held", 5.0)
            await broker.nack("g", first.receipt_handle, delay_s=0)  # revived at once
            (retried,) = await _returns_promptly(held)
            assert retried.record.body == b"again" and retried.delivery_attempt == 2

    asyncio.run(scenario())


def test_a_released_fifo_group_wakes_the_pop_held_on_its_queue(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 2, message_type="fifo")
            sent = await broker.send(
                [NewMessage("orders", f"a{i}".encode(), message_group="a") for i in range(2)]
            )
            queue = sent[0].queue_id
            assert sent[1].queue_id == queue
            (a0,) = await broker.pop("g", "orders", queue_id=queue, wait_s=0)
            other = _hold(broker, 1 - queue)  # older, and on the other queue
            await until(lambda: broker.polling.held == 1, "1 pop held", 5.0)
            mine = _hold(broker, queue)  # a1 waits behind a0
            await until(lambda: broker.polling.held == 2, "2 pops held", 5.0)
            await broker.ack("g", [a0.receipt_handle])
            (a1,) = await _returns_promptly(mine)
            assert a1.record.body == b"a1"
            other.cancel()
            with pytest.raises(asyncio.CancelledError):
                await other
            assert broker.polling.held == 0

    asyncio.run(scenario())


def test_fifo_order_holds_on_a_single_queue_pop(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 2, message_type="fifo")
            sent = await broker.send(
                [NewMessage("orders", f"{g}{i}".encode(), message_group=g)
                 for i in range(3) for g in ("a", "b")]
            )  # fmt: skip
            queue_of = {r.message_id: r.queue_id for r in sent}
            delivered: list[bytes] = []
            for queue in range(2):
                while found := await broker.pop(
                    "g", "orders", queue_id=queue, max_messages=32, wait_s=0.5
                ):
                    assert all(queue_of[m.record.message_id] == queue for m in found)
                    assert len({m.record.message_group for m in found}) == len(found)
                    delivered += _bodies(found)
                    await broker.ack("g", [m.receipt_handle for m in found])
            assert sorted(delivered) == sorted(f"{g}{i}".encode() for i in range(3) for g in "ab")
            for group in "ab":
                assert [b for b in delivered if b.startswith(group.encode())] == [
                    f"{group}{i}".encode() for i in range(3)
                ]

    asyncio.run(scenario())


def test_a_cancelled_held_pop_is_unparked_and_takes_nothing(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 2)
            held = _hold(broker, 1)
            await until(lambda: broker.polling.held == 1, "1 pop held", 5.0)
            held.cancel()
            with pytest.raises(asyncio.CancelledError):
                await held
            assert broker.polling.held == 0
            await broker.send([NewMessage("orders", b"zero"), NewMessage("orders", b"one")])
            got = await broker.pop("g", "orders", queue_id=1, wait_s=0)
            assert _bodies(got) == [b"one"]

    asyncio.run(scenario())


def test_a_pop_cancelled_after_its_wake_up_hands_the_wake_up_on(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 2)
            first = _hold(broker, 1)
            await until(lambda: broker.polling.held == 1, "1 pop held", 5.0)
            second = _hold(broker, 1)
            await until(lambda: broker.polling.held == 2, "2 pops held", 5.0)
            polling = broker.polling
            notify = polling.notify

            def notify_then_cancel(topic: str, count: int = 1, **kwargs: Any) -> int:
                woken = notify(topic, count, **kwargs)
                if kwargs.get("queue_id") == 1:
                    # The send woke `first`, which has not run yet: cancel it before it pops.
                    first.cancel()
                return woken

            polling.notify = notify_then_cancel  # type: ignore[method-assign]
            sent = await broker.send([NewMessage("orders", b"zero"), NewMessage("orders", b"one")])
            polling.notify = notify  # type: ignore[method-assign]
            assert [r.queue_id for r in sent] == [0, 1]
            with pytest.raises(asyncio.CancelledError):
                await first
            assert _bodies(await _returns_promptly(second)) == [b"one"]
            assert broker.polling.held == 0

    asyncio.run(scenario())


def test_a_held_probe_that_can_reserve_takes_the_arrival_that_wakes_it(
    open_broker: OpenBroker,
) -> None:
    asked: list[int] = []

    def reserve(needed: int) -> int:
        asked.append(needed)
        return MAX_RESPONSE_BYTES

    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            probe = asyncio.create_task(
                broker.pop("g", "orders", max_bytes=0, reserve=reserve, max_messages=8, wait_s=20)
            )
            await until(lambda: broker.polling.held == 1, "1 pop held", 5.0)
            await broker.send([NewMessage("orders", b"zero"), NewMessage("orders", b"one")])
            assert _bodies(await _returns_promptly(probe)) == [b"zero", b"one"]

    asyncio.run(scenario())
    assert len(asked) == 1  # for the first message; the second fits what it reserved


def test_a_held_probe_whose_reserve_refuses_takes_nothing_and_says_what_it_needs(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            probe = asyncio.create_task(
                broker.pop("g", "orders", max_bytes=0, reserve=lambda needed: 0, wait_s=20)
            )
            await until(lambda: broker.polling.held == 1, "1 pop held", 5.0)
            await broker.send([NewMessage("orders", b"zero")])
            with pytest.raises(AnswerBoundError) as refused:
                await _returns_promptly(probe)
            assert refused.value.needed_bytes > len(b"zero")
            got = await broker.pop("g", "orders", wait_s=0)
            assert _bodies(got) == [b"zero"]  # still there for the next pop

    asyncio.run(scenario())
