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

Flow control: `context.write` returns once grpc took the answer, and blocks only
when the client's HTTP/2 window is full, so a client that does not read leaves answers
queued here. Once `MAX_UNWRITTEN_BYTES` of answers wait (queued or being written), the
stream pauses: its restartable requests (pops) are cancelled where they wait and kept as
requests, and new ones are kept without starting; they start again, in order, once the
writes have brought the waiting bytes down to half. A pop that was ready in the same turn
anyway gives back what it took (as below) and waits with the others.

Admission: a pause comes after the fact, and a wave of pops run in one
event-loop turn (a stream's 1,024 pops released once their auto-created group exists, or
many parked pops woken by a wave of messages) would all take before it. So a pop reserves
bytes before it takes: the stream's budget is `max_unwritten_bytes` for the bytes reserved
by running pops and those of unwritten answers together (and the server's `PoppedBytes`,
proxy/memory.py, for all streams), and a pop is granted up to one whole answer
(`ANSWER_BYTES`) of what is free, which the broker's pop may not pass (`max_bytes`). A
granted pop takes what is there at once; finding nothing it waits for messages as a probe,
granted nothing (`max_bytes` 0), so a parked pop holds no bytes and any number may park.
A probe woken by an arrival reserves its grant at that moment (`_reserve_now`, the broker's
`reserve`) and takes the message in the same step, when the budget has the bytes and no
other pop waits for bytes. Otherwise a probe, or a pop whose next message is larger than its
grant, gets the broker's AnswerBoundError (it took nothing, and says how many bytes it
needs) and waits here, first come first served, until that much is free; new pops meanwhile
start as probes. Taken
bytes count as the answer's size once the pop ends. So what a stream holds never passes
its budget plus rejections' answers, however many pops are woken at once. A pop that
carries acks is never run twice (its acks would be): it waits for a whole answer's worth
and keeps it while it long-polls.

Ends: the client half-closes -> the requests in flight are answered, then the stream ends
OK. The call ends otherwise (cancelled, deadline, connection lost, a write refused) -> the
handler cancels its tasks, gives up its queued answers (a subclass gives back what they
carried: `_abandon`) and drops every reference to them at once, so the memory comes back
without waiting for the garbage collector. A failed write is the client going away, not a
server error: it ends the stream without an ERROR log. Server shutdown (`release`) ->
reading stops, the requests in flight are answered (paused ones UNAVAILABLE), then the stream
ends UNAVAILABLE.

Everything runs on the event loop; nothing blocks.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, ClassVar, Final, Generic, NamedTuple, TypeVar

import grpc

from popmq.broker_core import MAX_RESPONSE_BYTES, AnswerBoundError, PopMQError
from popmq.grpc_calls.errors import INTERNAL_MESSAGE, RefusedRequestError
from popmq.grpc_calls.write_errors import WRITE_FAILED, after_failed_write
from popmq.proxy.memory import PoppedBytes

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 1024
"""Requests in flight (read, not yet answered) on one stream; the default held long polls per
(group, topic) is the same number, so one consumer's PopStream is never the tighter bound."""

MAX_UNWRITTEN_BYTES: Final = 8 * 1024 * 1024
"""Answer bytes one stream may hold unwritten before it pauses its pops, and its budget for
those and the bytes reserved by its running pops together (see the module doc): two of the
largest pop answers (about 4 MiB each), so a client that reads keeps one answer ready while
it reads the other."""

ANSWER_BYTES = MAX_RESPONSE_BYTES
"""The most one pop answer holds (broker_core/budget.py): a pop granted this much is not
bounded further, and may take one message however large."""

Observe = Callable[[str, float, Any, str, str], None]
"""Reports one answered request: (status code name, seconds, request, peer, error message)."""

RequestT = TypeVar("RequestT")
"""What one stream request asks for (a PopRequest, a SendMessagesRequest)."""
ResponseT = TypeVar("ResponseT", bound=Any)
"""The stream's response message; it has `request_id` and an `error` (PopStreamError)."""
ResultT = TypeVar("ResultT")
"""What the broker's coroutine returns for one request."""


CoroutineFor = Callable[[int | None, bool], Coroutine[Any, Any, ResultT]]
"""Makes a request's coroutine, given the bytes reserved for its answer (None: not admitted
by bytes, or a whole answer's worth) and whether it may wait (long-poll) for messages."""


