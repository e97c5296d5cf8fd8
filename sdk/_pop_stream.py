"""A consumer's receives multiplexed over one ``MessagingService/PopStream`` call.

A held unary Pop costs the server a whole gRPC call (about 20 KB); a pop held on a stream
about 2 KB (docs/pop-stream.md). So a consumer sends its Pops over one bidirectional stream,
opened on the first receive and opened again by the receive after it broke. Receives behave
as unary Pops (sdk/_stream_call.py); a receive that times out or is cancelled sends a cancel
for its pop, and messages the server popped for it anyway are delivered again after their
invisible duration. Acks go over the same stream, so a receive cycle makes no unary call.
"""

from __future__ import annotations

from typing import Any

from popmq.v1 import messaging_pb2
from sdk._stream_call import MAX_IN_FLIGHT, MultiplexedStream

__all__ = ["MAX_IN_FLIGHT", "PopStream"]


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
