"""`HopFrameStream`: a proxy's requests to one broker on one of its hop streams (HopStream:
pops without a wait and acks; HopSend: sends and half sends), those made while a frame is on
its way going together as the next frame.

Each request on its own was a stream message each way, and the stream's per-message price (a
gRPC write and read, a task on each side) was most of what a request cost the proxy and the
broker: at batch 1 for sends, and for pops and acks of 32 from several consumers. Here, as
group commit does for fsyncs, one frame is in flight to the broker at a time: a request made
while none is goes out at once (an idle proxy adds no wait); requests made while one is
written or awaited wait for it and go together in the next (HopSendRequest.frame,
HopStreamRequest.frame; send_wire.frame_wire). The broker serves each request of a frame on
its own, as if it had come alone, and answers them in one frame; each caller gets its own
request's answer, results or error: one refused request fails no other.

Only a broker whose stream headers carry send_wire.FRAMES_HEADER is sent frames; to one
without it each request is written as it comes, as before (cluster/hop_stream.py), and a
broker without the stream at all is asked by unary calls (RemoteBroker). HopSend's broker
sends its headers at once and nothing is written before them (`handshake`); HopStream's of
the first release sends them only with its first answer, so pops and acks are written on
their own until the headers have come.

A request taken into a frame counts as sent from then on (its timeout or a broken stream says
it may have been done: a send may be stored, send_outcome.py; an ack may have been done; a
pop's deliveries come back after their invisible time); one still waiting for a frame when
its caller times out or is cancelled was never written, is dropped, and says not sent.

Runs on the proxy's event loop only; nothing here blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, Final

import grpc

from popmq._gen.popmq.broker.v1 import broker_pb2 as pb
from popmq.broker import send_wire
from popmq.broker.hop_wire import HOP_ERROR, hop_answer
from popmq.broker.wire import error_from_detail
from popmq.broker_core import PopMQError
from popmq.cluster.hop_stream import METHOD, HopStream
from popmq.cluster.send_outcome import BrokerUnansweredError

__all__ = ["FRAME_BYTES", "HopFrameStream"]

log = logging.getLogger(__name__)

FRAME_BYTES: Final = 4 * 1024 * 1024
"""The most request bytes a frame takes (a larger request goes in a frame of its own): well
under the channel's message limit, and a frame is served and answered whole."""


