"""PopStream: the pops of one client multiplexed over one bidirectional gRPC stream.

Why: a unary Pop held by a long poll costs the server a whole gRPC call, about 20 KB of RSS
(grpc core's call arena and grpc.aio's objects for the call), so 10,000 held Pops cost 200 MB
however small the broker's share is. On a stream, a held pop costs about 1.9 KB: the broker's
pop coroutine, parked future and timer (about 1.1 KB), its asyncio task (about 0.4 KB with
asyncio's weak reference to it) and two dict entries here (`python -m bench.held_pops`;
docs/pop-stream.md).

Acks ride the same stream: a consumer's receive cycle (pop, then ack what it processed) then
costs no unary call, which is about 1 ms of server CPU a call on grpc.aio against about
0.4 ms for a message on an open stream. A pop may also carry the acks itself
(`PopRequest.ack_receipt_handles`), so a cycle is one stream message each way.

How, bounds and ends: proxy/stream_session.py (shared with SendStream). Pop specifics: each
pop is validated as the Pop RPC does (`MessagingServicer.start_pop`) and its task runs the
broker's `pop`; an ack runs the broker's `ack` as the Ack RPC does (`start_ack`); a request
may instead cancel an earlier pop by its id (an ack is never cancelled: it is answered with
its results), and repeating the id of a request in flight ends the stream INVALID_ARGUMENT.

What a pop may take: the bytes the stream admitted it with (proxy/stream_session.py,
"Admission"), passed to the broker's pop as `max_bytes`; a pop that finds nothing at once
waits as a probe that takes nothing, and reserves its bytes when an arrival wakes it
(`reserve`).

A client that does not read: the stream pauses its pops once `MAX_UNWRITTEN_BYTES` of
answers wait (proxy/stream_session.py); a paused pop is cancelled where it is parked (it
took nothing) and started again with what is left of its long-polling time. When the call
ends (or a pop of a paused stream was ready anyway), the messages of answers never written
are given back at once (`GiveBack`: a nack with no delay, so they are delivered again now,
with `delivery_attempt + 1`, rather than after their invisible time); a message whose answer
was written stays the client's. At shutdown
`release` comes after the broker released its held pops, so they answer at once (empty).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Final, NamedTuple, cast

import grpc

from popmq._gen.popmq.v1 import messaging_pb2
from popmq.broker_core import (
    BrokerAPI,
    PopMQError,
    PoppedMessage,
    ReceivedBatch,
    length_delimited,
    received_messages_wire,
    varint,
)
from popmq.proxy.ack_request import AckRequest, PopStreamRequest
from popmq.proxy.memory import PoppedBytes
from popmq.proxy.stream_session import (
    ANSWER_BYTES,
    MAX_IN_FLIGHT,
    MAX_UNWRITTEN_BYTES,
    Observe,
    StreamSession,
)

log = logging.getLogger(__name__)

__all__ = [
    "MAX_IN_FLIGHT",
    "MAX_UNWRITTEN_BYTES",
    "AckedPop",
    "AnyAckRequest",
    "GiveBack",
    "Observe",
    "PopResult",
    "PopStreamSession",
    "StartAck",
    "StartPop",
    "ack_answer",
    "pop_answer",
]

_REQUEST_ID_TAG: Final = b"\x08"
_POP_TAG: Final = b"\x12"
_ACK_TAG: Final = b"\x22"
"""PopStreamResponse.ack (4): an AckResponse."""
_RESULTS_TAG: Final = b"\x0a"
"""AckResponse.results (1)."""
_ACK_RESULTS_TAG: Final = b"\x12"
"""PopResponse.ack_results (2)."""
# EntryResult's receipt_handle (1), code (2) and message (3).
_HANDLE_TAG: Final = b"\x0a"
_CODE_TAG: Final = b"\x12"
_MESSAGE_TAG: Final = b"\x1a"
_OK: Final = b"\x12\x02OK"
"""EntryResult.code "OK", encoded."""

AckOutcomes = list[PopMQError | None]
"""The broker's ack result: per receipt handle, None (acked) or why not."""


