"""A producer's sends multiplexed over one ``MessagingService/SendStream`` call.

A unary call costs the server and the client more CPU than storing a small message; a
message on an open stream about a third of that (docs/pop-stream.md, "SendStream"). So a
producer sends over one bidirectional stream, opened on the first send and opened again by
the send after it broke.

Each send gets a request id, queues its request for the stream's writer task and awaits its
answer, which the stream's reader task hands over by id. A send behaves as the unary
SendMessages would, so the producer's retry policy treats both alike:

- a refused send raises the SDK error of the code the server answered for that request;
- a broken stream fails every send in flight with the error of the stream's status
  (UNAVAILABLE when the server went away or shut down: ``UnavailableError``, retriable), and
  the next send opens a new stream. Such a send may have been stored: its retry carries the
  same message ids, and the server's dedup window answers the repeat with the first result;
- a send not answered within its timeout raises ``DeadlineExceededError`` (retriable, as a
  unary deadline is); its answer, if it comes, is dropped.

The server starts a stream's sends in the order it reads them, which is the order ``send``
was called. A stream takes at most ``MAX_IN_FLIGHT`` sends at once (the server's limit); a
send beyond that returns None and the producer uses a unary call. Everything runs on the
client's event loop.
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

__all__ = ["MAX_IN_FLIGHT", "SendStream"]

logger = logging.getLogger(__name__)

MAX_IN_FLIGHT = 1024
"""Sends the server accepts in flight on one stream (proxy/send_stream.py MAX_IN_FLIGHT)."""

_DEADLINE = "Deadline Exceeded"
"""What grpc says when a unary call's deadline passes; a send on the stream says the same."""
_ENDED = "the SendStream ended with sends in flight; send again to open a new stream"


class _Call:
    """One open SendStream call: its writer and reader tasks and the sends in flight."""

    def __init__(self, stub: Any, channel: Any) -> None:
        self.channel = channel
        self.call: Any = stub.SendStream()
        # request id -> the future its send awaits. An entry stays until the server answers
        # (a timed-out send's too: the server counts it until then) or the call breaks.
        # Touched on the loop only.
        self.pending: dict[int, asyncio.Future[messaging_pb2.SendMessagesResponse]] = {}
        # Requests for the writer, in the order the sends were made.
        self.outbox: asyncio.Queue[messaging_pb2.SendStreamRequest] = asyncio.Queue()
        self.broken = False
        self.writing = False
        """A write is on the wire: the writer finishes it rather than being cancelled."""
        self.writer = asyncio.ensure_future(self._write())
        self.reader = asyncio.ensure_future(self._read())

    async def close(self) -> None:
        """Cancel the call; sends still waiting are cancelled."""
        self.broken = True
        self.call.cancel()
        # A task cancelled amid a grpc read or write would leave grpc an operation to
        # complete on this loop later, maybe after it closed: let them end by themselves.
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
                # The call ended; the reader reports how, to every send in flight.
                logger.debug("SendStream write failed: %s", exc)
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
                    continue  # its send timed out or was cancelled
                if answer.WhichOneof("result") == "error":
                    future.set_exception(
                        error_from_code_name(answer.error.code, answer.error.message)
                    )
                else:
                    future.set_result(answer.send)
        except grpc.aio.AioRpcError as exc:
            details = exc.details()
            self._break(exc.code(), details if isinstance(details, str) else "")
        except Exception as exc:
            # Not a status of the call: a bug here or in grpc. Fail the sends, not hang them.
            logger.exception("SendStream reader failed")
            self._break(grpc.StatusCode.INTERNAL, f"the SendStream reader failed: {exc!r}")
        finally:
            # Cancelled (closed, or the channel closed under the call): cancel the sends.
            self.broken = True
            if not self.writing:
                self.writer.cancel()
            self._fail(None)

    def _break(self, status: grpc.StatusCode, details: str) -> None:
        logger.debug("SendStream broke: %s %s", status.name, details)
        self.broken = True
        self._fail((status, details))

    def _fail(self, status: tuple[grpc.StatusCode, str] | None) -> None:
        """Fail every send in flight with the call's status, or cancel them (None)."""
        pending, self.pending = self.pending, {}
        for future in pending.values():
            if future.done():
                continue
            if status is None:
                future.cancel()
            else:
                future.set_exception(error_from_status(*status))


class SendStream:
    """Sends of one producer over one SendStream call, opened lazily and again after it broke.

    Args:
        conn: The producer's connection (its channel; the stream follows it when it changes).
    """

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._call: _Call | None = None
        self._ids = itertools.count(1)

    async def send(
        self, request: messaging_pb2.SendMessagesRequest, timeout_s: float
    ) -> messaging_pb2.SendMessagesResponse | None:
        """Send on the stream and return the server's answer; None when the stream is full
        (``MAX_IN_FLIGHT`` sends in flight): send with the unary RPC instead.

        Raises:
            PopMQError: The server's error for this send, the broken stream's error, or
                ``DeadlineExceededError`` after ``timeout_s``.
        """
        call = self._open()
        if len(call.pending) >= MAX_IN_FLIGHT:
            return None
        request_id = next(self._ids)
        future: asyncio.Future[messaging_pb2.SendMessagesResponse] = (
            asyncio.get_running_loop().create_future()
        )
        call.pending[request_id] = future
        call.outbox.put_nowait(messaging_pb2.SendStreamRequest(request_id=request_id, send=request))
        try:
            async with asyncio.timeout(timeout_s):
                return await future
        except TimeoutError:
            raise DeadlineExceededError(_DEADLINE) from None

    def _open(self) -> _Call:
        channel = self._conn.channel()
        call = self._call
        if call is None or call.broken or call.channel is not channel:
            # A call of an older channel belongs to a loop that no longer runs (see
            # sdk/_channel.py): it is dropped, not closed.
            call = self._call = _Call(self._conn.messaging(), channel)
        return call

    async def close(self) -> None:
        """Cancel the stream, if one is open; sends still waiting are cancelled."""
        call, self._call = self._call, None
        # A call opened on another (no longer running) loop is dropped, as its channel is.
        if call is not None and call.reader.get_loop() is asyncio.get_running_loop():
            await call.close()
