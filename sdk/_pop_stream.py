"""A consumer's receives multiplexed over one ``MessagingService/PopStream`` call.

A held unary Pop costs the server a whole gRPC call (about 20 KB); a pop held on a stream
about 2 KB (docs/pop-stream.md). So a consumer sends its Pops over one bidirectional stream,
opened on the first receive and opened again by the receive after it broke.

Each receive gets a request id, queues its request for the stream's writer task and awaits
its answer, which the stream's reader task hands over by id. A receive behaves as the unary
Pop would:

- a failed pop raises the SDK error of the code the server answered for that request;
- a broken stream fails every receive in flight with the error of the stream's status
  (UNAVAILABLE when the server went away or shut down: ``UnavailableError``), and the next
  receive opens a new stream; a stream that was cancelled locally (the client closed) cancels
  them, as a closed channel cancels unary calls;
- a receive not answered within its timeout raises ``DeadlineExceededError``; a receive that
  times out or is cancelled sends a cancel for its pop. Messages the server popped for it
  anyway are delivered again after their invisible duration.

A stream takes at most ``MAX_IN_FLIGHT`` pops at once (the server's limit); a receive beyond
that uses a unary Pop. Everything runs on the client's event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

import grpc
import grpc.aio

from popmq.v1 import messaging_pb2
from sdk._channel import Connection
from sdk.errors import DeadlineExceededError, error_from_code_name, error_from_status

__all__ = ["MAX_IN_FLIGHT", "PopStream"]

logger = logging.getLogger(__name__)

MAX_IN_FLIGHT = 1024
"""Pops the server accepts in flight on one stream (proxy/pop_stream.py MAX_IN_FLIGHT)."""

_DEADLINE = "Deadline Exceeded"
"""What grpc says when a unary call's deadline passes; a receive on the stream says the same."""
_ENDED = "the PopStream ended with pops in flight; receive again to open a new stream"


class _Call:
    """One open PopStream call: its writer and reader tasks and the pops in flight."""

    def __init__(self, stub: Any, channel: Any) -> None:
        self.channel = channel
        self.call: Any = stub.PopStream()
        # request id -> the future its receive awaits. An entry stays until the server
        # answers (a cancelled receive's too: the server counts it until then) or the call
        # breaks. Touched on the loop only.
        self.pending: dict[int, asyncio.Future[messaging_pb2.PopResponse]] = {}
        # Requests for the writer, in the order they were made.
        self.outbox: asyncio.Queue[messaging_pb2.PopStreamRequest] = asyncio.Queue()
        self.broken = False
        self.writing = False
        """A write is on the wire: the writer finishes it rather than being cancelled."""
        self.writer = asyncio.ensure_future(self._write())
        self.reader = asyncio.ensure_future(self._read())

    def send(self, request: messaging_pb2.PopStreamRequest) -> None:
        self.outbox.put_nowait(request)

    def cancel(self, request_id: int) -> None:
        """Ask the server to cancel a pop still in flight (a receive gave up on it)."""
        if not self.broken and request_id in self.pending:
            self.send(
                messaging_pb2.PopStreamRequest(
                    request_id=request_id, cancel=messaging_pb2.PopStreamCancel()
                )
            )

    async def close(self) -> None:
        """Cancel the call; receives still waiting are cancelled."""
        self.broken = True
        self.call.cancel()
        # The read (and a write on the wire) of a cancelled call end by themselves, once
        # grpc has finished them; a task cancelled amid one would leave grpc an operation
        # to complete on this loop later, maybe after it closed.
        if not self.writing:
            self.writer.cancel()
        await asyncio.gather(self.writer, self.reader, return_exceptions=True)
        self._fail(None)

    async def _write(self) -> None:
        while not self.broken:
            request = await self.outbox.get()
            self.writing = True
            try:
                await self.call.write(request)
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as exc:
                # The call ended; the reader reports how, to every pop in flight.
                logger.debug("PopStream write failed: %s", exc)
                return
            finally:
                self.writing = False

    async def _read(self) -> None:
        try:
            while True:
                answer = await self.call.read()
                if answer is grpc.aio.EOF:
                    self._break(grpc.StatusCode.UNAVAILABLE, _ENDED)
                    return
                future = self.pending.pop(answer.request_id, None)
                if future is None or future.done():
                    continue  # cancelled by its receive
                if answer.WhichOneof("result") == "error":
                    future.set_exception(
                        error_from_code_name(answer.error.code, answer.error.message)
                    )
                else:
                    future.set_result(answer.pop)
        except grpc.aio.AioRpcError as exc:
            details = exc.details()
            self._break(exc.code(), details if isinstance(details, str) else "")
        except Exception as exc:
            # Not a status of the call: a bug here or in grpc. Fail the pops, not hang them.
            logger.exception("PopStream reader failed")
            self._break(grpc.StatusCode.INTERNAL, f"the PopStream reader failed: {exc!r}")
        finally:
            # Cancelled (closed, or the channel closed under the call): cancel the receives.
            self.broken = True
            if not self.writing:
                self.writer.cancel()
            self._fail(None)

    def _break(self, status: grpc.StatusCode, details: str) -> None:
        logger.debug("PopStream broke: %s %s", status.name, details)
        self.broken = True
        self._fail((status, details))

    def _fail(self, status: tuple[grpc.StatusCode, str] | None) -> None:
        """Fail every pop in flight with the call's status (each its own error), or cancel
        them (None)."""
        pending, self.pending = self.pending, {}
        for future in pending.values():
            if future.done():
                continue
            if status is None:
                future.cancel()
            else:
                future.set_exception(error_from_status(*status))


class PopStream:
    """Pops of one client over one PopStream call, opened lazily and again after it broke.

    Args:
        conn: The client's connection (its channel; the stream follows it when it changes).
    """

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._call: _Call | None = None
        self._ids = itertools.count(1)

    async def pop(
        self, request: messaging_pb2.PopRequest, timeout_s: float
    ) -> messaging_pb2.PopResponse | None:
        """Pop on the stream and return the server's answer; None when the stream is full
        (``MAX_IN_FLIGHT`` pops in flight): pop with the unary RPC instead.

        Raises:
            PopMQError: The server's error for this pop, the broken stream's error, or
                ``DeadlineExceededError`` after ``timeout_s``.
        """
        call = self._open()
        if len(call.pending) >= MAX_IN_FLIGHT:
            return None
        request_id = next(self._ids)
        future: asyncio.Future[messaging_pb2.PopResponse] = (
            asyncio.get_running_loop().create_future()
        )
        call.pending[request_id] = future
        call.send(messaging_pb2.PopStreamRequest(request_id=request_id, pop=request))
        try:
            async with asyncio.timeout(timeout_s):
                return await future
        except TimeoutError:
            call.cancel(request_id)
            raise DeadlineExceededError(_DEADLINE) from None
        except asyncio.CancelledError:
            call.cancel(request_id)
            raise

    def _open(self) -> _Call:
        channel = self._conn.channel()
        call = self._call
        if call is None or call.broken or call.channel is not channel:
            # A call of an older channel belongs to a loop that no longer runs (see
            # sdk/_channel.py): it is dropped, not closed.
            call = self._call = _Call(self._conn.messaging(), channel)
        return call

    async def close(self) -> None:
        """Cancel the stream, if one is open; receives still waiting are cancelled."""
        call, self._call = self._call, None
        # A call opened on another (no longer running) loop is dropped, as its channel is.
        if call is not None and call.reader.get_loop() is asyncio.get_running_loop():
            await call.close()
