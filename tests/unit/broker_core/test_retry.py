"""Retry and dead letters (pop/retry.py): revive into the retry queue, dead-lettering, retry
isolation and fairness, a consumer's dead_letter and the redrive of dead letters."""

from __future__ import annotations

import asyncio

import pytest

from popmq.broker_core.broker import Broker
from popmq.broker_core.catalog import retry_topic_name
from popmq.broker_core.clock import ManualClock
from popmq.broker_core.errors import FailedPreconditionError
from popmq.broker_core.types import NewMessage, PoppedMessage, RedriveResult
from tests.support.waiting import until
from tests.unit.conftest import OpenBroker, settle


def _msg(body: bytes = b"x", topic: str = "orders") -> NewMessage:
    return NewMessage(topic, body)


def _bodies(found: list[PoppedMessage]) -> list[bytes]:
    return [m.record.body for m in found]


async def _retry_max_offset(broker: Broker, group: str, topic: str) -> int:
    rows = [row for row in await broker.group_lag(group, topic) if row.retry]
    return rows[0].max_offset if rows else 0


async def _retry_max_offset_is(broker: Broker, group: str, topic: str, expected: int) -> bool:
    return await _retry_max_offset(broker, group, topic) == expected


async def _topic_exists(broker: Broker, name: str) -> bool:
    return any(t.name == name for t in await broker.list_topics())


def test_unacked_message_is_redelivered_with_attempt_2_after_invisible_time(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(clock=clock) as broker:
            await broker.create_topic("orders", 1)
            (sent,) = await broker.send([_msg(b"once")])
            (first,) = await broker.pop("g", "orders", invisible_s=1, wait_s=0)
            assert first.delivery_attempt == 1
            clock.advance(999)
            await settle()
            assert await broker.pop("g", "orders", wait_s=0) == []  # invisible until deadline

            # Long poll woken by the revive, not by a sweep.
            held = asyncio.create_task(broker.pop("g", "orders", invisible_s=30, wait_s=5))
            await until(lambda: broker.polling.held == 1, "the pop held", 5.0)
            clock.advance(1)
            (again,) = await held
            assert again.delivery_attempt == 2
            assert again.topic == "orders"
            assert again.record.message_id == sent.message_id
            assert again.record.body == b"once"
            assert again.receipt_handle != first.receipt_handle
            # It came through the group's retry queue, which remembers the original position.
            assert (again.record.origin_topic, again.record.origin_offset) == ("orders", 0)
            assert await _retry_max_offset(broker, "g", "orders") == 1
            assert await broker.ack("g", [again.receipt_handle]) == [None]
            assert broker.live_checkpoints == 0

    asyncio.run(scenario())


def test_redelivered_message_keeps_coming_back_with_increasing_attempts(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg()])
            (msg,) = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            attempts = [msg.delivery_attempt]
            for _ in range(3):
                await broker.nack("g", msg.receipt_handle, delay_s=0)
                (msg,) = await broker.pop("g", "orders", invisible_s=30, wait_s=5)
                attempts.append(msg.delivery_attempt)
            assert attempts == [1, 2, 3, 4]
            assert (msg.record.origin_topic, msg.record.origin_offset) == ("orders", 0)

    asyncio.run(scenario())


def test_revive_does_not_redeliver_an_acked_message(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(clock=clock) as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg(b"acked"), _msg(b"dropped")])
            acked, _ = await broker.pop("g", "orders", invisible_s=1, wait_s=0)
            assert await broker.ack("g", [acked.receipt_handle]) == [None]
            clock.advance(1000)

            again = await broker.pop("g", "orders", invisible_s=30, wait_s=5)
            assert [(m.record.body, m.delivery_attempt) for m in again] == [(b"dropped", 2)]
            assert await _retry_max_offset(broker, "g", "orders") == 1  # one retry copy, not two
            assert await broker.pop("g", "orders", wait_s=0) == []

    asyncio.run(scenario())


