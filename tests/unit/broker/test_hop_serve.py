"""How a broker serves a hop stream (broker/hop_serve.py): every request's answer is written
once ready, in the order they become ready, and the call ends once the requests read are
answered."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from popmq._gen.popmq.broker.v1 import broker_pb2 as pb
from popmq.broker.hop_serve import serve_stream


def _answer(request_id: int) -> bytes:
    return pb.HopStreamResponse(
        id=request_id, error=pb.ErrorDetail(message="x")
    ).SerializeToString()


class _Context:
    """The one thing serve_stream asks of a grpc.aio.ServicerContext: writes, noted."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.wrote = asyncio.Event()

    async def write(self, data: bytes) -> None:
        self.written.append(data)
        self.wrote.set()


async def _requests(ids: list[int], then: asyncio.Event | None = None) -> AsyncIterator[int]:
    for request_id in ids:
        yield request_id
    if then is not None:
        await then.wait()  # the proxy keeps its stream open


def test_every_request_is_answered_each_in_its_own_write_as_it_becomes_ready() -> None:
    async def scenario() -> None:
        release = asyncio.Event()

        async def answer(request_id: int) -> bytes | None:
            if request_id == 0:
                return None  # answers nothing (a malformed request's case)
            if request_id > 1:
                await release.wait()
            return _answer(request_id)

        context = _Context()
        serving = asyncio.ensure_future(
            serve_stream(_requests([0, 1, 2, 3, 4]), context, answer, asyncio.Event())
        )
        await asyncio.wait_for(context.wrote.wait(), 5)
        assert context.written == [_answer(1)]  # ready on its own, written at once
        release.set()
        await asyncio.wait_for(serving, 5)
        # 0 answers nothing; 2, 3 and 4 became ready together, in that order
        assert context.written == [_answer(1), _answer(2), _answer(3), _answer(4)]

    asyncio.run(scenario())


def test_a_stopping_server_stops_reading_and_ends_once_the_requests_read_are_answered() -> None:
    async def scenario() -> None:
        ending = asyncio.Event()
        release = asyncio.Event()
        forever = asyncio.Event()

        async def answer(request_id: int) -> bytes | None:
            await release.wait()
            return _answer(request_id)

        context = _Context()
        serving = asyncio.ensure_future(
            serve_stream(_requests([1, 2], then=forever), context, answer, ending)
        )
        for _ in range(5):
            await asyncio.sleep(0)
        ending.set()
        await asyncio.sleep(0.01)
        assert not serving.done()  # its two requests are not answered yet
        release.set()
        await asyncio.wait_for(serving, 5)
        ids = [pb.HopStreamResponse.FromString(m).id for m in context.written]
        assert sorted(ids) == [1, 2]

    asyncio.run(scenario())


def test_a_failing_request_stream_ends_the_call_with_its_error_after_the_answers() -> None:
    async def scenario() -> None:
        async def requests() -> AsyncIterator[int]:
            yield 1
            raise ConnectionResetError("the proxy went away")

        async def answer(request_id: int) -> bytes | None:
            await asyncio.sleep(0.01)
            return _answer(request_id)

        context = _Context()
        with pytest.raises(ConnectionResetError, match="went away"):
            await asyncio.wait_for(serve_stream(requests(), context, answer, asyncio.Event()), 5)
        assert context.written == [_answer(1)]

    asyncio.run(scenario())


def test_a_call_cancelled_while_it_ends_leaves_the_next_call_unharmed() -> None:
    """A proxy's stream cancelled while its requests are read (the proxy went away) must not
    touch the next stream's call: compiled, a cancelled reader once made the next call fail
    with its CancelledError."""

    async def scenario() -> None:
        async def answer(request_id: int) -> bytes | None:
            await asyncio.sleep(0.001)
            return _answer(request_id)

        forever = asyncio.Event()
        cancelled = asyncio.ensure_future(
            serve_stream(_requests([1, 2], then=forever), _Context(), answer, asyncio.Event())
        )
        await asyncio.sleep(0.05)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        context = _Context()
        await asyncio.wait_for(serve_stream(_requests([3, 4]), context, answer, asyncio.Event()), 5)
        ids = [pb.HopStreamResponse.FromString(m).id for m in context.written]
        assert sorted(ids) == [3, 4]

    asyncio.run(scenario())
