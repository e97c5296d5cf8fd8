"""Before a restarted cluster broker serves: remove the sends a proxy moved off it when it died.

A proxy moves a send whose broker died mid-call to another broker once the dead broker's
address refuses connections, so that the client sees no error (docs/cluster.md, "A retried
send is stored once"). If the broker had written the send before it died, the message would
be stored twice once it restarts. So a standalone `popmq broker` whose last run did not end
cleanly (broker_core/crash_tail.py) asks every other live broker in etcd, with
BrokerService `LookupSends` (the dedup window a proxy's repeat asks), whether it holds each
message of its crash tail, and removes the messages one of them holds, logging the count at
WARNING. This runs after the catalog sync and before the broker registers (a shard's new
leader: once registered, before it takes writes). Meanwhile its BrokerService refuses
writes (server.py fences it) and the `LookupSends` that name a message of its tail, so two
brokers restarting at once never each remove their copy because the other has one: each
finds the other silent about it. It answers the lookups of every other message: its store
changes meanwhile only by removals from its tail, so two brokers reconciling at once (a
whole cluster restarted) do not wait for each other unless their tails share a send, and
then only for the batches that hold one.

A broker that does not answer (down, paused, still starting, a release without
`LookupSends`) is asked again every `_ASK_EVERY_S` until every live one has answered or
`[cluster] crash_tail_wait_s` has passed; then the broker serves anyway and logs at WARNING
which messages may be stored twice (at-least-once). A broker that is not registered is not
asked: a copy moved to it stays a second copy.

A shard's replica runs this when it takes over as leader (replica.py) unless its last
leader released it or stopped cleanly with the replica's copy as it is now (a clean stop
lets the sends in flight finish first; last_leader.py keeps it across restarts), whatever
the run marker (a replicating store keeps none): the shard's previous leader may have died
mid-send, after replicating a send the proxy then moved to another broker. Its writes (pops
and acks included) are fenced meanwhile as a restarting broker's are, and the removal is
replicated like any write. Lookups ask for durable copies only (`stored_only`): a copy a
peer is still writing, or holds in doubt after a failed fsync or a failed wait for its
followers, does not count. A round that runs out of time goes on where it stopped.

Everything runs on the event loop; the calls to the peers run concurrently. Each round
(listing the peers in etcd, then each peer's batches of lookups one after another) has one
deadline, `_CALL_TIMEOUT_S` away and never past the end of the wait, so the start waits at
most `crash_tail_wait_s` (half a second with 0) for its peers.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from popmq._gen.popmq.broker.v1 import broker_pb2 as pb
from popmq._gen.popmq.broker.v1 import broker_pb2_grpc
from popmq.broker.fencing import WriteFence
from popmq.broker_core import MAX_SEND_MESSAGES, Broker, PopMQError
from popmq.broker_core.crash_tail import TailMessage
from popmq.coordination.coordinator import Coordinator
from popmq.coordination.errors import CoordinationError
from popmq.security.signing import Signer
from popmq.security.tls import ChannelTLS

log = logging.getLogger(__name__)

_ASK_EVERY_S = 1.0
"""How often the brokers that have not answered are asked again."""
_CALL_TIMEOUT_S = 5.0
"""Longest a round of lookups takes (listing the peers, then asking them)."""
_MIN_CALL_S = 0.5
"""Shortest round of lookups: with `crash_tail_wait_s = 0` (ask once), its length; no round
starts with less of the wait left."""
_SHOWN = 20
"""Message ids a warning names at most."""


@dataclass(frozen=True, slots=True)
class _Unanswered:
    """A peer did not answer a lookup."""

    why: str


async def reconcile_crash_tail(
    broker: Broker,
    coordinator: Coordinator,
    *,
    name: str,
    wait_s: float,
    tls: ChannelTLS | None = None,
    signer: Signer | None = None,
    takeover: bool = False,
    fence: WriteFence | None = None,
) -> int:
    """Remove the messages of the broker's crash tail that other live brokers hold (module
    doc); returns how many were removed. Nothing to do after a clean end, unless
    `takeover` (a shard's new leader: its previous leader may have died mid-send).
    `fence`: the broker's, fenced for this reconciliation (it then answers the lookups of
    messages outside the tail)."""
    tail = await broker.crash_tail(takeover=takeover)
    if not tail:
        return 0
    # Lookups of other messages are answered meanwhile (fencing.py, `check_lookup`). A
    # message with a dedup id is indexed under its message id too.
    if fence is not None:
        fence.reconciles(
            frozenset((m.topic, key) for m in tail for key in (m.message_id, m.dedup_id) if key)
        )
    try:
        return await _reconcile(broker, coordinator, tail, name, wait_s, tls, signer, takeover)
    finally:
        if fence is not None:
            fence.reconciles(None)


async def _reconcile(
    broker: Broker,
    coordinator: Coordinator,
    tail: list[TailMessage],
    name: str,
    wait_s: float,
    tls: ChannelTLS | None,
    signer: Signer | None,
    takeover: bool,
) -> int:
    log.warning(
        "broker %r %s: asking the other brokers whether they hold any of the %d message(s) "
        "it stored in its last %gs (sends a proxy may have moved to them when it died)",
        name,
        "takes over from its last leader" if takeover else "did not stop cleanly last time",
        len(tail),
        broker.config.messages.crash_tail_s,
    )
    asking = _Asking(tail, name=name, tls=tls, signer=signer)
    loop = asyncio.get_running_loop()
    # Even `wait_s = 0` asks once, for at least _MIN_CALL_S.
    give_up = loop.time() + max(wait_s, _MIN_CALL_S)
    try:
        while True:
            # One deadline for the whole round (the listing of the peers, then every batch
            # of every call), never past the bound: the start waits no longer than that.
            await asking.round(coordinator, min(give_up, loop.time() + _CALL_TIMEOUT_S))
            left = give_up - loop.time()
            if asking.complete or left < _MIN_CALL_S:  # too little left to ask again
                break
            await asyncio.sleep(min(_ASK_EVERY_S, left - _MIN_CALL_S))
    finally:
        await asking.close()
    held = [m for i, m in enumerate(tail) if i in asking.held]
    try:
        await broker.remove_crash_tail(held)
    except PopMQError as exc:
        log.warning(
            "broker %r could not remove the %d message(s) of its crash tail that other "
            "brokers hold (%s): they are stored twice: %s",
            name,
            len(held),
            exc,
            _listed(held),
        )
        return 0
    if held:
        log.warning(
            "broker %r removed %d of the %d message(s) of its crash tail: other brokers "
            "hold them (%s), sends a proxy moved there when this broker died",
            name,
            len(held),
            len(tail),
            ", ".join(f"{peer}: {n}" for peer, n in sorted(asking.held_by.items())),
        )
    if not asking.complete:
        doubtful = [m for i, m in enumerate(tail) if i not in asking.held]
        log.warning(
            "broker %r serves with %d message(s) of its crash tail that may also be stored on "
            "a broker that did not answer within %gs (%s): %s",
            name,
            len(doubtful),
            wait_s,
            asking.silence(),
            _listed(doubtful),
        )
    elif not held:
        log.info("broker %r: no other broker holds a message of its crash tail", name)
    return len(held)


def _listed(messages: Sequence[TailMessage]) -> str:
    shown = ", ".join(f"{m.topic}/{m.message_id}" for m in messages[:_SHOWN])
    more = len(messages) - _SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


class _Asking:
    """The lookups of one reconciliation: which peers answered, which messages are held."""

    def __init__(
        self,
        tail: list[TailMessage],
        *,
        name: str,
        tls: ChannelTLS | None,
        signer: Signer | None,
    ) -> None:
        self._name = name
        self._tls = tls
        self._metadata = None if signer is None else signer.metadata()
        # Batches of (tail index, message), one topic each, at most a send's size.
        by_topic: dict[str, list[int]] = defaultdict(list)
        for i, m in enumerate(tail):
            by_topic[m.topic].append(i)
        self._batches: list[tuple[str, list[int]]] = [
            (topic, indexes[at : at + MAX_SEND_MESSAGES])
            for topic, indexes in by_topic.items()
            for at in range(0, len(indexes), MAX_SEND_MESSAGES)
        ]
        self._tail = tail
        self.held: set[int] = set()
        self.held_by: dict[str, int] = {}
        self._answered: set[tuple[str, str]] = set()
        """(peer name, address) that answered every batch."""
        self._progress: dict[tuple[str, str], set[int]] = defaultdict(set)
        """Batches (indexes into _batches) each (peer name, address) answered so far: a
        round that ran out of time goes on where it stopped."""
        self._peers: dict[str, str] | None = None
        """Live peers by name -> address, as etcd last listed them (None: never listed)."""
        self._errors: dict[str, str] = {}
        """Why each silent peer (or etcd, under "etcd") did not answer, the last time."""
        self._channels: dict[str, grpc.aio.Channel] = {}

    @property
    def complete(self) -> bool:
        """Every live peer answered every lookup."""
        peers = self._peers
        return peers is not None and all((n, a) in self._answered for n, a in peers.items())

    def silence(self) -> str:
        return "; ".join(f"{who}: {why}" for who, why in sorted(self._errors.items()))

    async def round(self, coordinator: Coordinator, deadline: float) -> None:
        """List the live peers and ask those that have not answered yet, all of it done by
        `deadline` (the loop's time)."""
        try:
            async with asyncio.timeout_at(deadline):
                members = await coordinator.members("broker")
        except TimeoutError:
            self._errors["etcd"] = "it did not list the brokers in time"
        except CoordinationError as exc:
            self._errors["etcd"] = str(exc) or type(exc).__name__
        else:
            self._errors.pop("etcd", None)
            self._peers = {
                n: str(m.info.get("addr", "")) for n, m in members.items() if n != self._name
            }
        peers = self._peers or {}
        asked = [(n, a) for n, a in peers.items() if (n, a) not in self._answered]
        answers = await asyncio.gather(*(self._ask(n, a, deadline) for n, a in asked))
        for (peer, address), answer in zip(asked, answers, strict=True):
            if answer is not None:
                self._errors[peer] = answer.why
                continue
            self._errors.pop(peer, None)
            self._answered.add((peer, address))

    def _found(self, peer: str, indexes: set[int]) -> None:
        """`peer` holds these messages of the tail (a durable copy each)."""
        found = indexes - self.held
        if found:
            self.held_by[peer] = self.held_by.get(peer, 0) + len(found)
            self.held |= found

    async def _ask(self, peer: str, address: str, deadline: float) -> _Unanswered | None:
        """Ask `peer` about the batches it has not answered yet (what it holds goes into
        `held` batch by batch); None once it answered them all, else why it did not by
        `deadline`."""
        if not address:
            return _Unanswered("its registration has no address")
        stub = broker_pb2_grpc.BrokerServiceStub(self._channel(address))  # type: ignore[no-untyped-call]
        answered = self._progress[(peer, address)]
        loop = asyncio.get_running_loop()
        refused: _Unanswered | None = None
        for batch, (topic, indexes) in enumerate(self._batches):
            if batch in answered:
                continue
            timeout_s = deadline - loop.time()
            if timeout_s <= 0:
                return _Unanswered("no time was left for all of its lookups")
            messages = [self._tail[i] for i in indexes]
            # Durable copies only: a send in flight at the peer may still fail, and then
            # removing this copy would leave none (the peer answers UNAVAILABLE meanwhile).
            request = pb.LookupSendsRequest(
                topic=topic, message_ids=[m.message_id for m in messages], stored_only=True
            )
            if any(m.dedup_id for m in messages):
                request.dedup_ids.extend(m.dedup_id for m in messages)
            try:
                answer: Any = await stub.LookupSends(
                    request, timeout=timeout_s, metadata=self._metadata
                )
            except grpc.aio.AioRpcError as exc:
                refused = _Unanswered(f"{exc.code().name}: {exc.details()}")
                if exc.code() is not grpc.StatusCode.UNAVAILABLE:
                    return refused
                # Refused now (a message of the peer's own tail, a send of one in flight
                # there): its other batches may be answered all the same.
                continue
            if len(answer.held) != len(indexes):
                return _Unanswered(f"{len(answer.held)} answers to {len(indexes)} lookups")
            self._found(peer, {i for i, held in zip(indexes, answer.held, strict=True) if held})
            answered.add(batch)
        return refused

    def _channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            if self._tls is None:
                channel = grpc.aio.insecure_channel(address)
            else:
                channel = grpc.aio.secure_channel(
                    address, self._tls.credentials, options=self._tls.options()
                )
            self._channels[address] = channel
        return channel

    async def close(self) -> None:
        channels, self._channels = self._channels, {}
        await asyncio.gather(*(c.close() for c in channels.values()))