def test_message_is_dead_lettered_after_max_delivery_attempts_and_readable_by_another_group(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.create_group("g", max_delivery_attempts=2)
            (sent,) = await broker.send([_msg(b"poison")])
            (first,) = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            await broker.nack("g", first.receipt_handle, delay_s=0)
            (second,) = await broker.pop("g", "orders", invisible_s=30, wait_s=5)
            assert second.delivery_attempt == 2
            await broker.nack("g", second.receipt_handle, delay_s=0)

            await until(lambda: _topic_exists(broker, "%DLQ%g"), "the dead-letter topic", 5.0)
            info, _ = await broker.get_topic("%DLQ%g")
            assert info.kind_name == "dlq"

            async def dead_lettered() -> bool:
                return (await broker.get_topic("%DLQ%g"))[1][0].max_offset == 1

            await until(dead_lettered, "the message to be dead-lettered", 5.0)
            assert await broker.pop("g", "orders", wait_s=0) == []  # not retried a third time
            assert await _retry_max_offset(broker, "g", "orders") == 1

            (dead,) = await broker.pop("inspector", "%DLQ%g", invisible_s=30, wait_s=5)
            assert dead.topic == "%DLQ%g"
            assert dead.record.message_id == sent.message_id
            assert dead.record.body == b"poison"
            assert dead.record.origin_topic == "orders"
            assert dead.delivery_attempt == 1
            assert await broker.ack("inspector", [dead.receipt_handle]) == [None]
            assert broker.live_checkpoints == 0

    asyncio.run(scenario())


def test_with_a_single_attempt_the_first_failure_dead_letters(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.create_group("g", max_delivery_attempts=1)
            await broker.send([_msg(b"once")])
            (msg,) = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            await broker.nack("g", msg.receipt_handle, delay_s=0)
            await until(lambda: _topic_exists(broker, "%DLQ%g"), "the dead-letter topic", 5.0)
            (dead,) = await broker.pop("inspector", "%DLQ%g", wait_s=5)
            assert dead.record.body == b"once"
            assert await broker.pop("g", "orders", wait_s=0) == []
            assert await _retry_max_offset(broker, "g", "orders") == 0

    asyncio.run(scenario())


def test_a_group_popping_two_topics_never_gets_one_topics_retries_on_the_other(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("a", 1)
            await broker.create_topic("b", 1)
            await broker.send([_msg(b"from-a", "a"), _msg(b"from-b", "b")])
            (from_a,) = await broker.pop("g", "a", invisible_s=30, wait_s=0)
            (from_b,) = await broker.pop("g", "b", invisible_s=30, wait_s=0)
            await broker.nack("g", from_a.receipt_handle, delay_s=0)
            await until(
                lambda: _retry_max_offset_is(broker, "g", "a", 1),
                "one message revived into g's retry topic of a",
                5.0,
            )

            assert await _retry_max_offset(broker, "g", "b") == 0
            for _ in range(5):  # every pop position, retry-first ones included
                assert await broker.pop("g", "b", wait_s=0) == []
            (again,) = await broker.pop("g", "a", wait_s=0)
            assert (again.topic, again.record.body, again.delivery_attempt) == ("a", b"from-a", 2)
            assert await broker.ack("g", [from_b.receipt_handle]) == [None]

    asyncio.run(scenario())


def test_retry_queues_are_per_group_and_topic_even_when_display_names_collide(
    open_broker: OpenBroker,
) -> None:
    """`%RETRY%g_x_y` names both (g, x_y) and (g_x, y): they must stay two queues."""

    async def scenario() -> None:
        async with open_broker() as broker:
            assert retry_topic_name("g", "x_y") == retry_topic_name("g_x", "y")
            await broker.create_topic("x_y", 1)
            await broker.create_topic("y", 1)
            await broker.send([_msg(b"for-g", "x_y"), _msg(b"for-g_x", "y")])
            (one,) = await broker.pop("g", "x_y", invisible_s=30, wait_s=0)
            (two,) = await broker.pop("g_x", "y", invisible_s=30, wait_s=0)
            await broker.nack("g", one.receipt_handle, delay_s=0)
            await broker.nack("g_x", two.receipt_handle, delay_s=0)
            (again_one,) = await broker.pop("g", "x_y", wait_s=5)
            (again_two,) = await broker.pop("g_x", "y", wait_s=5)
            assert (again_one.topic, again_one.record.body) == ("x_y", b"for-g")
            assert (again_two.topic, again_two.record.body) == ("y", b"for-g_x")
            assert await broker.pop("g", "x_y", wait_s=0) == []
            assert await broker.pop("g_x", "y", wait_s=0) == []

    asyncio.run(scenario())


def test_retries_are_not_starved_by_a_backlog_of_new_messages(open_broker: OpenBroker) -> None:
    """About one pop in five reads the retry queue first (RocketMQ: 20 %)."""

    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg(b"retry-me")])
            (msg,) = await broker.pop("g", "orders", max_messages=1, invisible_s=30, wait_s=0)
            await broker.nack("g", msg.receipt_handle, delay_s=0)
            await until(
                lambda: _retry_max_offset_is(broker, "g", "orders", 1),
                "one message revived into g's retry topic of orders",
                5.0,
            )
            await broker.send([_msg(b"new-%d" % i) for i in range(50)])

            popped: list[PoppedMessage] = []
            for _ in range(5):
                popped += await broker.pop("g", "orders", max_messages=1, wait_s=0)
            bodies = [m.record.body for m in popped]
            assert b"retry-me" in bodies, bodies
            assert len(bodies) == 5
            # The other pops took new messages, in order: new ones are not starved either.
            assert [b for b in bodies if b != b"retry-me"] == [b"new-%d" % i for i in range(4)]

    asyncio.run(scenario())


def test_pop_tops_up_from_the_retry_queue_when_normal_queues_run_short(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 2)
            await broker.send([_msg(b"old")])
            (msg,) = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            await broker.nack("g", msg.receipt_handle, delay_s=0)
            await until(
                lambda: _retry_max_offset_is(broker, "g", "orders", 1),
                "one message revived into g's retry topic of orders",
                5.0,
            )
            await broker.send([_msg(b"new-0"), _msg(b"new-1")])
            popped = await broker.pop("g", "orders", max_messages=32, wait_s=0)
            assert sorted((m.record.body, m.delivery_attempt) for m in popped) == [
                (b"new-0", 1),
                (b"new-1", 1),
                (b"old", 2),
            ]

    asyncio.run(scenario())


def test_redelivery_reaches_only_the_owning_group(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg()])
            (msg,) = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            await broker.pop("other", "orders", invisible_s=30, wait_s=0)  # consumed there too
            other = asyncio.create_task(broker.pop("other", "orders", wait_s=0.3))
            mine = asyncio.create_task(broker.pop("g", "orders", wait_s=5))
            await until(lambda: broker.polling.held == 2, "2 pops held", 5.0)
            await broker.nack("g", msg.receipt_handle, delay_s=0)
            (again,) = await mine
            assert again.delivery_attempt == 2
            assert await other == []

    asyncio.run(scenario())


