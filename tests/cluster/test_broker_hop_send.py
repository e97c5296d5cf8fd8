"""A proxy's sends and half sends travel on one HopSend stream per broker (cluster/hop_stream.py,
broker/send_wire.py): concurrent sends each get their own results, stored as a unary Send
stores them; errors keep their class and fields; a stream that breaks says the send may have
been stored; and a broker without the stream is sent to by unary calls."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest

from popmq._gen.popmq.broker.v1 import broker_pb2 as pb
from popmq.broker import BrokerServicer, add_broker_service
from popmq.broker.hop_wire import HOP_ERROR, hop_answer_from_wire
from popmq.broker.wire import error_from_detail
from popmq.broker_core import (
    InvalidArgumentError,
    NewMessage,
    PopMQError,
    SendResult,
    UnavailableError,
)
from popmq.broker_core.broker import Broker
from popmq.broker_core.config import BrokerConfig, StoreConfig
from popmq.cluster.hop_stream import SEND_METHOD
from popmq.cluster.send_outcome import BrokerUnansweredError, may_be_stored
from tests.support.brokers import remote, served_broker


def test_concurrent_sends_share_one_stream_and_each_gets_its_results(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with served_broker(tmp_path / "b") as served:
            async with remote(served.address) as api:
                await api.create_topic("orders", 4)
                await api.create_group("g")

                async def produce(n: int) -> list[tuple[bytes, str, int, int]]:
                    sent = []
                    for i in range(10):
                        batch = [
                            NewMessage("orders", f"p{n}-{i}-{j}".encode(), keys=(f"k{n}",))
                            for j in range(1 + i % 3)
                        ]
                        results = await api.send(batch)
                        assert len(results) == len(batch)
                        sent += [
                            (m.body, r.message_id, r.queue_id, r.offset)
                            for m, r in zip(batch, results, strict=True)
                        ]
                    return sent

                sent = [s for part in await asyncio.gather(*map(produce, range(6))) for s in part]
                stream = api._hop_send
                assert stream is not None and stream._call is not None
                assert not stream.unsupported
                # Each result names where its own message is stored, read back by the broker.
                for body, message_id, queue_id, offset in sent:
                    (stored,) = await served.broker.peek(
                        "orders", queue_id=queue_id, offset=offset, max_messages=1
                    )
                    assert (stored.record.body, stored.record.message_id) == (body, message_id)
                assert len({s[1] for s in sent}) == len(sent)
                popped = 0
                while batch := await served.broker.pop("g", "orders", max_messages=32, wait_s=0):
                    popped += len(batch)
                assert popped == len(sent)

    asyncio.run(scenario())


def test_a_repeated_dedup_id_is_answered_with_the_first_sends_result(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with served_broker(tmp_path / "b") as served:
            async with remote(served.address) as api:
                await api.create_topic("orders", 2)
                message = NewMessage("orders", b"once", message_id="01AAAA", dedup_id="d-1")
                (first,) = await api.send([message])
                (again,) = await api.send([message])
                assert not first.duplicate and again.duplicate
                assert (again.queue_id, again.offset) == (first.queue_id, first.offset)
                (_, stats) = await served.broker.get_topic("orders")
                assert sum(q.max_offset for q in stats) == 1

    asyncio.run(scenario())


def test_errors_on_the_send_stream_are_the_unary_calls_errors(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with served_broker(tmp_path / "b") as served:
            async with remote(served.address) as api:
                await api.create_topic("orders", 1)
                bad = [NewMessage("orders", b"x", queue_id=5)]
                with pytest.raises(PopMQError) as remote_error:
                    await api.send(bad)
                with pytest.raises(PopMQError) as local_error:
                    await served.broker.send(bad)
                assert type(remote_error.value) is type(local_error.value)
                assert str(remote_error.value) == str(local_error.value)
                assert remote_error.value.field == local_error.value.field

                served.servicer.writes.fence("etcd session lost")
                with pytest.raises(UnavailableError, match="etcd session lost") as fenced:
                    await api.send([NewMessage("orders", b"y")])
                assert not may_be_stored(fenced.value)  # refused before anything was written
                served.servicer.writes.unfence()
                (result,) = await api.send([NewMessage("orders", b"z")])  # the stream is still up
                assert result.offset == 0

    asyncio.run(scenario())


def test_half_sends_go_on_the_stream_and_commit(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with served_broker(tmp_path / "b") as served:
            async with remote(served.address) as api:
                await api.create_topic("tx", 1, message_type="transaction")
                await api.create_group("g")
                (half,) = await api.send_half(
                    [NewMessage("tx", b"half")], producer_group="pg", check_first_s=30.0
                )
                assert half.transaction_id
                info = await served.broker.get_transaction(half.transaction_id)
                assert (info.state, info.producer_group) == ("open", "pg")
                assert await served.broker.pop("g", "tx", wait_s=0) == []
                await api.end_transaction(half.transaction_id, commit=True)
                (popped,) = await served.broker.pop("g", "tx", wait_s=0)
                assert popped.record.body == b"half"
                assert api._hop_send is not None and api._hop_send._call is not None

    asyncio.run(scenario())


def test_a_send_whose_stream_breaks_may_have_been_stored(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with served_broker(tmp_path / "b") as served:
            async with remote(served.address, call_timeout_s=5.0) as api:
                await api.create_topic("orders", 1)
                await api.send([NewMessage("orders", b"first")])  # the stream is open
                stalled = asyncio.Event()
                original = served.broker.send

                async def stall(messages: Sequence[NewMessage]) -> list[SendResult]:
                    stalled.set()
                    await asyncio.Event().wait()
                    return await original(messages)

                served.broker.send = stall  # type: ignore[method-assign]
                sending = asyncio.ensure_future(api.send([NewMessage("orders", b"second")]))
                await stalled.wait()
                await served.server.stop(None)  # the connection drops mid-send
                with pytest.raises(BrokerUnansweredError) as broken:
                    await sending
                assert may_be_stored(broken.value)
                # Nothing listens there now: the next send provably was not sent.
                with pytest.raises(BrokerUnansweredError) as refused:
                    await api.send([NewMessage("orders", b"third")])
                assert not may_be_stored(refused.value)

    asyncio.run(scenario())


class _WithoutHopSend(BrokerServicer):
    """A broker of a version before HopSend: it answers UNIMPLEMENTED, as gRPC answers a
    method the server does not register."""

    async def HopSend(self, requests: AsyncIterator[bytes], context: Any) -> None:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")


def test_a_broker_without_the_send_stream_is_sent_to_by_unary_calls(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = Broker(BrokerConfig(broker_name="b1", store=StoreConfig(data_dir=tmp_path)))
        await broker.start()
        server = grpc.aio.server()
        add_broker_service(server, _WithoutHopSend(broker))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with remote(f"127.0.0.1:{port}") as api:
                await api.create_topic("orders", 1)
                await api.create_topic("tx", 1, message_type="transaction")
                await api.create_group("g")
                first = await asyncio.gather(
                    *(api.send([NewMessage("orders", f"m{i}".encode())]) for i in range(3))
                )
                assert api._hop_send is not None and api._hop_send.unsupported
                second = await api.send([NewMessage("orders", b"m3", properties={"a": "b"})])
                (half,) = await api.send_half([NewMessage("tx", b"h")], producer_group="pg")
                assert half.transaction_id
                offsets = sorted(r.offset for batch in [*first, second] for r in batch)
                assert offsets == [0, 1, 2, 3]
                popped = await api.pop("g", "orders", max_messages=8, wait_s=0)
                assert sorted(p.record.body for p in popped) == [b"m0", b"m1", b"m2", b"m3"]
                assert not api._hop.unsupported  # type: ignore[union-attr]
        finally:
            broker.release_waiters()
            await server.stop(1.0)
            await broker.close()

    asyncio.run(scenario())


def test_a_send_stream_request_without_a_send_is_refused_naming_what_it_must_carry(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with served_broker(tmp_path / "b") as served:
            async with grpc.aio.insecure_channel(served.address) as channel:
                call = channel.stream_stream(
                    SEND_METHOD,
                    request_serializer=_as_is,
                    response_deserializer=_as_is,
                )()
                await call.write(b"\x08\x07")  # a HopSendRequest of id 7 and nothing else
                answer = await call.read()
                await call.done_writing()
                request_id, field, payload = hop_answer_from_wire(answer)
                assert (request_id, field) == (7, HOP_ERROR)
                error = error_from_detail(pb.ErrorDetail.FromString(payload))
                assert isinstance(error, InvalidArgumentError)
                assert "neither send (field 2) nor send_half (field 3)" in str(error)

    asyncio.run(scenario())


def _as_is(data: bytes) -> bytes:
    return data


def test_a_stopping_broker_ends_the_hop_streams_instead_of_waiting_its_grace(
    tmp_path: Path,
) -> None:
    # A proxy's HopSend and HopStream never end by themselves: a broker's stop would wait
    # its whole grace for them (30 s here) unless it ends them.
    async def scenario() -> None:
        async with served_broker(tmp_path / "b") as served:
            async with remote(served.address) as api:
                await api.create_topic("orders", 1)
                await api.create_group("g")
                await api.send([NewMessage("orders", b"x")])  # opens HopSend
                (popped,) = await api.pop("g", "orders", wait_s=0)  # opens HopStream
                served.servicer.end_streams()
                await asyncio.wait_for(served.server.stop(30.0), timeout=20.0)
                with pytest.raises(PopMQError) as after:
                    await api.send([NewMessage("orders", b"y")])
                assert after.value.retriable
                assert popped.receipt_handle

    asyncio.run(scenario())
