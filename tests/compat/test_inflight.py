"""The proxy's in-flight handles: auto-renewal for push consumers, release of departed clients.

A real broker over a tmp store, with the v2 front end's timings shortened so renewals and
idle timeouts happen within seconds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from popmq.broker_core.broker import Broker
from popmq.broker_core.config import BrokerConfig, StoreConfig
from popmq.broker_core.types import NewMessage, PoppedMessage
from popmq.proxy.rocketmq.config import RocketMQConfig
from popmq.proxy.rocketmq.inflight import Inflight
from popmq.proxy.rocketmq.sessions import Sessions

FAST = RocketMQConfig(
    auto_renew_invisible_s=1.5, renew_ahead_s=1.0, renew_steps_s=(2.0,), client_idle_s=60
)


@asynccontextmanager
async def running(
    tmp_path: Path, config: RocketMQConfig
) -> AsyncIterator[tuple[Broker, Sessions, Inflight]]:
    broker = Broker(BrokerConfig(store=StoreConfig(data_dir=tmp_path / "data")))
    await broker.start()
    sessions = Sessions(config.client_idle_s)
    inflight = Inflight(broker, config, sessions)
    inflight.start()
    try:
        await broker.create_topic("orders", 1)
        yield broker, sessions, inflight
    finally:
        await inflight.close()
        await broker.close()


async def pop_one(broker: Broker, invisible_s: float) -> PoppedMessage:
    await broker.send([NewMessage(topic="orders", body=b"x")])
    (popped,) = await broker.pop("g", "orders", invisible_s=invisible_s, wait_s=0)
    return popped


def test_an_auto_renewed_message_stays_invisible_and_acks_with_its_first_handle(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with running(tmp_path, FAST) as (broker, sessions, inflight):
            sessions.touch("push-1")
            popped = await pop_one(broker, FAST.auto_renew_invisible_s)
            inflight.track("push-1", "g", popped, auto_renew=True)
            # Without renewals it would be redelivered after 1.5 s; this waits 3.5 s for it.
            assert await broker.pop("g", "orders", invisible_s=10, wait_s=3.5) == []
            assert inflight.renewed >= 2
            current = await inflight.current_handle("g", popped.receipt_handle)
            assert current != popped.receipt_handle
            assert await broker.ack("g", [current]) == [None]
            inflight.acked("g", popped.receipt_handle)
            assert len(inflight) == 0

    asyncio.run(scenario())


def test_renewal_stops_after_renew_max_and_the_message_comes_back(tmp_path: Path) -> None:
    config = RocketMQConfig(
        auto_renew_invisible_s=1.5, renew_ahead_s=1.0, renew_steps_s=(2.0,), renew_max_s=2.0
    )

    async def scenario() -> None:
        async with running(tmp_path, config) as (broker, sessions, inflight):
            sessions.touch("push-1")
            popped = await pop_one(broker, config.auto_renew_invisible_s)
            inflight.track("push-1", "g", popped, auto_renew=True)
            (again,) = await broker.pop("g", "orders", invisible_s=10, wait_s=10)
            assert again.record.delivery_attempt == 2
            assert inflight.renewed == 1  # one renewal (to 2.5 s), then it was let go

    asyncio.run(scenario())


def test_an_idle_clients_messages_are_released(tmp_path: Path) -> None:
    config = RocketMQConfig(client_idle_s=0.5)

    async def scenario() -> None:
        async with running(tmp_path, config) as (broker, sessions, inflight):
            sessions.touch("gone")
            popped = await pop_one(broker, 600)
            inflight.track("gone", "g", popped, auto_renew=False)
            started = time.monotonic()
            (again,) = await broker.pop("g", "orders", invisible_s=10, wait_s=20)
            assert again.record.message_id == popped.record.message_id
            assert again.record.delivery_attempt == 2
            assert time.monotonic() - started < 15  # idle 0.5 s + release 1 s, not 600 s
            assert sessions.get("gone") is None
            assert inflight.released == 1

    asyncio.run(scenario())


def test_a_simple_consumer_keeps_tracking_the_handle_it_changed_to(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running(tmp_path, FAST) as (broker, sessions, inflight):
            sessions.touch("simple-1")
            popped = await pop_one(broker, 600)
            inflight.track("simple-1", "g", popped, auto_renew=False)
            handle, deadline = await broker.change_invisible_time("g", popped.receipt_handle, 600)
            inflight.changed("g", popped.receipt_handle, handle, deadline)
            assert inflight.holding("simple-1") == 1
            assert await inflight.current_handle("g", handle) == handle
            assert await inflight.release_client("simple-1") == 1
            (again,) = await broker.pop("g", "orders", invisible_s=10, wait_s=10)
            assert again.record.delivery_attempt == 2

    asyncio.run(scenario())
