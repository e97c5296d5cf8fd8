"""What PopStream and SendStream share: one bidi call whose requests run concurrently.

The stream's reader task reads requests; each accepted one runs as one task whose coroutine
is the broker's own (`pop` or `send`, no wrapper coroutine), and its done-callback queues the
answer. The handler's coroutine is the stream's only writer, so writes never overlap and an
answer waits in the queue (never dropped) while the client is slow to read. The tasks of a
stream share one contextvars context (nothing in those paths sets a context variable), so a
task does not copy one for itself and again for its callback, and one bound method serves as
every done-callback.

Bounds: `MAX_IN_FLIGHT` requests read and not yet answered (written) per stream; one more is
answered RESOURCE_EXHAUSTED. Rejections are not counted, so a client that sends and never
reads could queue them without end: the reader stops reading while `MAX_IN_FLIGHT` answers
wait to be written and goes on once the client reads.

Ends: the client half-closes -> the requests in flight are answered, then the stream ends
OK. The call ends otherwise (cancelled, deadline, connection lost) -> the handler is cancelled
and cancels its tasks. Server shutdown (`release`) -> reading stops, the requests in flight are
answered, then the stream ends UNAVAILABLE.

Everything runs on the event loop; nothing blocks.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any, ClassVar, Generic, TypeVar

import grpc

from broker_core.errors import PopMQError
from proxy.errors import INTERNAL_MESSAGE

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 1024
"""Requests in flight (read, not yet answered) on one stream; the default held long polls per
(group, topic) is the same number, so one consumer's PopStream is never the tighter bound."""

Observe = Callable[[str, float, Any, str, str], None]
"""Reports one answered request: (status code name, seconds, request, peer, error message)."""

RequestT = TypeVar("RequestT")
"""What one stream request asks for (a PopRequest, a SendMessagesRequest)."""
ResponseT = TypeVar("ResponseT", bound=Any)
"""The stream's response message; it has `request_id` and an `error` (PopStreamError)."""
ResultT = TypeVar("ResultT")
"""What the broker's coroutine returns for one request."""


