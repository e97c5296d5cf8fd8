"""A producer's sends multiplexed over one ``MessagingService/SendStream`` call.

A unary call costs the server and the client more CPU than storing a small message; a
message on an open stream about a third of that (docs/pop-stream.md, "SendStream"). So a
producer sends over one bidirectional stream, opened on the first send and opened again by
the send after it broke. Sends behave as unary SendMessages calls (sdk/_stream_call.py), so
the producer's retry policy treats both alike: a send failed by a broken stream may have been
stored, and its retry carries the same message ids, which the server's dedup window answers
with the first result. A timed-out send's answer, if it comes, is dropped.

The server starts a stream's sends in the order it reads them, which is the order ``send``
was called.
"""

from __future__ import annotations

from typing import Any

from popmq._gen.popmq.v1 import messaging_pb2
from popmq.sdk._stream_call import MAX_IN_FLIGHT, MultiplexedStream

__all__ = ["MAX_IN_FLIGHT", "SendStream"]


class SendStream(
    MultiplexedStream[messaging_pb2.SendMessagesRequest, messaging_pb2.SendMessagesResponse]
):
    """Sends of one producer over one SendStream call, opened lazily and again after it broke."""

    method = "SendStream"
    answer_field = "send"
    ended = "the SendStream ended with sends in flight; send again to open a new stream"

    async def send(
        self, request: messaging_pb2.SendMessagesRequest, timeout_s: float
    ) -> messaging_pb2.SendMessagesResponse | None:
        """Send on the stream; None when ``MAX_IN_FLIGHT`` sends are in flight (send with the
        unary RPC instead). Raises as ``MultiplexedStream._request`` says."""
        return await self._request(request, timeout_s)

    def _wrap(self, request_id: int, request: messaging_pb2.SendMessagesRequest) -> Any:
        return messaging_pb2.SendStreamRequest(request_id=request_id, send=request)
