"""AsyncSimpleConsumer's receives over a PopStream, against a fake channel (no server).

The fake stream records what the consumer writes; each test answers as the server would, or
breaks the stream, and checks what the receives see.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
import pytest

from popmq import sdk
from popmq._gen.popmq.v1 import messaging_pb2
from popmq.sdk._pop_stream import MAX_IN_FLIGHT


class FakeCall:
    """A PopStream call: written requests are recorded, reads return what the test feeds."""

    def __init__(self) -> None:
        self.written: list[messaging_pb2.PopStreamRequest] = []
        self._reads: asyncio.Queue[Any] = asyncio.Queue()
        self.cancelled = False
        self.half_closed = False

    async def write(self, request: messaging_pb2.PopStreamRequest) -> None:
        self.written.append(request)

    async def done_writing(self) -> None:
        # The server ends the call OK once it has written its answers: its reads end.
        self.half_closed = True
        self._reads.put_nowait(grpc.aio.EOF)

    async def read(self) -> Any:
        item = await self._reads.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def cancel(self) -> bool:
        # grpc.aio: a read of a call cancelled locally raises CancelledError.
        self.cancelled = True
        self._reads.put_nowait(asyncio.CancelledError())
        return True

    def answer(self, request_id: int, *bodies: bytes) -> None:
        self._reads.put_nowait(
            messaging_pb2.PopStreamResponse(
                request_id=request_id,
                pop=messaging_pb2.PopResponse(
                    messages=[messaging_pb2.ReceivedMessage(body=b) for b in bodies]
                ),
            )
        )

    def fail(self, request_id: int, code: str, message: str) -> None:
        self._reads.put_nowait(
            messaging_pb2.PopStreamResponse(
                request_id=request_id,
                error=messaging_pb2.PopStreamError(code=code, message=message),
            )
        )

    def end(self, item: Any) -> None:
        """End the call: grpc.aio.EOF (status OK) or an AioRpcError."""
        self._reads.put_nowait(item)

    def pops(self) -> list[int]:
        return [r.request_id for r in self.written if r.WhichOneof("action") == "pop"]

    def cancels(self) -> list[int]:
        return [r.request_id for r in self.written if r.WhichOneof("action") == "cancel"]


class FakeChannel:
    """Opens FakeCalls for PopStream; answers unary Pops with an empty response."""

    def __init__(self) -> None:
        self.streams: list[FakeCall] = []
        self.unary_pops = 0

    def stream_stream(self, method: str, *args: Any, **kwargs: Any) -> Callable[[], FakeCall]:
        # The stub asks for every streaming method; the consumer opens PopStream only.
        assert method in {
            "/popmq.v1.MessagingService/PopStream",
            "/popmq.v1.MessagingService/SendStream",
        }

        def open_call(*, metadata: Any = None) -> FakeCall:
            assert method == "/popmq.v1.MessagingService/PopStream"
            assert metadata is None  # no credentials: nothing signs the stream
            call = FakeCall()
            self.streams.append(call)
            return call

        return open_call

    def unary_stream(self, method: str, *args: Any, **kwargs: Any) -> Callable[..., Any]:
        def call(*_: Any, **__: Any) -> Any:
            raise AssertionError(f"{method}: a consumer opens no server stream")

        return call

    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> Callable[..., Awaitable[Any]]:
        async def call(
            request: Any,
            timeout: float | None = None,  # noqa: ASYNC109
            metadata: Any = None,
        ) -> Any:
            assert method == "/popmq.v1.MessagingService/Pop"
            assert metadata is None  # no credentials: nothing signs the call
            self.unary_pops += 1
            return messaging_pb2.PopResponse()

        return call

    async def close(self) -> None:
        raise AssertionError("a borrowed channel must be left to its owner")


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def _consumer(channel: FakeChannel, timeout_s: float = 10) -> sdk.AsyncSimpleConsumer:
    return sdk.AsyncSimpleConsumer(
        "fake", group="g", topic="orders", channel=channel, timeout_s=timeout_s
    )


def _unavailable(details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(
        grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), details
    )


def test_answers_go_to_their_receives_by_request_id() -> None:
    channel = FakeChannel()

    async def scenario() -> tuple[list[bytes], list[bytes]]:
        async with _consumer(channel) as consumer:
            first = asyncio.ensure_future(consumer.receive(wait_s=5))
            second = asyncio.ensure_future(consumer.receive(wait_s=5))
            await _settle()
            (call,) = channel.streams
            one, two = call.pops()
            call.answer(two, b"for the second")
            call.answer(one, b"for the first")
            return [m.body for m in await first], [m.body for m in await second]

    assert asyncio.run(scenario()) == ([b"for the first"], [b"for the second"])
    assert len(channel.streams) == 1 and channel.unary_pops == 0


def test_an_error_answer_fails_only_its_receive_with_the_error_of_its_code() -> None:
    channel = FakeChannel()

    async def scenario() -> list[bytes]:
        async with _consumer(channel) as consumer:
            bad = asyncio.ensure_future(consumer.receive(wait_s=5))
            good = asyncio.ensure_future(consumer.receive(wait_s=5))
            await _settle()
            (call,) = channel.streams
            one, two = call.pops()
            call.fail(one, "NOT_FOUND", "topic 'orders' does not exist; create it first")
            with pytest.raises(sdk.NotFoundError, match="does not exist"):
                await bad
            call.answer(two, b"fine")
            return [m.body for m in await good]

    assert asyncio.run(scenario()) == [b"fine"]


def test_a_broken_stream_fails_the_receives_in_flight_and_the_next_receive_reopens() -> None:
    channel = FakeChannel()

    async def scenario() -> tuple[list[BaseException | Any], list[bytes]]:
        async with _consumer(channel) as consumer:
            receives = [asyncio.ensure_future(consumer.receive(wait_s=5)) for _ in range(3)]
            await _settle()
            channel.streams[0].end(_unavailable("Socket closed"))
            failed = await asyncio.gather(*receives, return_exceptions=True)
            again = asyncio.ensure_future(consumer.receive(wait_s=5))
            await _settle()
            assert len(channel.streams) == 2
            (request_id,) = channel.streams[1].pops()
            channel.streams[1].answer(request_id, b"reopened")
            return failed, [m.body for m in await again]

    failed, again = asyncio.run(scenario())
    assert [type(f) for f in failed] == [sdk.UnavailableError] * 3
    assert all(isinstance(f, sdk.PopMQError) and f.message == "Socket closed" for f in failed)
    assert again == [b"reopened"]


def test_a_stream_ended_ok_with_pops_in_flight_fails_them_as_unavailable() -> None:
    channel = FakeChannel()

    async def scenario() -> None:
        async with _consumer(channel) as consumer:
            receive = asyncio.ensure_future(consumer.receive(wait_s=5))
            await _settle()
            channel.streams[0].end(grpc.aio.EOF)
            with pytest.raises(sdk.UnavailableError, match="receive again"):
                await receive

    asyncio.run(scenario())


def test_a_stream_grpc_ended_under_a_write_fails_its_pops_as_unavailable() -> None:
    # grpc ends a call with INTERNAL "Internal error from Core" when a write failed because
    # the server had ended the call; the server's status is lost, and it never said INTERNAL.
    channel = FakeChannel()

    async def scenario() -> None:
        async with _consumer(channel) as consumer:
            receive = asyncio.ensure_future(consumer.receive(wait_s=5))
            await _settle()
            channel.streams[0].end(
                grpc.aio.AioRpcError(
                    grpc.StatusCode.INTERNAL,
                    grpc.aio.Metadata(),
                    grpc.aio.Metadata(),
                    "Internal error from Core",
                )
            )
            with pytest.raises(sdk.UnavailableError, match="ended as a request was written"):
                await receive

    asyncio.run(scenario())


def test_an_unanswered_receive_times_out_and_cancels_its_pop() -> None:
    channel = FakeChannel()

    async def scenario() -> None:
        async with _consumer(channel, timeout_s=0.05) as consumer:
            with pytest.raises(sdk.DeadlineExceededError, match="Deadline Exceeded"):
                await consumer.receive(wait_s=0)
            await _settle()
            (call,) = channel.streams
            assert call.cancels() == call.pops()

    asyncio.run(scenario())


def test_a_cancelled_receive_sends_a_cancel_and_its_late_answer_is_dropped() -> None:
    channel = FakeChannel()

    async def scenario() -> list[bytes]:
        async with _consumer(channel) as consumer:
            receive = asyncio.ensure_future(consumer.receive(wait_s=5))
            await _settle()
            (call,) = channel.streams
            (request_id,) = call.pops()
            receive.cancel()
            with pytest.raises(asyncio.CancelledError):
                await receive
            await _settle()
            assert call.cancels() == [request_id]
            call.answer(request_id, b"too late")  # ready before the cancel arrived
            nxt = asyncio.ensure_future(consumer.receive(wait_s=5))
            await _settle()
            call.answer(call.pops()[-1], b"next")
            return [m.body for m in await nxt]

    assert asyncio.run(scenario()) == [b"next"]


def test_receives_beyond_the_stream_limit_use_unary_pops() -> None:
    channel = FakeChannel()

    async def scenario() -> None:
        async with _consumer(channel) as consumer:
            held = [asyncio.ensure_future(consumer.receive(wait_s=5)) for _ in range(MAX_IN_FLIGHT)]
            await _settle()
            assert await consumer.receive(wait_s=5) == []  # the fake unary Pop's answer
            assert channel.unary_pops == 1
            assert len(channel.streams[0].pops()) == MAX_IN_FLIGHT
            for receive in held:
                receive.cancel()
            await asyncio.gather(*held, return_exceptions=True)

    asyncio.run(scenario())


def test_close_cancels_the_stream_and_the_receives_waiting_on_it() -> None:
    channel = FakeChannel()

    async def scenario() -> None:
        consumer = _consumer(channel)
        receive = asyncio.ensure_future(consumer.receive(wait_s=5))
        await _settle()
        await consumer.close()
        with pytest.raises(asyncio.CancelledError):
            await receive
        assert channel.streams[0].cancelled

    asyncio.run(scenario())


def test_close_with_nothing_in_flight_half_closes_and_lets_the_server_end_the_stream() -> None:
    # Cancelled, the server could be amid the write of the answer just read, take it as
    # never written and give its messages back (superseding the handles the client holds).
    channel = FakeChannel()

    async def scenario() -> FakeCall:
        consumer = _consumer(channel)
        receive = asyncio.ensure_future(consumer.receive(wait_s=5))
        await _settle()
        (call,) = channel.streams
        call.answer(call.pops()[0], b"m")
        assert [m.body for m in await receive] == [b"m"]
        await consumer.close()
        return call

    call = asyncio.run(scenario())
    assert call.half_closed


def test_multiplex_false_receives_with_unary_pops() -> None:
    channel = FakeChannel()

    async def scenario() -> None:
        async with sdk.AsyncSimpleConsumer(
            "fake", group="g", topic="orders", channel=channel, multiplex=False
        ) as consumer:
            assert await consumer.receive(wait_s=5) == []

    asyncio.run(scenario())
    assert (len(channel.streams), channel.unary_pops) == (0, 1)
