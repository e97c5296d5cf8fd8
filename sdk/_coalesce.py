"""Send coalescing: single-message sends that meet a busy producer share the next RPC.

A producer keeps at most ``max_rpcs`` single-message send RPCs on the wire (1 by default).
A send that arrives while they are all busy waits, and when one returns, everything that
waited goes out as one SendMessages request. With an idle producer nothing waits, so a lone
send costs what it always did; under load the batch grows with the round-trip time, which
is what keeps the server's per-RPC cost (the largest part of a small send's cost, on the
server and in the client alike) from capping the message rate. Kafka's producer
(linger.ms=0 with batching) and Pub/Sub's publisher behave the same way.

The waiting sends leave on the event loop's next turn after an RPC returns, not at once,
and sends made until then join them: the callers of that RPC are woken first, so the next
send each of them makes joins the same request. Without that turn, N coroutines sending in
a loop split into alternating requests of 1 and N - 1 messages instead of requests of N
(twice the RPCs). A lone sender finds nothing waiting and nothing queued, and sends at once.

What each caller sees is unchanged: its own receipt, its own message id, its own error.

- A request is atomic on the server, so one bad message would fail the others sharing it.
  When a shared request fails with an error that can come from a single message
  (INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION), each message is sent again on its
  own and gets its own outcome. Other failures (after the retry policy gave up) reach
  every caller: they concern the server, not a message.
- Retries repeat the same message ids, so the server's dedup window stores each once.
- Messages keep the producer's call order: a later send never overtakes an earlier one
  that waited, which matters for FIFO message groups.
- A request being retried (its first attempt failed: a cluster proxy may hold its repeat
  until a cut-off broker is back, up to 17 s with the default retries) gives its slot back
  when it holds no FIFO message, so that the producer's other sends are not stuck behind
  it; at most ``MAX_RETRYING_RPCS`` requests do so at once. Plain sends have no order
  between them (the retried one's outcome is unknown until it is answered); a FIFO
  request being retried keeps its slot, so that no later send overtakes it.
- A caller cancelled while its message waits takes the message out; once the request is on
  the wire, cancelling the caller does not recall it (as with any RPC).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable

from popmq._gen.popmq.v1 import messaging_pb2
from popmq.sdk._validation import MAX_BATCH_BODY_BYTES, MAX_BATCH_REQUEST_BYTES
from popmq.sdk.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PopMQError,
)
from popmq.sdk.types import SendReceipt

__all__ = ["SendCoalescer"]

MAX_COALESCED_MESSAGES = 1024
"""Most messages one coalesced request carries."""
MAX_RETRYING_RPCS = 3
"""Requests being retried that may give their slot back at once (module docstring): with
``max_rpcs`` 1, at most 4 requests are on the wire."""
_PER_MESSAGE_ERRORS = (InvalidArgumentError, NotFoundError, FailedPreconditionError)

SendFn = Callable[
    [messaging_pb2.SendMessagesRequest, Callable[[], None]], Awaitable[list[SendReceipt]]
]
"""Sends a request with retries, calling its second argument when it begins to retry."""
_Waiting = tuple[messaging_pb2.OutgoingMessage, int, int, "asyncio.Future[SendReceipt]"]
"""A message, its body bytes, its encoded bytes and its caller's future."""


