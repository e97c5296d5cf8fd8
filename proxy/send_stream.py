"""SendStream: the sends of one producer multiplexed over one bidirectional gRPC stream.

Why: a unary call costs the server about 1,100 us of CPU (430 us at 8 concurrent callers)
and the client about 630 us, more than storing a small message; a message on an open stream
costs about a third of that. A producer that sends one message at a time pays it per send
(docs/pop-stream.md, "SendStream").

How: the stream's reader task reads requests. Each send is converted and validated as the
SendMessages RPC does (`MessagingServicer.start_send`) and runs as one task whose coroutine
is the broker's `send` itself; its done-callback queues the answer. The handler's own
coroutine is the stream's only writer, so writes never overlap and an answer waits in the
queue while the client is slow to read (the same shape as proxy/pop_stream.py).

Order: nothing is awaited between reading a request and creating its task, and tasks start
in creation order, so the sends of a stream start in the order read. `Broker.send` reaches
the group-commit writer without suspending when its topics exist, so its write job is queued
in that order too: of two sends of one stream, the later one's messages get the higher
offsets in each queue they share. (A send that auto-creates its topic suspends first and may
be overtaken.)

Bounds: `MAX_IN_FLIGHT` sends read and not yet answered per stream; one more is answered
RESOURCE_EXHAUSTED and not stored. The reader stops reading while `MAX_IN_FLIGHT` answers
wait to be written and goes on once the client reads.

Ends: the client half-closes -> the sends in flight are answered, then the stream ends OK.
The call ends otherwise (cancelled, deadline, connection lost) -> the handler is cancelled
and cancels its sends, as grpc cancels a unary send whose caller went away: each may or may
not be stored (a retry with the same message ids is deduplicated). Server shutdown
(`release`) -> reading stops, the sends in flight are answered (the store is still open
during the grace period), then the stream ends UNAVAILABLE.

Everything runs on the event loop; nothing blocks.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import grpc

from broker_core.errors import PopMQError
from broker_core.types import SendResult
from popmq.v1 import messaging_pb2
from proxy import convert

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 1024
"""Sends in flight (read, not yet answered) on one stream, as for a PopStream's pops."""

StartSend = Callable[[messaging_pb2.SendMessagesRequest], Coroutine[Any, Any, list[SendResult]]]
"""Converts a SendMessagesRequest (raising the broker's error) and returns its send
coroutine."""
Observe = Callable[[str, float, messaging_pb2.SendMessagesRequest, str, str], None]
"""Reports one answered send: (status code name, seconds, request, peer, error message)."""

_SendTask = asyncio.Task[list[SendResult]]
_STOPPING = (
    "popmq is shutting down: the sends in flight on this stream were answered; open a new "
    "stream (to another server, or retry shortly)"
)
_INTERNAL = "internal error; see the server log"
_Answer = tuple[messaging_pb2.SendStreamResponse, bool]
"""An answer to write, and whether it answers a counted send (not a rejection)."""


def send_response(results: Sequence[SendResult]) -> messaging_pb2.SendMessagesResponse:
    """The SendMessages answer for the broker's results (unary and stream alike)."""
    return messaging_pb2.SendMessagesResponse(results=[convert.send_result(r) for r in results])


