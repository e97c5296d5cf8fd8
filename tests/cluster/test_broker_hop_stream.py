"""A proxy's pops without a wait and its acks travel on one HopStream per broker
(cluster/hop_stream.py): concurrent requests are each answered as their unary calls would
be, errors keep their class and fields, and a broker without the stream is asked by unary
calls. A pop asked in the received form is the same bytes whoever writes them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from popmq._gen.popmq.broker.v1 import broker_pb2 as pb
from popmq._gen.popmq.broker.v1 import broker_pb2_grpc
from popmq._gen.popmq.v1 import messaging_pb2
from popmq.broker import BrokerServicer, add_broker_service
from popmq.broker_core import (
    BrokerAPI,
    InvalidReceiptHandleError,
    NewMessage,
    NotFoundError,
    PoppedMessage,
    UnavailableError,
    received_messages_wire,
)
from popmq.broker_core.broker import Broker
from popmq.broker_core.config import BrokerConfig, StoreConfig
from popmq.cluster.pop_wire import pop_request
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


class _EarlierRelease(BrokerServicer):
    """A broker of a release before the received form: it does not know
    PopRequest.received_form and answers `messages`."""

    def __init__(self, broker: BrokerAPI) -> None:
        super().__init__(broker)
        self.answers_received_form = False


@pytest.mark.parametrize(
    ("servicer_class", "wait_s"),
    [
        (BrokerServicer, 0.0),  # on the stream, written by the broker
        (BrokerServicer, 1.0),  # a pop that waits: unary, written by the broker
        (_EarlierRelease, 0.0),  # PoppedMessages on the stream, written by the proxy
        (_EarlierRelease, 1.0),  # PoppedMessages of a unary pop, written by the proxy
        (_WithoutHopStream, 0.0),  # unary, written by the broker
    ],
    ids=["stream", "long-poll", "earlier-release", "earlier-release-long-poll", "without-stream"],
)
def test_a_pop_in_the_received_form_is_the_same_bytes_from_any_broker(
    tmp_path: Path, servicer_class: Callable[[Broker], BrokerServicer], wait_s: float
) -> None:
    """A proxy asking for the received form gets its client's bytes, the route's queue ids
    in them, whoever writes them: the broker (on the stream or in a unary pop), or the proxy
    from the PoppedMessages of a broker of an earlier release. A pop without the form (a
    proxy of an earlier release) is answered PoppedMessages, as before."""

    async def scenario() -> None:
        async with served_broker(tmp_path / "b", servicer_class) as served:
            async with remote(served.address) as api:
                await api.create_topic("orders", 3)
                await api.create_group("g")
                sent = [NewMessage("orders", f"m{i}".encode(), tag="t") for i in range(12)]
                await api.send(sent)
                global_ids = (7, 3, 11)  # a route's numbers for local queues 0, 1, 2
                asked = pop_request("g", "orders", max_messages=10, wait_s=wait_s)
                batch = await api.pop_received_form(asked, global_ids)
                handles = batch.receipt_handles()
                assert len(batch) == len(handles) == 10
                delivered = await api.get_deliveries("g", handles)
                objects = [d for d in delivered if isinstance(d, PoppedMessage)]
                assert len(objects) == 10
                assert batch.wire() == received_messages_wire(
                    [
                        PoppedMessage(
                            m.topic,
                            global_ids[m.queue_id],
                            m.offset,
                            m.record,
                            m.receipt_handle,
                            m.invisible_until_ms,
                        )
                        for m in objects
                    ]
                )
                expected_stored = sum(m.record.stored_size for m in objects)
                assert batch.stored_bytes == expected_stored
                rest = await api.pop("g", "orders", max_messages=10, wait_s=wait_s)
                assert sorted(m.record.body for m in [*objects, *rest]) == sorted(
                    m.body for m in sent
                )
                assert await api.ack("g", handles + [m.receipt_handle for m in rest]) == [
                    None
                ] * len(sent)

    asyncio.run(scenario())


def test_the_broker_answers_in_the_received_form_only_when_asked(tmp_path: Path) -> None:
    """On the wire: a PopRequest with received_form is answered with the received fields
    (the client's bytes, queue ids renumbered), one without it (a proxy of an earlier
    release) with `messages`."""

    async def scenario() -> None:
        async with served_broker(tmp_path / "b") as served:
            async with remote(served.address) as api:
                await api.create_topic("orders", 1)
                await api.create_group("g")
                await api.send([NewMessage("orders", f"m{i}".encode()) for i in range(3)])
            async with grpc.aio.insecure_channel(served.address) as channel:
                pop = channel.unary_unary(
                    "/popmq.broker.v1.BrokerService/Pop",
                    request_serializer=pb.PopRequest.SerializeToString,
                    response_deserializer=pb.PopResponse.FromString,
                )
                form = pb.ReceivedForm(queue_ids=[5])
                asked = pb.PopRequest(
                    group="g", topic="orders", max_messages=2, wait_s=0, received_form=form
                )
                answer = await pop(asked)
                assert not answer.messages and answer.received_count == 2
                received = messaging_pb2.PopResponse.FromString(answer.received).messages
                assert [(m.body, m.queue_id) for m in received] == [(b"m0", 5), (b"m1", 5)]
                assert list(answer.received_handles.handles) == [m.receipt_handle for m in received]
                plain = await pop(pb.PopRequest(group="g", topic="orders", wait_s=0))
                assert plain.received_count == 0 and not plain.received
                assert [(m.queue_id, m.offset) for m in plain.messages] == [(0, 2)]

    asyncio.run(scenario())
