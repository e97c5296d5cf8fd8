"""What the SDK's PopStream and SendStream share: requests multiplexed over one stream call.

Each request gets an id, queues for the call's writer task and awaits its answer, which the
call's reader task hands over by id. A request behaves as its unary RPC would:

- the server's error for that request raises the SDK error of its code;
- a broken call fails every request in flight with the error of the call's status
  (UNAVAILABLE when the server went away or shut down: ``UnavailableError``), and the next
  request opens a new call; a call cancelled locally (the client closed) cancels them, as a
  closed channel cancels unary calls;
- closing with nothing in flight half-closes the call and waits (briefly) for the server to
  end it: an answer the client has read may still be on the server's side of a write, and a
  cancelled call tells the server it was never written (PopStream gives its messages back,
  and their receipt handles are superseded);
- a call is opened on a connected endpoint of the client's connection, and a call that
  breaks with an outage status (UNAVAILABLE, DEADLINE_EXCEEDED) tells the connection, which
  moves to its next endpoint (sdk/_channel.py): the next request's call opens there. Whether
  a failed request is repeated is its caller's choice, as for a unary call;
- a request not answered within its timeout raises ``DeadlineExceededError``;
- an answer whose caller stopped waiting (timed out or cancelled) goes to the subclass's
  ``_unclaimed``, which may undo what the request did (PopStream gives popped messages back).

A call takes at most ``MAX_IN_FLIGHT`` requests at once (the server's limit); a request
beyond that gets None and the caller uses the unary RPC. Everything runs on the client's
event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any, ClassVar, Generic, TypeVar

import grpc
import grpc.aio

from popmq.sdk._channel import Connection, Endpoint
from popmq.sdk.errors import DeadlineExceededError, error_from_code_name, error_from_status

logger = logging.getLogger(__name__)

MAX_IN_FLIGHT = 1024
"""Requests the server accepts in flight on one stream (proxy/stream_session.py)."""

_CORE_INTERNAL = "Internal error from Core"
"""What grpc's status says when a write failed because the call had ended under it."""
_DEADLINE = "Deadline Exceeded"
"""What grpc says when a unary call's deadline passes; a request on a stream says the same."""
_END_WAIT_S = 5.0
"""How long ``close`` waits for the server to end a half-closed call before cancelling it
(the server ends it as soon as it has written its last answer)."""
_END = object()
"""The writer's cue to half-close the call."""

AnswerT = TypeVar("AnswerT")
"""What one request is answered with (a PopResponse or AckResponse, a SendMessagesResponse)."""


class _Call(Generic[AnswerT]):
    """One open stream call: its writer and reader tasks and the requests in flight."""

    def __init__(self, stream: MultiplexedStream[Any, AnswerT], endpoint: Endpoint) -> None:
        self.stream = stream
        self.endpoint = endpoint
        # Signed once, as it opens: the server authenticates a stream's headers then.
        self.call: Any = getattr(endpoint.stub("messaging"), stream.method)(
            metadata=stream._conn.call_metadata()
        )
        self.answered = False
        """The server answered a request on this call (its endpoint works)."""
        # request id -> the future its caller awaits (done once the caller gave up) and the
        # request. An entry stays until the server answers (a given-up request's too: the
        # server counts it until then) or the call breaks. Touched on the loop only.
        self.pending: dict[int, tuple[asyncio.Future[AnswerT], Any]] = {}
        # Requests for the writer, in the order they were made.
        self.outbox: asyncio.Queue[Any] = asyncio.Queue()
        self.broken = False
        self.writing = False
        """A write is on the wire: the writer finishes it rather than being cancelled."""
        self.ending = False
        """``close`` half-closed the call: its end is not a failure."""
        self.writer = asyncio.ensure_future(self._write())
        self.reader = asyncio.ensure_future(self._read())

    async def close(self) -> None:
        """End the call; requests still waiting are cancelled.

        With nothing in flight the call is half-closed first, and the server ends it once
        its writes are done: cancelled amid the write of an answer the client already read,
        the server could not tell it was written and would undo it (PopStream gives popped
        messages back). The call is cancelled when it does not end within `_END_WAIT_S`.
        """
        if not self.broken and not self.pending:
            self.ending = True
            self.outbox.put_nowait(_END)
            await asyncio.wait([self.reader], timeout=_END_WAIT_S)
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
                if request is _END:
                    await self.call.done_writing()
                    return
                await self.call.write(request)
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as exc:
                # The call ended; the reader reports how, to every request in flight.
                logger.debug("%s write failed: %s", self.stream.method, exc)
                return
            finally:
                self.writing = False

    async def _read(self) -> None:
        method = self.stream.method
        try:
            while True:
                answer = await self.call.read()
                if answer is grpc.aio.EOF:
                    if not (self.ending and not self.pending):
                        self._break(grpc.StatusCode.UNAVAILABLE, self.stream.ended)
                    return
                if not self.answered:
                    self.answered = True
                    self.stream._conn.answered(self.endpoint)
                entry = self.pending.pop(answer.request_id, None)
                if entry is None:
                    continue
                future, request = entry
                if future.done():  # its caller gave up on it
                    self.stream._unclaimed(request, answer)
                    continue
                kind = answer.WhichOneof("result")
                if kind == "error":
                    future.set_exception(
                        error_from_code_name(answer.error.code, answer.error.message)
                    )
                else:
                    future.set_result(getattr(answer, kind or self.stream.answer_field))
        except grpc.aio.AioRpcError as exc:
            status, details = exc.code(), exc.details()
            details = details if isinstance(details, str) else ""
            if status is grpc.StatusCode.INTERNAL and details == _CORE_INTERNAL:
                # grpc ends a call so when a write failed under it (the server ended the
                # call, or the connection went): the server's own status is lost, and it did
                # not say INTERNAL. As retriable as any call the server ended.
                status = grpc.StatusCode.UNAVAILABLE
                details = f"the {method} call ended as a request was written to it ({details})"
            self._break(status, details)
        except Exception as exc:
            # Not a status of the call: a bug here or in grpc. Fail the requests, not hang them.
            logger.exception("%s reader failed", method)
            self._break(grpc.StatusCode.INTERNAL, f"the {method} reader failed: {exc!r}")
        finally:
            # Cancelled (closed, or the channel closed under the call): cancel the requests.
            self.broken = True
            if not self.writing:
                self.writer.cancel()
            self._fail(None)

    def _break(self, status: grpc.StatusCode, details: str) -> None:
        logger.debug("%s broke: %s %s", self.stream.method, status.name, details)
        self.broken = True
        self.stream._conn.failed(self.endpoint, status, details)
        self._fail((status, details))

    def _fail(self, status: tuple[grpc.StatusCode, str] | None) -> None:
        """Fail every request in flight with the call's status (each its own error), or
        cancel them (None)."""
        pending, self.pending = self.pending, {}
        for future, _ in pending.values():
            if future.done():
                continue
            if status is None:
                future.cancel()
            else:
                future.set_exception(error_from_status(*status))


