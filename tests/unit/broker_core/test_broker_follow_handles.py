"""follow_handles: from a handle ChangeInvisibleTime superseded to the newest handle of the
same delivery (what a proxy's lease uses when a renewal's record was lost), while a client's
ack or ChangeInvisibleTime of the old handle is still refused as superseded."""

from __future__ import annotations

import asyncio

import pytest

from popmq.broker_core.clock import ManualClock
from popmq.broker_core.errors import (
    InvalidArgumentError,
    InvalidReceiptHandleError,
    PopMQError,
    ReceiptHandleExpiredError,
    ReceiptHandleSupersededError,
)
from popmq.broker_core.types import NewMessage, PoppedMessage
from popmq.broker_core.validation import MAX_HANDLES
from tests.unit.conftest import OpenBroker


def test_a_superseded_handle_follows_to_the_newest_while_a_client_still_gets_superseded(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([NewMessage("orders", f"m{i}".encode()) for i in range(2)])
            popped, other = await broker.pop(
                "g", "orders", max_messages=2, invisible_s=30, wait_s=0
            )
            h0 = popped.receipt_handle
            h1, _ = await broker.change_invisible_time("g", h0, 40)
            h2, until2 = await broker.change_invisible_time("g", h1, 50)
            followed = await broker.follow_handles("g", [h0, h1, h2, other.receipt_handle])
            assert followed == [(h2, until2)] * 3 + [
                (other.receipt_handle, other.invisible_until_ms)
            ]
            # Ordinary clients: the old handles stay refused exactly as before.
            for old in (h0, h1):
                (refused,) = await broker.ack("g", [old])
                assert isinstance(refused, ReceiptHandleSupersededError)
                with pytest.raises(ReceiptHandleSupersededError, match="use the newest handle"):
                    await broker.change_invisible_time("g", old, 60)
                (found,) = await broker.get_deliveries("g", [old])
                assert isinstance(found, ReceiptHandleSupersededError)
            assert await broker.inflight_count(group="g") == 2
            # Following reads only: the newest handle acks, once.
            assert await broker.ack("g", [h2, other.receipt_handle]) == [None, None]
            assert await broker.inflight_count(group="g") == 0
            # An acknowledged delivery still follows to its newest handle, whose ack answers
            # "acked before" (a lease acked by a proxy that died before recording it).
            assert await broker.follow_handles("g", [h0]) == [(h2, until2)]
            assert await broker.ack("g", [h2]) == [None]
            assert sum((await broker.metrics_snapshot()).acked.values()) == 2

    asyncio.run(scenario())


def test_a_delivery_given_back_by_a_nack_has_no_newer_handle_to_follow(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([NewMessage("orders", f"m{i}".encode()) for i in range(2)])
            moved, nacked = await broker.pop(
                "g", "orders", max_messages=2, invisible_s=30, wait_s=0
            )
            h1, _ = await broker.change_invisible_time("g", moved.receipt_handle, 40)
            await broker.nack("g", h1, delay_s=5)  # moved, then given back
            await broker.nack("g", nacked.receipt_handle, delay_s=5)
            results = await broker.follow_handles(
                "g", [moved.receipt_handle, h1, nacked.receipt_handle]
            )
            for result in results:
                assert isinstance(result, ReceiptHandleSupersededError), result
                assert "Nack" in str(result) and "no newer handle" in str(result)

    asyncio.run(scenario())


@pytest.mark.parametrize("message_type", ["normal", "fifo"])
def test_a_redelivered_delivery_is_not_followed_to_its_next_attempt(
    open_broker: OpenBroker, clock: ManualClock, message_type: str
) -> None:
    async def scenario() -> None:
        async with open_broker(clock=clock) as broker:
            await broker.create_topic("orders", 1, message_type=message_type)
            group = "k" if message_type == "fifo" else ""
            await broker.send([NewMessage("orders", b"x", message_group=group)])
            refused = (
                ReceiptHandleSupersededError
                if message_type == "fifo"
                else ReceiptHandleExpiredError
            )
            (first,) = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            # A short ChangeInvisibleTime: the old handle's record (and link) outlive the
            # new deadline, so the delivery is redelivered while the link still exists.
            h1, until1 = await broker.change_invisible_time("g", first.receipt_handle, 1)
            clock.advance(until1 - clock.now_ms())
            (again,) = await broker.pop("g", "orders", invisible_s=30, wait_s=5)
            assert again.delivery_attempt == 2
            for old in (first.receipt_handle, h1):
                (result,) = await broker.follow_handles("g", [old])
                # Never attempt 2's handle: the error an ack of the old delivery gets (a
                # FIFO message is redelivered in place, under a newer checkpoint).
                assert isinstance(result, PopMQError), result
                assert type(result) is refused, result
            assert await broker.follow_handles("g", [again.receipt_handle]) == [
                (again.receipt_handle, again.invisible_until_ms)
            ]

    asyncio.run(scenario())


def test_the_links_survive_a_restart(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([NewMessage("orders", b"x")])
            (popped,) = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            h1, until1 = await broker.change_invisible_time("g", popped.receipt_handle, 60)
        async with open_broker() as broker:
            assert await broker.follow_handles("g", [popped.receipt_handle]) == [(h1, until1)]
            (refused,) = await broker.ack("g", [popped.receipt_handle])
            assert isinstance(refused, ReceiptHandleSupersededError)
            (found,) = await broker.get_deliveries("g", [h1])
            assert isinstance(found, PoppedMessage) and found.record.body == b"x"

    asyncio.run(scenario())


def test_the_request_and_each_handle_are_checked(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([NewMessage("orders", b"x")])
            (popped,) = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            # Superseded: another group is refused before any link is followed.
            await broker.change_invisible_time("g", popped.receipt_handle, 60)
            await broker.create_group("other")
            with pytest.raises(InvalidArgumentError, match="at least one receipt handle"):
                await broker.follow_handles("g", [])
            with pytest.raises(InvalidArgumentError, match=f"at most {MAX_HANDLES} are allowed"):
                await broker.follow_handles("g", ["x"] * (MAX_HANDLES + 1))
            wrong_group, junk = await broker.follow_handles(
                "other", [popped.receipt_handle, "junk"]
            )
            assert isinstance(wrong_group, InvalidReceiptHandleError)
            assert "not 'other'" in str(wrong_group)
            assert isinstance(junk, InvalidReceiptHandleError)

    asyncio.run(scenario())
