"""`HopStream`: a proxy's pops without a wait and its acks to one broker, on one long-lived
BrokerService HopStream instead of a unary call each; and its sends and half sends on another
(HopSend), the same way.

A unary gRPC call costs both processes its setup and teardown (a new HTTP/2 stream, the
call objects, metadata), and at batch 32 a pop and an ack are two calls per 32 messages: the
largest share of what the hop cost a message. On a stream each request is one message each
way. Requests carry an id the broker answers with; answers come back in the order they are
ready, each as its unary call would have answered (hop_wire.py).

`HopStub` is the unary calls' stub, with the same bytes for Pop, Ack, Send and SendHalf.

What stays unary: a pop with a wait (a long poll, held by the broker and released by
`RemoteBroker.release_waiters`), and every other BrokerService call. Here a request is
written as soon as it is made; RemoteBroker's streams (hop_frames.py) send those made while
one is in flight together, in frames, to a broker that answers frames.

Sends have a stream of their own so that a broker without it says so (UNIMPLEMENTED) before
it reads anything: a send it did not understand must be known not stored (send_outcome.py).
A send that the stream cannot answer fails as its unary call would: not sent when the
stream could not connect (gRPC's "failed to connect to all addresses"), else maybe stored
(the stream broke, the broker ended it, or the answer did not come within the call timeout).

Failure: when the stream ends (the broker went away, the connection broke), every request
in flight on it fails with the error its unary call would have got (a retriable
BrokerUnansweredError: the broker may have done it; an ack not answered is redelivered, a
pop's messages come back after their invisible time), and the next request opens a new
stream. A broker that does not serve HopStream (UNIMPLEMENTED) is asked by unary calls from
then on. Each request waits at most the call timeout for its answer.

Runs on the proxy's event loop only; nothing here blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable
from typing import Any

import grpc

from popmq._gen.popmq.broker.v1 import broker_pb2 as pb
from popmq._gen.popmq.broker.v1 import broker_pb2_grpc
from popmq.broker import hop_wire, send_wire
from popmq.broker.hop_wire import HOP_ERROR, hop_answer, hop_answer_from_wire
from popmq.broker.wire import error_from_detail
from popmq.broker_core.errors import PopMQError
from popmq.cluster.send_outcome import BrokerUnansweredError

log = logging.getLogger(__name__)

METHOD = "/popmq.broker.v1.BrokerService/HopStream"
SEND_METHOD = "/popmq.broker.v1.BrokerService/HopSend"


class HopUnsupportedError(Exception):
    """The broker does not serve the stream: ask it with unary calls (nothing was done)."""


class HopStream:
    """Requests to one broker over one HopStream (or HopSend: `method`) call, opened on first
    use and again after it ended.

    `carries` names the requests in errors. With `handshake`, nothing is written on a call
    before the broker's headers come (HopSend's broker sends them at once; HopStream's
    answers only requests, so a broker of its first release would never send them).
    """

    def __init__(
        self,
        channel: grpc.aio.Channel,
        *,
        shown: str,
        timeout_s: float,
        metadata: Callable[[], tuple[tuple[str, str], ...] | None],
        error: Callable[[grpc.aio.AioRpcError], PopMQError],
        method: str = METHOD,
        carries: str = "pops and acks",
        handshake: bool = False,
    ) -> None:
        self._method = method.rsplit("/", 1)[-1]
        self._carries = carries
        self._handshake = handshake
        # The call whose broker has accepted it (sent its headers), with `handshake`.
        self._accepted: Any = None
        self._open_call = channel.stream_stream(
            method,
            request_serializer=_as_is,
            response_deserializer=_as_is,
            _registered_method=True,
        )
        self._shown = shown
        self._timeout = timeout_s
        self._metadata = metadata
        self._error = error
        self._call: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._ids = itertools.count(1)
        # Request id -> the future of its answer (HopStreamResponse field, its bytes); requests in
        # flight on the current stream, failed all at once when it ends.
        self._pending: dict[int, asyncio.Future[tuple[int, bytes]]] = {}
        # Held while a request is written: a call takes one write at a time.
        self._write_lock = asyncio.Lock()
        self.unsupported = False
        """Set once the broker answered UNIMPLEMENTED: use unary calls."""

    async def request(self, field: int, payload: bytes) -> tuple[int, bytes]:
        """Send the request `payload` (a message's bytes) as the stream request's `field`
        (hop_wire.HOP_POP, HOP_ACK, HOP_SEND...; its id is chosen here) and return its
        answer: the response's field and that field's bytes. A broker error in the answer is
        raised as itself; HopUnsupportedError when the broker does not serve the stream."""
        call = self._call if self._call is not None else self._open()
        request_id = next(self._ids)
        future: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        sent = False
        try:
            async with asyncio.timeout(self._timeout):
                async with self._write_lock:
                    try:
                        if self._handshake and self._accepted is not call:
                            # Nothing is written before the broker accepts the call: one
                            # without the method ends it (UNIMPLEMENTED) without having read
                            # a request, and requests written meanwhile could turn that
                            # status into gRPC's INTERNAL.
                            await call.initial_metadata()
                            self._accepted = call
                        sent = True
                        await call.write(hop_answer(request_id, field, payload))
                    except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                        # The call has ended: its reader fails the future with the call's
                        # status (a failed write's own says only INTERNAL), which tells a
                        # broker without the stream (UNIMPLEMENTED) and whether a send may
                        # have been sent.
                        pass
                field, payload = await future
        except TimeoutError:
            raise BrokerUnansweredError(
                f"broker {self._shown} did not answer within {self._timeout:g}s; retry later",
                request_sent=sent,
            ) from None
        finally:
            self._pending.pop(request_id, None)
        if field == HOP_ERROR:
            raise error_from_detail(pb.ErrorDetail.FromString(payload))
        return field, payload

    def _open(self) -> Any:
        call = self._open_call(metadata=self._metadata())
        self._call = call
        self._reader = asyncio.ensure_future(self._read(call))
        return call

    async def _read(self, call: Any) -> None:
        try:
            async for data in call:
                self._answered(data)
        except grpc.aio.AioRpcError as exc:
            self._ended(call, exc)
        except asyncio.CancelledError:
            self._ended(call, None)
            raise
        except ValueError:
            log.exception("broker %s answered a malformed %s response", self._shown, self._method)
            call.cancel()
            self._ended(call, None)
        else:
            self._ended(call, None)

    def _answered(self, data: bytes) -> None:
        """Hand the answer `data` (a response's bytes) to its request's caller. Raises
        ValueError when it does not parse."""
        request_id, field, payload = hop_answer_from_wire(data)
        future = self._pending.pop(request_id, None)
        if future is not None and not future.done():
            future.set_result((field, payload))

    def _ended(self, call: Any, exc: grpc.aio.AioRpcError | None) -> None:
        """The stream `call` is over: fail what is in flight on it, open anew next time."""
        if self._call is not call:
            return
        self._call = None
        error: Exception
        if exc is not None and exc.code() == grpc.StatusCode.UNIMPLEMENTED:
            self.unsupported = True
            error = HopUnsupportedError(f"broker {self._shown} does not serve {self._method}")
        elif exc is not None:
            error = self._error(exc)
        else:
            error = BrokerUnansweredError(
                f"broker {self._shown} ended the stream of {self._carries} with requests "
                "in flight; retry",
                request_sent=True,
            )
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(error)

    async def close(self) -> None:
        """End the stream; requests in flight fail as if the broker had gone (retriable)."""
        call, reader = self._call, self._reader
        if call is not None:
            self._ended(call, None)
            call.cancel()
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader


class HopStub(broker_pb2_grpc.BrokerServiceStub):
    """The generated BrokerService stub, as RemoteBroker calls it, but Pop takes its
    request's bytes and answers its response's (read by hop_wire.py in the form the request
    asked for), Ack answers what its bytes say (a list of ack outcomes), with no response
    object between; Send and SendHalf take their request's bytes and answer a list of
    SendResult (send_wire.py)."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        super().__init__(channel)  # type: ignore[no-untyped-call]
        self.Pop = channel.unary_unary(
            "/popmq.broker.v1.BrokerService/Pop",
            request_serializer=_as_is,
            response_deserializer=_as_is,
            _registered_method=True,
        )
        self.Ack = channel.unary_unary(
            "/popmq.broker.v1.BrokerService/Ack",
            request_serializer=pb.AckRequest.SerializeToString,
            response_deserializer=hop_wire.ack_results_from_wire,
            _registered_method=True,
        )
        self.Send = channel.unary_unary(
            "/popmq.broker.v1.BrokerService/Send",
            request_serializer=_as_is,
            response_deserializer=send_wire.send_results_from_wire,
            _registered_method=True,
        )
        self.SendHalf = channel.unary_unary(
            "/popmq.broker.v1.BrokerService/SendHalf",
            request_serializer=_as_is,
            response_deserializer=send_wire.send_results_from_wire,
            _registered_method=True,
        )


def _as_is(data: bytes) -> bytes:
    return data
