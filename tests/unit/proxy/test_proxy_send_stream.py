"""SendStreamSession against a fake call context and a fake broker send (no server).

The tests hold sends in flight as long as they like, which a real broker's fast writes do
not allow: the in-flight limit, the start order, and what shutdown answers. The last ones
run a real broker whose fsync is held, for the sends handed to group commit as they are read
(`begin_send`, `Broker.send_now`).
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import grpc.aio

from popmq._gen.popmq.v1 import messaging_pb2
from popmq.broker_core import Broker, NewMessage
from popmq.broker_core.errors import InvalidArgumentError
from popmq.broker_core.send import SendTicket
from popmq.broker_core.types import SendResult
from popmq.proxy import convert
from popmq.proxy.send_request import SendRequest, SendStreamRequest
from popmq.proxy.send_stream import MAX_IN_FLIGHT, SendStreamSession
from tests.unit.conftest import OpenBroker, hold_fsync


class FakeContext:
    """A SendStream call: reads what the test feeds, records what the session writes (as
    the client reads it: answers the session encodes itself are parsed)."""

    answer_type: type[Any] = messaging_pb2.SendStreamResponse

    def __init__(self) -> None:
        self.reads: asyncio.Queue[Any] = asyncio.Queue()
        self.written: list[messaging_pb2.SendStreamResponse] = []
        self.wrote = asyncio.Event()
        self.code: grpc.StatusCode | None = None
        self.details = ""

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"

    async def read(self) -> Any:
        return await self.reads.get()

    async def write(self, response: Any) -> None:
        self.written.append(self.answer_type.FromString(convert.serialized(response)))
        self.wrote.set()

    def set_code(self, code: grpc.StatusCode) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details

    def answers(self) -> dict[int, messaging_pb2.SendStreamResponse]:
        return {a.request_id: a for a in self.written}


class FakeBroker:
    """Sends that wait until the test stores them; records the order they started in."""

    def __init__(self) -> None:
        self.started: list[bytes] = []
        self.held: dict[bytes, asyncio.Future[None]] = {}

    def start_send(self, request: SendRequest) -> Any:
        bodies = [m.body for m in request.messages]
        if b"" in bodies:
            raise InvalidArgumentError("messages[0].body is empty: 1 byte to 4 MiB")
        return self._send(bodies)

    async def _send(self, bodies: list[bytes]) -> list[SendResult]:
        self.started.extend(bodies)
        for body in bodies:
            if body.startswith(b"hold"):
                self.held[body] = asyncio.get_running_loop().create_future()
                await self.held[body]
        return [SendResult(body.decode(), "orders", 0, n, "") for n, body in enumerate(bodies)]


def _request(
    request_id: int, body: bytes, topic: str = "orders", **fields: Any
) -> SendStreamRequest:
    """A request as the method's deserializer reads it."""
    request = messaging_pb2.SendStreamRequest(
        request_id=request_id,
        send=messaging_pb2.SendMessagesRequest(
            messages=[messaging_pb2.OutgoingMessage(topic=topic, body=body, **fields)]
        ),
    )
    return SendStreamRequest.FromString(request.SerializeToString())


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_sends_start_in_the_order_read_and_are_answered_as_they_finish() -> None:
    observed: list[tuple[str, str]] = []

    async def scenario() -> tuple[FakeContext, FakeBroker]:
        context, broker = FakeContext(), FakeBroker()
        session = SendStreamSession(
            broker.start_send,
            context,  # type: ignore[arg-type]
            lambda code, _s, request, _p, _d: observed.append((code, request.messages[0].topic)),
        )
        serving = asyncio.ensure_future(session.serve())
        for n in range(10):
            context.reads.put_nowait(_request(n, b"hold-%d" % n if n == 0 else b"m%d" % n))
        await _settle()
        assert list(context.answers()) == list(range(1, 10))  # not waiting for request 0
        broker.held[b"hold-0"].set_result(None)
        context.reads.put_nowait(grpc.aio.EOF)
        await serving
        return context, broker

    context, broker = asyncio.run(scenario())
    assert broker.started == [b"hold-0"] + [b"m%d" % n for n in range(1, 10)]
    assert [a.request_id for a in context.written] == [*range(1, 10), 0]
    assert context.answers()[0].send.results[0].message_id == "hold-0"
    assert context.code is None  # half-closed: OK after every answer
    assert observed == [("OK", "orders")] * 10