class SendCoalescer:
    """Joins single-message sends that arrive while ``max_rpcs`` sends are on the wire."""

    def __init__(self, send: SendFn, *, max_rpcs: int = 1) -> None:
        if max_rpcs < 1:
            raise InvalidArgumentError(f"max_rpcs {max_rpcs} is below the minimum 1")
        self._send = send
        self._max_rpcs = max_rpcs
        self._busy = 0
        # Requests being retried that gave their slot back (at most MAX_RETRYING_RPCS).
        self._released = 0
        self._waiting: deque[_Waiting] = deque()
        # A _flush is queued on the loop (call_soon) and has not run yet.
        self._flush_queued = False
        # Strong references to the flushes under way (the loop keeps only weak ones).
        self._flushes: set[asyncio.Task[None]] = set()

    async def send(self, request: messaging_pb2.SendMessagesRequest) -> SendReceipt:
        """Send a one-message request, alone or together with others that wait."""
        if self._busy < self._max_rpcs and not self._waiting and not self._flush_queued:
            self._busy += 1
            try:
                (receipt,) = await self._sent(request)
                return receipt
            finally:
                self._busy -= 1
                if self._waiting:
                    self._queue_flush()
        (message,) = request.messages
        future: asyncio.Future[SendReceipt] = asyncio.get_running_loop().create_future()
        self._waiting.append((message, len(message.body), message.ByteSize(), future))
        return await future  # cancelling it drops the message if it has not left yet

    async def _sent(self, request: messaging_pb2.SendMessagesRequest) -> list[SendReceipt]:
        """``request`` sent in a slot the caller took; the slot is given back while it is
        retried, if it holds no FIFO message and fewer than MAX_RETRYING_RPCS did so (the
        caller's release of the slot then counts as taking it back)."""
        released = False

        def retrying() -> None:
            nonlocal released
            if released or self._released >= MAX_RETRYING_RPCS:
                return
            if any(m.message_group for m in request.messages):
                return  # a later send of its group must not overtake it
            released = True
            self._released += 1
            self._busy -= 1
            if self._waiting:
                self._queue_flush()

        try:
            return await self._send(request, retrying)
        finally:
            if released:
                self._released -= 1
                self._busy += 1  # the caller gives the slot back, as for any request

    def _queue_flush(self) -> None:
        """Run ``_flush`` on the loop's next turn, after the callbacks already due."""
        if not self._flush_queued:
            self._flush_queued = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        """Send what waits, as one request per free RPC slot."""
        self._flush_queued = False
        while self._waiting and self._busy < self._max_rpcs:
            batch: list[_Waiting] = []
            size = encoded = 0
            while self._waiting and len(batch) < MAX_COALESCED_MESSAGES:
                message, nbytes, wire_bytes, future = self._waiting[0]
                if future.done():  # its caller was cancelled: never sent
                    self._waiting.popleft()
                    continue
                if batch and (
                    size + nbytes > MAX_BATCH_BODY_BYTES
                    or encoded + wire_bytes > MAX_BATCH_REQUEST_BYTES
                ):
                    break
                self._waiting.popleft()
                batch.append((message, nbytes, wire_bytes, future))
                size += nbytes
                encoded += wire_bytes
            if not batch:
                return
            self._busy += 1
            task = asyncio.get_running_loop().create_task(self._send_together(batch))
            self._flushes.add(task)
            task.add_done_callback(self._flushes.discard)

    async def _send_together(self, batch: list[_Waiting]) -> None:
        try:
            request = messaging_pb2.SendMessagesRequest(messages=[m for m, _, _, _ in batch])
            try:
                receipts = await self._sent(request)
            except _PER_MESSAGE_ERRORS:
                if len(batch) == 1:
                    raise
                # One message may have failed them all: give each its own outcome.
                await asyncio.gather(*(self._send_alone(m, f) for m, _, _, f in batch))
                return
            for (_, _, _, future), receipt in zip(batch, receipts, strict=True):
                if not future.done():
                    future.set_result(receipt)
        except BaseException as exc:  # every caller gets an answer, whatever went wrong
            _fail(batch, exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self._busy -= 1
            self._queue_flush()

    async def _send_alone(
        self, message: messaging_pb2.OutgoingMessage, future: asyncio.Future[SendReceipt]
    ) -> None:
        try:
            alone = messaging_pb2.SendMessagesRequest(messages=[message])
            (receipt,) = await self._send(alone, _keeps_its_slot)
        except PopMQError as exc:
            if not future.done():
                future.set_exception(exc)
        else:
            if not future.done():
                future.set_result(receipt)


def _keeps_its_slot() -> None:
    """A message sent again alone (after its shared request failed) keeps the slot of that
    request while retried: the others of that request are sent alongside already."""


def _fail(batch: list[_Waiting], exc: BaseException) -> None:
    error = exc if isinstance(exc, Exception) else PopMQError("the send was cancelled")
    for _, _, _, future in batch:
        if not future.done():
            future.set_exception(error)