class StreamSession(Generic[RequestT, ResponseT, ResultT]):
    """One stream call: reads requests, runs them, writes their answers.

    Subclasses say what a request is (`_on_request`, which calls `_start`), how a result
    becomes an answer (`_response`, `_fill`) and, when a stream carries several kinds of
    request, who observes each kind (`_observer`).

    Args:
        context: The call's servicer context.
        observe: Told of every answered request, rejections included (metrics and the log).
    """

    method: ClassVar[str]
    """The RPC's short name, for log lines ("PopStream")."""
    noun: ClassVar[str]
    """What one request is, for messages ("pop")."""
    cancelled_text: ClassVar[str]
    """The error message of a request whose task was cancelled."""
    track_ids: ClassVar[bool] = False
    """Keep request_id -> task, for streams that cancel by id or refuse a repeated id."""

    def __init__(self, context: grpc.aio.ServicerContext, observe: Observe | None = None) -> None:
        self._context = context
        self._observe = observe
        self._peer = context.peer() if observe is not None else ""
        self._loop = asyncio.get_running_loop()
        self._task_context = contextvars.copy_context()
        # One bound method for every task's done-callback, not one per task.
        self._on_done = self._done
        # Running task -> (request_id, start time, request); and request_id -> task when
        # `track_ids`. A request leaves both when its task is done (its answer is then
        # queued). Touched on the loop only.
        self._running: dict[asyncio.Task[ResultT], tuple[int, float, RequestT]] = {}
        self._by_id: dict[int, asyncio.Task[ResultT]] | None = {} if self.track_ids else None
        # Answers waiting for the writer, in the order they became ready, each with whether
        # it answers a counted request (not a rejection); None wakes the writer to end.
        self._answers: asyncio.Queue[tuple[ResponseT, bool] | None] = asyncio.Queue()
        self._unanswered = 0
        """Requests read whose answer is not written yet (what MAX_IN_FLIGHT bounds)."""
        self._room: asyncio.Future[None] | None = None
        """Set while the reader waits for the client to read answers (see module doc)."""
        self._reader: asyncio.Task[None] | None = None
        self._reading_done = False
        self._releasing = False
        self._closed = False
        self._violation = ""
        """Set by `_on_request` to end the stream with INVALID_ARGUMENT."""

    # -- what a subclass defines ------------------------------------------------------------

    def _on_request(self, request: Any) -> bool:
        """Start, cancel or reject one request; False ends the reading (set `_violation`)."""
        raise NotImplementedError

    def _response(self, request_id: int) -> ResponseT:
        raise NotImplementedError

    def _fill(self, response: ResponseT, request: RequestT, result: ResultT) -> None:
        """Put a finished request's result into its answer."""
        raise NotImplementedError

    def _observer(self, request: RequestT) -> Observe | None:
        """Who is told of the answer to `request` (the session's `observe` by default)."""
        return self._observe

    # -- the stream -------------------------------------------------------------------------

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
                self._context.set_details(
                    f"popmq is shutting down: the {self.noun}s in flight on this stream were "
                    "answered; open a new stream (to another server, or retry shortly)"
                )
        finally:
            self._close()

    def release(self) -> None:
        """Stop reading, answer the requests in flight, then end (the server is stopping)."""
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
        # Cancelled means released (or closed, and then nobody writes): the requests in
        # flight are still answered. A violation or a failed read ends the stream now.
        self._reading_done = True
        failed = not reader.cancelled() and reader.exception() is not None
        if failed or self._violation or not self._unanswered:
            self._answers.put_nowait(None)

    def _start(
        self,
        request_id: int,
        request: RequestT,
        began: float,
        coroutine_for: Callable[[], Coroutine[Any, Any, ResultT]],
    ) -> None:
        """Run one request, unless the stream is full or `coroutine_for` refuses it.

        Nothing is awaited between reading a request and creating its task, and tasks start
        in creation order: the requests of a stream start in the order read.
        """
        if self._unanswered >= MAX_IN_FLIGHT:
            self._reject(
                request_id,
                "RESOURCE_EXHAUSTED",
                f"too many {self.noun}s in flight on this stream: at most {MAX_IN_FLIGHT}; "
                "wait for answers or open another stream",
                request,
                began,
            )
            return
        try:
            coroutine = coroutine_for()
        except PopMQError as exc:
            self._reject(request_id, exc.code, str(exc), request, began)
            return
        except Exception:
            # What the unary RPC answers for a bug (proxy/errors.py `rpc`), for this one only.
            log.exception("%s %s failed unexpectedly", self.method, self.noun)
            self._reject(request_id, "INTERNAL", INTERNAL_MESSAGE, request, began)
            return
        task = self._loop.create_task(coroutine, context=self._task_context)
        self._running[task] = (request_id, began, request)
        if self._by_id is not None:
            self._by_id[request_id] = task
        self._unanswered += 1
        task.add_done_callback(self._on_done, context=self._task_context)

    def _done(self, task: asyncio.Task[ResultT]) -> None:
        request_id, began, request = self._running.pop(task)
        if self._by_id is not None:
            del self._by_id[request_id]
        if self._closed:
            return
        response = self._response(request_id)
        if task.cancelled():
            response.error.code = "CANCELLED"
            response.error.message = self.cancelled_text
        elif (exc := task.exception()) is None:
            self._fill(response, request, task.result())
        elif isinstance(exc, PopMQError):
            log.debug(
                "%s %s from %s failed: %s %s",
                self.method, self.noun, self._context.peer(), exc.code, exc,
            )  # fmt: skip
            response.error.code = exc.code
            response.error.message = str(exc)
        else:
            log.error("%s %s failed unexpectedly", self.method, self.noun, exc_info=exc)
            response.error.code = "INTERNAL"
            response.error.message = INTERNAL_MESSAGE
        self._answers.put_nowait((response, True))
        observe = self._observer(request)
        if observe is not None:
            error = response.error
            observe(
                error.code or "OK", time.perf_counter() - began, request, self._peer, error.message
            )

    def _reject(
        self,
        request_id: int,
        code: str,
        message: str,
        request: RequestT | None = None,
        began: float = 0.0,
    ) -> None:
        response = self._response(request_id)
        response.error.code = code
        response.error.message = message
        self._answers.put_nowait((response, False))
        if request is not None and (observe := self._observer(request)) is not None:
            observe(code, time.perf_counter() - began, request, self._peer, message)

    def _close(self) -> None:
        """The call is over: cancel what still runs (their answers would go nowhere)."""
        self._closed = True
        if self._reader is not None:
            self._reader.cancel()
        if self._room is not None and not self._room.done():
            self._room.cancel()
        for task in list(self._running):
            task.cancel()
