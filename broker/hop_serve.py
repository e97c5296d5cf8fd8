"""How a broker serves one HopStream or HopSend call (broker/service.py): each request runs
as its own task, as its unary call would, and its answer is written once ready, in the order
the answers become ready.

Answers are written one per stream message, not joined: a proxy keeps one frame of requests
in flight per stream and writes a lone request unframed (cluster/hop_frames.py), so two
answers of one call are not ready at once.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Generic, TypeVar

__all__ = ["serve_stream"]

_Req = TypeVar("_Req")


async def serve_stream(
    requests: AsyncIterator[_Req],
    context: Any,
    answer: Callable[[_Req], Awaitable[bytes | None]],
    ending: asyncio.Event,
) -> None:
    """Serve a HopStream or HopSend call on `context` (a grpc.aio.ServicerContext): each of
    `requests` runs as a task of its own, and its `answer` (response bytes, or None for no
    answer) is written when ready. Once `ending` is set (the server stops) no more requests
    are read; the call ends when the ones read are answered."""
    await _StreamService(answer).serve(requests, context, ending)


class _StreamService(Generic[_Req]):
    """One call's requests in flight and the answers ready to write."""

    def __init__(self, answer: Callable[[_Req], Awaitable[bytes | None]]) -> None:
        self._answer = answer
        self._tasks: set[asyncio.Task[None]] = set()
        self._ready: deque[bytes] = deque()
        # Set when an answer is ready or the requests have all been answered.
        self._wake: asyncio.Future[None] | None = None
        self._read_all = False

    async def serve(
        self, requests: AsyncIterator[_Req], context: Any, ending: asyncio.Event
    ) -> None:
        reader = asyncio.ensure_future(self._read(requests, ending))
        try:
            while (data := await self._next()) is not None:
                await context.write(data)
            await reader  # raises what ended the reading, if anything did
        finally:
            reader.cancel()
            for task in list(self._tasks):
                task.cancel()

    async def _next(self) -> bytes | None:
        """The next stream message to write, or None once every request is answered."""
        ready = self._ready
        while not ready:
            if self._read_all and not self._tasks:
                return None
            wake = asyncio.get_running_loop().create_future()
            self._wake = wake
            try:
                await wake
            finally:
                self._wake = None
        return ready.popleft()

    def _woken(self) -> None:
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    async def _read(self, requests: AsyncIterator[_Req], ending: asyncio.Event) -> None:
        reading = asyncio.ensure_future(self._spawn(requests))
        stopping = asyncio.ensure_future(ending.wait())
        # No await in a finally: compiled by mypyc, a coroutine cancelled while awaiting in
        # one left that CancelledError to be raised again in the next call's coroutine.
        try:
            await asyncio.wait({reading, stopping}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            stopping.cancel()
            reading.cancel()  # the call is cancelled: serve() cancels the requests' tasks
            raise
        stopping.cancel()
        if not reading.done():
            reading.cancel()
            await asyncio.wait({reading})
        self._read_all = True
        self._woken()
        if not reading.cancelled():
            reading.result()  # raises what ended the reading, if anything did

    async def _spawn(self, requests: AsyncIterator[_Req]) -> None:
        tasks = self._tasks
        async for request in requests:
            tasks.add(asyncio.ensure_future(self._serve_one(request)))

    async def _serve_one(self, request: _Req) -> None:
        try:
            data = await self._answer(request)
            if data is not None:
                self._ready.append(data)
        finally:
            task = asyncio.current_task()
            if task is not None:
                self._tasks.discard(task)
            self._woken()
