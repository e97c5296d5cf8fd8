"""Event counters that the metrics exporter reads: each broker event counts once."""

from __future__ import annotations

import asyncio

from popmq.broker_core.clock import ManualClock
from popmq.broker_core.types import NewMessage
from tests.support.waiting import until
from tests.unit.conftest import OpenBroker


def test_send_pop_ack_nack_revive_and_dead_letter_are_counted(
    open_broker: OpenBroker, clock: ManualClock
) -> None:
    async def scenario() -> None:
        async with open_broker(clock=clock) as broker:
            await broker.create_topic("orders", 2)
            await broker.create_group("g", max_delivery_attempts=2)
            await broker.send([NewMessage("orders", b"a"), NewMessage("orders", b"b")])
            first, second = await broker.pop("g", "orders", max_messages=2, wait_s=0)
            await broker.ack("g", [first.receipt_handle])
            await broker.nack("g", second.receipt_handle, delay_s=0)
            (again,) = await broker.pop("g", "orders", invisible_s=1, wait_s=5)
            assert again.delivery_attempt == 2
            await broker.nack("g", again.receipt_handle, delay_s=0)
            # The second failure exhausts the attempts: dead-lettered, not revived again.
            await until(
                lambda: broker.stats.dead_lettered[("g", "orders")] == 1,
                "1 message dead-lettered",
                5.0,
            )
            dlq = await broker.pop("other", "%DLQ%g", wait_s=5)
            assert [m.record.body for m in dlq] == [b"b"]

            stats = broker.stats
            assert stats.sent == {"orders": 2}
            assert stats.popped[("g", "orders")] == 3
            assert stats.acked[("g", "orders")] == 1
            assert stats.nacked[("g", "orders")] == 2
            assert stats.revived[("g", "orders")] == 1
            assert stats.dead_lettered[("g", "orders")] == 1
            assert stats.popped[("other", "%DLQ%g")] == 1

    asyncio.run(scenario())
