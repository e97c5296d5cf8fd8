"""Shared fixtures of the broker_core unit tests: a real Broker over a tmp RocksDB dir.

There is no pytest-asyncio: a test writes its scenario as an `async def` and runs it with
`asyncio.run`, opening brokers inside that loop with the `open_broker` fixture. A test of
deadlines (invisible times, revive, the checkpoint buffer, timers, windows) gives its
brokers the `clock` fixture and advances it instead of sleeping.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest

from popmq.broker_core.broker import Broker
from popmq.broker_core.clock import Clock, ManualClock
from popmq.broker_core.config import (
    BrokerConfig,
    GroupDefaults,
    LongPollingConfig,
    PopConfig,
    StoreConfig,
    TransactionsConfig,
)
from popmq.broker_core.send import SendTicket
from popmq.broker_core.types import NewMessage

OpenBroker = Callable[..., AbstractAsyncContextManager[Broker]]


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """The store directory the brokers of one test share (so a restart finds its data)."""
    return tmp_path / "data"


@pytest.fixture
def open_broker(data_dir: Path) -> OpenBroker:
    """`async with open_broker(pop=PopConfig(...)) as broker:` a started broker, closed after.

    Every broker of a test opens the same data dir unless `data_dir` is given, so opening a
    second one after the first closed is a restart (give it the same `clock`, if any).
    """

    @asynccontextmanager
    async def factory(
        *,
        pop: PopConfig | None = None,
        long_polling: LongPollingConfig | None = None,
        groups: GroupDefaults | None = None,
        auto_create_topics: bool = False,
        path: Path | None = None,
        transactions: TransactionsConfig | None = None,
        clock: Clock | None = None,
    ) -> AsyncIterator[Broker]:
        config = BrokerConfig(
            store=StoreConfig(data_dir=path or data_dir),
            pop=pop or PopConfig(),
            long_polling=long_polling or LongPollingConfig(),
            groups=groups or GroupDefaults(),
            auto_create_topics=auto_create_topics,
            transactions=transactions or TransactionsConfig(),
        )
        broker = Broker(config, clock=clock)
        await broker.start()
        try:
            yield broker
        finally:
            await broker.close()

    return factory


@pytest.fixture
def clock() -> ManualClock:
    """A clock that stands still until the test advances it: `open_broker(clock=clock)`, then
    `clock.advance(ms)` where the test would otherwise sleep until a deadline."""
    return ManualClock()


async def settle(turns: int = 20) -> None:
    """Let what an advance of the clock woke run: a few turns of the event loop, no sleep.

    For checking that something did *not* happen by a time; what should happen is awaited
    with `until` (tests/support/waiting.py)."""
    for _ in range(turns):
        await asyncio.sleep(0)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def hold_fsync(broker: Broker, topic: str) -> tuple[threading.Event, list[SendTicket | None]]:
    """An earlier batch of `topic` whose fsync is in flight and held (on the sync thread,
    two jobs at once) until the returned gate is set: later writes wait behind it. Also
    returns the two sends' tickets."""
    gate = threading.Event()
    real_sync = broker.store.sync_wal

    def held_sync() -> None:
        gate.wait(10)
        real_sync()

    broker.store.sync_wal = held_sync  # type: ignore[method-assign]
    earlier = [
        broker.send_now([NewMessage(topic, b"x")]),
        broker.send_now([NewMessage(topic, b"y")]),
    ]
    for _ in range(3):
        await asyncio.sleep(0)
    return gate, earlier
