"""A consumer's receives multiplexed over one ``MessagingService/PopStream`` call.

A held unary Pop costs the server a whole gRPC call (about 20 KB); a pop held on a stream
about 2 KB (docs/pop-stream.md). So a consumer sends its Pops over one bidirectional stream,
opened on the first receive and opened again by the receive after it broke. Receives behave
as unary Pops (sdk/_stream_call.py); a receive that times out or is cancelled sends a cancel
for its pop. Messages the server popped for it anyway (its answer crossed the cancel, or
came as the receive was cancelled) are given back at once, each with a Nack of no delay, as
a PushConsumer gives back what it will not process: otherwise they would stay invisible for
their whole invisible duration. The server answers every pop, a cancelled one with
CANCELLED, so ``close`` first waits (briefly) for the answers of the pops given up, and for
those Nacks. Acks go over the same stream, so a receive cycle makes no unary call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from google.protobuf import duration_pb2

from popmq._gen.popmq.v1 import messaging_pb2
from popmq.sdk._channel import DEFAULT_TIMEOUT_S, Connection
from popmq.sdk._stream_call import MAX_IN_FLIGHT, MultiplexedStream
from popmq.sdk.errors import PopMQError

__all__ = ["MAX_IN_FLIGHT", "PopStream"]

logger = logging.getLogger(__name__)

_ANSWERS_WAIT_S = 1.0
"""How long ``close`` waits for the answers of given-up pops (the server answers a cancel at
once; this only bounds a stream that stopped answering)."""


class PopStream(
    MultiplexedStream[
        messaging_pb2.PopRequest | messaging_pb2.AckRequest,
        messaging_pb2.PopResponse | messaging_pb2.AckResponse,
    ]
):
    """Pops and acks of one client over one PopStream call, opened lazily and again after
    it broke."""

    method = "PopStream"
    answer_field = "pop"
    ended = "the PopStream ended with pops in flight; receive again to open a new stream"

    def __init__(self, conn: Connection) -> None:
        super().__init__(conn)
        self._answered: asyncio.Event | None = None
        """Set on each answer to a given-up request while ``close`` waits for those."""
        # Nacks giving back what given-up pops got, so close can wait for them.
        self._releasing: set[asyncio.Task[None]] = set()

    async def pop(
        self, request: messaging_pb2.PopRequest, timeout_s: float
    ) -> messaging_pb2.PopResponse | None:
        """Pop on the stream; None when ``MAX_IN_FLIGHT`` pops are in flight (pop with the
        unary RPC instead). Raises as ``MultiplexedStream._request`` says."""
        return await self._request(request, timeout_s)  # type: ignore[return-value]

    async def ack(
        self, request: messaging_pb2.AckRequest, timeout_s: float
    ) -> messaging_pb2.AckResponse | None:
        """Ack on the stream; None when ``MAX_IN_FLIGHT`` requests are in flight (ack with
        the unary RPC instead). Raises as ``MultiplexedStream._request`` says.

        An ack whose caller stops waiting is not cancelled on the server: it may be applied.
        """
        return await self._request(request, timeout_s)  # type: ignore[return-value]

    def _wrap(
        self, request_id: int, request: messaging_pb2.PopRequest | messaging_pb2.AckRequest
    ) -> Any:
        if isinstance(request, messaging_pb2.AckRequest):
            return messaging_pb2.PopStreamRequest(request_id=request_id, ack=request)
        return messaging_pb2.PopStreamRequest(request_id=request_id, pop=request)

    def _give_up(self, request_id: int) -> Any:
        return messaging_pb2.PopStreamRequest(
            request_id=request_id, cancel=messaging_pb2.PopStreamCancel()
        )

    def _unclaimed(
        self, request: messaging_pb2.PopRequest | messaging_pb2.AckRequest, answer: Any
    ) -> None:
        """Give back the messages a pop got for a receive that stopped waiting."""
        if self._answered is not None:
            self._answered.set()
        if not isinstance(request, messaging_pb2.PopRequest):
            return  # an ack stands (acking again is harmless)
        if isinstance(answer, messaging_pb2.PopStreamResponse):
            if answer.WhichOneof("result") == "error":
                return
            answer = answer.pop
        handles = [m.receipt_handle for m in answer.messages]
        if handles:
            task = asyncio.ensure_future(self._release(request.group, handles))
            self._releasing.add(task)
            task.add_done_callback(self._releasing.discard)

    async def _release(self, group: str, handles: list[str]) -> None:
        now = duration_pb2.Duration()  # a delay of 0 s: visible again at once
        results = await asyncio.gather(
            *(
                self._conn.call(
                    "Nack",
                    messaging_pb2.NackRequest(group=group, receipt_handle=h, delay=now),
                    DEFAULT_TIMEOUT_S,
                    retry=True,
                )
                for h in handles
            ),
            return_exceptions=True,
        )
        failed = [r for r in results if isinstance(r, PopMQError)]
        if failed:
            logger.warning(
                "giving back %d of %d messages popped for a receive that stopped waiting "
                "failed (%s); they are delivered again after their invisible duration",
                len(failed), len(handles), failed[0],
            )  # fmt: skip

    async def close(self) -> None:
        """Wait (briefly) for the answers of given-up pops and give back what they got,
        then cancel the stream, if one is open; requests still waiting are cancelled."""
        call = self._call
        if call is not None and call.reader.get_loop() is asyncio.get_running_loop():

            def given_up() -> bool:
                return not call.broken and any(
                    future.done() and isinstance(request, messaging_pb2.PopRequest)
                    for future, request in call.pending.values()
                )

            self._answered = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_ANSWERS_WAIT_S):
                    while given_up():
                        await self._answered.wait()
                        self._answered.clear()
            self._answered = None
        if self._releasing:
            await asyncio.gather(*list(self._releasing), return_exceptions=True)
        await super().close()
