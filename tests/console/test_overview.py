"""The overview: health through GetClusterStatus, and live rates pushed as server-sent
events from the sampled history (they move after sends, receives and acks)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from popmq.broker_core import BrokerAPI, HistogramSnapshot, MetricsSnapshot
from popmq.console.history import History, Sampler, total_lag
from popmq.sdk import AsyncProducer, AsyncSimpleConsumer, Credentials, ReceivedMessage
from popmq.security.model import Action, Pattern, Policy, ResourceType
from tests.console.support import (
    AUTHENTICATED,
    ROOT_KEY,
    ROOT_SECRET,
    browser,
    log_in,
    serving,
)
from tests.support.run_async import run_async


async def _events(response: httpx.Response) -> AsyncIterator[tuple[str, dict[str, object]]]:
    """(event, data) of a server-sent event stream, as they arrive."""
    name = ""
    async for line in response.aiter_lines():
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            yield name, json.loads(line.removeprefix("data: "))


@run_async
async def test_the_stream_yields_ticks_whose_rates_move_after_sends_receives_and_acks(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path / "data", security=AUTHENTICATED) as server:
        await server.broker.create_topic("orders", 2)
        credentials = Credentials(ROOT_KEY, ROOT_SECRET)
        async with browser(server) as client:
            await log_in(client, ROOT_KEY, ROOT_SECRET)
            page = await client.get("/")
            assert 'id="rates-chart"' in page.text and 'data-events="/events"' in page.text
            async with client.stream("GET", "/events", timeout=30) as stream:
                assert stream.headers["content-type"].startswith("text/event-stream")
                events = _events(stream)
                name, first = await anext(events)
                assert name == "history"
                points = first["points"]
                assert isinstance(points, list)
                if not points:  # a loaded machine: no point yet; the next one is a base
                    name, point = await anext(events)
                    assert name == "point"
                    points = [point]
                last_t = float(points[-1]["t"])

                async def traffic() -> None:
                    async with AsyncProducer(server.address, credentials=credentials) as p:
                        for i in range(20):
                            await p.send("orders", b"m%d" % i)
                    async with AsyncSimpleConsumer(
                        server.address, group="billing", topic="orders", credentials=credentials
                    ) as consumer:
                        got = 0
                        while got < 20:
                            batch = await consumer.receive(max_messages=32, wait_s=1)
                            await consumer.ack(batch)
                            got += len(batch)

                driver = asyncio.ensure_future(traffic())
                # Messages counted by the ticks: each rate times its tick's interval.
                seen = {"send": 0.0, "receive": 0.0, "ack": 0.0}
                async with asyncio.timeout(20):
                    async for name, point in events:
                        assert name == "point"
                        t = float(point["t"])  # type: ignore[arg-type]
                        for key in seen:
                            seen[key] += float(point[key]) * (t - last_t)  # type: ignore[arg-type]
                        last_t = t
                        if driver.done() and all(round(v) >= 20 for v in seen.values()):
                            break
                await driver
        assert {key: round(total) for key, total in seen.items()} == {
            "send": 20,
            "receive": 20,
            "ack": 20,
        }


@run_async
async def test_the_overview_shows_health_and_refuses_live_numbers_without_cluster_get(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path / "data", security=AUTHENTICATED) as server:
        store = server.security_store
        assert store is not None
        await store.create_user("app", "app-secret-0123")
        await store.grant(
            "app", Policy(ResourceType.TOPIC, Pattern.ANY, "", frozenset({Action.LIST}))
        )
        async with browser(server) as root:
            await log_in(root, ROOT_KEY, ROOT_SECRET)
            page = (await root.get("/")).text
            assert 'id="serving"' in page and "broker-a" in page
        async with browser(server) as app:
            await log_in(app, "app", "app-secret-0123")
            page = (await app.get("/")).text
            assert "may not GET the cluster" in page and 'id="rates-chart"' not in page
            refused = await app.get("/events")
            assert refused.status_code == 403
            assert refused.headers["content-type"].startswith("text/html")


class _Counters:
    """A BrokerAPI stand-in whose counters the test sets (only what the sampler reads)."""

    def __init__(self) -> None:
        self.sent = 0
        self.lag = 0

    async def metrics_snapshot(self) -> MetricsSnapshot:
        empty = HistogramSnapshot((), (0,), 0.0)
        return MetricsSnapshot(
            sent={"t": self.sent}, popped={}, acked={}, nacked={}, revived={},
            dead_lettered={}, long_polls_held=0, buffered_checkpoints=0,
            live_checkpoints=0, write_batches=0, write_batches_failed=0, write_jobs=0,
            batch_jobs=empty, write_seconds_synced=empty, write_seconds_unsynced=empty,
            store_bytes=0, topics=1, groups=0,
        )  # fmt: skip


@run_async
async def test_the_history_keeps_15_minutes_of_rates_per_second() -> None:
    counters = _Counters()
    now = [1000.0]
    history = History(interval_s=2.0)

    async def lag(_: BrokerAPI) -> int:
        return counters.lag

    sampler = Sampler(counters, history, clock=lambda: now[0], lag=lag)  # type: ignore[arg-type]
    assert await sampler.sample() is None  # the first sample sets the base
    for _ in range(500):
        now[0] += 2.0
        counters.sent += 10
        counters.lag += 1
        point = await sampler.sample()
        assert point is not None and point.send == 5.0
    assert len(history) == 450  # 900 s / 2 s
    assert history.points()[0].t == now[0] - 449 * 2.0
    assert history.latest() is not None and history.latest().lag == 500  # type: ignore[union-attr]
    assert [p.t for p in history.points(after=now[0] - 5)] == [now[0] - 4, now[0] - 2, now[0]]


@run_async
async def test_the_server_stops_promptly_while_a_page_holds_the_live_stream(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path / "data") as server:
        assert server.console is not None
        async with browser(server) as client, client.stream("GET", "/events") as stream:
            events = _events(stream)
            assert (await anext(events))[0] == "history"
            began = asyncio.get_running_loop().time()
            await server.stop()  # the stream ends; the server does not wait it out
            assert asyncio.get_running_loop().time() - began < 3
            with contextlib.suppress(httpx.HTTPError):
                async for _ in events:
                    pass


@run_async
async def test_total_lag_counts_ready_and_in_flight_messages_until_acked(tmp_path: Path) -> None:
    async with serving(tmp_path / "data") as server:
        await server.broker.create_topic("orders", 2)
        async with AsyncProducer(server.address) as producer:
            for i in range(5):
                await producer.send("orders", b"m%d" % i)
        assert await total_lag(server.broker) == 0  # no group reads it yet
        async with AsyncSimpleConsumer(server.address, group="billing", topic="orders") as c:
            got: list[ReceivedMessage] = []
            while len(got) < 2:
                got += await c.receive(max_messages=2 - len(got), wait_s=1)
            assert await total_lag(server.broker) == 5  # 3 ready, 2 in flight
            await c.ack(got)
            assert await total_lag(server.broker) == 3
