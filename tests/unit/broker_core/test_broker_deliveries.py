"""get_deliveries: the in-flight deliveries receipt handles name, as their pops returned
them, without changing any state; a handle that names none gets the error an ack gets."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from popmq.broker_core.broker import Broker
from popmq.broker_core.clock import ManualClock
from popmq.broker_core.config import BrokerConfig, StoreConfig
from popmq.broker_core.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    InvalidReceiptHandleError,
    NotFoundError,
    ReceiptHandleExpiredError,
    ReceiptHandleSupersededError,
)
from popmq.broker_core.types import NewMessage, PoppedMessage
from popmq.broker_core.validation import MAX_HANDLES
from tests.unit.conftest import OpenBroker


def _same(found: object, popped: PoppedMessage) -> None:
    assert isinstance(found, PoppedMessage), found
    assert (found.topic, found.queue_id, found.offset) == (
        popped.topic,
        popped.queue_id,
        popped.offset,
    )
    assert found.record.to_bytes() == popped.record.to_bytes()
    assert found.delivery_attempt == popped.delivery_attempt
    assert (found.receipt_handle, found.invisible_until_ms) == (
        popped.receipt_handle,
        popped.invisible_until_ms,
    )


def test_a_live_handle_gives_back_the_delivery_its_pop_returned_and_nothing_changes(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 2)
            await broker.send([NewMessage("orders", f"m{i}".encode(), tag="t") for i in range(4)])
            popped = await broker.pop("g", "orders", max_messages=4, invisible_s=30, wait_s=0)
            assert len(popped) == 4
            before = await broker.metrics_snapshot()
            found = await broker.get_deliveries("g", [p.receipt_handle for p in popped])
            for f, p in zip(found, popped, strict=True):
                _same(f, p)
            # Read only: still in flight, nothing acked or moved, handles still ack.
            after = await broker.metrics_snapshot()
            assert after.acked == before.acked
            assert after.live_checkpoints == before.live_checkpoints
            assert await broker.inflight_count(group="g") == 4
            assert await broker.get_deliveries("g", [popped[0].receipt_handle]) == found[:1]
            assert await broker.ack("g", [p.receipt_handle for p in popped]) == [None] * 4

    asyncio.run(scenario())


def test_a_retry_copy_is_reported_under_the_user_topic_with_its_attempt(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([NewMessage("orders", b"again")])
            (first,) = await broker.pop("g", "orders", invisible_s=30, wait_s=0)
            await broker.nack("g", first.receipt_handle, delay_s=0)
            (retry,) = await broker.pop("g", "orders", invisible_s=30, wait_s=5)
            assert (retry.topic, retry.delivery_attempt) == ("orders", 2)
            (found,) = await broker.get_deliveries("g", [retry.receipt_handle])
            _same(found, retry)

    asyncio.run(scenario())


def test_a_fifo_redelivery_reports_its_attempt_not_the_stored_first_one(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("ordered", 1, message_type="fifo")
            await broker.send([NewMessage("ordered", b"m0", message_group="k")])
            (m0,) = await broker.pop("c", "ordered", invisible_s=30, wait_s=0)
            await broker.nack("c", m0.receipt_handle, delay_s=0)
            (again,) = await broker.pop("c", "ordered", invisible_s=30, wait_s=5)
            assert again.delivery_attempt == 2
            (found,) = await broker.get_deliveries("c", [again.receipt_handle])
            _same(found, again)
            # After a ChangeInvisibleTime the new handle names it, with the same attempt.
            handle, until = await broker.change_invisible_time("c", again.receipt_handle, 40)
            (moved,) = await broker.get_deliveries("c", [handle])
            assert isinstance(moved, PoppedMessage)
            assert (moved.receipt_handle, moved.invisible_until_ms) == (handle, until)
            assert moved.delivery_attempt == 2

    asyncio.run(scenario())


def test_a_handle_that_names_no_live_delivery_gets_the_error_an_ack_gets(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            await broker.send([NewMessage("orders", f"m{i}".encode()) for i in range(3)])
            acked, moved, live = await broker.pop(
                "g", "orders", max_messages=3, invisible_s=30, wait_s=0
            )
            await broker.ack("g", [acked.receipt_handle])
            await broker.change_invisible_time("g", moved.receipt_handle, 60)
            text, mid = live.receipt_handle, len(live.receipt_handle) // 2
            forged = text[:mid] + ("B" if text[mid] == "A" else "A") + text[mid + 1 :]
            foreign = "broker-z." + live.receipt_handle.partition(".")[2]
            await broker.create_group("other")
            handles = [acked.receipt_handle, moved.receipt_handle, forged, foreign,
                       live.receipt_handle]  # fmt: skip
            results = await broker.get_deliveries("g", handles)
            acks = await broker.ack("other", [live.receipt_handle])  # wrong group: refused
            assert isinstance(results[0], FailedPreconditionError)
            assert "acknowledged" in str(results[0])
            assert isinstance(results[1], ReceiptHandleSupersededError)
            assert isinstance(results[2], InvalidReceiptHandleError)
            assert "signature" in str(results[2])
            assert isinstance(results[3], InvalidReceiptHandleError)
            assert "broker 'broker-z'" in str(results[3])
            _same(results[4], live)
            (wrong_group,) = await broker.get_deliveries("other", [live.receipt_handle])
            assert isinstance(wrong_group, InvalidReceiptHandleError)
            assert str(wrong_group) == str(acks[0])

    asyncio.run(scenario())


def test_an_expired_handle_is_refused_as_expired(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(clock=clock) as broker:
            await broker.create_topic("orders", 1)
            await broker.send([NewMessage("orders", b"x")])
            (popped,) = await broker.pop("g", "orders", invisible_s=1, wait_s=0)
            clock.advance(1_050)
            (found,) = await broker.get_deliveries("g", [popped.receipt_handle])
            assert isinstance(found, ReceiptHandleExpiredError)
            assert found.code == (await broker.ack("g", [popped.receipt_handle]))[0].code  # type: ignore[union-attr]

    asyncio.run(scenario())


def test_the_request_is_checked_before_any_handle_is_looked_at(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            with pytest.raises(InvalidArgumentError, match="at least one receipt handle"):
                await broker.get_deliveries("g", [])
            with pytest.raises(InvalidArgumentError, match=f"at most {MAX_HANDLES} are allowed"):
                await broker.get_deliveries("g", ["x"] * (MAX_HANDLES + 1))
            with pytest.raises(InvalidArgumentError, match="group name"):
                await broker.get_deliveries("bad group", ["x"])
            with pytest.raises(NotFoundError, match="group 'nobody' does not exist"):
                await broker.get_deliveries("nobody", ["x"])

    asyncio.run(scenario())


def test_a_delivery_survives_a_restart_once_its_checkpoint_is_persisted(tmp_path: Path) -> None:
    config = BrokerConfig(store=StoreConfig(data_dir=tmp_path / "data"))

    async def scenario() -> None:
        broker = Broker(config)
        await broker.start()
        await broker.create_topic("orders", 1)
        await broker.send([NewMessage("orders", b"x")])
        (popped,) = await broker.pop("g", "orders", invisible_s=60, wait_s=0)
        await broker.close()  # a clean close persists buffered checkpoints
        broker = Broker(config)
        await broker.start()
        try:
            (found,) = await broker.get_deliveries("g", [popped.receipt_handle])
            _same(found, popped)
        finally:
            await broker.close()

    asyncio.run(scenario())