class HopFrameStream(HopStream):
    """Requests to one broker over one hop stream call, in frames (module docstring);
    arguments and `request` as HopStream's."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        *,
        shown: str,
        timeout_s: float,
        metadata: Callable[[], tuple[tuple[str, str], ...] | None],
        error: Callable[[grpc.aio.AioRpcError], PopMQError],
        method: str = METHOD,
        carries: str = "pops and acks",
        handshake: bool = False,
    ) -> None:
        super().__init__(
            channel,
            shown=shown,
            timeout_s=timeout_s,
            metadata=metadata,
            error=error,
            method=method,
            carries=carries,
            handshake=handshake,
        )
        # Request id -> its request's bytes: requests made and not yet written, in the order
        # they were made (the next frame). Their futures are in _pending.
        self._waiting: dict[int, bytes] = {}
        # The task writing the waiting requests; None while none wait.
        self._sender: asyncio.Task[None] | None = None
        # The call whose broker said it answers frames.
        self._frames: Any = None
        # Request id -> its deadline (loop time): the requests made here and not yet done,
        # oldest first. One timeout for all, so the first is always the next to expire:
        # one timer (`_expire`) serves them all, instead of one armed and cancelled per
        # request.
        self._deadlines: dict[int, float] = {}
        # The timer armed for the oldest deadline; None while no request is timed.
        self._timer: asyncio.TimerHandle | None = None

    async def request(self, field: int, payload: bytes) -> tuple[int, bytes]:
        call = self._call if self._call is not None else self._open()
        if self._frames is not call and (self._accepted is call or not self._handshake):
            # A broker without frames, or (without `handshake`) one whose headers have not
            # come yet: each request is written as it comes.
            return await super().request(field, payload)
        request_id = next(self._ids)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[int, bytes]] = loop.create_future()
        self._pending[request_id] = future
        self._waiting[request_id] = hop_answer(request_id, field, payload)
        deadline = self._deadlines[request_id] = loop.time() + self._timeout
        if self._timer is None:
            self._timer = loop.call_at(deadline, self._expire, loop)
        if self._sender is None:
            self._sender = loop.create_task(self._send())
        try:
            field, payload = await future
        except _ExpiredError:
            raise BrokerUnansweredError(
                f"broker {self._shown} did not answer within {self._timeout:g}s; retry later",
                request_sent=request_id not in self._waiting,
            ) from None
        finally:
            self._pending.pop(request_id, None)
            self._waiting.pop(request_id, None)
            self._deadlines.pop(request_id, None)
        if field == HOP_ERROR:
            raise error_from_detail(pb.ErrorDetail.FromString(payload))
        return field, payload

    async def _send(self) -> None:
        """Write the waiting requests until none wait: a frame at a time to a broker that
        answers frames, each on its own to one that does not."""
        try:
            while self._waiting:
                call = self._call if self._call is not None else self._open()
                reader = self._reader
                try:
                    if self._handshake and self._accepted is not call:
                        # Nothing is written before the broker accepts the call (HopStream).
                        self._headers(call, await call.initial_metadata())
                    framed = self._frames is call
                    taken = self._take(framed)
                    if not taken:
                        continue
                    async with self._write_lock:
                        if framed and len(taken) > 1:
                            frame = [data for _, data in taken]
                            await call.write(
                                send_wire.frame_wire(send_wire.REQUEST_FRAME_KEY, frame)
                            )
                        else:
                            for _, data in taken:
                                await call.write(data)
                except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                    # The call has ended: its reader fails what is in flight with the call's
                    # status (as HopStream.request), and the next round opens a new call.
                    if reader is not None:
                        await asyncio.wait({reader})
                    continue
                if framed:
                    # One frame in flight: what comes meanwhile waits to go in the next.
                    await _all_done([future for future, _ in taken])
        finally:
            self._sender = None

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        """Fail the requests whose deadline has passed (each says whether it was written),
        and arm the timer for the oldest left."""
        self._timer = None
        now = loop.time()
        deadlines = self._deadlines
        while deadlines:
            request_id, deadline = next(iter(deadlines.items()))
            if deadline > now:
                self._timer = loop.call_at(deadline, self._expire, loop)
                return
            del deadlines[request_id]
            future = self._pending.get(request_id)
            if future is not None and not future.done():
                future.set_exception(_ExpiredError())

    async def _read(self, call: Any) -> None:
        if not self._handshake:
            # The headers come with the broker's first answer, or at once from a broker that
            # answers frames; until then requests go on their own (`request`).
            try:
                self._headers(call, await call.initial_metadata())
            except grpc.aio.AioRpcError:
                pass  # the call has ended: reading it below says how
            except asyncio.CancelledError:
                self._ended(call, None)
                raise
        await super()._read(call)

    def _headers(self, call: Any, headers: Any) -> None:
        """The broker sent `headers` on `call`: it has accepted it, and they say whether it
        answers frames."""
        self._accepted = call
        if headers is not None and headers.get(send_wire.FRAMES_HEADER) == "1":
            self._frames = call

    def _take(self, framed: bool) -> list[tuple[asyncio.Future[tuple[int, bytes]], bytes]]:
        """The waiting requests to write now (each with its answer's future), taken out of
        the waiting ones: to a broker that answers frames, those that fit in one."""
        taken: list[tuple[asyncio.Future[tuple[int, bytes]], bytes]] = []
        size = 0
        for request_id, data in list(self._waiting.items()):
            future = self._pending.get(request_id)
            if future is None or future.done():
                # Failed with its call (never written: it may not be now) or given up.
                del self._waiting[request_id]
                continue
            if framed and taken and size + len(data) > FRAME_BYTES:
                break
            del self._waiting[request_id]
            taken.append((future, data))
            size += len(data)
        return taken

    def _answered(self, data: bytes) -> None:
        parts = send_wire.frame_from_wire(send_wire.ANSWER_FRAME_KEY, data)
        if parts is None:
            super()._answered(data)
            return
        for part in parts:
            super()._answered(part)

    async def close(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        sender, self._sender = self._sender, None
        if sender is not None:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender
        # Requests waiting for a frame fail with those in flight (HopStream.close).
        await super().close()
        self._waiting.clear()


class _ExpiredError(Exception):
    """A request's deadline passed before its answer came (HopFrameStream._expire)."""


async def _all_done(futures: list[asyncio.Future[tuple[int, bytes]]]) -> None:
    """Return once every one of `futures` is done (answered, failed or given up): what
    `asyncio.wait` does, without its checks and sets, once per frame."""
    left = [future for future in futures if not future.done()]
    if not left:
        return
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    count = len(left)

    def one_done(_: asyncio.Future[tuple[int, bytes]]) -> None:
        nonlocal count
        count -= 1
        if not count and not done.done():
            done.set_result(None)

    for future in left:
        future.add_done_callback(one_done)
    await done
