"""A proxy's pops without a wait and its acks travel on one HopStream per broker
(cluster/hop_stream.py): concurrent requests are each answered as their unary calls would
be, errors keep their class and fields, and a broker without the stream is asked by unary
calls."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from popmq._gen.popmq.broker.v1 import broker_pb2_grpc
from popmq.broker import BrokerServicer, add_broker_service
from popmq.broker_core import (
    InvalidReceiptHandleError,
    NewMessage,
    NotFoundError,
    UnavailableError,
)
from popmq.broker_core.broker import Broker
from popmq.broker_core.config import BrokerConfig, StoreConfig
from tests.support.brokers import remote, served_broker


def test_concurrent_pops_and_acks_share_one_stream_and_each_gets_its_answer(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with served_broker(tmp_path / "b") as served:
            async with remote(served.address) as api:
                await api.create_topic("orders", 4)
                await api.create_group("g")
                bodies = {f"m{i}".encode() for i in range(200)}
                await api.send([NewMessage("orders", b) for b in sorted(bodies)])

                delivered: list[bytes] = []

                async def consume() -> None:
                    # A pop may find a queue another pop holds: empty answers until all came.
                    for _ in range(500):
                        if len(delivered) >= len(bodies):
                            return
                        popped = await api.pop("g", "orders", max_messages=7, wait_s=0)
                        if not popped:
                            continue
                        outcomes = await api.ack("g", [p.receipt_handle for p in popped])
                        assert outcomes == [None] * len(popped)
                        delivered.extend(p.record.body for p in popped)

                await asyncio.gather(*(consume() for _ in range(6)))
                assert sorted(delivered) == sorted(bodies)  # each once, none lost
                stream = api._hop
                assert stream is not None and stream._call is not None
                assert not stream.unsupported
                assert await api.pop("g", "orders", wait_s=0) == []
                assert await served.broker.inflight_count(group="g", topic="orders") == 0

    asyncio.run(scenario())


def test_errors_on_the_stream_keep_their_class_and_fields(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with served_broker(tmp_path / "b") as served:
            async with remote(served.address) as api:
                await api.create_topic("orders", 1)
                await api.create_group("g")
                with pytest.raises(NotFoundError, match="nothere"):
                    await api.pop("g", "nothere", wait_s=0)
                (bad,) = await api.ack("g", ["not-a-handle"])
                assert isinstance(bad, InvalidReceiptHandleError)
                (local,) = await served.broker.ack("g", ["not-a-handle"])
                assert str(bad) == str(local) and bad.field == local.field  # type: ignore[union-attr]

                await api.send([NewMessage("orders", b"x")])
                served.servicer.writes.fence("etcd session lost")
                with pytest.raises(UnavailableError, match="etcd session lost") as fenced:
                    await api.pop("g", "orders", wait_s=0)
                assert fenced.value.retriable
                with pytest.raises(UnavailableError, match="etcd session lost"):
                    await api.ack("g", ["not-a-handle"])
                served.servicer.writes.unfence()
                (popped,) = await api.pop("g", "orders", wait_s=0)  # the stream is still up
                assert await api.ack("g", [popped.receipt_handle]) == [None]

    asyncio.run(scenario())


class _WithoutHopStream(BrokerServicer):
    """A broker of a version before HopStream: the generated base answers UNIMPLEMENTED."""

    HopStream = broker_pb2_grpc.BrokerServiceServicer.HopStream


def test_a_broker_without_the_stream_is_asked_by_unary_calls(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = Broker(BrokerConfig(broker_name="b1", store=StoreConfig(data_dir=tmp_path)))
        await broker.start()
        server = grpc.aio.server()
        add_broker_service(server, _WithoutHopStream(broker))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with remote(f"127.0.0.1:{port}") as api:
                await api.create_topic("orders", 1)
                await api.create_group("g")
                await api.send([NewMessage("orders", b"x"), NewMessage("orders", b"y")])
                first = await api.pop("g", "orders", max_messages=1, wait_s=0)
                assert [p.record.body for p in first] == [b"x"]
                assert api._hop is not None and api._hop.unsupported
                second = await api.pop("g", "orders", max_messages=1, wait_s=0)
                assert [p.record.body for p in second] == [b"y"]
                handles = [p.receipt_handle for p in first + second]
                assert await api.ack("g", handles) == [None, None]
        finally:
            broker.release_waiters()
            await server.stop(1.0)
            await broker.close()

    asyncio.run(scenario())
