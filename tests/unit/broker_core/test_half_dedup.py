"""Half messages are deduplicated as sends are (broker_core/half_dedup.py), on the real store:
a half send repeating a half of the dedup window is answered with the first transaction's id
and stores nothing, whether that transaction is open, committed or rolled back; past the
window it is a new transaction. A duplicate half would be a second transaction, which a
check-back would have its producer commit: the message delivered twice."""

from __future__ import annotations

import asyncio
from pathlib import Path

from popmq.broker_core.broker import Broker
from popmq.broker_core.clock import ManualClock
from popmq.broker_core.config import BrokerConfig, MessagesConfig, StoreConfig
from popmq.broker_core.types import NewMessage
from tests.unit.conftest import OpenBroker


async def _drain(broker: Broker, topic: str, group: str = "g") -> list[bytes]:
    """Pop and ack everything visible in `topic` now."""
    bodies: list[bytes] = []
    while popped := await broker.pop(group, topic, max_messages=32, wait_s=0):
        await broker.ack(group, [m.receipt_handle for m in popped])
        bodies += [m.record.body for m in popped]
    return bodies


def test_a_repeated_half_send_is_answered_with_the_first_transaction_and_stores_nothing(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("tx", 2, message_type="transaction")
            await broker.create_topic("tx2", 1, message_type="transaction")
            first, by_dedup = await broker.send_half(
                [
                    NewMessage("tx", b"order-1", message_id="ID-1"),
                    NewMessage("tx", b"order-2", message_id="ID-2", dedup_id="order-2"),
                ],
                producer_group="pg",
            )
            assert not first.duplicate and first.transaction_id
            again, again_by_dedup, new = await broker.send_half(
                [
                    NewMessage("tx", b"order-1", message_id="ID-1"),
                    NewMessage("tx", b"order-2", message_id="ID-9", dedup_id="order-2"),
                    NewMessage("tx", b"order-3", message_id="ID-3"),
                ],
                producer_group="pg",
            )
            assert again.duplicate and again_by_dedup.duplicate and not new.duplicate
            assert (again.transaction_id, again.message_id, again.queue_id, again.offset) == (
                first.transaction_id,
                "ID-1",
                first.queue_id,
                -1,
            )
            assert (again_by_dedup.transaction_id, again_by_dedup.message_id) == (
                by_dedup.transaction_id,
                "ID-2",
            )
            opened = {t.transaction_id for t in await broker.list_transactions("open")}
            assert opened == {first.transaction_id, by_dedup.transaction_id, new.transaction_id}
            assert (await broker.metrics_snapshot()).transactions_open == 3
            # Dedup is per topic, and a message given no id is a new transaction each time.
            (other,) = await broker.send_half([NewMessage("tx2", b"order-1", message_id="ID-1")])
            assert not other.duplicate and other.transaction_id != first.transaction_id
            plain = await broker.send_half([NewMessage("tx", b"x"), NewMessage("tx", b"x")])
            assert [p.duplicate for p in plain] == [False, False]
            # A half and a plain message do not repeat each other: different kinds of send.
            await broker.create_topic("mixed", 1, message_type="mixed")
            (half,) = await broker.send_half([NewMessage("mixed", b"m", message_id="ID-M")])
            (sent,) = await broker.send([NewMessage("mixed", b"m", message_id="ID-M")])
            assert not half.duplicate and not sent.duplicate

    asyncio.run(scenario())


def test_concurrent_repeats_of_a_half_are_one_transaction(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("tx", 1, message_type="transaction")
            same = [NewMessage("tx", b"order-1", message_id="ID-1")]
            answers = await asyncio.gather(*(broker.send_half(same) for _ in range(3)))
            within = await broker.send_half(
                [
                    NewMessage("tx", b"o", message_id="ID-7"),
                    NewMessage("tx", b"o", message_id="ID-7"),
                ]
            )
            results = [r for (r,) in answers]
            assert len({r.transaction_id for r in results}) == 1
            assert sorted(r.duplicate for r in results) == [False, True, True]
            assert within[0].transaction_id == within[1].transaction_id
            assert [r.duplicate for r in within] == [False, True]
            assert len(await broker.list_transactions("open")) == 2

    asyncio.run(scenario())


def test_a_half_send_given_up_keeps_its_claim_until_written(open_broker: OpenBroker) -> None:
    """A proxy cancels a half send whose client went away, and the client's repeat may come
    at once: the write goes ahead, and the repeat gets its transaction."""

    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("tx", 1, message_type="transaction")
            same = [NewMessage("tx", b"order-1", message_id="ID-1")]
            first = asyncio.create_task(broker.send_half(same))
            await asyncio.sleep(0)  # claimed, its write under way
            first.cancel()
            await asyncio.gather(first, return_exceptions=True)
            (repeat,) = await broker.send_half(same)
            assert repeat.duplicate
            [opened] = await broker.list_transactions("open")
            assert opened.transaction_id == repeat.transaction_id
            assert (await broker.metrics_snapshot()).transactions_open == 1

    asyncio.run(scenario())


def test_a_repeat_after_commit_or_rollback_gets_the_first_result_and_is_delivered_once(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("tx", 2, message_type="transaction")
            await broker.create_group("g")
            (first,) = await broker.send_half([NewMessage("tx", b"kept", message_id="ID-1")])
            (dropped,) = await broker.send_half([NewMessage("tx", b"gone", message_id="ID-2")])
            await broker.end_transaction(first.transaction_id, commit=True)
            await broker.end_transaction(dropped.transaction_id, commit=False)
            again, again_dropped = await broker.send_half(
                [
                    NewMessage("tx", b"kept", message_id="ID-1"),
                    NewMessage("tx", b"gone", message_id="ID-2"),
                ]
            )
            assert (again.transaction_id, again.duplicate) == (first.transaction_id, True)
            assert again_dropped.transaction_id == dropped.transaction_id
            assert await broker.list_transactions("open") == []
            # The producer ends the transaction it was answered with: as the first end did.
            info = await broker.end_transaction(again.transaction_id, commit=True)
            assert info.state == "committed"
            info = await broker.end_transaction(again_dropped.transaction_id, commit=False)
            assert info.state == "rolled_back"
            assert await _drain(broker, "tx") == [b"kept"]

    asyncio.run(scenario())


def test_past_the_dedup_window_a_repeated_half_is_a_new_transaction(
    data_dir: Path, clock: ManualClock
) -> None:
    async def scenario() -> None:
        broker = Broker(
            BrokerConfig(
                store=StoreConfig(data_dir=data_dir),
                messages=MessagesConfig(dedup_window_s=0.3),
            ),
            clock=clock,
        )
        await broker.start()
        try:
            await broker.create_topic("tx", 1, message_type="transaction")
            (first,) = await broker.send_half([NewMessage("tx", b"a", dedup_id="k")])
            clock.advance(299)
            assert broker.lookup_sends("tx", [("any-id", "k")]) == [True]
            (inside,) = await broker.send_half([NewMessage("tx", b"a", dedup_id="k")])
            assert inside.duplicate and inside.transaction_id == first.transaction_id
            clock.advance(1)  # the window ends
            assert broker.lookup_sends("tx", [("any-id", "k")]) == [False]
            (second,) = await broker.send_half([NewMessage("tx", b"a", dedup_id="k")])
            assert not second.duplicate and second.transaction_id != first.transaction_id
            # The expired entry's sweep keeps the new one (written again under its key).
            await broker.sweep_index(clock.now_ms() + 100)
            assert broker.lookup_sends("tx", [("any-id", "k")]) == [True]
        finally:
            await broker.close()

    asyncio.run(scenario())


def test_lookup_sends_holds_a_half_stored_or_being_stored(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("tx", 1, message_type="transaction")
            sending = asyncio.create_task(
                broker.send_half([NewMessage("tx", b"a", message_id="ID-1")])
            )
            await asyncio.sleep(0)  # the half send has claimed its id and waits for its write
            assert not sending.done()
            # Not in the index yet, but a half send of it now would wait for this one's result.
            assert broker.lookup_sends("tx", [("ID-1", ""), ("ID-2", "")]) == [True, False]
            await sending
            assert broker.lookup_sends("tx", [("ID-1", ""), ("ID-2", "")]) == [True, False]

    asyncio.run(scenario())