def test_a_send_beyond_the_limit_is_refused_until_an_answer_frees_room() -> None:
    async def scenario() -> tuple[FakeContext, FakeBroker]:
        context, broker = FakeContext(), FakeBroker()
        session = SendStreamSession(broker.start_send, context)  # type: ignore[arg-type]
        serving = asyncio.ensure_future(session.serve())
        for n in range(MAX_IN_FLIGHT):
            context.reads.put_nowait(_request(n, b"hold-%d" % n))
        context.reads.put_nowait(_request(5000, b"refused"))
        await _settle()
        assert list(context.answers()) == [5000]
        broker.held[b"hold-7"].set_result(None)
        await _settle()
        context.reads.put_nowait(_request(5001, b"accepted"))
        await _settle()
        for n in range(MAX_IN_FLIGHT):
            if n != 7:
                broker.held[b"hold-%d" % n].set_result(None)
        context.reads.put_nowait(grpc.aio.EOF)
        await serving
        return context, broker

    context, broker = asyncio.run(scenario())
    refused = context.answers()[5000]
    assert refused.error.code == "RESOURCE_EXHAUSTED"
    assert f"at most {MAX_IN_FLIGHT}" in refused.error.message
    assert b"refused" not in broker.started  # never reached the broker
    assert context.answers()[5001].WhichOneof("result") == "send"
    assert len(context.written) == MAX_IN_FLIGHT + 2


def test_a_bad_send_is_answered_with_its_error_and_the_stream_goes_on() -> None:
    async def scenario() -> FakeContext:
        context, broker = FakeContext(), FakeBroker()
        session = SendStreamSession(broker.start_send, context)  # type: ignore[arg-type]
        serving = asyncio.ensure_future(session.serve())
        context.reads.put_nowait(_request(1, b""))
        context.reads.put_nowait(_request(2, b"fine"))
        context.reads.put_nowait(grpc.aio.EOF)
        await serving
        return context

    context = asyncio.run(scenario())
    answers = context.answers()
    assert (answers[1].error.code, answers[1].error.message) == (
        "INVALID_ARGUMENT",
        "messages[0].body is empty: 1 byte to 4 MiB",
    )
    assert answers[2].send.results[0].message_id == "fine"


def test_release_stops_reading_answers_the_sends_in_flight_then_ends_unavailable() -> None:
    async def scenario() -> tuple[FakeContext, FakeBroker, bool]:
        context, broker = FakeContext(), FakeBroker()
        session = SendStreamSession(broker.start_send, context)  # type: ignore[arg-type]
        serving = asyncio.ensure_future(session.serve())
        context.reads.put_nowait(_request(1, b"hold-1"))
        await _settle()
        session.release()
        context.reads.put_nowait(_request(2, b"unread"))
        await _settle()
        ended_early = serving.done()
        broker.held[b"hold-1"].set_result(None)
        await serving
        return context, broker, ended_early

    context, broker, ended_early = asyncio.run(scenario())
    assert not ended_early  # waited for the send in flight
    assert list(context.answers()) == [1]
    assert context.answers()[1].WhichOneof("result") == "send"
    assert b"unread" not in broker.started
    assert context.code == grpc.StatusCode.UNAVAILABLE
    assert "shutting down" in context.details


def test_a_cancelled_call_cancels_its_sends() -> None:
    async def scenario() -> FakeBroker:
        context, broker = FakeContext(), FakeBroker()
        session = SendStreamSession(broker.start_send, context)  # type: ignore[arg-type]
        serving = asyncio.ensure_future(session.serve())
        context.reads.put_nowait(_request(1, b"hold-1"))
        await _settle()
        serving.cancel()  # what grpc does when the client cancels or the connection drops
        await asyncio.gather(serving, return_exceptions=True)
        await _settle()
        return broker

    broker = asyncio.run(scenario())
    assert broker.held[b"hold-1"].cancelled()


