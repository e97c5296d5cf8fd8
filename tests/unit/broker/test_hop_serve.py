"""How a broker serves a hop stream (broker/hop_serve.py): every request's answer is written,
answers ready together go out as one frame a proxy reads part by part, a lone answer goes
as it is, and the call ends once the requests read are answered."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator

import pytest

from popmq._gen.popmq.broker.v1 import broker_pb2 as pb
from popmq.broker.hop_serve import COALESCED_BYTES, coalesced, serve_stream
from popmq.broker.send_wire import ANSWER_FRAME_KEY, frame_from_wire, frame_wire


def _answer(request_id: int, size: int = 0) -> bytes:
    return pb.HopStreamResponse(
        id=request_id, error=pb.ErrorDetail(message="x" * size)
    ).SerializeToString()


def _parts(message: bytes) -> list[bytes]:
    """The answers one stream message carries, as a proxy reads them (hop_frames.py)."""
    parts = frame_from_wire(ANSWER_FRAME_KEY, message)
    return [message] if parts is None else parts


def test_a_lone_ready_answer_is_written_as_it_is() -> None:
    ready = deque([_answer(1)])
    assert coalesced(ready) == _answer(1)
    assert not ready


def test_answers_ready_together_become_one_frame_and_frames_add_their_parts() -> None:
    framed = frame_wire(ANSWER_FRAME_KEY, [_answer(2), _answer(3)])
    ready = deque([_answer(1), framed, _answer(4)])
    message = coalesced(ready)
    assert not ready
    assert [pb.HopStreamResponse.FromString(p).id for p in _parts(message)] == [1, 2, 3, 4]


def test_a_stream_message_holds_at_most_the_coalesced_bytes_and_a_large_answer_goes_alone() -> None:
    third = COALESCED_BYTES // 3
    big = _answer(9, COALESCED_BYTES)
    ready = deque([_answer(1, third), _answer(2, third), _answer(3, third), big, _answer(4)])
    first = coalesced(ready)
    assert len(first) <= COALESCED_BYTES + 64  # the frame's own tags and lengths
    assert [pb.HopStreamResponse.FromString(p).id for p in _parts(first)] == [1, 2]
    assert [pb.HopStreamResponse.FromString(p).id for p in _parts(coalesced(ready))] == [3]
    assert coalesced(ready) == big
    assert coalesced(ready) == _answer(4)
    assert not ready


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


def test_every_request_is_answered_and_answers_ready_at_once_share_a_write() -> None:
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
        assert len(context.written) == 2  # 2, 3 and 4 became ready together
        ids = [pb.HopStreamResponse.FromString(p).id for m in context.written for p in _parts(m)]
        assert ids == [1, 2, 3, 4]

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
        ids = [pb.HopStreamResponse.FromString(p).id for m in context.written for p in _parts(m)]
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
        ids = [pb.HopStreamResponse.FromString(p).id for m in context.written for p in _parts(m)]
        assert sorted(ids) == [3, 4]

    asyncio.run(scenario())