class _Request(NamedTuple, Generic[RequestT, ResultT]):
    """A request read and not yet answered: what `_start` needs to run it (again)."""

    request_id: int
    began: float
    request: RequestT
    coroutine_for: CoroutineFor[ResultT]
    grant: int = 0
    """Bytes reserved for its answer while it runs (admission, module doc)."""
    demand: int = 0
    """Bytes it needs before it may start again: its message did not fit its last grant."""
    probe: bool = False
    """It found nothing at once: it waits for messages as a probe, taking nothing."""


def _changed(
    entry: _Request[RequestT, ResultT], grant: int, demand: int, probe: bool
) -> _Request[RequestT, ResultT]:
    """`entry` with its admission fields set: NamedTuple's `_replace` is interpreted Python
    (a map over the fields and a keyword dict) even when this module is compiled."""
    return _Request(
        entry.request_id, entry.began, entry.request, entry.coroutine_for, grant, demand, probe
    )


class _Answer(NamedTuple, Generic[RequestT, ResponseT]):
    """An answer waiting for the writer."""

    response: ResponseT | bytes
    """The answer, or its bytes already encoded (`StreamSession._encoded`)."""
    counted: bool
    """It answers a counted request (not a rejection)."""
    request: RequestT | None
    size: int
    """Its serialized size, counted in the stream's unwritten bytes."""
    carried: Any = None  # not `object`: a compiled NamedTuple's annotations must resolve here
    """What the answer carries that `_abandon` gives back if it is never written (`_carried`
    of the result: not the result itself, which would double the answer's memory)."""


