"""`HopCalls`: a remote broker's sends and acks, on its hop streams or, to a broker without
them, as unary calls.

RemoteBroker is the BrokerAPI facade of a `popmq broker`, and stays Python: its members'
signatures are checked against the Protocol, which compiled methods do not carry. What each
send and ack of a cluster proxy runs lives here instead, compiled (src/popmq/_compiled.py),
and the proxy's send path (cluster_send.py, compiled too) stores a batch through `send_on`
and ClusterBroker acks through `HopCalls.ack`: no interpreted frame between the broker a
request is routed to and the hop stream's write. The pops stay RemoteBroker's (a pop may be
a long poll held by the broker, which RemoteBroker answers when it drains).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from popmq._gen.popmq.broker.v1 import broker_pb2 as pb
from popmq.broker import hop_wire, send_wire
from popmq.broker_core import PopMQError, UnavailableError
from popmq.broker_core.types import NewMessage, SendResult
from popmq.cluster.hop_frames import HopFrameStream
from popmq.cluster.hop_stream import HopStub, HopUnsupportedError

if TYPE_CHECKING:
    from popmq.cluster.remote_broker import RemoteBroker

__all__ = ["HopCalls", "UnaryCall", "send_on"]

UnaryCall = Callable[[Callable[..., Any], Any], Awaitable[Any]]
"""One unary call to the broker with the call timeout, its failure raised as a broker error
(RemoteBroker._call)."""


class HopCalls:
    """The sends and acks of one remote broker (module docstring).

    Args:
        shown: How errors name the broker.
        call: The unary call, for a broker without the hop streams.
    """

    def __init__(self, shown: str, call: UnaryCall) -> None:
        self._shown = shown
        self._call = call
        # All None while the remote broker is not started, or after it closed.
        self._stub: HopStub | None = None
        self._hop: HopFrameStream | None = None
        self._hop_send: HopFrameStream | None = None

    def open(self, stub: HopStub, hop: HopFrameStream, hop_send: HopFrameStream) -> None:
        """The remote broker started: its stub, its HopStream (pops and acks) and its
        HopSend stream."""
        self._stub = stub
        self._hop = hop
        self._hop_send = hop_send

    def close(self) -> None:
        """The remote broker closed: calls fail as not started (UnavailableError)."""
        self._stub = None
        self._hop = None
        self._hop_send = None

    def stub(self) -> HopStub:
        """The broker's stub; UnavailableError while the remote broker is not started."""
        stub = self._stub
        if stub is None:
            raise UnavailableError(f"the remote broker {self._shown} is not started")
        return stub

    async def send(self, messages: Sequence[NewMessage]) -> list[SendResult]:
        """Store `messages` on the broker (RemoteBroker.send but its catalog cache)."""
        request = send_wire.send_request_wire(messages)
        return await self.stored(hop_wire.HOP_SEND, request, self.stub().Send)

    async def stored(
        self, field: int, request: bytes, unary: Callable[..., Any]
    ) -> list[SendResult]:
        """The results of the (half) send `request` (its bytes, send_wire.py): on the
        HopSend stream, or as the unary call `unary` to a broker without it."""
        hop = self._hop_send
        if hop is not None and not hop.unsupported:
            try:
                return send_wire.send_results_from_wire((await hop.request(field, request))[1])
            except HopUnsupportedError:
                pass
        results: list[SendResult] = await self._call(unary, request)
        return results

    async def ack(self, group: str, handles: Sequence[str]) -> list[PopMQError | None]:
        """Ack `handles` of `group` on the broker (RemoteBroker.ack): on the HopStream, or
        as a unary Ack to a broker without it."""
        hop = self._hop
        if hop is not None and not hop.unsupported:
            try:
                asked = hop_wire.ack_request_wire(group, handles)
                _, answer = await hop.request(hop_wire.HOP_ACK, asked)
                return hop_wire.ack_results_from_wire(answer)
            except HopUnsupportedError:
                pass
        request = pb.AckRequest(group=group, handles=handles)
        outcomes: list[PopMQError | None] = await self._call(self.stub().Ack, request)
        return outcomes


async def send_on(remote: RemoteBroker, batch: list[NewMessage]) -> list[SendResult]:
    """Store `batch` on `remote`, a cluster proxy's pooled broker: BrokerPool's keep no
    catalog cache, so this is all RemoteBroker.send does for them."""
    calls: HopCalls = remote.hop_calls
    return await calls.send(batch)
