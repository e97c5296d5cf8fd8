"""Handles of deliveries a crash lost: an explicit error, never a silent success.

A crash is simulated as in test_live_checkpoints: the store is closed under the broker, so
nothing buffered is persisted, and the next broker over the same dir is the restart.
"""

from __future__ import annotations

import asyncio

import pytest

from popmq.broker_core import keys
from popmq.broker_core.broker import Broker
from popmq.broker_core.clock import ManualClock
from popmq.broker_core.errors import FailedPreconditionError, ReceiptHandleLostError
from popmq.broker_core.types import NewMessage, PoppedMessage
from tests.support.waiting import until
from tests.unit.conftest import OpenBroker


def _stored_offset(broker: Broker) -> int | None:
    group_id = broker.get_group("g").group_id
    topic_id = broker.topic_info("orders").topic_id
    value = broker.store.get("offsets", keys.offset_key(group_id, topic_id, 0))
    return None if value is None else keys.decode_u64(value)


async def _crash_after_pops(
    open_broker: OpenBroker, clock: ManualClock
) -> tuple[PoppedMessage, PoppedMessage]:
    """m0 popped, acked and its offset stored; m1 popped (buffered: the clock stands still,
    so its buffer time never passes); then a crash."""
    async with open_broker(clock=clock) as broker:
        await broker.create_topic("orders", 1)
        await broker.send([NewMessage("orders", b"m0"), NewMessage("orders", b"m1")])
        (m0,) = await broker.pop("g", "orders", max_messages=1, invisible_s=300, wait_s=0)
        assert await broker.ack("g", [m0.receipt_handle]) == [None]
        await until(lambda: _stored_offset(broker) == 1, "offset 1 persisted", 5.0)
        (m1,) = await broker.pop("g", "orders", max_messages=1, invisible_s=300, wait_s=0)
        broker.store.close()  # crash: m1's buffered checkpoint is lost
    return m0, m1


def test_ack_of_a_delivery_lost_in_a_crash_is_an_error_until_the_message_is_acked_again(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        m0, m1 = await _crash_after_pops(open_broker, clock)
        async with open_broker(clock=clock) as broker:
            (lost,) = await broker.ack("g", [m1.receipt_handle])
            assert isinstance(lost, ReceiptHandleLostError)
            assert isinstance(lost, FailedPreconditionError)
            assert "no longer tracked" in str(lost) and "delivered again" in str(lost)
            # Acked (and recorded) before the crash: a repeated ack stays OK.
            assert await broker.ack("g", [m0.receipt_handle]) == [None]

            (again,) = await broker.pop("g", "orders", invisible_s=300, wait_s=0)
            assert (again.record.body, again.delivery_attempt) == (b"m1", 1)
            (still,) = await broker.ack("g", [m1.receipt_handle])
            assert isinstance(still, ReceiptHandleLostError)
            assert await broker.ack("g", [again.receipt_handle]) == [None]
            assert await broker.ack("g", [again.receipt_handle]) == [None]  # idempotent
            # The message is acked now (with its new handle): nothing comes back.
            assert await broker.pop("g", "orders", wait_s=0) == []

    asyncio.run(scenario())


def test_nack_and_change_invisible_time_of_a_lost_delivery_are_refused_the_same_way(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        _, m1 = await _crash_after_pops(open_broker, clock)
        async with open_broker(clock=clock) as broker:
            with pytest.raises(ReceiptHandleLostError, match="no longer tracked"):
                await broker.nack("g", m1.receipt_handle, delay_s=0)
            with pytest.raises(ReceiptHandleLostError, match="no longer tracked"):
                await broker.change_invisible_time("g", m1.receipt_handle, 60)
            (again,) = await broker.pop("g", "orders", invisible_s=300, wait_s=0)
            assert again.record.body == b"m1"

    asyncio.run(scenario())


def test_repeated_ack_in_the_same_boot_stays_idempotent(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([NewMessage("orders", b"m0"), NewMessage("orders", b"m1")])
            first = await broker.pop("g", "orders", max_messages=1, invisible_s=300, wait_s=0)
            second = await broker.pop("g", "orders", max_messages=1, invisible_s=300, wait_s=0)
            # m1 is acked while m0's checkpoint still holds the committed offset below it.
            handle = second[0].receipt_handle
            assert await broker.ack("g", [handle]) == [None]
            assert await broker.ack("g", [handle]) == [None]
            assert await broker.ack("g", [first[0].receipt_handle, handle]) == [None, None]

    asyncio.run(scenario())
