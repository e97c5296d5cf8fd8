"""`HopCalls`: a remote broker's sends, pops and acks, on its hop streams or, to a broker
without them (or for a pop that waits), as unary calls.

RemoteBroker is the BrokerAPI facade of a `popmq broker`, and stays Python: its members'
signatures are checked against the Protocol, which compiled methods do not carry. What each
send, pop and ack of a cluster proxy runs lives here instead, compiled
(src/popmq/_compiled.py): the proxy's send path (cluster_send.py, compiled too) stores a
batch through `send_on`, its pops (cluster_pop.py) take `HopCalls.pop_received` and
ClusterBroker acks through `HopCalls.ack`, with no interpreted frame between the broker a
request is routed to and the hop stream's write. A pop that waits is a long poll that
RemoteBroker holds, and answers empty once it drains (`draining`, `release_waiters`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from popmq._gen.popmq.broker.v1 import broker_pb2 as pb
from popmq.broker import hop_wire, send_wire
from popmq.broker_core import PopMQError, UnavailableError
from popmq.broker_core.record_wire import ReceivedBatch
from popmq.broker_core.types import NewMessage, SendResult
from popmq.cluster.hop_frames import HopFrameStream
from popmq.cluster.hop_stream import HopStub, HopUnsupportedError

if TYPE_CHECKING:
    from popmq.cluster.remote_broker import RemoteBroker

__all__ = ["HopCalls", "LongPoll", "UnaryCall", "send_on"]

UnaryCall = Callable[[Callable[..., Any], Any], Awaitable[Any]]
"""One unary call to the broker with the call timeout, its failure raised as a broker error
(RemoteBroker._call)."""
LongPoll = Callable[[bytes, float], Awaitable[bytes]]
"""A unary Pop of these request bytes that the broker may hold up to that wait (s), answered
empty when the remote broker drains (RemoteBroker's long poll)."""


class HopCalls:
    """The sends, pops and acks of one remote broker (module docstring).

    Args:
        shown: How errors name the broker.
        call: The unary call, for a broker without the hop streams.
        long_poll: A pop that waits, or to a broker without the HopStream.
        default_wait_s: The broker's default wait, for a pop that names none (it only sizes
            the call's deadline: the broker applies its own).
    """

    def __init__(
        self,
        shown: str,
        call: UnaryCall,
        long_poll: LongPoll,
        default_wait_s: Callable[[], float],
    ) -> None:
        self._shown = shown
        self._call = call
        self._long_poll = long_poll
        self._default_wait_s = default_wait_s
        self.draining = False
        """Shutdown is coming: pops wait for nothing (RemoteBroker.release_waiters)."""
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

    async def pop_received(self, request: pb.PopRequest, queue_ids: Sequence[int]) -> ReceivedBatch:
        """The pop `request` (pop_wire's) answered as the client gets it, queues numbered by
        `queue_ids` (by local id: ReceivedForm): by the broker, or here from the
        PoppedMessages of a broker of an earlier release (the same bytes)."""
        if self.draining:
            request.wait_s = 0.0
        answer = await self.pop_answer(request, hop_wire.received_form_wire(queue_ids))
        batch = hop_wire.received_from_wire(answer)
        if batch is None:  # a broker of an earlier release
            batch = ReceivedBatch.of(hop_wire.popped_from_wire(answer), queue_ids)
        return batch

    async def pop_answer(self, request: pb.PopRequest, form: bytes) -> bytes:
        """The PopResponse bytes of `request` with `form` appended to it: a pop without a
        wait (nothing to hold or release) goes on HopStream (hop_stream.py), one that waits,
        or to a broker without HopStream, as a unary Pop (the long poll)."""
        wait = request.wait_s if request.HasField("wait_s") else self._default_wait_s()
        hop = self._hop
        data = request.SerializeToString() + form
        if wait == 0.0 and hop is not None and not hop.unsupported:
            try:
                return (await hop.request(hop_wire.HOP_POP, data))[1]
            except HopUnsupportedError:
                pass
        return await self._long_poll(data, wait)

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