def _begin_send(broker: Broker) -> Any:
    """What MessagingServicer.begin_send does for a plain send: the ticket, or the send's
    coroutine when a topic must be created first."""

    def begin(request: SendRequest) -> Any:
        return broker.send_now(request.messages) or broker.send(request.messages)

    return begin


def test_sends_handed_to_group_commit_are_answered_in_order_each_with_its_outcome(
    open_broker: OpenBroker,
) -> None:
    """Sends begun as they are read (no task each) get the answers a task would have given:
    their receipts in order, a repeat of a send still being written its duplicate, a refused
    send its error, each observed once."""
    observed: list[str] = []

    async def scenario() -> tuple[FakeContext, list[bytes]]:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            gate, earlier = await hold_fsync(broker, "orders")  # the sends below wait behind
            context = FakeContext()
            session = SendStreamSession(
                broker.send,  # never used: every send here is begun at once
                context,  # type: ignore[arg-type]
                lambda code, _s, _r, _p, _d: observed.append(code),
                begin_send=_begin_send(broker),
            )
            serving = asyncio.ensure_future(session.serve())
            context.reads.put_nowait(_request(1, b"a", message_id="A"))
            context.reads.put_nowait(_request(2, b"b"))
            context.reads.put_nowait(_request(3, b"again", message_id="A"))
            context.reads.put_nowait(_request(4, b"x", topic="missing"))
            await _settle()
            assert list(context.answers()) == [4]  # the refusal only: the writes are held
            gate.set()
            context.reads.put_nowait(grpc.aio.EOF)
            await serving
            for ticket in earlier:
                assert isinstance(ticket, SendTicket)
                await ticket.results()
            stored = await broker.peek("orders", queue_id=0, max_messages=8)
            return context, [m.record.body for m in stored]

    context, stored = asyncio.run(scenario())
    answers = context.answers()
    assert [a.request_id for a in context.written] == [4, 1, 2, 3]
    assert answers[4].error.code == "NOT_FOUND"
    assert "topic 'missing' does not exist" in answers[4].error.message
    results = [answers[n].send.results[0] for n in (1, 2, 3)]
    assert [(r.offset, r.duplicate) for r in results] == [(2, False), (3, False), (2, True)]
    assert results[2].message_id == "A"
    assert stored == [b"x", b"y", b"a", b"b"]
    assert sorted(observed) == ["NOT_FOUND", "OK", "OK", "OK"]
    assert context.code is None


def test_a_call_ending_before_its_sends_are_written_gives_up_only_their_answers(
    open_broker: OpenBroker,
) -> None:
    """The call ends while its send waits for its write: the write and the send's dedup
    claim go on, so a retry arriving before the write is its duplicate, stored once."""

    async def scenario() -> tuple[FakeContext, bool, list[bytes]]:
        async with open_broker() as broker:
            await broker.create_topic("orders", 1)
            gate, earlier = await hold_fsync(broker, "orders")
            context = FakeContext()
            session = SendStreamSession(
                broker.send,
                context,  # type: ignore[arg-type]
                begin_send=_begin_send(broker),
            )
            serving = asyncio.ensure_future(session.serve())
            context.reads.put_nowait(_request(1, b"first", message_id="M"))
            await _settle()
            serving.cancel()  # the client went away
            await asyncio.gather(serving, return_exceptions=True)
            retry = asyncio.ensure_future(
                broker.send([NewMessage("orders", b"retry", message_id="M")])
            )
            await _settle()
            gate.set()
            (retried,) = await retry
            for ticket in earlier:
                assert isinstance(ticket, SendTicket)
                await ticket.results()
            await _settle()
            stored = await broker.peek("orders", queue_id=0, max_messages=8)
            return context, retried.duplicate, [m.record.body for m in stored]

    context, duplicate, stored = asyncio.run(scenario())
    assert context.written == []  # nobody read an answer after the call ended
    assert duplicate
    assert stored == [b"x", b"y", b"first"]
