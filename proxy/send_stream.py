"""SendStream: the sends of one producer multiplexed over one bidirectional gRPC stream.

Why: a unary call costs the server about 1,100 us of CPU (430 us at 8 concurrent callers)
and the client about 630 us, more than storing a small message; a message on an open stream
costs about a third of that. A producer that sends one message at a time pays it per send
(docs/pop-stream.md, "SendStream").

How, bounds and ends: proxy/stream_session.py (shared with PopStream). Send specifics: each
send is read from its bytes (send_request.py) and checked as the SendMessages RPC does
(`MessagingServicer.start_send`), and its task runs the broker's `send`. A send cancelled
because the call ended may or may not be stored, as for a unary send whose caller went away
(a retry with the same message ids is deduplicated); at shutdown the sends in flight are
answered (the store is still open during the grace period).

No task for a plain send: on the server's own broker (`popmq serve`), a send that is
neither transactional nor a repeat, to topics that exist, is handed to group commit as it is
read (`Broker.send_now`, as the cluster's HopSend frames are) and answered from its ticket's
done-callback (`SendTicket.add_done_callback`, `results_now`), without a task, its two steps,
the broker's send coroutines and the generic done-callback. Nothing about the send changes:
it is checked, refused (same code and message), stored, deduplicated and observed as before;
a stream that ends before the write does only gives up the answer, never the write or its
dedup claims. Other sends (transactional, repeats, a topic to create, a cluster proxy's
broker) run as tasks, as below.

Order: nothing is awaited between reading a request and creating its task, and tasks start
in creation order, so the sends of a stream start in the order read. `Broker.send` reaches
the group-commit writer without suspending when its topics exist, so its write job is queued
in that order too: of two sends of one stream, the later one's messages get the higher
offsets in each queue they share. (A send that auto-creates its topic suspends first and may
be overtaken.) A send is handed over at once only while no send of the stream runs as a
task, so it never overtakes one read before it; answers are queued as the writes settle,
which for the sends of one stream is the order they were handed over.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from functools import partial
from typing import Any, Final

import grpc

from popmq._gen.popmq.v1 import messaging_pb2
from popmq.broker_core import PopMQError, SendResult, SendTicket, length_delimited, varint
from popmq.grpc_calls.errors import INTERNAL_MESSAGE
from popmq.proxy.send_request import SendRequest, SendStreamRequest
from popmq.proxy.stream_session import (
    MAX_IN_FLIGHT,
    Observe,
    StreamSession,
    _Answer,
    _Request,
)

__all__ = [
    "MAX_IN_FLIGHT", "BeginSend", "Observe", "SendStreamSession", "StartSend", "send_answer",
]  # fmt: skip

log = logging.getLogger(__name__)

StartSend = Callable[[SendRequest], Coroutine[Any, Any, list[SendResult]]]
"""Schedules a send's messages (raising the broker's error) and returns its send
coroutine."""

BeginSend = Callable[[SendRequest], SendTicket | Coroutine[Any, Any, list[SendResult]]]
"""`StartSend`, or the send's ticket when the broker took it at once (`Broker.send_now`)."""


def send_answer(results: Sequence[SendResult]) -> bytes:
    """The SendMessages answer for the broker's results (unary and stream alike), encoded:
    a SendMessagesResponse's `repeated SendResult results = 1`, each result's fields written
    as they are (a quarter of building the messages to serialize them), into one list joined
    once (a result's length is the sum of its parts')."""
    parts: list[bytes] = []
    topic = ""
    topic_field = b""
    for result in results:
        if result.topic != topic:
            topic = result.topic
            topic_field = length_delimited(_TOPIC, topic.encode())
        length_at = len(parts) + 1
        parts.append(_RESULTS)
        parts.append(b"")  # the result's length, once its fields are in
        message_id = result.message_id.encode()
        parts.append(_MESSAGE_ID)
        parts.append(varint(len(message_id)))
        parts.append(message_id)
        parts.append(topic_field)
        if result.queue_id:
            parts.append(_QUEUE_ID)
            parts.append(varint(result.queue_id))
        if result.offset:  # -1 for a delayed message: ten bytes, as an int64 is encoded
            parts.append(_OFFSET)
            parts.append(varint(result.offset))
        if result.recall_handle:
            parts.append(length_delimited(_RECALL_HANDLE, result.recall_handle.encode()))
        if result.duplicate:
            parts.append(_DUPLICATE)
        if result.transaction_id:
            parts.append(length_delimited(_TRANSACTION_ID, result.transaction_id.encode()))
        size = 0
        for i in range(length_at + 1, len(parts)):
            size += len(parts[i])
        parts[length_at] = varint(size)
    return b"".join(parts)


