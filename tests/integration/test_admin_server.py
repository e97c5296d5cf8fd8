"""Server-level operations: health through the lifecycle, the readiness gate, server info."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from popmq import Admin, Message, Producer
from popmq._gen.popmq.v1 import admin_pb2, admin_pb2_grpc
from popmq.broker_core import keys
from popmq.broker_core.config import BrokerConfig, StoreConfig
from popmq.broker_core.errors import DataDirError
from popmq.broker_core.types import NewMessage
from popmq.proxy.server import PopMQServer
from popmq.runtime.config import ServerConfig
from tests.support.server_thread import ServerThread

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def _config(data_dir: Path) -> ServerConfig:
    return ServerConfig(
        listen="127.0.0.1:0",
        shutdown_grace_s=1.0,
        broker=BrokerConfig(store=StoreConfig(data_dir=data_dir)),
    )


def test_health_follows_the_lifecycle_and_other_rpcs_wait_for_the_store(tmp_path: Path) -> None:
    async def scenario() -> None:
        server = PopMQServer(_config(tmp_path / "data"))
        port = await server.listen()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            admin = admin_pb2_grpc.AdminServiceStub(channel)
            check = await health.Check(health_pb2.HealthCheckRequest())
            assert check.status == NOT_SERVING
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await admin.ListTopics(admin_pb2.ListTopicsRequest())
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "starting" in (refused.value.details() or "")
            watch = health.Watch(health_pb2.HealthCheckRequest())
            assert (await watch.read()).status == NOT_SERVING

            await server.start()
            assert (await watch.read()).status == SERVING
            for service in ("", "popmq.v1.AdminService", "popmq.v1.MessagingService"):
                answer = await health.Check(health_pb2.HealthCheckRequest(service=service))
                assert answer.status == SERVING, service
            await admin.ListTopics(admin_pb2.ListTopicsRequest())

            stopping = asyncio.create_task(server.stop())
            assert (await watch.read()).status == NOT_SERVING
            await stopping

    asyncio.run(scenario())


def test_a_store_that_cannot_open_stops_the_listener(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the store should be")

    async def scenario() -> None:
        server = PopMQServer(_config(blocker))
        with pytest.raises(DataDirError, match="is a file, not a directory"):
            await server.start()
        port = server.port
        assert port > 0
        # Nothing listens any more: a new server can take the same port.
        again = PopMQServer(
            ServerConfig(
                listen=f"127.0.0.1:{port}",
                broker=BrokerConfig(store=StoreConfig(data_dir=tmp_path / "data")),
            )
        )
        assert await again.start() == port
        await again.stop()

    asyncio.run(scenario())


def test_server_info_reports_version_uptime_store_and_config(server: ServerThread) -> None:
    with Admin(server.endpoint) as admin, Producer(server.endpoint) as producer:
        admin.create_topic("orders", queues=1)
        producer.send_batch("orders", [Message(b"x" * 1000) for _ in range(10)])
        info = admin.server_info()
    assert info.version
    assert info.uptime_s >= 0
    assert Path(info.data_dir) == server.data_dir.resolve()
    assert info.store_bytes > 10_000
    assert (info.topics, info.groups) == (1, 0)
    assert info.config["server.listen"] == '"127.0.0.1:0"'
    assert info.config["store.data_dir"] == f'"{server.data_dir}"'
    assert info.config["pop.max_batch"] == "32"
    assert info.config["metrics.listen"] == '""'


def test_a_dead_background_task_turns_health_not_serving_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A corrupt stored record kills the revive loop: redelivery stops, so health must say
    NOT_SERVING (an orchestrator restarts the server) instead of only logging."""

    async def scenario() -> None:
        server = PopMQServer(_config(tmp_path / "data"))
        port = await server.start()
        broker = server.broker
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                health = health_pb2_grpc.HealthStub(channel)
                watch = health.Watch(health_pb2.HealthCheckRequest())
                assert (await watch.read()).status == SERVING
                info = await broker.create_topic("t", 1)
                await broker.send([NewMessage("t", b"m")])
                [popped] = await broker.pop("g", "t", invisible_s=1, wait_s=0)
                # The real fault: the message's record is garbage when revive reads it.
                batch = broker.store.batch()
                key = keys.message_key(info.topic_id, 0, popped.offset)
                batch.put("messages", key, b"\xff\xff\xff")
                broker.store.write(batch, sync=False)

                status = await asyncio.wait_for(watch.read(), timeout=10)
                assert status.status == NOT_SERVING
                assert broker.failure is not None
                assert "popmq-revive" in broker.failure
                assert server.health.failure == broker.failure
                for service in ("", "popmq.v1.AdminService", "popmq.v1.MessagingService"):
                    answer = await health.Check(health_pb2.HealthCheckRequest(service=service))
                    assert answer.status == NOT_SERVING, service
                assert "health turns NOT_SERVING: background task popmq-revive died" in (
                    caplog.text
                )
        finally:
            await server.stop()

    asyncio.run(scenario())