class StreamSession(Generic[RequestT, ResponseT, ResultT]):
    """One stream call: reads requests, runs them, writes their answers.

    Subclasses say what a request is (`_on_request`, which calls `_start`), how a result
    becomes an answer (`_response`, `_fill`), which requests may be paused (`_restartable`),
    what an answer never written gives back (`_abandon`) and, when a stream carries several
    kinds of request, who observes each kind (`_observer`).

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
    max_unwritten_bytes: int = MAX_UNWRITTEN_BYTES
    """Unwritten answer bytes at which the stream pauses (an attribute, so tests can lower
    it for one session)."""

    def __init__(
        self,
        context: grpc.aio.ServicerContext,
        observe: Observe | None = None,
        popped_bytes: PoppedBytes | None = None,
    ) -> None:
        self._context = context
        self._pool = popped_bytes
        """The server-wide budget the stream's bytes count in too (proxy/memory.py)."""
        self._observe = observe
        self._peer = context.peer() if observe is not None else ""
        self._loop = asyncio.get_running_loop()
        self._task_context = contextvars.copy_context()
        # One bound method for every task's done-callback, not one per task.
        self._on_done = self._done
        # Running task -> its request; and request_id -> task (or the paused request) when
        # `track_ids`. A request leaves both when it is answered (its answer is then
        # queued). Touched on the loop only.
        self._running: dict[asyncio.Task[ResultT], _Request[RequestT, ResultT]] = {}
        self._by_id: dict[int, asyncio.Task[ResultT] | _Request[RequestT, ResultT]] | None = (
            {} if self.track_ids else None
        )
        # Answers waiting for the writer, in the order they became ready; None wakes the
        # writer to end. `_unwritten` counts their bytes and those of the one being written.
        # A deque and one future, set while the writer waits on an empty deque: an
        # asyncio.Queue would do the same with more bookkeeping per answer, and a
        # get_running_loop (a getpid syscall on Python 3.11) each time the writer waits.
        self._answers: deque[_Answer[RequestT, ResponseT] | None] = deque()
        self._answer_ready: asyncio.Future[None] | None = None
        self._unwritten = 0
        self._writing: _Answer[RequestT, ResponseT] | None = None
        # Paused requests, in the order they are to start again; tasks cancelled to pause
        # whose done-callback has not run yet. Both only while `_paused` (or just after).
        self._paused = False
        self._deferred: deque[_Request[RequestT, ResultT]] = deque()
        # Admitted requests that wait for `demand` bytes of the budget, first come first
        # served; and the bytes reserved by the running ones (module doc, "Admission").
        self._waiting: deque[_Request[RequestT, ResultT]] = deque()
        self._reserved = 0
        self._admit_later = self._admit  # one bound method, registered with the pool
        self._pausing: set[asyncio.Task[ResultT]] = set()
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

    def _encoded(self, request_id: int, request: RequestT, result: ResultT) -> bytes | None:
        """A finished request's whole answer already encoded, for results cheaper to write
        as bytes than as a message (the call's serializer passes bytes through); None (the
        default) answers with `_response` filled by `_fill`."""
        return None

    def _observer(self, request: RequestT) -> Observe | None:
        """Who is told of the answer to `request` (the session's `observe` by default)."""
        return self._observe

    def _admitted(self, request: RequestT) -> int | None:
        """Whether `request` takes bytes that count in the stream's budget (a pop): then the
        fewest bytes it may start with (0: it may start as a probe, taking nothing); None
        when it takes nothing (the default)."""
        return None

    def _at_once(self, request: RequestT) -> bool:
        """Whether an admitted `request` granted bytes takes what is there without waiting,
        and waits for more as a probe (see `_again`). False by default."""
        return False

    def _again(self, request: RequestT, result: ResultT, began: float) -> bool:
        """Whether a result of a request run at once is empty and the request still has time
        to wait for messages (then it waits as a probe instead of being answered)."""
        return False

    def _restartable(self, request: RequestT) -> bool:
        """Whether `request` may be cancelled while it waits and started again later: it
        takes nothing until it returns (a pop). None by default."""
        return False

    def _carried(self, request: RequestT, result: ResultT) -> object:
        """What an answer to `request` carries that must be given back if it is never
        written (given to `_abandon`); None (the default) when nothing."""
        return None

    def _abandon(self, request: RequestT, carried: object) -> None:
        """An answer to `request` will never be written (the call ended): give back what it
        carried (`_carried`). Nothing by default."""

    def _give_back(self, request: RequestT, result: ResultT) -> bool:
        """A restartable request's result will not be answered (the stream is paused): give
        back what it took; True when it took something (then it is started again later).
        False by default: the result is answered."""
        return False

    # -- the stream -------------------------------------------------------------------------

    async def serve(self) -> None:
        """Run the stream until the client ends it, the call ends, or the server stops."""
        reader = self._reader = self._loop.create_task(self._read())
        reader.add_done_callback(self._reader_done)
        try:
            while True:
                if not self._answers:
                    ready = self._answer_ready = self._loop.create_future()
                    await ready
                    continue
                answer = self._answers.popleft()
                if answer is None:
                    break
                self._writing = answer
                try:
                    await self._context.write(answer.response)
                except WRITE_FAILED:
                    # The client went away (or grpc refused the answer): the call is over.
                    self._close()
                    await after_failed_write(self.method)
                    return
                self._writing = None
                self._unwritten -= answer.size
                if self._pool is not None:
                    self._pool.let_go(answer.size)
                if answer.counted:
                    self._unanswered -= 1
                answer = None  # not held while the writer waits for the next one
                if self._paused and self._unwritten <= self.max_unwritten_bytes // 2:
                    self._resume()
                elif self._waiting:
                    self._admit()
                if self._room is not None and len(self._answers) < MAX_IN_FLIGHT:
                    self._room.set_result(None)
                    self._room = None
                if self._reading_done and not self._unanswered and not self._answers:
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
        for waiting in (self._waiting, self._deferred):
            while waiting:
                paused = waiting.popleft()
                if self._by_id is not None:
                    del self._by_id[paused.request_id]
                self._reject_paused(paused)

    def _reject_paused(self, paused: _Request[RequestT, ResultT]) -> None:
        self._reject(
            paused.request_id,
            "UNAVAILABLE",
            f"popmq is shutting down: this {self.noun} waited for the client to read earlier "
            "answers and was not started; retry on a new stream",
            paused.request,
            paused.began,
            counted=True,
        )

    async def _read(self) -> None:
        while not self._releasing:
            if len(self._answers) >= MAX_IN_FLIGHT:
                # The client does not read its answers: read no more until it does.
                self._room = self._loop.create_future()
                await self._room
                continue
            try:
                request = await self._context.read()
            except RefusedRequestError as refused:  # the security gate's, for this one only
                error = refused.error
                self._reject(refused.request.request_id, error.code, str(error))
                continue
            if request is grpc.aio.EOF or not self._on_request(request):
                return

    def _reader_done(self, reader: asyncio.Task[None]) -> None:
        # Cancelled means released (or closed, and then nobody writes): the requests in
        # flight are still answered. A violation or a failed read ends the stream now.
        self._reading_done = True
        failed = not reader.cancelled() and reader.exception() is not None
        if failed or self._violation or not self._unanswered:
            self._put_answer(None)

    def _start(
        self,
        request_id: int,
        request: RequestT,
        began: float,
        coroutine_for: CoroutineFor[ResultT],
    ) -> None:
        """Run one request, unless the stream is full or `coroutine_for` refuses it; keep it
        for later while the stream is paused.

        Nothing is awaited between reading a request and creating its task, and tasks start
        in creation order: the requests of a stream start in the order read.
        """
        if not self._count(request_id, request, began):
            return
        entry = _Request(request_id, began, request, coroutine_for)
        if self._paused and self._restartable(request):
            self._deferred.append(entry)
            if self._by_id is not None:
                self._by_id[request_id] = entry
            return
        self._launch(entry)

    def _count(self, request_id: int, request: RequestT, began: float) -> bool:
        """Count a request read as in flight, or answer it RESOURCE_EXHAUSTED when the
        stream has `MAX_IN_FLIGHT` already: whether it was counted."""
        if self._unanswered >= MAX_IN_FLIGHT:
            self._reject(
                request_id,
                "RESOURCE_EXHAUSTED",
                f"too many {self.noun}s in flight on this stream: at most {MAX_IN_FLIGHT}; "
                "wait for answers or open another stream",
                request,
                began,
            )
            return False
        self._unanswered += 1
        return True

    def _grant(self, entry: _Request[RequestT, ResultT]) -> int | None:
        """Bytes to reserve for an admitted request's answer now, or None: it must wait."""
        need = max(self._admitted(entry.request) or 0, entry.demand)
        if entry.probe or (not need and self._waiting):
            return 0  # a probe: the bytes go to those that wait for them, in order
        grant = min(ANSWER_BYTES, max(0, self._free()))
        return grant if grant >= need else None

    def _free(self) -> int:
        """Bytes the stream may still reserve: its own budget's, and the server's."""
        free = self.max_unwritten_bytes - self._reserved - self._unwritten
        return free if self._pool is None else min(free, self._pool.free())

    def _reserve_now(self, needed: int) -> int:
        """A running probe (the current task) found a message of `needed` bytes: reserve
        what `_launch` would start it again with, so it takes the message now; 0 (it refuses
        the message, and waits for the bytes as before) when the budget lacks them, when
        others wait for bytes first, or when the stream is paused or ending."""
        task = asyncio.current_task()
        entry = None if task is None else self._running.get(task)
        if (
            entry is None
            or entry.grant
            or self._waiting
            or self._paused
            or self._closed
            or self._releasing
        ):
            return 0
        grant = min(ANSWER_BYTES, max(0, self._free()))
        if grant < needed:
            return 0
        self._running[task] = _changed(entry, grant, entry.demand, entry.probe)  # type: ignore[index]
        self._reserved += grant
        if self._pool is not None:
            self._pool.hold(grant)
        return grant

    def _wait_for_bytes(self, entry: _Request[RequestT, ResultT]) -> None:
        self._waiting.append(entry)
        if self._by_id is not None:
            self._by_id[entry.request_id] = entry
        if self._pool is not None:
            self._pool.wait(self._admit_later)

    def _launch(self, entry: _Request[RequestT, ResultT]) -> None:
        """Start a counted request's task (or answer it, if `coroutine_for` refuses it), or
        keep it waiting for bytes (admission)."""
        request_id, began, request, coroutine_for, _, _, _ = entry
        bound: int | None = None
        wait = True
        if self._admitted(request) is not None:
            grant = self._grant(entry)
            if grant is None:
                need = max(self._admitted(request) or 0, entry.demand)
                self._wait_for_bytes(_changed(entry, entry.grant, need, entry.probe))
                return
            entry = _changed(entry, grant, 0, False)
            bound = None if grant >= ANSWER_BYTES else grant
            # Granted bytes are never held by a parked pop: it takes what is there at once
            # and, finding nothing, waits again as a probe (`_again`).
            wait = not grant or not self._at_once(request)
        try:
            coroutine = coroutine_for(bound, wait)
        except PopMQError as exc:
            self._reject(request_id, exc.code, str(exc), request, began, counted=True)
            return
        except Exception:
            # What the unary RPC answers for a bug (grpc_calls/errors.py `rpc`), for this one only.
            log.exception("%s %s failed unexpectedly", self.method, self.noun)
            self._reject(request_id, "INTERNAL", INTERNAL_MESSAGE, request, began, counted=True)
            return
        task = self._loop.create_task(coroutine, context=self._task_context)
        self._running[task] = entry
        self._reserved += entry.grant
        if self._pool is not None:
            self._pool.hold(entry.grant)
        if self._by_id is not None:
            self._by_id[request_id] = task
        task.add_done_callback(self._on_done, context=self._task_context)

    def _cancel(self, request_id: int) -> None:
        """The client cancels a restartable request: it is answered CANCELLED (or with its
        result, if that was ready first)."""
        assert self._by_id is not None  # track_ids
        found = self._by_id.get(request_id)
        if found is None:
            return
        if isinstance(found, asyncio.Task):
            if self._restartable(self._running[found].request):
                self._pausing.discard(found)  # answered, not paused, when it ends
                found.cancel()
            return
        # Paused, or waiting for bytes: never started again.
        if found in self._waiting:
            self._waiting.remove(found)
        else:
            self._deferred.remove(found)
        del self._by_id[request_id]
        self._reject(
            request_id, "CANCELLED", self.cancelled_text, found.request, found.began, counted=True
        )

    def _pause(self) -> None:
        """The client does not read its answers: stop what may take more (module doc)."""
        self._paused = True
        for task, entry in self._running.items():
            if self._restartable(entry.request) and task not in self._pausing:
                self._pausing.add(task)
                task.cancel()
        log.debug(
            "%s from %s paused: %d bytes of answers unwritten",
            self.method,
            self._peer,
            self._unwritten,
        )

    def _resume(self) -> None:
        self._paused = False
        self._admit()
        while self._deferred and not self._paused:
            entry = self._deferred.popleft()
            if self._by_id is not None:
                del self._by_id[entry.request_id]
            self._launch(entry)

    def _admit(self) -> None:
        """Start the requests waiting for bytes, in order, while the budget has them."""
        while self._waiting and not (self._paused or self._closed or self._releasing):
            entry = self._waiting[0]
            if min(ANSWER_BYTES, self._free()) < entry.demand:
                return
            self._waiting.popleft()
            if self._by_id is not None:
                del self._by_id[entry.request_id]
            self._launch(entry)
        if not self._waiting and self._pool is not None:
            self._pool.unwait(self._admit_later)

    def _done(self, task: asyncio.Task[ResultT]) -> None:
        entry = self._running.pop(task)
        self._reserved -= entry.grant  # what it took is in its answer's size from now on
        if self._pool is not None:
            self._pool.let_go(entry.grant)
        self._settle(task, entry)
        if self._waiting:
            self._admit()

    def _settle(self, task: asyncio.Task[ResultT], entry: _Request[RequestT, ResultT]) -> None:
        request_id, began, request, _, grant, _, _ = entry
        if self._by_id is not None:
            del self._by_id[request_id]
        if task in self._pausing:
            self._pausing.discard(task)
            if task.cancelled():
                if self._releasing and not self._closed:
                    self._reject_paused(entry)  # nothing starts again at shutdown
                elif not self._closed:
                    self._deferred.append(entry)  # paused where it waited: it took nothing
                    if self._by_id is not None:
                        self._by_id[request_id] = entry
                return
        if self._closed and task.cancelled():
            return  # nobody reads its answer, and it took nothing
        if (
            not self._closed
            and not task.cancelled()
            and isinstance(short := task.exception(), AnswerBoundError)
            and self._restartable(request)
        ):
            # Its message did not fit the bytes it was granted (it took nothing): it waits
            # until the budget has enough, before those that came after it.
            if self._releasing:
                self._reject_paused(entry)
                return
            self._wait_for_bytes(
                _changed(entry, 0, min(ANSWER_BYTES, short.needed_bytes), entry.probe)
            )
            return
        if (
            grant
            and not self._closed
            and not self._releasing
            and not task.cancelled()
            and task.exception() is None
            and self._at_once(request)
            and self._again(request, task.result(), began)
        ):
            # Nothing there at once: it waits for messages as a probe, holding no bytes.
            probe = _changed(entry, 0, entry.demand, True)
            if self._paused:
                self._deferred.append(probe)
                if self._by_id is not None:
                    self._by_id[request_id] = probe
            else:
                self._launch(probe)
            return
        if (
            self._paused
            and not self._closed
            and not self._releasing
            and not task.cancelled()
            and task.exception() is None
            and self._restartable(request)
            and self._give_back(request, task.result())
        ):
            # Ready in the same turn as the answers that paused the stream (a wave of woken
            # pops): what it took is given back, before it becomes an answer, and it waits
            # with the others, so the stream stays near its bound however many were woken.
            self._deferred.append(entry)
            if self._by_id is not None:
                self._by_id[request_id] = entry
            return
        # A result answered as bytes (`_encoded`) builds no response message at all.
        answer: ResponseT | bytes
        result: ResultT | None = None
        code, message = "OK", ""
        if task.cancelled():
            code, message = "CANCELLED", self.cancelled_text
        elif (exc := task.exception()) is None:
            result = task.result()
            encoded = self._encoded(request_id, request, result)
            if encoded is None:
                answer = self._response(request_id)
                self._fill(answer, request, result)
            else:
                answer = encoded
        elif isinstance(exc, PopMQError):
            log.debug(
                "%s %s from %s failed: %s %s",
                self.method, self.noun, self._context.peer(), exc.code, exc,
            )  # fmt: skip
            code, message = exc.code, str(exc)
        else:
            log.error("%s %s failed unexpectedly", self.method, self.noun, exc_info=exc)
            code, message = "INTERNAL", INTERNAL_MESSAGE
        if code != "OK":
            answer = self._response(request_id)
            answer.error.code = code
            answer.error.message = message
        carried = None if result is None else self._carried(request, result)
        result = None  # not held with the answer
        if self._closed:
            if carried is not None:
                self._abandon(request, carried)  # ready after the call ended
            return
        size = len(answer) if isinstance(answer, bytes) else answer.ByteSize()
        self._queue(_Answer(answer, True, request, size, carried))
        observe = self._observer(request)
        if observe is not None:
            observe(code, time.perf_counter() - began, request, self._peer, message)

    def _put_answer(self, answer: _Answer[RequestT, ResponseT] | None) -> None:
        """Hand `answer` (None: end) to the writer, waking it if it waits for one."""
        self._answers.append(answer)
        ready = self._answer_ready
        if ready is not None:
            self._answer_ready = None
            if not ready.done():
                ready.set_result(None)

    def _queue(self, answer: _Answer[RequestT, ResponseT]) -> None:
        if self._closed:
            return  # nobody writes it (and its bytes would never come back to the pool)
        self._put_answer(answer)
        self._unwritten += answer.size
        if self._pool is not None:
            self._pool.hold(answer.size)
        if not self._paused and self._unwritten >= self.max_unwritten_bytes:
            self._pause()

    def _reject(
        self,
        request_id: int,
        code: str,
        message: str,
        request: RequestT | None = None,
        began: float = 0.0,
        *,
        counted: bool = False,
    ) -> None:
        response = self._response(request_id)
        response.error.code = code
        response.error.message = message
        self._queue(_Answer(response, counted, None, response.ByteSize()))
        if request is not None and (observe := self._observer(request)) is not None:
            observe(code, time.perf_counter() - began, request, self._peer, message)

    def _close(self) -> None:
        """The call is over: cancel what still runs (their answers would go nowhere), give
        back what the unwritten answers carried and let go of them now."""
        if self._closed:
            return
        self._closed = True
        if self._reader is not None:
            self._reader.cancel()
        if self._room is not None and not self._room.done():
            self._room.cancel()
        self._room = None
        for task in self._running:
            task.cancel()
        self._pausing.clear()
        self._deferred.clear()
        self._waiting.clear()
        if self._pool is not None:
            self._pool.unwait(self._admit_later)
            self._pool.let_go(self._unwritten)  # the reserved bytes come back as tasks end
        unwritten = [] if self._writing is None else [self._writing]
        self._writing = None
        while self._answers:
            answer = self._answers.popleft()
            if answer is not None:
                unwritten.append(answer)
        self._unwritten = 0
        for answer in unwritten:
            if answer.request is not None and answer.carried is not None:
                self._abandon(answer.request, answer.carried)
