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

Order: nothing is awaited between reading a request and creating its task, and tasks start
in creation order, so the sends of a stream start in the order read. `Broker.send` reaches
the group-commit writer without suspending when its topics exist, so its write job is queued
in that order too: of two sends of one stream, the later one's messages get the higher
offsets in each queue they share. (A send that auto-creates its topic suspends first and may
be overtaken.)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Final

import grpc

from popmq._gen.popmq.v1 import messaging_pb2
from popmq.broker_core import SendResult, length_delimited, varint
from popmq.proxy.send_request import SendRequest, SendStreamRequest
from popmq.proxy.stream_session import MAX_IN_FLIGHT, Observe, StreamSession

__all__ = ["MAX_IN_FLIGHT", "Observe", "SendStreamSession", "StartSend", "send_answer"]

StartSend = Callable[[SendRequest], Coroutine[Any, Any, list[SendResult]]]
"""Schedules a send's messages (raising the broker's error) and returns its send
coroutine."""


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
    """

    method = "SendStream"
    noun = "send"
    cancelled_text = "the send was cancelled"

    def __init__(
        self,
        start_send: StartSend,
        context: grpc.aio.ServicerContext,
        observe: Observe | None = None,
    ) -> None:
        super().__init__(context, observe)
        self._start_send = start_send

    def _on_request(self, request: SendStreamRequest) -> bool:
        """`request` as send_request.py read it (the method's deserializer)."""
        began = time.perf_counter()
        if not request.has_send:
            self._reject(request.request_id, "INVALID_ARGUMENT", "the request has no send")
            return True
        send = request.send
        self._start(request.request_id, send, began, lambda _bound, _wait: self._start_send(send))
        return True

    def _response(self, request_id: int) -> messaging_pb2.SendStreamResponse:
        return messaging_pb2.SendStreamResponse(request_id=request_id)

    def _encoded(self, request_id: int, request: SendRequest, result: list[SendResult]) -> bytes:
        head = _REQUEST_ID + varint(request_id) if request_id else b""
        return head + length_delimited(_SEND, send_answer(result))
