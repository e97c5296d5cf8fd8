"""Broker end to end without gRPC: send, pop, ack and the receipt-handle rules."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from popmq.broker_core.broker import Broker
from popmq.broker_core.clock import ManualClock
from popmq.broker_core.config import BrokerConfig, PopConfig, StoreConfig
from popmq.broker_core.consume_queue import ConsumeQueue
from popmq.broker_core.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    InvalidReceiptHandleError,
    NotFoundError,
    ReceiptHandleExpiredError,
    ReceiptHandleSupersededError,
    UnavailableError,
)
from popmq.broker_core.types import NewMessage
from tests.unit.conftest import OpenBroker, now_ms, settle


def _msg(body: bytes = b"x", topic: str = "orders", *, message_id: str = "") -> NewMessage:
    return NewMessage(topic, body, message_id=message_id)


def _queue(broker: Broker, group: str = "g", topic: str = "orders") -> ConsumeQueue:
    cq = broker.consume_queue(group, topic, 0)
    assert cq is not None
    return cq


# -- send -----------------------------------------------------------------------------------


def test_sent_message_is_popped_with_its_fields_and_acked(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(clock=clock) as broker:
            await broker.create_topic("orders", 1)
            (sent,) = await broker.send(
                [
                    NewMessage(
                        "orders",
                        b"hello",
                        tag="TagA",
                        keys=("k1", "k2"),
                        properties={"region": "eu"},
                        born_time_ms=1_600_000_000_000,
                    )
                ]
            )
            assert (sent.topic, sent.queue_id, sent.offset) == ("orders", 0, 0)
            assert re.fullmatch(r"01[0-9A-F]{32}", sent.message_id)

            stored_at = clock.now_ms()
            clock.advance(250)
            (msg,) = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            assert (msg.topic, msg.queue_id, msg.offset) == ("orders", 0, 0)
            record = msg.record
            assert record.message_id == sent.message_id
            assert (record.body, record.tag, list(record.keys)) == (b"hello", "TagA", ["k1", "k2"])
            assert dict(record.properties) == {"region": "eu"}
            assert record.born_time_ms == 1_600_000_000_000
            assert record.store_time_ms == stored_at
            assert msg.delivery_attempt == 1
            assert msg.invisible_until_ms == clock.now_ms() + 30_000

            assert await broker.ack("g", [msg.receipt_handle]) == [None]
            assert await broker.pop("g", "orders", wait_s=0) == []
            rows = [row for row in await broker.group_lag("g", "orders") if not row.retry]
            assert [(r.consumer_offset, r.max_offset, r.lag, r.inflight) for r in rows] == [
                (1, 1, 0, 0)
            ]

    asyncio.run(scenario())


def test_send_assigns_a_message_id_unless_one_is_given(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            given, assigned, assigned2 = await broker.send(
                [_msg(message_id="my-id"), _msg(), _msg()]
            )
            assert given.message_id == "my-id"
            assert assigned.message_id != assigned2.message_id
            popped = await broker.pop("g", "orders", wait_s=0)
            assert [m.record.message_id for m in popped] == [
                "my-id",
                assigned.message_id,
                assigned2.message_id,
            ]

    asyncio.run(scenario())


def test_send_spreads_messages_round_robin_with_dense_offsets_per_queue(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 2)
            batch = await broker.send([_msg(b"%d" % i) for i in range(4)])
            concurrent = await asyncio.gather(*(broker.send([_msg(b"c")]) for _ in range(4)))
            placed = [(r.queue_id, r.offset) for r in [*batch, *(c[0] for c in concurrent)]]
            assert sorted(placed) == [(q, o) for q in (0, 1) for o in range(4)]
            assert [(r.queue_id, r.offset) for r in batch] == [(0, 0), (1, 0), (0, 1), (1, 1)]
            _, stats = await broker.get_topic("orders")
            assert [(s.queue_id, s.min_offset, s.max_offset) for s in stats] == [
                (0, 0, 4),
                (1, 0, 4),
            ]

    asyncio.run(scenario())


def test_send_to_a_missing_topic_is_not_found(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            with pytest.raises(NotFoundError, match="topic 'nope' does not exist"):
                await broker.send([_msg(topic="nope")])
            assert await broker.list_topics() == []

    asyncio.run(scenario())


def test_send_creates_a_missing_topic_when_auto_create_is_on(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker(auto_create_topics=True) as broker:
            (sent,) = await broker.send([_msg(topic="fresh")])
            info, stats = await broker.get_topic("fresh")
            assert info.queues == 8
            assert info.kind_name == "normal"
            assert sum(s.max_offset for s in stats) == 1
            assert sent.topic == "fresh"

    asyncio.run(scenario())


def test_send_to_a_dead_letter_topic_is_refused(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            with pytest.raises(InvalidArgumentError, match="reserved prefix '%DLQ%'"):
                await broker.send([_msg(topic="%DLQ%g")])

    asyncio.run(scenario())


def test_send_with_one_invalid_message_stores_none_of_them(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            with pytest.raises(InvalidArgumentError, match=r"^messages\[1\]\.body is empty"):
                await broker.send([_msg(b"fine"), _msg(b"")])
            with pytest.raises(InvalidArgumentError, match="at least one message"):
                await broker.send([])
            _, (stats,) = await broker.get_topic("orders")
            assert stats.max_offset == 0

    asyncio.run(scenario())


def test_send_after_close_fails_as_unavailable(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
        with pytest.raises(UnavailableError):
            await asyncio.wait_for(broker.send([_msg()]), 1)

    asyncio.run(scenario())


def test_broker_that_is_not_started_is_unavailable(data_dir: Path) -> None:
    broker = Broker(BrokerConfig(store=StoreConfig(data_dir=data_dir)))
    with pytest.raises(UnavailableError, match="not started"):
        _ = broker.store


# -- pop arguments --------------------------------------------------------------------------


_BAD_POP_ARGUMENTS: list[tuple[dict[str, Any], str]] = [
    ({"max_messages": 0}, "max_messages 0 is below the minimum 1"),
    ({"max_messages": 33}, "max_messages 33 is above the maximum 32"),
    ({"invisible_s": 0.5}, "invisible_duration 0.5s is below the minimum 1s"),
    ({"invisible_s": 43201}, "invisible_duration 43201s is above the maximum 43200s"),
    ({"wait_s": -1}, "long_polling_timeout -1s is below the minimum 0s"),
    ({"wait_s": 31}, "long_polling_timeout 31s is above the maximum 30s"),
    ({"filter_expression": "A ||"}, "tag expression 'A ||' is invalid"),
]


def test_pop_rejects_out_of_range_arguments_instead_of_clamping(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg()])
            for kwargs, message in _BAD_POP_ARGUMENTS:
                with pytest.raises(InvalidArgumentError) as info:
                    await broker.pop("g", "orders", **kwargs)
                assert str(info.value).startswith(message), kwargs
            # Nothing was delivered by the refused pops.
            assert len(await broker.pop("g", "orders", wait_s=0)) == 1

    asyncio.run(scenario())


def test_pop_batch_ceiling_follows_the_config(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker(pop=PopConfig(max_batch=100)) as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg() for _ in range(100)])
            assert len(await broker.pop("g", "orders", max_messages=100, wait_s=0)) == 100
            with pytest.raises(InvalidArgumentError, match="above the maximum 100"):
                await broker.pop("g", "orders", max_messages=101, wait_s=0)

    asyncio.run(scenario())


def test_pop_without_max_messages_works_with_a_smaller_batch_ceiling(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker(pop=PopConfig(max_batch=16)) as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg() for _ in range(20)])
            assert len(await broker.pop("g", "orders", wait_s=0)) == 16

    asyncio.run(scenario())


def test_pop_returns_at_most_max_messages(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg(b"%d" % i) for i in range(5)])
            first = await broker.pop("g", "orders", max_messages=3, wait_s=0)
            second = await broker.pop("g", "orders", max_messages=3, wait_s=0)
            assert [m.record.body for m in first] == [b"0", b"1", b"2"]
            assert [m.record.body for m in second] == [b"3", b"4"]

    asyncio.run(scenario())


def test_pop_of_a_missing_topic_is_not_found(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            with pytest.raises(NotFoundError, match="topic 'nope' does not exist"):
                await broker.pop("g", "nope", wait_s=0)

    asyncio.run(scenario())


def test_first_pop_creates_the_group_with_default_settings(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            with pytest.raises(NotFoundError):
                broker.get_group("g")
            await broker.pop("g", "orders", wait_s=0)
            info = broker.get_group("g")
            assert info.auto_created
            assert info.max_delivery_attempts == 17
            assert info.retry_backoff_ms[:3] == (1000, 5000, 10000)

    asyncio.run(scenario())


def test_groups_consume_independently(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg(b"a"), _msg(b"b")])
            one = await broker.pop("billing", "orders", wait_s=0)
            two = await broker.pop("shipping", "orders", wait_s=0)
            assert [m.record.body for m in one] == [b"a", b"b"]
            assert [m.record.body for m in two] == [b"a", b"b"]

    asyncio.run(scenario())


# -- ack ------------------------------------------------------------------------------------


def test_ack_is_idempotent_for_the_same_valid_handle(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg(b"a"), _msg(b"b")])
            first, second = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            handle = first.receipt_handle
            assert await broker.ack("g", [handle]) == [None]
            assert await broker.ack("g", [handle]) == [None]
            assert await broker.ack("g", [handle, handle]) == [None, None]
            # The other message of the same pop is still owned by its handle.
            assert _queue(broker).inflight.keys() == {1}
            assert await broker.ack("g", [second.receipt_handle]) == [None]
            assert await broker.ack("g", [handle, second.receipt_handle]) == [None, None]

    asyncio.run(scenario())


def test_ack_returns_one_result_per_handle_in_order(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg(b"a"), _msg(b"b")])
            a, b = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            results = await broker.ack("g", [a.receipt_handle, "forged", b.receipt_handle])
            assert results[0] is None
            assert isinstance(results[1], InvalidReceiptHandleError)
            assert results[2] is None
            assert _queue(broker).committed == 2

    asyncio.run(scenario())


def test_ack_needs_a_handle_and_an_existing_group(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg()])
            (msg,) = await broker.pop("g", "orders", wait_s=0)
            with pytest.raises(InvalidArgumentError, match="at least one receipt handle"):
                await broker.ack("g", [])
            with pytest.raises(NotFoundError, match="group 'nobody' does not exist"):
                await broker.ack("nobody", [msg.receipt_handle])

    asyncio.run(scenario())


def test_handle_of_another_group_is_invalid_and_leaves_the_message_in_flight(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.create_group("other")
            await broker.send([_msg()])
            (msg,) = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            (result,) = await broker.ack("other", [msg.receipt_handle])
            assert isinstance(result, InvalidReceiptHandleError)
            assert str(result) == "receipt handle belongs to group 'g', not 'other'"
            assert _queue(broker).inflight.keys() == {0}
            assert await broker.ack("g", [msg.receipt_handle]) == [None]

    asyncio.run(scenario())


def test_ack_after_the_invisible_time_passed_is_expired(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(clock=clock) as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg()])
            (msg,) = await broker.pop("g", "orders", invisible_s=1, wait_s=0)
            clock.advance(1050)
            (result,) = await broker.ack("g", [msg.receipt_handle])
            assert isinstance(result, ReceiptHandleExpiredError)
            assert result.code == "FAILED_PRECONDITION"
            assert "expired 0.050s ago" in str(result)
            # The message is delivered again (the expired ack did not swallow it).
            (again,) = await broker.pop("g", "orders", wait_s=5)
            assert again.record.message_id == msg.record.message_id
            assert again.delivery_attempt == 2

    asyncio.run(scenario())


# -- change invisible time ------------------------------------------------------------------


def test_ack_with_the_handle_replaced_by_change_invisible_time_is_superseded(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(clock=clock) as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg(b"a"), _msg(b"b")])
            a, b = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            clock.advance(5_000)
            new_handle, until = await broker.change_invisible_time("g", a.receipt_handle, 60)
            assert new_handle != a.receipt_handle
            assert until == clock.now_ms() + 60_000

            results = await broker.ack("g", [a.receipt_handle, b.receipt_handle])
            assert isinstance(results[0], ReceiptHandleSupersededError)
            assert "superseded" in str(results[0])
            assert results[1] is None
            assert await broker.ack("g", [new_handle]) == [None]
            # Once the new handle acked, the old one is still refused, not a silent success.
            (late,) = await broker.ack("g", [a.receipt_handle])
            assert isinstance(late, ReceiptHandleSupersededError)
            with pytest.raises(ReceiptHandleSupersededError):
                await broker.change_invisible_time("g", a.receipt_handle, 10)

    asyncio.run(scenario())


def test_change_invisible_time_extends_the_deadline(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(clock=clock) as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg()])
            (msg,) = await broker.pop("g", "orders", invisible_s=1, wait_s=0)
            new_handle, until = await broker.change_invisible_time("g", msg.receipt_handle, 4)
            assert until == msg.invisible_until_ms + 3_000
            # Past the old deadline: the message stays invisible.
            clock.advance(1_300)
            await settle()
            assert await broker.pop("g", "orders", wait_s=0) == []
            assert await broker.ack("g", [new_handle]) == [None]
            assert broker.live_checkpoints == 0

    asyncio.run(scenario())


def test_change_invisible_time_shortens_the_deadline(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(clock=clock) as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg()])
            (msg,) = await broker.pop("g", "orders", invisible_s=60, wait_s=0)
            _, until = await broker.change_invisible_time("g", msg.receipt_handle, 1)
            assert until == msg.invisible_until_ms - 59_000
            clock.advance(1_000)
            (again,) = await broker.pop("g", "orders", invisible_s=30, wait_s=5)
            assert again.record.message_id == msg.record.message_id
            assert again.delivery_attempt == 2

    asyncio.run(scenario())


def test_change_invisible_time_can_be_repeated_with_the_newest_handle(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg()])
            (msg,) = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            second, _ = await broker.change_invisible_time("g", msg.receipt_handle, 30)
            third, _ = await broker.change_invisible_time("g", second, 30)
            results = await broker.ack("g", [msg.receipt_handle, second, third])
            assert isinstance(results[0], ReceiptHandleSupersededError)
            assert isinstance(results[1], ReceiptHandleSupersededError)
            assert results[2] is None

    asyncio.run(scenario())


def test_change_invisible_time_rejects_out_of_range_durations(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg()])
            (msg,) = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            with pytest.raises(InvalidArgumentError) as info:
                await broker.change_invisible_time("g", msg.receipt_handle, -0.5)
            assert str(info.value) == "invisible_duration -0.5s is below the minimum 0s"
            with pytest.raises(InvalidArgumentError, match="above the maximum 43200s"):
                await broker.change_invisible_time("g", msg.receipt_handle, 43_201)
            # The refused calls changed nothing: the original handle is still valid.
            assert await broker.ack("g", [msg.receipt_handle]) == [None]

    asyncio.run(scenario())


def test_change_invisible_time_of_an_acked_message_fails(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg()])
            (msg,) = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            await broker.ack("g", [msg.receipt_handle])
            with pytest.raises(FailedPreconditionError, match="already acknowledged"):
                await broker.change_invisible_time("g", msg.receipt_handle, 30)

    asyncio.run(scenario())


# -- nack -----------------------------------------------------------------------------------


def test_nack_with_zero_delay_redelivers_at_once(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg()])
            (msg,) = await broker.pop("g", "orders", invisible_s=60, wait_s=0)
            until = await broker.nack("g", msg.receipt_handle, delay_s=0)
            assert until <= now_ms()
            # Woken by the redelivery well before the 60 s invisible time (or 5 s wait) ends.
            (again,) = await broker.pop("g", "orders", invisible_s=30, wait_s=5)
            assert again.record.message_id == msg.record.message_id
            assert again.delivery_attempt == 2
            (old,) = await broker.ack("g", [msg.receipt_handle])
            assert isinstance(old, ReceiptHandleSupersededError)
            assert await broker.ack("g", [again.receipt_handle]) == [None]

    asyncio.run(scenario())


def test_nack_without_delay_waits_the_group_backoff_of_the_attempt(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(clock=clock) as broker:
            await broker.create_topic("orders", 1)
            await broker.create_group("g", retry_backoff_s=(1, 9))
            await broker.send([_msg()])
            (msg,) = await broker.pop("g", "orders", invisible_s=60, wait_s=0)
            until = await broker.nack("g", msg.receipt_handle)
            assert until == clock.now_ms() + 1_000  # attempt 1: backoff[0]
            clock.advance(999)
            await settle()
            assert await broker.pop("g", "orders", wait_s=0) == []
            clock.advance(1)
            (again,) = await broker.pop("g", "orders", invisible_s=60, wait_s=5)
            assert again.delivery_attempt == 2
            until = await broker.nack("g", again.receipt_handle)
            assert until == clock.now_ms() + 9_000  # attempt 2: backoff[1]

    asyncio.run(scenario())


def test_nack_rejects_a_negative_delay(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg()])
            (msg,) = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            with pytest.raises(InvalidArgumentError) as info:
                await broker.nack("g", msg.receipt_handle, delay_s=-1)
            assert str(info.value) == "delay -1s is below the minimum 0s"

    asyncio.run(scenario())


def test_nack_of_a_superseded_or_forged_handle_fails(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([_msg()])
            (msg,) = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            new_handle, _ = await broker.change_invisible_time("g", msg.receipt_handle, 30)
            with pytest.raises(ReceiptHandleSupersededError):
                await broker.nack("g", msg.receipt_handle, delay_s=0)
            with pytest.raises(ReceiptHandleSupersededError):
                await broker.nack("g", msg.receipt_handle)
            with pytest.raises(InvalidReceiptHandleError):
                await broker.nack("g", "forged")
            assert await broker.ack("g", [new_handle]) == [None]

    asyncio.run(scenario())
