"""`ClusterSend`: a cluster proxy's send path, from a client's batch to the brokers that store it.

- the send is checked whole first (validation.check_send), since it is split: refused with
  the indexes of this send before any part of it is stored;
- messages without an id get one here, so that every retry of the send, on the broker or
  from the client, carries the same ids and meets the broker's dedup window;
- the batch is split by (topic, message group): a FIFO group's part goes to its group's
  queue, any other part to one broker picked by the fault table, which spreads it over its
  queues of the topic (fault_tolerance.SendRouter);
- a broker failure is retried on another broker when the try provably was not stored, else
  on the same broker (send_outcome.py); the broker of each try is noted (in_doubt.py) so
  that a client's repeat of a send goes where the first went. Half sends (transactions)
  follow the same rules: a broker's dedup window answers a repeated half with its first
  transaction, whose id names that broker, so EndTransaction finds it;
- a try that went unanswered on a broker whose connection is down quarantines that broker
  until its connection is up again (quarantine.py): new sends go elsewhere meanwhile;
- a repeat the client marked as one (its retry of a send whose answer it did not get) that
  this proxy does not remember, its first try having gone through another proxy, is looked
  up on every broker of the topic first (`LookupSends`: their dedup windows): it goes to
  the broker holding it, or is routed as a new send when every broker answered that it
  holds none; while a broker that may hold it does not answer, it is not sent anywhere and
  fails retriably as of unknown outcome. A first send asks nothing;
- each broker's local queue ids are turned into the route's global ones.

Runs on the proxy's event loop; the state (rotation, memory) changes between awaits only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial

from popmq.broker_core import (
    NewMessage,
    NotFoundError,
    OutcomeUnknownError,
    SendResult,
    UnavailableError,
    now_ms,
)
from popmq.broker_core import validation as rules
from popmq.broker_core.message_id import MessageIdGenerator
from popmq.cluster.broker_pool import BrokerPool
from popmq.cluster.fault_tolerance import FaultTable, SendRouter
from popmq.cluster.in_doubt import InDoubtSends, Key, send_keys
from popmq.cluster.quarantine import Quarantine
from popmq.cluster.remote_broker import RemoteBroker
from popmq.cluster.send_outcome import BrokerUnansweredError, may_be_stored
from popmq.cluster.topology import Topology
from popmq.coordination.routes import QueueRef, RouteCache, TopicRoute
from popmq.proxy.call_deadline import call_deadline

__all__ = ["DEADLINE_MARGIN_S", "ClusterSend", "Store"]

DEADLINE_MARGIN_S = 0.5
"""How long before a unary call's deadline a send stops waiting for a quarantined broker:
time for the answer to reach the client before its deadline does."""

Store = Callable[[RemoteBroker, list[NewMessage]], Awaitable[list[SendResult]]]
"""How a batch is stored on one broker: a send, or a half send."""


class ClusterSend:
    """The send path of a cluster proxy (module docstring).

    Args:
        topology: Routes and global queue ids.
        routes: The route cache (its live brokers, for FIFO groups).
        pool: Connections to the brokers.
        faults: The proxy's fault table (its clock and config too).
        max_delay_s: The longest delivery delay a send may ask for (the proxy's limit).
        topic_for_send: The topic's route, created first when auto-creation is on.
    """

    def __init__(
        self,
        topology: Topology,
        routes: RouteCache,
        pool: BrokerPool,
        faults: FaultTable,
        *,
        max_delay_s: float,
        topic_for_send: Callable[[str], Awaitable[TopicRoute]],
    ) -> None:
        self._topology = topology
        self._routes = routes
        self._pool = pool
        self._max_delay_s = max_delay_s
        self._topic_for_send = topic_for_send
        self.router = SendRouter(faults)
        self.in_doubt = InDoubtSends(
            faults.clock,
            keep_s=faults.config.in_doubt_keep_s,
            max_entries=faults.config.in_doubt_max_sends,
        )
        self._clock = faults.clock
        self._ids = MessageIdGenerator()
        self.quarantine = Quarantine(pool, faults)

    async def route(
        self,
        messages: Sequence[NewMessage],
        store: Store,
        *,
        repeat: bool = False,
    ) -> list[SendResult]:
        """Store `messages` with `store` on the brokers, results in the messages' order.

        A repeat on a broker is answered by its dedup window, for a send as for a half send.
        `repeat`: the client's retry of a send whose answer it did not get (looked up when
        not remembered).
        """
        rules.check_send(messages, now_ms(), self._max_delay_s)
        if not all(m.message_id for m in messages):
            # Numbered here, not by the broker, so that a retry of this send on its broker
            # carries the same ids and its dedup window recognises a copy stored after all.
            stamp = now_ms()
            ids = self._ids
            messages = [
                m if m.message_id else _variant(m, ids.next(stamp), m.queue_id) for m in messages
            ]
        batches: dict[tuple[str, str], list[int]] = {}
        for index, message in enumerate(messages):
            batches.setdefault((message.topic, message.message_group), []).append(index)
        for topic, _ in batches:
            await self._topic_for_send(topic)
        if len(batches) == 1:
            # The usual send, one topic and no message group: no task to gather.
            ((topic, group),) = batches
            return await self._send_batch(topic, group, list(messages), store, repeat=repeat)
        results: list[SendResult | None] = [None] * len(messages)

        async def send_batch(topic: str, group: str, indexes: list[int]) -> None:
            batch = [messages[i] for i in indexes]
            stored = await self._send_batch(topic, group, batch, store, repeat=repeat)
            for index, result in zip(indexes, stored, strict=True):
                results[index] = result

        outcomes = await asyncio.gather(
            *(send_batch(topic, group, idx) for (topic, group), idx in batches.items()),
            return_exceptions=True,
        )
        for outcome in outcomes:  # every part finishes; the first error is raised
            if isinstance(outcome, BaseException):
                raise outcome
        return [r for r in results if r is not None]

    async def route_half(
        self,
        messages: Sequence[NewMessage],
        producer_group: str,
        check_first_s: float | None,
        *,
        repeat: bool = False,
    ) -> list[SendResult]:
        """`route` for half messages (transactions): the same rules, each broker's dedup
        window answering a repeated half with its first transaction."""
        return await self.route(
            messages,
            lambda remote, batch: remote.send_half(
                batch, producer_group=producer_group, check_first_s=check_first_s
            ),
            repeat=repeat,
        )

    async def _send_batch(
        self,
        topic: str,
        group: str,
        batch: list[NewMessage],
        store: Store,
        *,
        repeat: bool,
    ) -> list[SendResult]:
        topology = self._topology
        pool = self._pool
        quarantine = self.quarantine

        async def to_queue(queue: QueueRef) -> list[SendResult]:
            placed = [_with_queue(m, queue.queue_id) for m in batch]
            remote = pool.get(queue.broker)
            return await _sent(queue.broker, remote, store(remote, placed), quarantine)

        async def to_broker(queue: QueueRef) -> list[SendResult]:
            # The broker spreads the batch over its queues of the topic, as one process
            # spreads a batch over all of them.
            remote = pool.get(queue.broker)
            return await _sent(queue.broker, remote, store(remote, batch), quarantine)

        if group:
            route = topology.route(topic)
            routed = await self.router.send_fifo(
                topic, group, route.queues, to_queue, live=self._routes.live_brokers
            )
        else:
            keys = send_keys(batch)
            pinned = self.in_doubt.broker_of(keys)
            if pinned is None and repeat:
                pinned = await self._holder(topic, batch)
            routed = await self.router.send(
                topic,
                topology.writable(topic),
                partial(self._remembered, keys, to_broker),
                deadline=self._deadline(),
                pinned=pinned,
            )
        broker = routed.queue.broker
        # A batch lands on a few of the broker's queues: each is looked up once.
        global_ids: dict[int, int] = {}
        for result in routed.result:
            local_id = result.queue_id
            global_id = global_ids.get(local_id)
            if global_id is None:
                global_id = global_ids[local_id] = topology.global_id(topic, broker, local_id)
            result.queue_id = global_id
        return routed.result

    def _deadline(self) -> float | None:
        """On the fault table's clock: shortly before the deadline of the client's unary call
        (proxy/call_deadline.py), so that a repeat waiting for its broker's quarantine is
        answered retriably as of unknown outcome (UNAVAILABLE) while the client still
        listens, not cut off by its deadline (DEADLINE_EXCEEDED, after which an official
        RocketMQ client's next try waits again); None without one."""
        deadline = call_deadline()
        if deadline is None:
            return None
        return self._clock() + (deadline - time.monotonic()) - DEADLINE_MARGIN_S

    async def _holder(self, topic: str, batch: list[NewMessage]) -> str | None:
        """The broker of `topic` whose dedup window holds a message of the repeated `batch`
        (sent through another proxy, or forgotten here); None when every broker of the
        topic's route answered that it holds none of them.

        Raises:
            OutcomeUnknownError: a broker of the topic did not answer (down, paused, not a
                live member, fenced) and none answered that it holds them: the first copy
                may be there, so the repeat is not sent to another broker (retriable).
        """
        sent = [(m.message_id, m.dedup_id) for m in batch]
        brokers = self._topology.route(topic).brokers
        pool = self._pool

        async def ask(broker: str) -> list[bool]:
            return await pool.get(broker).lookup_sends(topic, sent)

        answers = await asyncio.gather(*(ask(b) for b in brokers), return_exceptions=True)
        unanswered: list[tuple[str, BaseException]] = []
        for broker, answer in zip(brokers, answers, strict=True):
            if isinstance(answer, BaseException):
                if not isinstance(answer, Exception):
                    raise answer  # cancelled: the client went away
                unanswered.append((broker, answer))
            elif any(answer):
                return broker  # a batch is stored whole on one broker: this one
        if not unanswered:
            return None
        broker, error = unanswered[0]
        raise OutcomeUnknownError(
            f"a repeated send to topic {topic!r} may be stored on broker {broker!r}, which "
            f"did not answer whether it holds it ({str(error) or type(error).__name__}); "
            f"it was not sent to another broker, which would store a second copy; retry "
            "with the same message ids"
        ) from error

    async def _remembered(
        self,
        keys: list[Key],
        send: Callable[[QueueRef], Awaitable[list[SendResult]]],
        queue: QueueRef,
    ) -> list[SendResult]:
        """One try of a send, its messages' broker noted in InDoubtSends while a repeat of
        them may come (a client that gave up on it, or was told its outcome is unknown)."""
        memory = self.in_doubt
        memory.sending(keys, queue.broker)
        started = self._clock()
        try:
            results = await send(queue)
        except BaseException as error:
            # A cancelled try (the client went away) may have reached the broker too.
            if isinstance(error, asyncio.CancelledError) or may_be_stored(error):
                memory.done(keys, queue.broker, took_s=self._clock() - started, stored=False)
            else:
                memory.refused(keys, queue.broker)
            raise
        memory.done(keys, queue.broker, took_s=self._clock() - started, stored=True)
        return results


async def _sent(
    broker: str,
    remote: RemoteBroker,
    send: Awaitable[list[SendResult]],
    quarantine: Quarantine,
) -> list[SendResult]:
    """A send to a broker that does not know a topic its route gives it (its catalog sync is
    behind, or it missed the topic's creation) is that broker's failure, retried elsewhere,
    not the client's NOT_FOUND: the route says the topic exists. One left unanswered may
    quarantine the broker (quarantine.py)."""
    try:
        return await send
    except BrokerUnansweredError:
        quarantine.unanswered(broker, remote)
        raise
    except NotFoundError as error:
        raise UnavailableError(
            f"broker {broker!r} does not hold the topic yet ({error}); retry"
        ) from error


def _with_queue(message: NewMessage, queue_id: int) -> NewMessage:
    if message.queue_id == queue_id:
        return message
    return _variant(message, message.message_id, queue_id)


def _variant(message: NewMessage, message_id: str, queue_id: int | None) -> NewMessage:
    """A copy of `message` with its id and queue id set: what `dataclasses.replace` makes,
    built by the compiled constructor instead (replace reads the fields' list and builds
    keyword arguments, about 3 us a message, the largest part of what numbering a send of
    32 cost the proxy). tests/unit/cluster/test_cluster_send_copies.py checks it against replace
    for every field, so a field added to NewMessage fails there until it is added here."""
    return NewMessage(
        message.topic,
        message.body,
        message.tag,
        message.keys,
        message.properties,
        message_id,
        message.born_time_ms,
        message.message_group,
        message.deliver_at_ms,
        message.dedup_id,
        message.body_encoding,
        message.born_host,
        queue_id,
    )
