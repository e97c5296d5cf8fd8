"""Broker.lookup_sends: which sent messages a send would find in the dedup window.

A cluster proxy asks it before routing a client's repeat of a send it does not remember
(docs/cluster.md, "A retried send is stored once"), so its answer must be the send's own:
held exactly when a send of the same message now would be answered as a duplicate.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from popmq.broker_core.broker import Broker
from popmq.broker_core.clock import ManualClock
from popmq.broker_core.config import BrokerConfig, MessagesConfig, StoreConfig
from popmq.broker_core.errors import UnavailableError
from popmq.broker_core.types import NewMessage
from tests.unit.conftest import OpenBroker


def test_lookup_finds_stored_messages_by_id_and_by_dedup_id(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 2)
            await broker.create_topic("other", 1)
            by_id, by_dedup = await broker.send(
                [
                    NewMessage("orders", b"a", message_id="ID-1"),
                    NewMessage("orders", b"b", message_id="ID-2", dedup_id="order-7"),
                ]
            )
            held = broker.lookup_sends(
                "orders",
                [
                    ("ID-1", ""),
                    ("ID-9", "order-7"),  # a repeat known by its dedup id, whatever its id
                    ("ID-2", ""),  # every message's id is indexed: a send finds it too
                    ("ID-3", ""),
                    ("ID-1", "order-8"),  # a dedup id other than the id is looked up alone
                ],
            )
            assert held == [True, True, True, False, False]
            # What a send of the same messages finds: exactly the held ones are duplicates.
            again = await broker.send(
                [
                    NewMessage("orders", b"a", message_id="ID-1"),
                    NewMessage("orders", b"b", message_id="ID-9", dedup_id="order-7"),
                    NewMessage("orders", b"b", message_id="ID-2"),
                    NewMessage("orders", b"c", message_id="ID-3"),
                    NewMessage("orders", b"c", message_id="ID-1", dedup_id="order-8"),
                ]
            )
            assert [r.duplicate for r in again] == held
            assert (again[0].queue_id, again[0].offset) == (by_id.queue_id, by_id.offset)
            assert (again[1].queue_id, again[1].offset) == (by_dedup.queue_id, by_dedup.offset)
            # Dedup is per topic, and a topic the broker does not hold holds nothing.
            assert broker.lookup_sends("other", [("ID-1", "")]) == [False]
            assert broker.lookup_sends("no-such-topic", [("ID-1", ""), ("x", "y")]) == [
                False,
                False,
            ]
            assert broker.lookup_sends("orders", []) == []

    asyncio.run(scenario())


def test_lookup_holds_a_send_still_being_stored(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            sending = asyncio.create_task(
                broker.send([NewMessage("orders", b"a", message_id="ID-1")])
            )
            await asyncio.sleep(0)  # the send has claimed its id and waits for its write
            assert not sending.done()
            # Not in the index yet, but a send of it now would wait for this one's result.
            assert broker.lookup_sends("orders", [("ID-1", "")]) == [True]
            # Not durable yet: that write may still fail, so a lookup of durable copies is
            # not answered (asked again).
            with pytest.raises(UnavailableError, match="being stored now"):
                broker.lookup_sends("orders", [("ID-1", "")], stored_only=True)
            (first,) = await sending
            assert broker.lookup_sends("orders", [("ID-1", "")]) == [True]
            assert broker.lookup_sends("orders", [("ID-1", "")], stored_only=True) == [True]
            (repeat,) = await broker.send([NewMessage("orders", b"a", message_id="ID-1")])
            assert repeat.duplicate and repeat.offset == first.offset

    asyncio.run(scenario())


def test_lookup_ends_with_the_dedup_window(data_dir: Path, clock: ManualClock) -> None:
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
            await broker.create_topic("orders", 1)
            await broker.send([NewMessage("orders", b"a", dedup_id="k")])
            clock.advance(299)
            assert broker.lookup_sends("orders", [("any-id", "k")]) == [True]
            clock.advance(1)  # the window ends: a send of it now is stored again
            assert broker.lookup_sends("orders", [("any-id", "k")]) == [False]
            (second,) = await broker.send([NewMessage("orders", b"a", dedup_id="k")])
            assert not second.duplicate
        finally:
            await broker.close()

    asyncio.run(scenario())
