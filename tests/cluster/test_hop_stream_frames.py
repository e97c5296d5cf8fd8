"""Pops without a wait and acks made while a frame is in flight to a broker go together on
HopStream in the next frame (cluster/hop_frames.py, broker/service.py): each request keeps
its own answer or error, one given up before it was written is never done, a pop whose
answer was lost gives its messages back after their invisible time, and a broker that does
not answer frames is sent each request on its own."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from popmq._gen.popmq.broker.v1 import broker_pb2 as pb
from popmq.broker.send_wire import (
    ANSWER_FRAME_KEY,
    FRAMES_HEADER,
    REQUEST_FRAME_KEY,
    frame_from_wire,
    frame_wire,
)
from popmq.broker.wire import error_from_detail
from popmq.broker_core import InvalidReceiptHandleError, NewMessage, NotFoundError
from popmq.broker_core.broker import Broker
from popmq.broker_core.types import PoppedMessage
from popmq.cluster.hop_stream import METHOD
from popmq.cluster.send_outcome import BrokerUnansweredError
from tests.support.brokers import remote
from tests.support.hop_frames import as_is, held_first, served, settle


async def _topics(broker: Broker, *names: str) -> None:
    for name in names:
        await broker.create_topic(name, 1)
        await broker.send([NewMessage(name, f"{name} body".encode())])


def test_pops_and_acks_made_while_a_frame_is_in_flight_go_as_one_frame_each_with_its_answer(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with served(tmp_path / "b") as (broker, servicer, address):
            await broker.create_group("g")
            await _topics(broker, "warm", "t0", "t1", "t2", "t3")
            async with remote(address) as api:
                (earlier,) = await api.pop("g", "t2", wait_s=0)
                held, release, _ = held_first(broker, "pop")
                first = asyncio.ensure_future(api.pop("g", "warm", wait_s=0))
                await held.wait()
                pops = [asyncio.ensure_future(api.pop("g", t, wait_s=0)) for t in ("t0", "t1")]
                unknown = asyncio.ensure_future(api.pop("g", "nope", wait_s=0))
                acked = asyncio.ensure_future(api.ack("g", [earlier.receipt_handle]))
                refused = asyncio.ensure_future(api.ack("g", ["not-a-handle"]))
                given_up = asyncio.ensure_future(api.pop("g", "t3", wait_s=0))
                await settle()
                given_up.cancel()
                await settle()
                release.set()
                assert [p.record.body for p in await first] == [b"warm body"]
                for topic, pop in zip(("t0", "t1"), pops, strict=True):
                    assert [p.record.body for p in await pop] == [f"{topic} body".encode()]
                with pytest.raises(NotFoundError, match="nope"):
                    await unknown
                assert await acked == [None]
                (bad,) = await refused
                assert isinstance(bad, InvalidReceiptHandleError)
                with pytest.raises(asyncio.CancelledError):
                    await given_up
                # Those made while the first was in flight went as one frame, without the
                # pop given up before it was written.
                assert servicer.frames == [1, 1, 5]
                assert await broker.inflight_count(group="g", topic="t2") == 0
                # The pop given up was never done: t3's message waits for the next pop.
                assert await broker.inflight_count(group="g", topic="t3") == 0
                (again,) = await api.pop("g", "t3", wait_s=0)
                assert again.record.body == b"t3 body"
                assert servicer.frames == [1, 1, 5, 1]
                assert await api.ack("g", [again.receipt_handle]) == [None]

    asyncio.run(scenario())


def test_a_pop_whose_frame_is_not_answered_gives_its_messages_back_after_their_invisible_time(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with served(tmp_path / "b") as (broker, servicer, address):
            await broker.create_group("g")
            await _topics(broker, "warm", "t0")
            async with remote(address, call_timeout_s=1.0) as api:
                assert await api.pop("g", "warm", wait_s=0, invisible_s=60) != []
                _, release, popped = held_first(broker, "pop")
                with pytest.raises(BrokerUnansweredError) as lost:
                    await api.pop("g", "t0", wait_s=0, invisible_s=1.0)
                assert lost.value.retriable
                release.set()
                await popped.wait()  # done after all, its answer lost: the handle with it
                assert await broker.inflight_count(group="g", topic="t0") == 1
                back: list[PoppedMessage] = []
                for _ in range(100):
                    back = await api.pop("g", "t0", wait_s=0)
                    if back:
                        break
                    await asyncio.sleep(0.05)
                assert [p.record.body for p in back] == [b"t0 body"]
                assert await api.ack("g", [back[0].receipt_handle]) == [None]
                assert await broker.inflight_count(group="g", topic="t0") == 0
                assert set(servicer.frames) == {1}

    asyncio.run(scenario())


def test_a_broker_that_does_not_answer_frames_is_sent_each_request_on_its_own(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with served(tmp_path / "b", answers_frames=False) as (broker, servicer, address):
            await broker.create_group("g")
            topics = [f"t{i}" for i in range(4)]
            await _topics(broker, "warm", *topics)
            async with remote(address) as api:
                (warm,) = await api.pop("g", "warm", wait_s=0)
                held, release, _ = held_first(broker, "pop")
                first = asyncio.ensure_future(api.pop("g", "t0", wait_s=0))
                await held.wait()
                pops = [asyncio.ensure_future(api.pop("g", t, wait_s=0)) for t in topics[1:]]
                acked = asyncio.ensure_future(api.ack("g", [warm.receipt_handle]))
                await settle()
                release.set()
                found = [await first, *[await p for p in pops]]
                assert [[p.record.body for p in f] for f in found] == [
                    [f"{t} body".encode()] for t in topics
                ]
                assert await acked == [None]
                assert servicer.frames == [1] * 6
                assert api._hop is not None and not api._hop.unsupported

    asyncio.run(scenario())


def test_the_broker_answers_each_request_of_a_frame_by_its_id_with_its_own_outcome(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with served(tmp_path / "b") as (broker, _, address):
            await broker.create_group("g")
            await _topics(broker, "t0", "t1")
            (earlier,) = await broker.pop("g", "t1", wait_s=0)
            async with grpc.aio.insecure_channel(address) as channel:
                call = channel.stream_stream(
                    METHOD, request_serializer=as_is, response_deserializer=as_is
                )()
                headers = await call.initial_metadata()
                assert headers.get(FRAMES_HEADER) == "1"
                frame = [
                    pb.HopStreamRequest(id=5, pop=pb.PopRequest(group="g", topic="t0")),
                    pb.HopStreamRequest(id=6, pop=pb.PopRequest(group="g", topic="nope")),
                    pb.HopStreamRequest(
                        id=7,
                        ack=pb.AckRequest(group="g", handles=[earlier.receipt_handle, "bad"]),
                    ),
                    pb.HopStreamRequest(id=8),
                ]
                await call.write(
                    frame_wire(REQUEST_FRAME_KEY, [r.SerializeToString() for r in frame])
                )
                answer = await call.read()
                await call.done_writing()
                parts = frame_from_wire(ANSWER_FRAME_KEY, answer)
                assert parts is not None
                answers = {
                    a.id: a for a in (pb.HopStreamResponse.FromString(part) for part in parts)
                }
                assert sorted(answers) == [5, 6, 7, 8]
                assert answers[5].WhichOneof("response") == "pop"
                assert [m.topic for m in answers[5].pop.messages] == ["t0"]
                assert isinstance(error_from_detail(answers[6].error), NotFoundError)
                assert answers[7].WhichOneof("response") == "ack"
                acked, bad = answers[7].ack.results
                assert not acked.HasField("error")
                assert isinstance(error_from_detail(bad.error), InvalidReceiptHandleError)
                assert answers[8].WhichOneof("response") == "error"
                assert "8 is empty" in answers[8].error.message
            assert await broker.inflight_count(group="g", topic="t0") == 1
            assert await broker.inflight_count(group="g", topic="t1") == 0

    asyncio.run(scenario())