def test_dead_letter_moves_one_delivery_to_the_dlq_at_once(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.create_topic("ordered", 1, message_type="fifo")
            await broker.send([NewMessage("orders", b"bad"), NewMessage("orders", b"good")])
            await broker.send([NewMessage("ordered", b"f0", message_group="g"),
                               NewMessage("ordered", b"f1", message_group="g")])  # fmt: skip
            bad, good = await broker.pop("c", "orders", max_messages=2, wait_s=0)
            assert await broker.dead_letter("c", bad.receipt_handle) == "%DLQ%c"
            with pytest.raises(FailedPreconditionError):  # the handle is spent
                await broker.dead_letter("c", bad.receipt_handle)
            await broker.ack("c", [good.receipt_handle])
            (f0,) = await broker.pop("c", "ordered", wait_s=0)
            await broker.dead_letter("c", f0.receipt_handle)
            (f1,) = await broker.pop("c", "ordered", wait_s=1)  # the group moved on
            assert f1.record.body == b"f1"
            dead = await broker.pop("ops", "%DLQ%c", max_messages=8, wait_s=1)
            assert sorted(_bodies(dead)) == [b"bad", b"f0"]
            assert all(m.record.origin_topic for m in dead)
            assert broker.stats.dead_lettered[("c", "orders")] == 1
            # Nothing comes back to the original group.
            assert await broker.pop("c", "orders", wait_s=0) == []

    asyncio.run(scenario())


def test_redrive_makes_each_dead_letter_a_new_message_of_its_origin_queue(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 2)
            await broker.send([NewMessage("orders", b"a"), NewMessage("orders", b"b")])
            popped = await broker.pop("c", "orders", max_messages=2, wait_s=0)
            origin = {m.record.body: m.queue_id for m in popped}
            for message in popped:
                await broker.dead_letter("c", message.receipt_handle)
            assert await broker.redrive("c") == RedriveResult(2, 0, 0)
            back = await broker.pop("c", "orders", max_messages=8, wait_s=0)
            assert sorted(_bodies(back)) == [b"a", b"b"]
            for message in back:
                assert message.queue_id == origin[message.record.body]
                assert message.delivery_attempt == 1
                assert message.record.origin_topic == ""
            assert await broker.pop("ops", "%DLQ%c", wait_s=0) == []

    asyncio.run(scenario())
