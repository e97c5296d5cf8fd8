"""Sends made while a frame to the broker is in flight go together as the next frame
(cluster/hop_frames.py, broker/send_wire.py): each request keeps its own outcome, one waiting
for a frame when its caller gives up is never written (not stored, and it says so), and a
broker that does not answer frames is sent each request on its own."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from popmq._gen.popmq.broker.v1 import broker_pb2 as pb
from popmq.broker.hop_wire import HOP_SEND, HOP_SEND_HALF, hop_answer
from popmq.broker.send_wire import (
    ANSWER_FRAME_KEY,
    FRAMES_HEADER,
    REQUEST_FRAME_KEY,
    frame_from_wire,
    frame_wire,
    send_request_wire,
    send_results_from_wire,
)
from popmq.broker.wire import error_from_detail
from popmq.broker_core import InvalidArgumentError, NewMessage, NotFoundError
from popmq.cluster.hop_stream import SEND_METHOD
from popmq.cluster.send_outcome import BrokerUnansweredError, may_be_stored
from tests.support.brokers import remote, served_broker
from tests.support.hop_frames import as_is, held_first, served, settle


def test_sends_made_while_a_frame_is_in_flight_go_as_one_frame_each_with_its_outcome(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with served(tmp_path / "b") as (broker, servicer, address):
            async with remote(address) as api:
                await api.create_topic("orders", 2)
                await api.create_topic("tx", 1, message_type="transaction")
                await api.send([NewMessage("orders", b"opens the stream")])
                held, release, _ = held_first(broker, "send")
                first = asyncio.ensure_future(api.send([NewMessage("orders", b"first")]))
                await held.wait()
                sends = [
                    asyncio.ensure_future(api.send([NewMessage("orders", f"m{i}".encode())]))
                    for i in range(3)
                ]
                unknown = asyncio.ensure_future(api.send([NewMessage("nope", b"refused")]))
                half = asyncio.ensure_future(
                    api.send_half([NewMessage("tx", b"half")], producer_group="pg")
                )
                given_up = asyncio.ensure_future(api.send([NewMessage("orders", b"given up")]))
                await settle()
                given_up.cancel()
                await settle()
                release.set()
                (stored_first,) = await first
                stored = [(await s)[0] for s in sends]
                with pytest.raises(NotFoundError, match="nope"):
                    await unknown
                (stored_half,) = await half
                assert stored_half.transaction_id
                with pytest.raises(asyncio.CancelledError):
                    await given_up
                # The sends made while the first was in flight went as one frame, without
                # the one given up before it was written.
                assert servicer.frames == [1, 1, 5]
                bodies = []
                for result in [stored_first, *stored]:
                    (message,) = await broker.peek(
                        "orders", queue_id=result.queue_id, offset=result.offset, max_messages=1
                    )
                    assert message.record.message_id == result.message_id
                    bodies.append(message.record.body)
                assert bodies == [b"first", b"m0", b"m1", b"m2"]
                everything = [
                    m.record.body
                    for queue_id in (0, 1)
                    for m in await broker.peek("orders", queue_id=queue_id, max_messages=16)
                ]
                assert sorted(everything) == sorted([b"opens the stream", *bodies])

    asyncio.run(scenario())


def test_a_send_that_times_out_waiting_for_a_frame_was_not_sent_and_is_never_stored(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with served(tmp_path / "b") as (broker, servicer, address):
            async with remote(address, call_timeout_s=1.0) as api:
                await api.create_topic("orders", 1)
                # The broker takes the call but does not accept it yet: nothing is written.
                servicer.accepting.clear()
                with pytest.raises(BrokerUnansweredError) as waited:
                    await api.send([NewMessage("orders", b"waited")])
                assert not may_be_stored(waited.value)
                servicer.accepting.set()
                (after,) = await api.send([NewMessage("orders", b"after")])
                stored = await broker.peek("orders", queue_id=0, max_messages=8)
                assert [m.record.body for m in stored] == [b"after"]
                assert after.offset == 0
                assert servicer.frames == [1]

    asyncio.run(scenario())


def test_a_send_in_a_frame_that_is_not_answered_may_be_stored(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with served(tmp_path / "b") as (broker, servicer, address):
            async with remote(address, call_timeout_s=1.0) as api:
                await api.create_topic("orders", 1)
                await api.send([NewMessage("orders", b"opens the stream")])
                _, release, stored_first = held_first(broker, "send")
                with pytest.raises(BrokerUnansweredError) as in_flight:
                    await api.send([NewMessage("orders", b"first")])
                assert may_be_stored(in_flight.value)
                release.set()
                await stored_first.wait()
                # Stored after all; a send after it goes in a frame of its own at once.
                (after,) = await api.send([NewMessage("orders", b"after")])
                stored = await broker.peek("orders", queue_id=0, max_messages=8)
                assert [m.record.body for m in stored] == [b"opens the stream", b"first", b"after"]
                assert after.offset == 2
                assert servicer.frames == [1, 1, 1]

    asyncio.run(scenario())


def test_a_broker_that_does_not_answer_frames_is_sent_each_request_on_its_own(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with served(tmp_path / "b", answers_frames=False) as (broker, servicer, address):
            async with remote(address) as api:
                await api.create_topic("orders", 1)
                await api.send([NewMessage("orders", b"opens the stream")])
                held, release, _ = held_first(broker, "send")
                first = asyncio.ensure_future(api.send([NewMessage("orders", b"first")]))
                await held.wait()
                sends = [
                    asyncio.ensure_future(api.send([NewMessage("orders", f"m{i}".encode())]))
                    for i in range(4)
                ]
                await settle()
                release.set()
                results = [await first, *[await s for s in sends]]
                assert len({r.offset for (r,) in results}) == 5
                assert servicer.frames == [1] * 6
                assert api._hop_send is not None and not api._hop_send.unsupported
                stored = await broker.peek("orders", queue_id=0, max_messages=8)
                assert sorted(m.record.body for m in stored) == sorted(
                    [b"opens the stream", b"first", b"m0", b"m1", b"m2", b"m3"]
                )

    asyncio.run(scenario())


def test_the_broker_answers_each_request_of_a_frame_by_its_id_with_its_own_outcome(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with served(tmp_path / "b") as (broker, _, address):
            await broker.create_topic("orders", 1)
            await broker.create_topic("tx", 1, message_type="transaction")
            async with grpc.aio.insecure_channel(address) as channel:
                call = channel.stream_stream(
                    SEND_METHOD, request_serializer=as_is, response_deserializer=as_is
                )()
                headers = await call.initial_metadata()
                assert headers.get(FRAMES_HEADER) == "1"
                frame = [
                    hop_answer(5, HOP_SEND, send_request_wire([NewMessage("orders", b"a")])),
                    hop_answer(6, HOP_SEND, send_request_wire([NewMessage("nope", b"b")])),
                    hop_answer(
                        7,
                        HOP_SEND_HALF,
                        send_request_wire([NewMessage("tx", b"c")], producer_group="pg"),
                    ),
                    hop_answer(8, HOP_SEND, send_request_wire([NewMessage("orders", b"d")])),
                ]
                await call.write(frame_wire(REQUEST_FRAME_KEY, frame))
                answer = await call.read()
                await call.done_writing()
                parts = frame_from_wire(ANSWER_FRAME_KEY, answer)
                assert parts is not None
                answers = {a.id: a for a in (pb.HopSendResponse.FromString(part) for part in parts)}
                assert sorted(answers) == [5, 6, 7, 8]
                assert answers[6].WhichOneof("response") == "error"
                refused = error_from_detail(answers[6].error)
                assert isinstance(refused, NotFoundError)
                assert answers[7].WhichOneof("response") == "send_half"
                assert answers[7].send_half.results[0].transaction_id
                offsets = []
                for request_id in (5, 8):
                    assert answers[request_id].WhichOneof("response") == "send"
                    (result,) = send_results_from_wire(answers[request_id].send.SerializeToString())
                    offsets.append(result.offset)
                assert sorted(offsets) == [0, 1]
                stored = await broker.peek("orders", queue_id=0, max_messages=8)
                assert sorted(m.record.body for m in stored) == [b"a", b"d"]

    asyncio.run(scenario())


def test_requests_waiting_for_a_frame_each_time_out_at_their_own_deadline(
    tmp_path: Path,
) -> None:
    """One timer serves every request's deadline: it fails the oldest first, and is armed
    again for the next, which is not failed before its own time."""

    async def scenario() -> None:
        async with served(tmp_path / "b") as (broker, servicer, address):
            async with remote(address, call_timeout_s=2.0) as api:
                await api.create_topic("orders", 1)
                servicer.accepting.clear()  # nothing is written: both wait for a frame
                first = asyncio.ensure_future(api.send([NewMessage("orders", b"first")]))
                await asyncio.sleep(1.0)
                second = asyncio.ensure_future(api.send([NewMessage("orders", b"second")]))
                with pytest.raises(BrokerUnansweredError) as first_failed:
                    await first
                assert not may_be_stored(first_failed.value)
                assert not second.done()  # its own deadline is a second later
                with pytest.raises(BrokerUnansweredError) as second_failed:
                    await second
                assert not may_be_stored(second_failed.value)
                servicer.accepting.set()
                (after,) = await api.send([NewMessage("orders", b"after")])
                stored = await broker.peek("orders", queue_id=0, max_messages=8)
                assert [m.record.body for m in stored] == [b"after"]
                assert after.offset == 0

    asyncio.run(scenario())


def test_a_frames_sends_are_written_together_each_answered_as_if_it_came_alone(
    tmp_path: Path,
) -> None:
    """One task serves a frame: its sends go to group commit in the frame's order, a repeat
    of a send earlier in the frame is answered with that send's result, a refused send fails
    no other, and a send to a topic still to create, a half send and a part whose id cannot
    be read are served as they would be alone."""

    async def scenario() -> None:
        async with served_broker(tmp_path / "b", auto_create_topics=True) as serving:
            broker = serving.broker
            await broker.create_topic("orders", 1)
            await broker.create_topic("tx", 1, message_type="transaction")

            def send(request_id: int, *messages: NewMessage) -> bytes:
                return hop_answer(request_id, HOP_SEND, send_request_wire(messages))

            frame = [
                send(1, NewMessage("orders", b"a", message_id="A")),
                send(2, NewMessage("orders", b"b")),
                send(3, NewMessage("orders", b"again", message_id="A")),
                send(4, NewMessage("orders", b"x", queue_id=3)),
                b"\x08",  # an id cut short: nothing to answer
                send(5, NewMessage("fresh", b"f")),
                hop_answer(
                    6,
                    HOP_SEND_HALF,
                    send_request_wire([NewMessage("tx", b"h")], producer_group="pg"),
                ),
                send(7, NewMessage("orders", b"c"), NewMessage("orders", b"d")),
            ]
            async with grpc.aio.insecure_channel(serving.address) as channel:
                call = channel.stream_stream(
                    SEND_METHOD, request_serializer=as_is, response_deserializer=as_is
                )()
                await call.write(frame_wire(REQUEST_FRAME_KEY, frame))
                answer = await call.read()
                await call.done_writing()
            parts = frame_from_wire(ANSWER_FRAME_KEY, answer)
            assert parts is not None
            answers = [pb.HopSendResponse.FromString(part) for part in parts]
            assert [a.id for a in answers] == [1, 2, 3, 4, 5, 6, 7]
            by_id = {a.id: a for a in answers}
            refused = error_from_detail(by_id[4].error)
            assert isinstance(refused, InvalidArgumentError)
            assert by_id[6].send_half.results[0].transaction_id

            def results(request_id: int) -> list[tuple[int, bool]]:
                wire = by_id[request_id].send.SerializeToString()
                return [(r.offset, r.duplicate) for r in send_results_from_wire(wire)]

            assert results(1) == [(0, False)]
            assert results(2) == [(1, False)]
            assert results(3) == [(0, True)]
            assert results(5) == [(0, False)]
            assert results(7) == [(2, False), (3, False)]
            stored = await broker.peek("orders", queue_id=0, max_messages=8)
            assert [m.record.body for m in stored] == [b"a", b"b", b"c", b"d"]
            (fresh,) = await broker.peek("fresh", max_messages=8)
            assert fresh.record.body == b"f"

    asyncio.run(scenario())


def test_a_frame_whose_stream_is_cancelled_leaves_each_send_stored_at_most_once(
    tmp_path: Path,
) -> None:
    """A proxy that gives up a stream with a frame on it: whether or not the broker read the
    frame, a retry of its sends stores each message once (a send begun before is found as a
    duplicate; its dedup claims ended with the frame)."""

    async def scenario() -> None:
        async with served(tmp_path / "b") as (broker, _, address):
            await broker.create_topic("orders", 1)
            sends = [
                send_request_wire([NewMessage("orders", f"m{i}".encode(), message_id=f"M{i}")])
                for i in range(4)
            ]
            frame = frame_wire(
                REQUEST_FRAME_KEY, [hop_answer(i, HOP_SEND, s) for i, s in enumerate(sends)]
            )
            async with grpc.aio.insecure_channel(address) as channel:
                call = channel.stream_stream(
                    SEND_METHOD, request_serializer=as_is, response_deserializer=as_is
                )()
                await call.initial_metadata()
                await call.write(frame)
                call.cancel()
            async with remote(address) as api:
                retried = await asyncio.gather(
                    *(
                        api.send([NewMessage("orders", f"m{i}".encode(), message_id=f"M{i}")])
                        for i in range(4)
                    )
                )
            assert sorted(r.message_id for (r,) in retried) == ["M0", "M1", "M2", "M3"]
            stored = await broker.peek("orders", queue_id=0, max_messages=16)
            assert sorted(m.record.body for m in stored) == [b"m0", b"m1", b"m2", b"m3"]

    asyncio.run(scenario())
