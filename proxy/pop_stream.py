"""PopStream: the pops of one client multiplexed over one bidirectional gRPC stream.

Why: a unary Pop held by a long poll costs the server a whole gRPC call, about 20 KB of RSS
(grpc core's call arena and grpc.aio's objects for the call), so 10,000 held Pops cost 200 MB
however small the broker's share is. On a stream, a held pop costs about 1.9 KB: the broker's
pop coroutine, parked future and timer (about 1.1 KB), its asyncio task (about 0.4 KB with
asyncio's weak reference to it) and two dict entries here (`python -m bench.held_pops`;
docs/pop-stream.md).

How: the stream's reader task reads requests. Each pop is validated as the Pop RPC does
(`MessagingServicer.start_pop`) and runs as one task whose coroutine is the broker's `pop`
itself (no wrapper coroutine); its done-callback queues the answer. The handler's own
coroutine is the stream's only writer, so writes never overlap and an answer waits in the
queue (never dropped) while the client is slow to read. The pops of a stream share one
contextvars context (nothing in the pop path sets a context variable), so a task does not copy
one for itself and again for its callback, and one bound method as done-callback.

Bounds: `MAX_IN_FLIGHT` pops read and not yet answered (written) per stream; one more is
answered RESOURCE_EXHAUSTED. Answers that are rejections are not counted, so a client that
sends and never reads could queue them without end: the reader stops reading while
`MAX_IN_FLIGHT` answers wait to be written and goes on once the client reads.

Ends: the client half-closes -> the pops in flight are answered, then the stream ends OK.
The call ends otherwise (cancelled, deadline, connection lost) -> the handler is cancelled
and cancels its pops: a message already popped but whose answer was not written stays
invisible until its invisible time passes, then is delivered again (as for a unary Pop whose
caller went away). Server shutdown (`release`, after the broker released its held pops) ->
reading stops, the pops in flight are answered (held ones at once, empty), then the stream
ends UNAVAILABLE.

Everything runs on the event loop; nothing blocks.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

import grpc

from broker_core.errors import PopMQError
from broker_core.types import PoppedMessage
from popmq.v1 import messaging_pb2
from proxy import convert

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 1024
"""Pops in flight (read, not yet answered) on one stream; the default held long polls per
(group, topic) is the same number, so one consumer's stream is never the tighter bound."""

StartPop = Callable[
    [messaging_pb2.PopRequest, float | None], Coroutine[Any, Any, list[PoppedMessage]]
]
"""Validates a PopRequest (raising the broker's error) and returns its pop coroutine."""

_PopTask = asyncio.Task[list[PoppedMessage]]
_STOPPING = (
    "popmq is shutting down: the pops in flight on this stream were answered; open a new "
    "stream (to another server, or retry shortly)"
)
_INTERNAL = "internal error; see the server log"
_Answer = tuple[messaging_pb2.PopStreamResponse, bool]
"""An answer to write, and whether it answers a counted pop (not a rejection)."""
Observe = Callable[[str, float, messaging_pb2.PopRequest, str, str], None]
"""Reports one answered pop: (status code name, seconds, request, peer, error message)."""


