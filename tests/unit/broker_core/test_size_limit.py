"""max_disk_bytes: over the limit, the oldest messages across all queues go first."""

from __future__ import annotations

import asyncio
from pathlib import Path

from popmq.broker_core import Broker, BrokerConfig, NewMessage, StoreConfig
from popmq.broker_core.clock import ManualClock
from popmq.broker_core.config import RetentionConfig


def test_over_the_limit_the_oldest_messages_go_first_across_queues(tmp_path: Path) -> None:
    clock = ManualClock()

    async def main() -> None:
        body = b"x" * 1000
        broker = Broker(
            BrokerConfig(
                store=StoreConfig(data_dir=tmp_path / "data"),
                retention=RetentionConfig(max_disk_bytes=30_000),
            ),
            clock=clock,
        )
        await broker.start()
        try:
            await broker.create_topic("old", 1)
            await broker.create_topic("new", 2)
            await broker.send([NewMessage("old", body) for _ in range(40)])
            clock.advance(10)
            await broker.send([NewMessage("new", body) for _ in range(40)])
            assert broker.stored_bytes_estimate() > 80_000
            deleted = await broker.apply_size_limit()
            assert broker.stored_bytes_estimate() <= 30_000
            # The 40 older messages of "old" went before any of "new".
            old_queue = (await broker.get_topic("old"))[1][0]
            assert old_queue.min_offset == 40
            new_min = sum(q.min_offset for q in (await broker.get_topic("new"))[1])
            assert deleted == 40 + new_min
            assert 0 < new_min < 40
            assert await broker.apply_size_limit() == 0  # under the limit: idempotent
            # Consumers start at the new min offset and see only what is left.
            got = await broker.pop("g", "new", max_messages=32, wait_s=0)
            assert len(got) == 40 - new_min
        finally:
            await broker.close()

    asyncio.run(main())


def test_no_limit_by_default(tmp_path: Path) -> None:
    async def main() -> None:
        broker = Broker(BrokerConfig(store=StoreConfig(data_dir=tmp_path / "data")))
        await broker.start()
        try:
            await broker.create_topic("t", 1)
            await broker.send([NewMessage("t", b"y" * 5000) for _ in range(10)])
            assert await broker.apply_size_limit() == 0
        finally:
            await broker.close()

    asyncio.run(main())
