"""What the tests of frames on the hop share (test_hop_send_frames.py,
test_hop_stream_frames.py): a BrokerService that notes how many requests each message of
its streams carried, or plays a broker of a release before frames; a broker call held until
the test releases it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

from popmq._gen.popmq.broker.v1 import broker_pb2 as pb
from popmq.broker import BrokerServicer
from popmq.broker.send_wire import REQUEST_FRAME_KEY, frame_from_wire
from popmq.broker_core.broker import Broker
from tests.support.brokers import served_broker

_Request = TypeVar("_Request")


class Watched(BrokerServicer):
    """BrokerService noting in `frames` how many requests each HopSend or HopStream message
    carried; with `answers_frames` False, its headers do not say that frames are answered
    (HopSend's empty at once, HopStream's none until its first answer: the releases before
    frames)."""

    def __init__(self, broker: Broker, *, answers_frames: bool = True) -> None:
        super().__init__(broker)
        self.answers_frames = answers_frames
        self.frames: list[int] = []
        self.accepting = asyncio.Event()
        """Cleared: a HopSend call is not accepted (no headers) until it is set again."""
        self.accepting.set()

    async def HopSend(self, requests: AsyncIterator[bytes], context: Any) -> None:
        await self.accepting.wait()
        await super().HopSend(
            self._noted(requests, _send_frame_size), self._context(context, at_once=True)
        )

    async def HopStream(self, requests: AsyncIterator[pb.HopStreamRequest], context: Any) -> None:
        await super().HopStream(
            self._noted(requests, _stream_frame_size), self._context(context, at_once=False)
        )

    async def _noted(
        self, requests: AsyncIterator[_Request], size: Callable[[_Request], int]
    ) -> AsyncIterator[_Request]:
        async for request in requests:
            self.frames.append(size(request))
            yield request

    def _context(self, context: Any, *, at_once: bool) -> Any:
        return context if self.answers_frames else _WithoutFramesHeader(context, at_once=at_once)


@contextlib.asynccontextmanager
async def served(
    data_dir: Path, *, answers_frames: bool = True
) -> AsyncIterator[tuple[Broker, Watched, str]]:
    """A started Broker behind a Watched on a free loopback port: (the broker, the Watched,
    its address)."""
    servicer = Watched if answers_frames else _without_frames
    async with served_broker(data_dir, servicer) as serving:
        assert isinstance(serving.servicer, Watched)
        yield serving.broker, serving.servicer, serving.address


def _without_frames(broker: Broker) -> Watched:
    return Watched(broker, answers_frames=False)


def _send_frame_size(data: bytes) -> int:
    parts = frame_from_wire(REQUEST_FRAME_KEY, data)
    return 1 if parts is None else len(parts)


def _stream_frame_size(request: pb.HopStreamRequest) -> int:
    return len(request.frame) or 1


class _WithoutFramesHeader:
    """A call context that sends empty headers when asked (`at_once`), or none."""

    def __init__(self, context: Any, *, at_once: bool) -> None:
        self._context = context
        self._at_once = at_once

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    async def send_initial_metadata(self, metadata: Any) -> None:
        if self._at_once:
            await self._context.send_initial_metadata(())


def held_first(broker: Broker, method: str) -> tuple[asyncio.Event, asyncio.Event, asyncio.Event]:
    """Make the broker's next call of `method` ("send", "pop") wait for the returned
    `release` before it runs: (`held`, set once it waits, the frame that carried it then in
    flight; `release`; `done`, set once it has run)."""
    held, release, done = asyncio.Event(), asyncio.Event(), asyncio.Event()
    original = getattr(broker, method)
    first = True

    async def call(*args: Any, **kwargs: Any) -> Any:
        nonlocal first
        if first:
            first = False
            held.set()
            await release.wait()
            result = await original(*args, **kwargs)
            done.set()
            return result
        return await original(*args, **kwargs)

    setattr(broker, method, call)
    return held, release, done


async def settle() -> None:
    """Let the tasks just started run up to their first real wait."""
    for _ in range(20):
        await asyncio.sleep(0)


def as_is(data: bytes) -> bytes:
    return data
