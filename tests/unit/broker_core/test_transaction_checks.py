"""The proxy's check-back loop over a real broker: due checks reach an online producer of
their topic, in turn among several, the next one when a delivery fails; checks of a topic
with no producer here are not claimed, and count as unanswered after an interval."""

from __future__ import annotations

import asyncio

import pytest

from popmq.broker_core import transactions
from popmq.broker_core.config import TransactionsConfig
from popmq.broker_core.types import NewMessage, TransactionCheck
from popmq.proxy.transaction_checks import TransactionCheckLoop
from tests.support.waiting import until
from tests.unit.conftest import OpenBroker

FAST = TransactionsConfig(check_first_s=0.2, check_interval_s=0.2, check_max=3)


def test_due_checks_go_to_producers_of_their_topic_in_turn(
    open_broker: OpenBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An unclaimed check counts as unanswered after max(interval, 10 s); 0.2 s here.
    monkeypatch.setattr(transactions, "_UNCLAIMED_GRACE_S", 0.2)

    async def scenario() -> None:
        async with open_broker(transactions=FAST) as broker:
            await broker.create_topic("orders", 1, message_type="transaction")
            await broker.create_topic("refunds", 1, message_type="transaction")
            loop = TransactionCheckLoop(broker, poll_wait_s=0.2)
            got: dict[str, list[TransactionCheck]] = {"a": [], "b": []}

            async def to(name: str, check: TransactionCheck) -> None:
                got[name].append(check)

            async def broken(check: TransactionCheck) -> None:
                raise ConnectionError("its stream ended")

            loop.add_producer(["orders"], lambda c: to("a", c), name="a")
            remove_b = loop.add_producer(["orders"], lambda c: to("b", c), name="b")
            loop.add_producer(["orders"], broken, name="broken")
            loop.start()
            try:
                [first, second] = await broker.send_half(
                    [NewMessage("orders", b"1"), NewMessage("orders", b"2")]
                )
                [refund] = await broker.send_half([NewMessage("refunds", b"no producer")])
                await until(lambda: len(got["a"]) + len(got["b"]) >= 2, "2 transaction checks", 10)
                # Both producers took a check (in turn), each check went to one producer.
                assert got["a"] and got["b"]
                ids = [c.transaction_id for c in got["a"] + got["b"]]
                assert sorted(set(ids)) == sorted({first.transaction_id, second.transaction_id})
                assert all(c.topic == "orders" and c.attempt >= 1 for c in got["a"] + got["b"])

                # No producer of refunds here: its checks are not claimed, and one unclaimed
                # for a whole interval counts as an unanswered attempt (then a discard).
                async def refund_counted() -> bool:
                    info = await broker.get_transaction(refund.transaction_id)
                    return info.checks >= 1 or info.state == "discarded"

                await until(refund_counted, "the refund's first check", 10)
                assert all(c.topic == "orders" for c in got["a"] + got["b"])
                assert loop.stats.no_producer == 0
                remove_b()
                assert loop.producers("orders") == 2
                assert loop.producers("refunds") == 0
            finally:
                await loop.close()

    asyncio.run(scenario())