RequestT = TypeVar("RequestT")
"""What one request asks for (a PopRequest, a SendMessagesRequest)."""


class MultiplexedStream(Generic[RequestT, AnswerT]):
    """Requests of one client over one stream call, opened lazily and again after it broke.

    A subclass names the RPC and wraps a request in the stream's request message.

    Args:
        conn: The client's connection (its channel; the stream follows it when it changes).
    """

    method: ClassVar[str]
    """The stream RPC's name on the stub ("PopStream")."""
    answer_field: ClassVar[str]
    """The field of a stream answer that holds the unary answer when the answer sets none of
    its ``result`` oneof ("pop"); otherwise the oneof's field is the answer."""
    ended: ClassVar[str]
    """The error text when the server ends the call with requests in flight."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._call: _Call[AnswerT] | None = None
        self._ids = itertools.count(1)

    def _wrap(self, request_id: int, request: RequestT) -> Any:
        """The stream request carrying `request`."""
        raise NotImplementedError

    def _give_up(self, request_id: int) -> Any | None:
        """What to tell the server when a caller stops waiting (None: nothing)."""
        return None

    def _unclaimed(self, request: RequestT, answer: Any) -> None:
        """The server answered ``request`` (``answer`` is the stream's message, maybe an
        error) after its caller stopped waiting, or the caller was cancelled as the answer
        came (``answer`` is then the unary answer)."""

    async def _request(self, request: RequestT, timeout_s: float) -> AnswerT | None:
        """Send `request` on the stream and return its answer; None when the stream is full.

        Raises:
            PopMQError: The server's error for this request, the broken stream's error, or
                ``DeadlineExceededError`` after ``timeout_s``.
            NoEndpointError: No endpoint of the connection could be connected to open a call.
        """
        loop = asyncio.get_running_loop()
        call = self._call
        if call is None or call.broken or call.reader.get_loop() is not loop:
            call = await self._open(timeout_s)
        if len(call.pending) >= MAX_IN_FLIGHT:
            return None
        request_id = next(self._ids)
        future: asyncio.Future[AnswerT] = loop.create_future()
        call.pending[request_id] = (future, request)
        call.outbox.put_nowait(self._wrap(request_id, request))
        try:
            async with asyncio.timeout(timeout_s):
                return await future
        except TimeoutError:
            self._stop_waiting(call, request_id, request, future)
            raise DeadlineExceededError(_DEADLINE) from None
        except asyncio.CancelledError:
            self._stop_waiting(call, request_id, request, future)
            raise

    def _stop_waiting(
        self, call: _Call[AnswerT], request_id: int, request: RequestT, future: asyncio.Future[Any]
    ) -> None:
        if future.done() and not future.cancelled() and future.exception() is None:
            # Answered, but the caller was cancelled (or timed out) before it could take it.
            self._unclaimed(request, future.result())
            return
        if not call.broken and request_id in call.pending:
            give_up = self._give_up(request_id)
            if give_up is not None:
                call.outbox.put_nowait(give_up)

    async def _open(self, timeout_s: float) -> _Call[AnswerT]:
        """A new call on a connected endpoint, unless another request opened one meanwhile."""
        endpoint = await self._conn.connected(timeout_s)
        loop = asyncio.get_running_loop()
        call = self._call
        if call is None or call.broken or call.reader.get_loop() is not loop:
            # A call of another loop belongs to a loop that no longer runs (see
            # sdk/_channel.py): it is dropped, not closed.
            call = self._call = _Call(self, endpoint)
        return call

    async def close(self) -> None:
        """Cancel the stream, if one is open; requests still waiting are cancelled."""
        call, self._call = self._call, None
        # A call opened on another (no longer running) loop is dropped, as its channel is.
        if call is not None and call.reader.get_loop() is asyncio.get_running_loop():
            await call.close()