class PopStreamSession:
    """One PopStream call: reads pops, runs them, writes their answers.

    Args:
        start_pop: Validates a pop and returns its coroutine (the Pop RPC's own path).
        context: The call's servicer context.
        observe: Told of every answered pop, rejections included (metrics and the RPC log).
    """

    def __init__(
        self,
        start_pop: StartPop,
        context: grpc.aio.ServicerContext,
        observe: Observe | None = None,
    ) -> None:
        self._start_pop = start_pop
        self._context = context
        self._observe = observe
        self._peer = context.peer() if observe is not None else ""
        self._loop = asyncio.get_running_loop()
        self._pop_context = contextvars.copy_context()
        # One bound method for every pop's done-callback, not one per pop.
        self._on_pop_done = self._pop_done
        # request_id -> its running pop, and back (with its start time and request, for
        # `observe`): a pop leaves both when its task is done (its answer is then queued).
        # Touched on the loop only.
        self._running: dict[int, _PopTask] = {}
        self._ids: dict[_PopTask, tuple[int, float, messaging_pb2.PopRequest]] = {}
        # Answers waiting for the writer, in the order they became ready; None wakes the
        # writer to end the stream.
        self._answers: asyncio.Queue[_Answer | None] = asyncio.Queue()
        self._unanswered = 0
        """Pops read whose answer is not written yet (what MAX_IN_FLIGHT bounds)."""
        self._room: asyncio.Future[None] | None = None
        """Set while the reader waits for the client to read answers (see module doc)."""
        self._reader: asyncio.Task[None] | None = None
        self._reading_done = False
        self._releasing = False
        self._closed = False
        self._violation = ""

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
            if self._violation:
                await self._context.abort(grpc.StatusCode.INVALID_ARGUMENT, self._violation)
            failure = None if reader.cancelled() else reader.exception()
            if failure is not None:
                raise failure
            if self._releasing:
                self._context.set_code(grpc.StatusCode.UNAVAILABLE)
                self._context.set_details(_STOPPING)
        finally:
            self._close()

    def release(self) -> None:
        """Stop reading, answer the pops in flight, then end (the server is shutting down).

        Called after the broker released its held pops, so they answer at once (empty).
        """
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
            if request is grpc.aio.EOF or not self._on_request(request):
                return

    def _reader_done(self, reader: asyncio.Task[None]) -> None:
        # Cancelled means released (or closed, and then nobody writes): the pops in flight
        # are still answered. A violation or a failed read ends the stream now.
        self._reading_done = True
        failed = not reader.cancelled() and reader.exception() is not None
        if failed or self._violation or not self._unanswered:
            self._answers.put_nowait(None)

    def _on_request(self, request: messaging_pb2.PopStreamRequest) -> bool:
        """Start, cancel or reject one request; False ends the reading (a violation)."""
        request_id = request.request_id
        action = request.WhichOneof("action")
        if action == "cancel":
            running = self._running.get(request_id)
            if running is not None:
                running.cancel()
            return True
        if action != "pop":
            self._reject(request_id, "INVALID_ARGUMENT", "the request has neither pop nor cancel")
            return True
        began = time.perf_counter()
        if request_id in self._running:
            self._violation = (
                f"request_id {request_id} repeats a pop still in flight on this stream; "
                "ids must be unique among the pops not yet answered"
            )
            return False
        if self._unanswered >= MAX_IN_FLIGHT:
            self._reject(
                request_id,
                "RESOURCE_EXHAUSTED",
                f"too many pops in flight on this stream: at most {MAX_IN_FLIGHT}; wait for "
                "answers or open another stream",
                request.pop,
                began,
            )
            return True
        try:
            pop = self._start_pop(request.pop, self._context.time_remaining())
        except PopMQError as exc:
            self._reject(request_id, exc.code, str(exc), request.pop, began)
            return True
        except Exception:
            # What the Pop RPC answers for a bug (proxy/errors.py `rpc`), for this pop only.
            log.exception("PopStream pop failed unexpectedly")
            self._reject(request_id, "INTERNAL", _INTERNAL, request.pop, began)
            return True
        task = self._loop.create_task(pop, context=self._pop_context)
        self._running[request_id] = task
        self._ids[task] = (request_id, began, request.pop)
        self._unanswered += 1
        task.add_done_callback(self._on_pop_done, context=self._pop_context)
        return True

    def _pop_done(self, task: _PopTask) -> None:
        request_id, began, request = self._ids.pop(task)
        del self._running[request_id]
        if self._closed:
            return
        response = messaging_pb2.PopStreamResponse(request_id=request_id)
        if task.cancelled():
            response.error.code = "CANCELLED"
            response.error.message = "the pop was cancelled by the client"
        elif (exc := task.exception()) is None:
            response.pop.SetInParent()  # set even when no message was popped
            response.pop.messages.extend(convert.received_message(m) for m in task.result())
        elif isinstance(exc, PopMQError):
            log.debug("PopStream pop from %s failed: %s %s", self._context.peer(), exc.code, exc)
            response.error.code = exc.code
            response.error.message = str(exc)
        else:
            log.error("PopStream pop failed unexpectedly", exc_info=exc)
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
        request: messaging_pb2.PopRequest | None = None,
        began: float = 0.0,
    ) -> None:
        response = messaging_pb2.PopStreamResponse(
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
        for task in list(self._running.values()):
            task.cancel()
