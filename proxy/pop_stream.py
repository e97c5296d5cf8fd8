"""PopStream: the pops of one client multiplexed over one bidirectional gRPC stream.

Why: a unary Pop held by a long poll costs the server a whole gRPC call, about 20 KB of RSS
(grpc core's call arena and grpc.aio's objects for the call), so 10,000 held Pops cost 200 MB
however small the broker's share is. On a stream, a held pop costs about 1.9 KB: the broker's
pop coroutine, parked future and timer (about 1.1 KB), its asyncio task (about 0.4 KB with
asyncio's weak reference to it) and two dict entries here (`python -m bench.held_pops`;
docs/pop-stream.md).

How, bounds and ends: proxy/stream_session.py (shared with SendStream). Pop specifics: each
pop is validated as the Pop RPC does (`MessagingServicer.start_pop`) and its task runs the
broker's `pop`; a request may instead cancel an earlier pop by its id, and repeating the id
of a pop in flight ends the stream INVALID_ARGUMENT. When the call ends, a message already
popped but whose answer was not written stays invisible until its invisible time passes, then
is delivered again (as for a unary Pop whose caller went away). At shutdown `release` comes
after the broker released its held pops, so they answer at once (empty).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine
from typing import Any

import grpc

from broker_core.types import PoppedMessage
from popmq.v1 import messaging_pb2
from proxy import convert
from proxy.stream_session import MAX_IN_FLIGHT, Observe, StreamSession

__all__ = ["MAX_IN_FLIGHT", "Observe", "PopStreamSession", "StartPop"]

StartPop = Callable[
    [messaging_pb2.PopRequest, float | None], Coroutine[Any, Any, list[PoppedMessage]]
]
"""Validates a PopRequest (raising the broker's error) and returns its pop coroutine."""


class PopStreamSession(
    StreamSession[messaging_pb2.PopRequest, messaging_pb2.PopStreamResponse, list[PoppedMessage]]
):
    """One PopStream call: reads pops (and cancels), runs them, writes their answers.

    Args:
        start_pop: Validates a pop and returns its coroutine (the Pop RPC's own path).
        context: The call's servicer context.
        observe: Told of every answered pop, rejections included (metrics and the RPC log).
    """

    method = "PopStream"
    noun = "pop"
    cancelled_text = "the pop was cancelled by the client"
    track_ids = True

    def __init__(
        self,
        start_pop: StartPop,
        context: grpc.aio.ServicerContext,
        observe: Observe | None = None,
    ) -> None:
        super().__init__(context, observe)
        self._start_pop = start_pop

    def _on_request(self, request: messaging_pb2.PopStreamRequest) -> bool:
        request_id = request.request_id
        action = request.WhichOneof("action")
        running = self._by_id
        assert running is not None  # track_ids
        if action == "cancel":
            task = running.get(request_id)
            if task is not None:
                task.cancel()
            return True
        if action != "pop":
            self._reject(request_id, "INVALID_ARGUMENT", "the request has neither pop nor cancel")
            return True
        began = time.perf_counter()
        if request_id in running:
            self._violation = (
                f"request_id {request_id} repeats a pop still in flight on this stream; "
                "ids must be unique among the pops not yet answered"
            )
            return False
        pop = request.pop
        self._start(
            request_id, pop, began, lambda: self._start_pop(pop, self._context.time_remaining())
        )
        return True

    def _response(self, request_id: int) -> messaging_pb2.PopStreamResponse:
        return messaging_pb2.PopStreamResponse(request_id=request_id)

    def _fill(self, response: messaging_pb2.PopStreamResponse, result: list[PoppedMessage]) -> None:
        response.pop.SetInParent()  # set even when no message was popped
        response.pop.messages.extend(convert.received_message(m) for m in result)
