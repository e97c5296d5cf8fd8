"""A queue emptied by a purge or by retention keeps its end across a restart, on the real
store: the offsets of the deleted messages are never given to new ones (a group that read
them sits past them, and would skip the new messages)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from popmq.broker_core.broker import Broker
from popmq.broker_core.clock import ManualClock
from popmq.broker_core.config import BrokerConfig, StoreConfig
from popmq.broker_core.types import NewMessage

_START_MS = 1_700_000_000_000


async def _send(broker: Broker, *bodies: bytes) -> list[int]:
    results = await broker.send([NewMessage("t", body, queue_id=0) for body in bodies])
    return [r.offset for r in results]


def _next_offset_after_restart(data_dir: Path, empty: str) -> tuple[int, list[bytes]]:
    """Store a, b, c in queue 0, empty it (`empty`: "purge" or "retention"), restart;
    (the offset the next message gets, what a group then pops)."""

    async def scenario() -> tuple[int, list[bytes]]:
        clock = ManualClock(_START_MS)
        config = BrokerConfig(store=StoreConfig(data_dir=data_dir))
        broker = Broker(config, clock=clock)
        await broker.start()
        await broker.create_topic("t", 1)
        assert await _send(broker, b"a", b"b", b"c") == [0, 1, 2]
        popped = await broker.pop("g", "t", max_messages=3, invisible_s=60, wait_s=0)
        await broker.ack("g", [p.receipt_handle for p in popped])  # g reads up to 3
        if empty == "purge":
            assert await broker.purge("t", 0) == 3
        else:
            retention_ms = round(config.retention.retention_s * 1000)
            assert await broker.apply_retention(_START_MS + retention_ms + 1) == 3
        await broker.close()
        again = Broker(config, clock=clock)
        await again.start()
        try:
            (offset,) = await _send(again, b"d")
            got = await again.pop("g", "t", max_messages=3, invisible_s=60, wait_s=0)
            return offset, [p.record.body for p in got]
        finally:
            await again.close()

    return asyncio.run(scenario())


def test_a_purged_queue_keeps_its_end_across_a_restart(tmp_path: Path) -> None:
    assert _next_offset_after_restart(tmp_path, "purge") == (3, [b"d"])


def test_a_queue_retention_emptied_keeps_its_end_across_a_restart(tmp_path: Path) -> None:
    assert _next_offset_after_restart(tmp_path, "retention") == (3, [b"d"])