class AckedPop(NamedTuple):
    """What a pop that carried acks (`PopRequest.ack_receipt_handles`) did: first the acks,
    then the pop. A pop without acks returns its messages alone."""

    acks: AckOutcomes
    popped: list[PoppedMessage] | ReceivedBatch


PopResult = list[PoppedMessage] | ReceivedBatch | AckedPop
"""A pop's messages: as objects, or already encoded as the client gets them (a cluster
proxy's, ReceivedBatch); a pop that carried acks also has their outcomes."""
StartPop = Callable[
    [messaging_pb2.PopRequest, float | None, int | None, Callable[[int], int] | None],
    Coroutine[Any, Any, PopResult],
]
"""Validates a PopRequest (raising the broker's error) and returns its pop coroutine; the
third argument bounds the bytes the pop may take (None: a whole answer), the last reserves
more when the first message found does not fit them (BrokerAPI.pop's `reserve`)."""
AnyAckRequest = messaging_pb2.AckRequest | AckRequest
"""An ack: as read from its bytes (proxy/ack_request.py), or a generated message."""
PopOrAck = messaging_pb2.PopRequest | AnyAckRequest
"""What a PopStream runs: anything not a PopRequest is an ack."""
StartAck = Callable[[AnyAckRequest], Coroutine[Any, Any, AckOutcomes]]
"""Returns the broker's ack coroutine for an AckRequest."""


class GiveBack:
    """Gives popped messages back to the broker when their answer will never be written.

    A nack with no delay per receipt handle, run as tasks held here (a stream that ended
    cannot hold them).

    Args:
        broker: The broker the messages were popped from.
    """

    def __init__(self, broker: BrokerAPI) -> None:
        self._broker = broker
        # Give-backs still running; each removes itself when done. Touched on the loop only.
        self._tasks: set[asyncio.Task[None]] = set()
        self.given_back = 0
        """Messages given back so far (tests and the memory benchmark read it)."""

    def __call__(self, group: str, handles: list[str]) -> None:
        task = asyncio.get_running_loop().create_task(self._give_back(group, handles))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _give_back(self, group: str, handles: list[str]) -> None:
        for handle in handles:
            try:
                await self._broker.nack(group, handle, delay_s=0)
            except PopMQError as exc:
                # Acked meanwhile, expired, or the group is gone: nothing to give back.
                log.debug("giving back a message of group %s skipped: %s", group, exc)
            else:
                self.given_back += 1


def ack_answer(
    handles: Sequence[str], outcomes: AckOutcomes, field_tag: bytes = _RESULTS_TAG
) -> bytes:
    """One EntryResult per receipt handle, in request order, encoded as the repeated field
    `field_tag`: by default an AckResponse's bytes (results), or with PopResponse's
    ack_results tag the part of a PopResponse that field is.

    Written field by field rather than built as messages and serialized. Empty strings
    are left out, as proto3 leaves them out."""
    parts: list[bytes] = []
    # `parts.append`, not a bound method held in a local: compiled, that is a Python call.
    # The entry's head (tag, length, handle tag and length) is the same for handles of one
    # length, as a pop's handles are: made once per length.
    head = b""
    head_length = -1
    for handle, error in zip(handles, outcomes, strict=True):
        text = handle.encode()
        if error is None and 0 < len(text) < 0x80:
            # The usual entry, written as its parts: the handle and "OK" (4 bytes).
            if len(text) != head_length:
                head_length = len(text)
                head = b"".join(
                    (field_tag, varint(head_length + 6), _HANDLE_TAG, varint(head_length))
                )
            parts.append(head)
            parts.append(text)
            parts.append(_OK)
            continue
        entry = length_delimited(_HANDLE_TAG, text) if text else b""
        if error is None:
            entry += _OK
        else:
            entry += length_delimited(_CODE_TAG, error.code.encode())
            message = str(error).encode()
            if message:
                entry += length_delimited(_MESSAGE_TAG, message)
        parts.append(field_tag)
        parts.append(varint(len(entry)))
        parts.append(entry)
    return b"".join(parts)