# SendMessagesResponse.results = 1; SendResult's fields; SendStreamResponse's request_id = 1
# and send = 2.
_RESULTS: Final = b"\x0a"
_MESSAGE_ID: Final = b"\x0a"
_TOPIC: Final = b"\x12"
_QUEUE_ID: Final = b"\x18"
_OFFSET: Final = b"\x20"
_RECALL_HANDLE: Final = b"\x2a"
_DUPLICATE: Final = b"\x30\x01"
_TRANSACTION_ID: Final = b"\x3a"
_REQUEST_ID: Final = b"\x08"
_SEND: Final = b"\x12"


class SendStreamSession(
    StreamSession[SendRequest, messaging_pb2.SendStreamResponse, list[SendResult]]
):
    """One SendStream call: reads sends, starts them in order, writes their answers.

    Args:
        start_send: Converts a send and returns its coroutine (the SendMessages RPC's path).
        context: The call's servicer context.
        observe: Told of every answered send, rejections included (metrics and the RPC log).
        begin_send: `start_send`, handing a plain send to group commit at once when it can
            (its ticket): used while no send of the stream runs as a task.
    """

    method = "SendStream"
    noun = "send"
    cancelled_text = "the send was cancelled"

    def __init__(
        self,
        start_send: StartSend,
        context: grpc.aio.ServicerContext,
        observe: Observe | None = None,
        begin_send: BeginSend | None = None,
    ) -> None:
        super().__init__(context, observe)
        self._start_send = start_send
        self._begin_send = begin_send

    def _on_request(self, request: SendStreamRequest) -> bool:
        """`request` as send_request.py read it (the method's deserializer)."""
        began = time.perf_counter()
        request_id = request.request_id
        if not request.has_send:
            self._reject(request_id, "INVALID_ARGUMENT", "the request has no send")
            return True
        send = request.send
        if self._begin_send is None or self._running:
            # A task of its own, after those before it.
            self._start(request_id, send, began, lambda _bound, _wait: self._start_send(send))
            return True
        if not self._count(request_id, send, began):
            return True
        try:
            started = self._begin_send(send)
        except PopMQError as exc:
            self._reject(request_id, exc.code, str(exc), send, began, counted=True)
            return True
        except Exception:
            # What the unary RPC answers for a bug (grpc_calls/errors.py `rpc`), for this one only.
            log.exception("%s %s failed unexpectedly", self.method, self.noun)
            self._reject(request_id, "INTERNAL", INTERNAL_MESSAGE, send, began, counted=True)
            return True
        if isinstance(started, SendTicket):
            # The ticket's done-callback answers: the session's context, as its tasks'.
            started.add_done_callback(
                partial(self._sent, request_id, began, send, started), self._task_context
            )
        else:
            self._launch(_Request(request_id, began, send, lambda _bound, _wait: started))
        return True

    def _sent(
        self,
        request_id: int,
        began: float,
        request: SendRequest,
        ticket: SendTicket,
        _stored: object,
    ) -> None:
        """A send handed to group commit at once has settled: queue its answer, as the base
        class answers a task's result (`_settle`)."""
        if self._closed:
            return  # nobody reads its answer; its write and claims went their way
        code, message = "OK", ""
        try:
            results = ticket.results_now()
        except PopMQError as exc:
            log.debug(
                "%s %s from %s failed: %s %s",
                self.method, self.noun, self._context.peer(), exc.code, exc,
            )  # fmt: skip
            code, message = exc.code, str(exc)
        except asyncio.CancelledError:
            code, message = "CANCELLED", self.cancelled_text
        except Exception:
            log.exception("%s %s failed unexpectedly", self.method, self.noun)
            code, message = "INTERNAL", INTERNAL_MESSAGE
        else:
            if results is None:
                # It repeats a concurrent send still under way: its wait runs as a task.
                self._launch(_Request(request_id, began, request, lambda _b, _w: ticket.results()))
                return
            encoded = self._encoded(request_id, request, results)
            self._queue(_Answer(encoded, True, request, len(encoded)))
        if code != "OK":
            response = self._response(request_id)
            response.error.code = code
            response.error.message = message
            self._queue(_Answer(response, True, request, response.ByteSize()))
        if self._observe is not None:
            self._observe(code, time.perf_counter() - began, request, self._peer, message)

    def _response(self, request_id: int) -> messaging_pb2.SendStreamResponse:
        return messaging_pb2.SendStreamResponse(request_id=request_id)

    def _encoded(self, request_id: int, request: SendRequest, result: list[SendResult]) -> bytes:
        head = _REQUEST_ID + varint(request_id) if request_id else b""
        return head + length_delimited(_SEND, send_answer(result))
