"""The Prometheus endpoint, scraped over HTTP from a real server with real traffic."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from popmq import AsyncAdmin, AsyncProducer, AsyncSimpleConsumer, Message, NotFoundError
from popmq.broker_core.config import BrokerConfig, StoreConfig
from popmq.proxy.server import PopMQServer
from popmq.runtime.config import ServerConfig
from popmq.runtime.metrics import MetricsConfig

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def _http_get(port: int, path: str, method: str = "GET") -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"{method} {path} HTTP/1.1\r\nHost: test\r\n\r\n".encode())
    await writer.drain()
    response = await reader.read()
    writer.close()
    await writer.wait_closed()
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


async def _scrape(port: int) -> Samples:
    status, body = await _http_get(port, "/metrics")
    assert status == 200
    samples: Samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_metrics_endpoint_exports_broker_rpc_and_writer_metrics(tmp_path: Path) -> None:
    config = ServerConfig(
        listen="127.0.0.1:0",
        shutdown_grace_s=1.0,
        broker=BrokerConfig(store=StoreConfig(data_dir=tmp_path / "data")),
        metrics=MetricsConfig(listen="127.0.0.1:0"),
    )

    async def scenario() -> None:
        server = PopMQServer(config)
        port = await server.start()
        endpoint = f"127.0.0.1:{port}"
        try:
            assert server.metrics_port > 0
            async with AsyncAdmin(endpoint) as admin, AsyncProducer(endpoint) as producer:
                await admin.create_topic("orders", queues=1)
                await producer.send_batch("orders", [Message(b"a"), Message(b"b"), Message(b"c")])
                try:
                    await admin.get_topic("missing")
                except NotFoundError:
                    pass
                async with AsyncSimpleConsumer(endpoint, group="g", topic="orders") as consumer:
                    got = await consumer.receive(max_messages=2, wait_s=5)
                    await consumer.ack(got[0])
                    await consumer.nack(got[1], delay_s=60)
                    # One more pop that waits: the held long poll shows up.
                    async with AsyncSimpleConsumer(endpoint, group="h", topic="orders") as idle:
                        await idle.ack(await idle.receive(max_messages=32, wait_s=5))
                        waiting = asyncio.create_task(idle.receive(wait_s=20))
                        deadline = asyncio.get_running_loop().time() + 10
                        while server.broker.polling.held == 0:
                            assert asyncio.get_running_loop().time() < deadline, "not held"
                            await asyncio.sleep(0.01)
                        samples = await _scrape(server.metrics_port)
                        waiting.cancel()
        finally:
            await server.stop()

        def value(name: str, **labels: str) -> float:
            return samples[(name, tuple(sorted(labels.items())))]

        assert value("popmq_messages_sent_total", topic="orders") == 3
        assert value("popmq_messages_popped_total", group="g", topic="orders") == 2
        assert value("popmq_messages_acked_total", group="g", topic="orders") == 1
        assert value("popmq_messages_nacked_total", group="g", topic="orders") == 1
        assert value("popmq_long_polls_held") == 1
        assert value("popmq_inflight_messages", group="g", topic="orders") == 1
        # a acked, b nacked (in flight outside the offset chain), c never popped.
        assert value("popmq_consumer_lag_messages", group="g", topic="orders") == 1
        assert value("popmq_consumer_lag_messages", group="h", topic="orders") == 0
        assert value("popmq_oldest_unacked_age_seconds", group="g", topic="orders") >= 0
        assert value("popmq_dead_letter_messages", group="g") == 0
        assert value("popmq_topics") == 1 and value("popmq_groups") == 2
        assert value("popmq_store_bytes") > 0
        assert value("popmq_live_checkpoints") >= 1
        assert ("popmq_checkpoint_buffer_size", ()) in samples
        send = "popmq.v1.MessagingService/SendStream"  # the producer's sends, one by one
        assert value("popmq_rpc_duration_seconds_count", method=send, code="OK") == 1
        missing = "popmq.v1.AdminService/GetTopic"
        assert value("popmq_rpc_duration_seconds_count", method=missing, code="NOT_FOUND") == 1
        # The consumers' receives went over PopStream: each answered pop is counted (the
        # held one is not answered yet).
        stream = "popmq.v1.MessagingService/PopStream"
        assert value("popmq_rpc_duration_seconds_count", method=stream, code="OK") == 2
        # Their acks went over it too: counted apart from pops, and no unary Ack was made.
        acks = "popmq.v1.MessagingService/PopStream/Ack"
        assert value("popmq_rpc_duration_seconds_count", method=acks, code="OK") == 2
        unary_ack = (("code", "OK"), ("method", "popmq.v1.MessagingService/Ack"))
        assert ("popmq_rpc_duration_seconds_count", unary_ack) not in samples
        assert value("popmq_write_batch_jobs_count") >= 2
        assert value("popmq_store_write_seconds_count", fsync="true") >= 1
        assert value("popmq_write_batches_total") >= 2

    asyncio.run(scenario())


def test_metrics_endpoint_answers_only_get_on_metrics(tmp_path: Path) -> None:
    config = ServerConfig(
        listen="127.0.0.1:0",
        broker=BrokerConfig(store=StoreConfig(data_dir=tmp_path / "data")),
        metrics=MetricsConfig(listen="127.0.0.1:0"),
    )

    async def scenario() -> None:
        server = PopMQServer(config)
        await server.start()
        try:
            port = server.metrics_port
            assert (await _http_get(port, "/nothing"))[0] == 404
            assert (await _http_get(port, "/metrics", method="POST"))[0] == 405
            status, body = await _http_get(port, "/metrics", method="HEAD")
            assert (status, body) == (200, b"")
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_metrics_are_off_by_default(tmp_path: Path) -> None:
    async def scenario() -> None:
        server = PopMQServer(
            ServerConfig(
                listen="127.0.0.1:0",
                broker=BrokerConfig(store=StoreConfig(data_dir=tmp_path / "data")),
            )
        )
        await server.start()
        try:
            assert server.metrics is None and server.metrics_port == 0
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_a_collect_off_the_loop_reads_the_broker_there_and_one_on_the_loop_exports_the_last(
    tmp_path: Path,
) -> None:
    config = ServerConfig(
        listen="127.0.0.1:0",
        shutdown_grace_s=1.0,
        broker=BrokerConfig(store=StoreConfig(data_dir=tmp_path / "data")),
        metrics=MetricsConfig(listen="127.0.0.1:0"),
    )
    sent = ("popmq_messages_sent_total", {"topic": "orders"})

    async def scenario() -> None:
        server = PopMQServer(config)
        endpoint = f"127.0.0.1:{await server.start()}"
        try:
            assert server.metrics is not None
            registry = server.metrics.registry
            # On the loop, before any scrape: collect() cannot wait for a reading, so the
            # broker's families are left out (the rest is exported).
            assert registry.get_sample_value("popmq_topics") is None
            assert registry.get_sample_value("popmq_start_time_seconds") is not None
            async with AsyncAdmin(endpoint) as admin, AsyncProducer(endpoint) as producer:
                await admin.create_topic("orders", queues=1)
                await producer.send_batch("orders", [Message(b"a"), Message(b"b")])
                # On another thread: a fresh reading, made on the server's loop.
                assert await asyncio.to_thread(registry.get_sample_value, *sent) == 2
                await producer.send("orders", b"c")
                # On the loop: the last reading (the thread's), not a new one.
                assert registry.get_sample_value(*sent) == 2
                # The endpoint reads anew before it renders.
                samples = await _scrape(server.metrics_port)
                assert samples[("popmq_messages_sent_total", (("topic", "orders"),))] == 3
                assert registry.get_sample_value(*sent) == 3
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_metrics_endpoint_exports_the_standard_process_and_python_families(
    tmp_path: Path,
) -> None:
    config = ServerConfig(
        listen="127.0.0.1:0",
        broker=BrokerConfig(store=StoreConfig(data_dir=tmp_path / "data")),
        metrics=MetricsConfig(listen="127.0.0.1:0"),
    )

    async def scenario() -> Samples:
        server = PopMQServer(config)
        await server.start()
        try:
            return await _scrape(server.metrics_port)
        finally:
            await server.stop()

    samples = asyncio.run(scenario())
    names = {name for name, _ in samples}
    assert "process_cpu_seconds_total" in names
    assert "process_resident_memory_bytes" in names
    assert "python_gc_collections_total" in names
    info = [labels for name, labels in samples if name == "python_info"]
    assert len(info) == 1 and dict(info[0])["implementation"] == "CPython"
    assert samples[("python_info", info[0])] == 1