class SendStreamSession:
    """One SendStream call: reads sends, starts them in order, writes their answers.

    Args:
        start_send: Converts a send and returns its coroutine (the SendMessages RPC's path).
        context: The call's servicer context.
        observe: Told of every answered send, rejections included (metrics and the RPC log).
    """

    def __init__(
        self,
        start_send: StartSend,
        context: grpc.aio.ServicerContext,
        observe: Observe | None = None,
    ) -> None:
        self._start_send = start_send
        self._context = context
        self._observe = observe
        self._peer = context.peer() if observe is not None else ""
        self._loop = asyncio.get_running_loop()
        # Nothing in the send path sets a context variable: one context for all its tasks.
        self._send_context = contextvars.copy_context()
        self._on_send_done = self._send_done
        # Running send -> (request_id, start time, request); a send leaves when its task is
        # done (its answer is then queued). Touched on the loop only.
        self._running: dict[_SendTask, tuple[int, float, messaging_pb2.SendMessagesRequest]] = {}
        # Answers waiting for the writer, in the order they became ready; None wakes the
        # writer to end the stream.
        self._answers: asyncio.Queue[_Answer | None] = asyncio.Queue()
        self._unanswered = 0
        """Sends read whose answer is not written yet (what MAX_IN_FLIGHT bounds)."""
        self._room: asyncio.Future[None] | None = None
        """Set while the reader waits for the client to read answers."""
        self._reader: asyncio.Task[None] | None = None
        self._reading_done = False
        self._releasing = False
        self._closed = False

    async def serve(self) -> None:
        """Run the stream until the client ends it, the call ends, or the server stops."""
        reader = self._reader = self._loop.create_task(self._read())
        reader.add_done_callback(self._reader_done)
        try:
            while True:
                answer = await self._answers.get()
                if answer is None:
                    break
                response, counted = answer
                await self._context.write(response)
                if counted:
                    self._unanswered -= 1
                if self._room is not None and self._answers.qsize() < MAX_IN_FLIGHT:
                    self._room.set_result(None)
                    self._room = None
                if self._reading_done and not self._unanswered and self._answers.empty():
                    break
            failure = None if reader.cancelled() else reader.exception()
            if failure is not None:
                raise failure
            if self._releasing:
                self._context.set_code(grpc.StatusCode.UNAVAILABLE)
                self._context.set_details(_STOPPING)
        finally:
            self._close()

    def release(self) -> None:
        """Stop reading, answer the sends in flight, then end (the server is shutting down)."""
        self._releasing = True
        if self._reader is not None:
            self._reader.cancel()

    async def _read(self) -> None:
        while not self._releasing:
            if self._answers.qsize() >= MAX_IN_FLIGHT:
                # The client does not read its answers: read no more until it does.
                self._room = self._loop.create_future()
                await self._room
                continue
            request = await self._context.read()
            if request is grpc.aio.EOF:
                return
            # No await from here to the send's task: sends start in the order read.
            self._on_request(request)

    def _reader_done(self, reader: asyncio.Task[None]) -> None:
        # Cancelled means released (or closed, and then nobody writes): the sends in flight
        # are still answered. A failed read ends the stream now.
        self._reading_done = True
        failed = not reader.cancelled() and reader.exception() is not None
        if failed or not self._unanswered:
            self._answers.put_nowait(None)

    def _on_request(self, request: messaging_pb2.SendStreamRequest) -> None:
        """Start or reject one send."""
        began = time.perf_counter()
        send = request.send
        if not request.HasField("send"):
            self._reject(request.request_id, "INVALID_ARGUMENT", "the request has no send")
            return
        if self._unanswered >= MAX_IN_FLIGHT:
            self._reject(
                request.request_id,
                "RESOURCE_EXHAUSTED",
                f"too many sends in flight on this stream: at most {MAX_IN_FLIGHT}; wait for "
                "answers or open another stream",
                send,
                began,
            )
            return
        try:
            coroutine = self._start_send(send)
        except PopMQError as exc:
            self._reject(request.request_id, exc.code, str(exc), send, began)
            return
        except Exception:
            # What SendMessages answers for a bug (proxy/errors.py `rpc`), for this send only.
            log.exception("SendStream send failed unexpectedly")
            self._reject(request.request_id, "INTERNAL", _INTERNAL, send, began)
            return
        task = self._loop.create_task(coroutine, context=self._send_context)
        self._running[task] = (request.request_id, began, send)
        self._unanswered += 1
        task.add_done_callback(self._on_send_done, context=self._send_context)

    def _send_done(self, task: _SendTask) -> None:
        request_id, began, request = self._running.pop(task)
        if self._closed:
            return
        response = messaging_pb2.SendStreamResponse(request_id=request_id)
        if task.cancelled():
            response.error.code = "CANCELLED"
            response.error.message = "the send was cancelled"
        elif (exc := task.exception()) is None:
            response.send.SetInParent()
            response.send.results.extend(convert.send_result(r) for r in task.result())
        elif isinstance(exc, PopMQError):
            log.debug("SendStream send from %s failed: %s %s", self._context.peer(), exc.code, exc)
            response.error.code = exc.code
            response.error.message = str(exc)
        else:
            log.error("SendStream send failed unexpectedly", exc_info=exc)
            response.error.code = "INTERNAL"
            response.error.message = _INTERNAL
        self._answers.put_nowait((response, True))
        if self._observe is not None:
            error = response.error
            self._observe(
                error.code or "OK", time.perf_counter() - began, request, self._peer, error.message
            )

    def _reject(
        self,
        request_id: int,
        code: str,
        message: str,
        request: messaging_pb2.SendMessagesRequest | None = None,
        began: float = 0.0,
    ) -> None:
        response = messaging_pb2.SendStreamResponse(
            request_id=request_id, error=messaging_pb2.PopStreamError(code=code, message=message)
        )
        self._answers.put_nowait((response, False))
        if self._observe is not None and request is not None:
            self._observe(code, time.perf_counter() - began, request, self._peer, message)

    def _close(self) -> None:
        """The call is over: cancel what still runs (their answers would go nowhere)."""
        self._closed = True
        if self._reader is not None:
            self._reader.cancel()
        if self._room is not None and not self._room.done():
            self._room.cancel()
        for task in list(self._running):
            task.cancel()
