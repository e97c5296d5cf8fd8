"""RocketMQ 5 consumers in popmq's client registry (proxy/clients.py), and FIFO queue claims.

Every v2 consumer that heartbeats with a group is registered in the registry popmq.v1
consumers use, so one view lists a group's live members. Push consumers of a FIFO group
(RocketMQ consumeMessageOrderly) register queue-exclusive: the registry splits the topic's
queues among them with AVERAGE (RocketMQ's default; v2 clients name no strategy), one claim
per queue, and each receives only from queues it holds. Every other consumer registers in
POP mode, for visibility: normal groups keep RocketMQ's single queue -1 assignment.

Official clients do not report which queues they hold (popmq.v1 clients send
``held_queue_ids``), so the proxy derives it: the claims the client holds now, plus queues
it asked to receive from since its previous query. The second part matters after a server
restart, when the registry knows no claims and grants no unreported queue of an existing
group during its restart grace: a client still receiving from a queue reports it that way
and keeps it. Each query then releases at once the claims outside the client's target, so a
queue moves at its old owner's next query (official clients query every 5 s) and goes to
the new owner at the new owner's next one. The release also ends the old owner's receives
waiting on the queue. Order within a message group does not rest on this handover: the
broker holds a group's next message until the previous one is acked.

A client that stops calling loses its claims after ``missed_heartbeats`` of its heartbeat
intervals (the registry's default interval, 10 s like RocketMQ's clients), as any member
does; NotifyClientTermination and the end of its session release them at once.

In a cluster the registry is shared by the proxies (clients.py), while what this module
keeps (queues tried, claim ends, waiting receives) is about the calls this proxy serves: an
official client sends all of them to one proxy until it fails over. A receive is checked
against the registry's view of the group as this proxy last read or wrote it, which the
client's own queries keep exact for its own claims, so a receive never waits on the
coordinator. A session that ends here by silence releases the client's claims only if its
last registry call came through this proxy (it may be calling another one now).

Runs on the server's event loop; only the registry's calls wait (on the coordinator).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from popmq.proxy.clients import ClientRegistry, ConsumeMode, Registration
from popmq.proxy.rocketmq.codes import Code, ProtocolError

__all__ = ["ConsumerAssignments"]

_GroupTopic = tuple[str, str]


@dataclass(slots=True)
class _Client:
    """What the proxy remembers about one v2 client beside the registry."""

    modes: dict[str, ConsumeMode] = field(default_factory=dict)
    """Group -> the mode it was registered with."""
    tried: dict[_GroupTopic, set[int]] = field(default_factory=dict)
    """Queues it asked to receive from since its last query (reported as held)."""
    claim_until: dict[_GroupTopic, float] = field(default_factory=dict)
    """Clock time its claims end unless a query renews them."""
    waiting: dict[tuple[str, str, int], set[asyncio.Future[None]]] = field(default_factory=dict)
    """(group, topic, queue) -> its receives waiting there; resolved when the claim ends."""


class ConsumerAssignments:
    """v2 clients as registry members; per-queue claims of FIFO push consumers.

    Args:
        registry: The server's client registry, shared with popmq.v1.
        clock: Wall-clock seconds, the same clock as the registry's (a seam for tests).
    """

    def __init__(self, registry: ClientRegistry, *, clock: Callable[[], float] = time.time) -> None:
        self.registry = registry
        self._clock = clock
        # client id -> its state. Guarded by running on one event loop.
        self._clients: dict[str, _Client] = {}

    async def register(
        self, client_id: str, group: str, queue_counts: Mapping[str, int], *, exclusive: bool
    ) -> None:
        """Register or renew a consumer of the topics in `queue_counts` (they exist).

        Raises what ClientRegistry.heartbeat raises (a malformed id, a mode conflict, too
        many clients).
        """
        mode = ConsumeMode.QUEUE_EXCLUSIVE if exclusive else ConsumeMode.POP
        registration = Registration(
            client_id=client_id, group=group, topics=tuple(queue_counts), mode=mode
        )
        await self.registry.heartbeat(registration, queue_counts)
        self._clients.setdefault(client_id, _Client()).modes[group] = mode

    async def query(
        self, client_id: str, group: str, topic: str, queue_count: int
    ) -> tuple[int, ...]:
        """The queues the client may receive from now; renews them and releases the rest.

        Raises:
            FailedPreconditionError: The client is not registered queue-exclusive for the
                topic (see ClientRegistry.query_assignment).
        """
        client = self._clients.setdefault(client_id, _Client())
        key = (group, topic)
        before = {
            q for q, owner in self.registry.owners(group, topic).items() if owner == client_id
        }
        tried = client.tried.pop(key, set())
        held = sorted(q for q in before | tried if q < queue_count)
        now = self._clock()  # before the registry's: our claim end is never later than its
        first = await self.registry.query_assignment(client_id, group, topic, queue_count, held)
        granted = first.queue_ids
        if set(held) - set(granted):
            # Claims outside the target (kept by the first call) end now, not in a claim time.
            await self.registry.query_assignment(client_id, group, topic, queue_count, granted)
        client.claim_until[key] = now + first.claim_s
        self._revoke(client, group, topic, before.difference(granted))
        return granted

    def check_receive(self, client_id: str, group: str, topic: str, queue_id: int) -> float:
        """Seconds the client's claim on the queue still lasts.

        Raises:
            ProtocolError: FORBIDDEN, the client does not hold the queue's claim.
        """
        client = self._clients.setdefault(client_id, _Client())
        key = (group, topic)
        client.tried.setdefault(key, set()).add(queue_id)
        owner = self.registry.owners(group, topic).get(queue_id)
        if owner != client_id:
            holder = "no client" if owner is None else f"client {owner!r}"
            raise ProtocolError(
                Code.FORBIDDEN,
                f"client {client_id!r} does not hold queue {queue_id} of topic {topic!r} in "
                f"FIFO group {group!r} ({holder} does): receive only from the queues "
                "QueryAssignment returns",
            )
        return max(0.0, client.claim_until.get(key, 0.0) - self._clock())

    @contextlib.contextmanager
    def receiving(
        self, client_id: str, group: str, topic: str, queue_id: int
    ) -> Iterator[asyncio.Future[None]]:
        """A future resolved when the client's claim on the queue ends, for one receive."""
        client = self._clients.setdefault(client_id, _Client())
        key = (group, topic, queue_id)
        ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        client.waiting.setdefault(key, set()).add(ended)
        try:
            yield ended
        finally:
            waiters = client.waiting.get(key)
            if waiters is not None:
                waiters.discard(ended)
                if not waiters:
                    del client.waiting[key]
            ended.cancel()

    def knows(self, client_id: str) -> bool:
        return client_id in self._clients

    async def end_client(self, client_id: str, *, if_last_here: bool = False) -> int:
        """Forget a client that said goodbye or whose session ended; its claims end now
        (with `if_last_here`, only if its last registry call came through this proxy).

        Returns how many registrations it had.
        """
        client = self._clients.pop(client_id, None)
        if client is None:
            return 0
        for waiters in client.waiting.values():
            for ended in waiters:
                if not ended.done():
                    ended.set_result(None)
        registrations = 0
        for group in client.modes:
            if await self.registry.unregister(client_id, group, if_last_here=if_last_here):
                registrations += 1
        return registrations

    def _revoke(self, client: _Client, group: str, topic: str, queue_ids: set[int]) -> None:
        for queue_id in queue_ids:
            for ended in client.waiting.pop((group, topic, queue_id), ()):
                if not ended.done():
                    ended.set_result(None)
