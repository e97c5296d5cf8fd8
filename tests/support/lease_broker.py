"""A broker core with a topic full of messages, and a pop of it: what the lease table tests
(tests/cluster/test_leases.py, test_lease_pages.py) pop pages with."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from popmq.broker_core import Broker, BrokerConfig, NewMessage, PoppedMessage, StoreConfig

Pop = Callable[[], Awaitable[list[PoppedMessage]]]
"""What a LeaseTable pops a page with."""


@contextlib.asynccontextmanager
async def lease_broker(tmp_path: Path, messages: int) -> AsyncIterator[Broker]:
    """A started broker whose topic `events` (2 queues) holds `messages` messages."""
    broker = Broker(BrokerConfig(store=StoreConfig(data_dir=tmp_path / "data")))
    await broker.start()
    try:
        await broker.create_topic("events", 2)
        await broker.send([NewMessage("events", f"m{i}".encode()) for i in range(messages)])
        yield broker
    finally:
        await broker.close()


def popper(broker: Broker, n: int = 4, invisible_s: float = 30) -> Pop:
    """A pop of up to `n` messages of `events` for group `g`, not waiting."""
    return lambda: broker.pop("g", "events", max_messages=n, invisible_s=invisible_s, wait_s=0)