def pop_answer(request: messaging_pb2.PopRequest, result: PopResult) -> bytes:
    """A pop's PopResponse, encoded: its messages as their stored bytes re-tagged
    (broker_core.received_messages_wire), or as they came so encoded (ReceivedBatch), after
    the results of the acks it carried."""
    if type(result) is AckedPop:
        acks = ack_answer(request.ack_receipt_handles, result.acks, _ACK_RESULTS_TAG)
        return acks + _messages_wire(result.popped)
    return _messages_wire(cast(list[PoppedMessage] | ReceivedBatch, result))


def _messages_wire(popped: list[PoppedMessage] | ReceivedBatch) -> bytes:
    if type(popped) is ReceivedBatch:
        return popped.wire()
    return received_messages_wire(cast(list[PoppedMessage], popped))


class PopStreamSession(
    StreamSession[
        PopOrAck,
        messaging_pb2.PopStreamResponse,
        PopResult | AckOutcomes,
    ]
):
    """One PopStream call: reads pops, acks (and cancels), runs them, writes their answers.

    Args:
        start_pop: Validates a pop and returns its coroutine (the Pop RPC's own path).
        start_ack: Returns an ack's coroutine (the Ack RPC's own path).
        context: The call's servicer context.
        observe: Told of every answered pop, rejections included (metrics and the RPC log).
        observe_ack: The same for every answered ack.
        give_back: Takes back the messages of answers never written (none when None).
        popped_bytes: The server-wide budget its pops' bytes count in too (none when None).
    """

    method = "PopStream"
    noun = "pop"
    cancelled_text = "the pop was cancelled by the client"
    track_ids = True

    def __init__(
        self,
        start_pop: StartPop,
        start_ack: StartAck,
        context: grpc.aio.ServicerContext,
        observe: Observe | None = None,
        observe_ack: Observe | None = None,
        give_back: Callable[[str, list[str]], None] | None = None,
        popped_bytes: PoppedBytes | None = None,
    ) -> None:
        super().__init__(context, observe, popped_bytes)
        self._start_pop = start_pop
        self._start_ack = start_ack
        self._observe_ack = observe_ack
        self._giver = give_back
        if observe_ack is not None and not self._peer:
            self._peer = context.peer()

    def _on_request(self, request: messaging_pb2.PopStreamRequest | PopStreamRequest) -> bool:
        request_id = request.request_id
        action = request.WhichOneof("action")
        running = self._by_id
        assert running is not None  # track_ids
        if action == "cancel":
            # An ack is not cancelled: it may be applied already, and is answered either way.
            self._cancel(request_id)
            return True
        if action is None:
            self._reject(
                request_id, "INVALID_ARGUMENT", "the request has no action: set pop, ack or cancel"
            )
            return True
        began = time.perf_counter()
        if request_id in running:
            self._violation = (
                f"request_id {request_id} repeats a request still in flight on this stream; "
                "ids must be unique among the requests not yet answered"
            )
            return False
        if action == "ack":
            ack = request.ack
            self._start(request_id, ack, began, lambda _bound, _wait: self._start_ack(ack))
            return True
        pop = request.pop
        self._start(
            request_id,
            pop,
            began,
            lambda bound, wait: self._pop_coroutine(pop, began, bound, wait),
        )
        return True

    def _pop_coroutine(
        self, pop: messaging_pb2.PopRequest, began: float, max_bytes: int | None, wait: bool
    ) -> Coroutine[Any, Any, PopResult]:
        """The pop's coroutine; a pop started again (after a pause, or as a probe) waits only
        for what is left of its long-polling time, and one that may not wait, not at all."""
        if not wait:
            resumed = messaging_pb2.PopRequest()
            resumed.CopyFrom(pop)
            resumed.long_polling_timeout.FromMilliseconds(0)
            pop = resumed
        elif time.perf_counter() - began > 0.001:
            left = self._wait_left(pop, began)
            if left is not None:
                resumed = messaging_pb2.PopRequest()
                resumed.CopyFrom(pop)
                resumed.long_polling_timeout.FromMilliseconds(int(left * 1000))
                pop = resumed
        # A probe (granted nothing) woken by an arrival reserves its bytes then and takes
        # the message at once, rather than refusing it and being started again.
        reserve = self._reserve_now if max_bytes == 0 else None
        return self._start_pop(pop, self._context.time_remaining(), max_bytes, reserve)

    def _wait_left(self, pop: messaging_pb2.PopRequest, began: float) -> float | None:
        """Seconds of its own long-polling time the pop has left (None: it has the
        server's default, from whenever it starts)."""
        if not pop.HasField("long_polling_timeout"):
            return None
        waited = time.perf_counter() - began
        return max(0.0, pop.long_polling_timeout.ToTimedelta().total_seconds() - waited)

    def _at_once(self, request: PopOrAck) -> bool:
        # Not a pop with acks: run again, it would apply them again.
        return type(request) is messaging_pb2.PopRequest and not request.ack_receipt_handles

    def _again(
        self,
        request: PopOrAck,
        result: PopResult | AckOutcomes,
        began: float,
    ) -> bool:
        if result or type(request) is not messaging_pb2.PopRequest:
            return False
        left = self._wait_left(request, began)
        return left is None or left > 0.001

    def _admitted(self, request: PopOrAck) -> int | None:
        if type(request) is not messaging_pb2.PopRequest:
            return None  # an ack takes no message
        # A pop that carries acks is not run twice (its acks would be): it starts only with
        # a whole answer's worth, never as a probe.
        return ANSWER_BYTES if request.ack_receipt_handles else 0

    def _restartable(self, request: PopOrAck) -> bool:
        # A pop takes nothing until it returns; an ack is answered with its results, always.
        return type(request) is messaging_pb2.PopRequest

    def _carried(
        self,
        request: PopOrAck,
        result: PopResult | AckOutcomes,
    ) -> object:
        if self._giver is None or type(request) is not messaging_pb2.PopRequest:
            return None
        popped = (
            result.popped
            if type(result) is AckedPop
            else cast(list[PoppedMessage] | ReceivedBatch, result)
        )
        if type(popped) is ReceivedBatch:
            return popped.handles_only() if popped.count else None  # not the messages' bytes
        return [m.receipt_handle for m in cast(list[PoppedMessage], popped)] or None

    def _abandon(self, request: PopOrAck, carried: object) -> None:
        if self._giver is not None:
            handles = (
                carried.receipt_handles()
                if type(carried) is ReceivedBatch
                else cast(list[str], carried)
            )
            self._giver(cast(messaging_pb2.PopRequest, request).group, handles)

    def _give_back(
        self,
        request: PopOrAck,
        result: PopResult | AckOutcomes,
    ) -> bool:
        carried = self._carried(request, result)
        if carried is None:
            return False
        self._abandon(request, carried)
        return True

    def _observer(self, request: PopOrAck) -> Observe | None:
        if type(request) is not messaging_pb2.PopRequest:
            return self._observe_ack
        return self._observe

    def _response(self, request_id: int) -> messaging_pb2.PopStreamResponse:
        return messaging_pb2.PopStreamResponse(request_id=request_id)

    def _encoded(
        self,
        request_id: int,
        request: PopOrAck,
        result: PopResult | AckOutcomes,
    ) -> bytes | None:
        # PopStreamResponse: request_id = 1, then pop = 2 or ack = 4 (present even when
        # empty).
        if type(request) is not messaging_pb2.PopRequest:
            ack = cast(AnyAckRequest, request)
            answer = ack_answer(ack.receipt_handles, cast(AckOutcomes, result))
            tag = _ACK_TAG
        else:
            pop = request
            answer = pop_answer(pop, cast(PopResult, result))
            tag = _POP_TAG
        # One copy of the answer (a pop's is some 35 KB), not one a concatenation.
        if request_id:
            return b"".join((_REQUEST_ID_TAG, varint(request_id), tag, varint(len(answer)), answer))
        return b"".join((tag, varint(len(answer)), answer))
