"""Latency fault tolerance for sends in cluster mode: which broker and queue a send goes to.

A proxy in front of several brokers records how long each send took on each broker, and
whether it failed, and keeps sends away from a broker that was slow or failing for a while
(RocketMQ's MQFaultStrategy and LatencyFaultTolerance; reference/mechanisms.md). A send that
fails on one broker with a broker failure is tried again at once on another, inside the
proxy, so a client sees no error while other brokers are up.

The pieces:

- `FaultToleranceConfig`: the latency -> isolation table, the failure charge, the attempts.
- `FaultTable`: per-broker state (recorded latency, isolated until when), the pick of a
  (broker, queue) for a send with a rotating index per topic, the all-isolated fallback and
  the FIFO rule (a message group keeps its queue; if that queue's broker is out, the send
  fails retriably rather than moving the group).
- Quarantine: a broker whose connection is down (a call to it went unanswered and its
  channel is not connected) gets no new send until a probe sees its connection up again
  (`unreachable`, `reachable`; quarantine.py runs the probe), rather than for a fixed
  isolation after which a client's send finds the cut again.
- `SendRouter`: the attempts loop around an async send-to-broker function given by the
  caller: pick, send, record, retry broker failures only: on another broker when the failed
  try provably was not stored, else on the same broker (send_outcome.py), so that a retry
  never stores a second copy.

Pure logic: no I/O, no tasks, no locks (a repeat waiting for a quarantine to end polls the
table with the injected sleep; a repeat refused the wait is logged, at most once a minute).
Time comes from an injectable monotonic clock (seconds, `time.monotonic` by default) so
tests are exact. Everything runs on the proxy's
event loop thread: the table's state changes only in synchronous code between awaits, so it
needs no lock. Memory is bounded: one entry per broker seen (dropped by `forget`) and one
rotation counter per topic, at most `max_tracked_topics` of them (least recently used go).

Where popmq differs from RocketMQ, and why, is said at each place and in
docs/fault-tolerance.md.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import zlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Container, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

from popmq.broker_core import (
    InvalidArgumentError,
    NotEnoughReplicasError,
    NotLeaderError,
    OutcomeUnknownError,
    PopMQError,
    UnavailableError,
)
from popmq.cluster.send_outcome import known_down, may_be_stored
from popmq.coordination.config import FaultToleranceConfig
from popmq.coordination.routes import QueueRef
from popmq.proxy.status import BrokerFaultState

log = logging.getLogger(__name__)

__all__ = [
    "RETRY_ON_ANOTHER_BROKER",
    "FaultSnapshot",
    "FaultTable",
    "Routed",
    "SendRouter",
    "fifo_queue_index",
    "is_broker_failure",
]

T = TypeVar("T")

Clock = Callable[[], float]
"""A monotonic clock in seconds (time.monotonic, or a fake one in tests)."""

RETRY_ON_ANOTHER_BROKER: frozenset[str] = frozenset(
    {"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED"}
)
"""Error codes that say "this broker, now" rather than "this request": the send is retried
(on another broker, or on the same one when it may have been stored there) and the broker is
charged a failure. UNAVAILABLE: the broker is down,
unreachable or shutting down. DEADLINE_EXCEEDED: it did not answer in time. RESOURCE_EXHAUSTED:
its disk is full or it sheds load; another broker may well have room. Anything else
(INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION, INTERNAL, ...) is about the request or a
bug, would fail the same way on every broker, and is never retried."""


_MAX_FORGOTTEN = 4096
"""Brokers whose last forget time is kept (the oldest beyond are dropped)."""


@dataclass(frozen=True, slots=True)
class FaultSnapshot:
    """Counters an exporter reads. Totals only grow (they survive `forget`); the per-broker
    ones start again at 0 when a broker is forgotten and comes back."""

    brokers: tuple[BrokerFaultState, ...]
    """Every broker the table has an entry for, by name."""
    isolations: int
    """Times any broker went from available to isolated."""
    failures: int
    """Failed sends recorded."""
    retries: int
    """Extra attempts of sends: on another broker, or on the same one after a try whose
    outcome is unknown (one per extra attempt)."""
    exhausted: int
    """Sends that failed on every broker they were tried on, or whose outcome stayed unknown
    (the client saw the error)."""
    fallback_picks: int
    """Picks made while every candidate broker was isolated (the soonest back was used)."""
    fifo_refusals: int
    """FIFO sends refused because their group's queue is on an unavailable broker."""


@dataclass(slots=True)
class _Topic:
    """A topic's rotation; guarded by running on the event loop thread only."""

    position: int
    """The next rotation position (taken modulo the number of usable queues)."""
    layout: tuple[tuple[str, tuple[int, ...]], ...] = ()
    """The queues `order` was built from (broker -> queue ids, as given)."""
    order: tuple[QueueRef, ...] = ()
    """`layout` interleaved across brokers: kept, so a send does not rebuild it."""


@dataclass(slots=True)
class _Broker:
    """Mutable per-broker state; guarded by running on the event loop thread only."""

    latency_s: float = 0.0
    isolated_since: float = -math.inf
    """When the current isolation was recorded (a success that started earlier cannot end
    it: it says nothing about the broker after the failure)."""
    available_at: float = -math.inf
    isolations: int = 0
    failures: int = 0
    unknown_outcomes: int = 0
    unreachable: bool = False
    """Quarantined: its connection is down; no send is picked for it until `reachable`."""
    unreachable_since: float = 0.0
    """When the quarantine in force began (meaningful while `unreachable`)."""
    waiting: int = 0
    """Repeats of sends waiting now for its quarantine to end (SendRouter)."""
    waits: int = 0
    """Repeats that waited for its quarantine to end since it was first seen."""
    wait_refusals: int = 0
    """Repeats refused the wait (quarantine_max_waiting reached) since it was first seen."""


_UNREACHABLE_SHOWN_S = 1.0
"""What `isolated_for_s` says at least for a quarantined broker (its end is not known: the
probe's next look): never 0, which would say that sends use it."""


def fifo_queue_index(message_group: str, queue_count: int) -> int:
    """The index of a message group's queue among `queue_count` queues.

    CRC-32 (zlib, IEEE polynomial) of the group's UTF-8 bytes, modulo the count: the rule
    popmq's local mode uses (broker_core's QueueChooser), so a one-broker cluster places a
    group on the same queue as `popmq serve`. It is the same on every proxy, process and
    restart (Python's own `hash` of a str is salted per process, so never that). RocketMQ 5's
    proxy uses Guava's consistentHash of Java's String.hashCode; popmq keeps its own rule.
    """
    if not message_group:
        raise InvalidArgumentError(
            "message_group is empty: only a FIFO message (one with a group) is placed by hash",
            field="message_group",
            value=message_group,
            allowed="a non-empty group name",
        )
    if queue_count < 1:
        raise InvalidArgumentError(
            f"queue_count {queue_count} must be at least 1",
            field="queue_count",
            value=queue_count,
            allowed=">= 1",
        )
    return zlib.crc32(message_group.encode()) % queue_count


def is_broker_failure(error: BaseException) -> bool:
    """Whether a send's error is the broker's (retry elsewhere, charge the broker) rather
    than the request's: a PopMQError whose code is in RETRY_ON_ANOTHER_BROKER, or a
    TimeoutError (the caller's own deadline around the call)."""
    if isinstance(error, PopMQError):
        return error.code in RETRY_ON_ANOTHER_BROKER
    return isinstance(error, TimeoutError)


class FaultTable:
    """Per-broker latency and isolation, and the choice of a queue for each send.

    Args:
        config: The tables and bounds.
        clock: Monotonic seconds; injected by tests.
    """

    def __init__(
        self, config: FaultToleranceConfig | None = None, *, clock: Clock = time.monotonic
    ) -> None:
        self.config = config or FaultToleranceConfig()
        self._clock = clock
        # broker name -> its state; guarded by running on the event loop thread only.
        self._brokers: dict[str, _Broker] = {}
        # When each broker was last forgotten (table clock): failures of sends begun before
        # belong to a process that is gone.
        self._forgotten: dict[str, float] = {}
        # topic -> its rotation state, least recently used first; same guard.
        self._topics: OrderedDict[str, _Topic] = OrderedDict()
        self._isolations = 0
        self._failures = 0
        self._retries = 0
        self._exhausted = 0
        self._fallback_picks = 0
        self._fifo_refusals = 0

    @property
    def clock(self) -> Clock:
        """The table's clock (the SendRouter times sends with it)."""
        return self._clock

    # -- recording ---------------------------------------------------------------------

    def update(self, broker: str, latency_s: float, *, failed: bool) -> None:
        """Record one send on `broker` that took `latency_s` and failed or not.

        A failure isolates the broker for the isolation of max(latency, failure_latency_s),
        extending (never shortening) an isolation in force. A success sets the isolation of
        its own latency (0 for a fast one: the broker is back at once), unless the send began
        before the isolation in force was recorded: such a send says nothing about the
        broker since, so it can extend the isolation but not end it.
        """
        if not (math.isfinite(latency_s) and latency_s >= 0):
            raise InvalidArgumentError(
                f"latency_s {latency_s} of a send on broker {broker!r} must be finite and >= 0",
                field="latency_s",
                value=latency_s,
                allowed=">= 0",
            )
        if not self.config.enabled:
            return
        now = self._clock()
        if failed and now - latency_s < self._forgotten.get(broker, -math.inf):
            # Sent before the broker was forgotten (it registered again: a restart, a shard's
            # new leader): the failure was the old process's, not the one there now.
            return
        state = self._brokers.get(broker)
        if state is None:
            state = self._brokers[broker] = _Broker()
        was_available = state.available_at <= now
        if failed:
            charged = max(latency_s, self.config.failure_latency_s)
            state.latency_s = charged
            state.failures += 1
            self._failures += 1
            state.available_at = max(state.available_at, now + self.config.isolation_for(charged))
            state.isolated_since = now
        else:
            state.latency_s = latency_s
            state.unreachable = False  # it answered: its connection is up
            until = now + self.config.isolation_for(latency_s)
            started = now - latency_s
            if started >= state.isolated_since:
                state.available_at = until
            else:
                state.available_at = max(state.available_at, until)
            if until > now:
                state.isolated_since = now
        if was_available and state.available_at > now:
            state.isolations += 1
            self._isolations += 1

    def record_retry(self) -> None:
        """Count one extra attempt of a send (SendRouter calls it)."""
        self._retries += 1

    def record_unknown_outcome(self, broker: str) -> None:
        """Count one try of a send on `broker` whose outcome is unknown (SendRouter)."""
        state = self._brokers.get(broker)
        if state is None:
            state = self._brokers[broker] = _Broker()
        state.unknown_outcomes += 1

    def record_wait(self, broker: str, *, began: bool) -> None:
        """Count a repeat that begins (`began`) or ends waiting for `broker`'s quarantine."""
        state = self._brokers.get(broker)
        if began:
            if state is None:
                state = self._brokers[broker] = _Broker()
            state.waiting += 1
            state.waits += 1
        elif state is not None and state.waiting > 0:  # forgotten meanwhile: not counted
            state.waiting -= 1

    def record_wait_refused(self, broker: str) -> None:
        """Count a repeat for `broker` not let wait (quarantine_max_waiting reached)."""
        state = self._brokers.get(broker)
        if state is None:
            state = self._brokers[broker] = _Broker()
        state.wait_refusals += 1

    def record_exhausted(self) -> None:
        """Count one send that failed on every broker it was tried on."""
        self._exhausted += 1

    def forget(self, broker: str) -> None:
        """Drop a broker that left the cluster (its lease lapsed, it was removed) or
        registered again, so the table holds only brokers that exist, as they are now.
        Failures of sends begun before are not recorded. Unknown names are ignored."""
        self._brokers.pop(broker, None)
        self._forgotten[broker] = self._clock()
        if len(self._forgotten) > _MAX_FORGOTTEN:
            oldest = min(self._forgotten, key=self._forgotten.__getitem__)
            del self._forgotten[oldest]

    def unreachable(self, broker: str) -> bool:
        """Quarantine `broker`: a call to it went unanswered and its connection is down. No
        send is picked for it (unless every broker is out: `pick`'s fallback takes it last)
        until `reachable` or a send on it succeeds; a FIFO send to it is refused. Returns
        whether it was not quarantined already (the caller then starts a probe); False, and
        nothing changes, when the table is disabled."""
        if not self.config.enabled:
            return False
        state = self._brokers.get(broker)
        if state is None:
            state = self._brokers[broker] = _Broker()
        if state.unreachable:
            return False
        state.unreachable = True
        state.isolated_since = state.unreachable_since = self._clock()
        if state.available_at <= state.isolated_since:
            state.isolations += 1
            self._isolations += 1
        return True

    def reachable(self, broker: str) -> None:
        """End `broker`'s quarantine: its connection is up again. The isolation its failed
        sends were charged ends too: they failed for want of the connection, which says
        nothing of the broker now. Unknown or unquarantined brokers are left as they are."""
        state = self._brokers.get(broker)
        if state is None or not state.unreachable:
            return
        state.unreachable = False
        now = self._clock()
        state.available_at = min(state.available_at, now)
        state.isolated_since = now

    def is_reachable(self, broker: str) -> bool:
        """Whether `broker` is not quarantined (`unreachable`)."""
        state = self._brokers.get(broker)
        return state is None or not state.unreachable

    def forget_topic(self, topic: str) -> None:
        """Drop a deleted topic's rotation position. Unknown names are ignored."""
        self._topics.pop(topic, None)

    # -- reading -----------------------------------------------------------------------

    def is_available(self, broker: str) -> bool:
        """Whether sends may go to `broker` now (a broker never recorded is available)."""
        state = self._brokers.get(broker)
        return state is None or (not state.unreachable and state.available_at <= self._clock())

    def isolated_for_s(self, broker: str) -> float:
        """Seconds until `broker` is available again; 0 when it is (a quarantined one: at
        least _UNREACHABLE_SHOWN_S)."""
        state = self._brokers.get(broker)
        return 0.0 if state is None else _isolated_for_s(state, self._clock())

    def snapshot(self) -> FaultSnapshot:
        """The counters and every broker's state, for an exporter."""
        now = self._clock()
        return FaultSnapshot(
            brokers=tuple(
                BrokerFaultState(
                    broker=name,
                    latency_s=state.latency_s,
                    isolated_for_s=_isolated_for_s(state, now),
                    isolations=state.isolations,
                    failures=state.failures,
                    unknown_outcomes=state.unknown_outcomes,
                    quarantined_for_s=now - state.unreachable_since if state.unreachable else None,
                    quarantine_waiting=state.waiting,
                    quarantine_waits=state.waits,
                    quarantine_wait_refusals=state.wait_refusals,
                )
                for name, state in sorted(self._brokers.items())
            ),
            isolations=self._isolations,
            failures=self._failures,
            retries=self._retries,
            exhausted=self._exhausted,
            fallback_picks=self._fallback_picks,
            fifo_refusals=self._fifo_refusals,
        )

    # -- picking -----------------------------------------------------------------------

    def pick(
        self,
        topic: str,
        queues: Mapping[str, Sequence[int]],
        *,
        avoid: Collection[str] = (),
    ) -> QueueRef | None:
        """Choose the queue for a (non-FIFO) send of `topic`.

        Args:
            topic: The topic; each has its own rotation position.
            queues: The topic's writable queues on live brokers: broker name -> local queue
                ids. Brokers with no queue are ignored.
            avoid: Brokers not to use (those this send already failed on).

        Returns:
            The next queue, in rotation, among the queues of available brokers; if every
            candidate broker is isolated, a queue of the one that becomes available soonest
            (RocketMQ's pickOneAtLeast idea: a send is tried rather than refused, since the
            isolation is a guess and the send's own retry bounds the cost); None when no
            broker outside `avoid` holds a queue.

        The rotation runs over the candidate queues interleaved across brokers (a0 b0 c0 a1
        b1 c1 ...), filtered to the available ones before the position is applied, so
        consecutive sends go to different brokers and an isolated broker's share is spread
        evenly over the others rather than landing on the queue after it (the skew of
        RocketMQ's skip-to-next-available). Each queue gets an equal share, so a broker's
        share follows its queue count, as in RocketMQ.
        """
        topic_state = self._topic(topic)
        layout = tuple((broker, tuple(ids)) for broker, ids in queues.items() if ids)
        if layout != topic_state.layout:  # the route changed (or first send): build once
            topic_state.layout = layout
            topic_state.order = _interleave(layout)
        order = topic_state.order
        now = self._clock()
        enabled = self.config.enabled
        usable = {
            broker
            for broker, _ in layout
            if broker not in avoid
            and (
                not enabled
                or (state := self._brokers.get(broker)) is None
                or (state.available_at <= now and not state.unreachable)
            )
        }
        if len(usable) < len(layout):
            order = tuple(queue for queue in order if queue.broker in usable)
        if order:
            position = topic_state.position
            topic_state.position = position + 1
            return order[position % len(order)]
        candidates = [broker for broker, _ in layout if broker not in avoid]
        if not candidates:
            return None
        # Every candidate is isolated (only possible when enabled).
        self._fallback_picks += 1
        broker = min(candidates, key=self._soonest_back_key)
        ids = sorted(dict(layout)[broker])
        position = topic_state.position
        topic_state.position = position + 1
        return QueueRef(broker, ids[position % len(ids)])

    def next_after_failure(
        self, topic: str, failed_broker: str, queues: Mapping[str, Sequence[int]]
    ) -> QueueRef | None:
        """The queue for a retry after a send failed on `failed_broker`: any other broker,
        chosen as `pick` does; None when no other broker holds a queue of the topic."""
        return self.pick(topic, queues, avoid=(failed_broker,))

    def pick_fifo(
        self,
        topic: str,
        message_group: str,
        queues: Sequence[QueueRef],
        *,
        live: Container[str] | None = None,
    ) -> QueueRef:
        """The queue of a FIFO message group: fixed by hash, never moved.

        Args:
            topic: The topic (named in the error).
            message_group: The group; its queue is queues[fifo_queue_index(group, len)].
            queues: All the topic's queues in the route's global order, including those of
                brokers that are down: the hash runs over the whole list so that a broker's
                loss does not move the groups of the other brokers.
            live: Brokers that are members of the cluster now (None: all are).

        Raises:
            UnavailableError: (retriable) the group's queue is on a broker that is not live or
                is isolated. Moving the group to another queue would let its next messages
                be delivered before the ones already stored on that broker, so the send waits
                for the broker instead (the client retries with backoff).
            UnavailableError: the topic has no queue at all.
        """
        if not queues:
            raise UnavailableError(f"topic {topic!r} has no queue: no broker holds it")
        queue = queues[fifo_queue_index(message_group, len(queues))]
        if live is not None and queue.broker not in live:
            why = "is not a live member of the cluster"
        elif not self.is_reachable(queue.broker):
            why = "cannot be reached now (its connection is down)"
        elif not self.is_available(queue.broker):
            why = (
                f"is isolated for another {self.isolated_for_s(queue.broker):.1f} s after"
                " failed or slow sends"
            )
        else:
            return queue
        self._fifo_refusals += 1
        raise UnavailableError(
            f"FIFO message group {message_group!r} of topic {topic!r} is kept on queue"
            f" {queue.queue_id} of broker {queue.broker!r}, which {why}; FIFO order forbids"
            " moving the group to another broker, so retry the send later"
        )

    def _topic(self, topic: str) -> _Topic:
        """The topic's rotation state, created on first use; the least recently used topic
        is dropped beyond max_tracked_topics."""
        state = self._topics.get(topic)
        if state is None:
            if len(self._topics) >= self.config.max_tracked_topics:
                self._topics.popitem(last=False)
            # A spread start rather than 0 for every topic, deterministic for tests.
            state = self._topics[topic] = _Topic(position=zlib.crc32(topic.encode()))
        else:
            self._topics.move_to_end(topic)
        return state

    def _soonest_back_key(self, broker: str) -> tuple[bool, float, float, str]:
        # Only called for brokers with an entry (all candidates are isolated); quarantined
        # ones last: their end is not known.
        state = self._brokers[broker]
        return (state.unreachable, state.available_at, state.latency_s, broker)


def _isolated_for_s(state: _Broker, now: float) -> float:
    left = max(0.0, state.available_at - now)
    return max(left, _UNREACHABLE_SHOWN_S) if state.unreachable else left


def _interleave(layout: Sequence[tuple[str, Sequence[int]]]) -> tuple[QueueRef, ...]:
    """Queues taken one per broker in turn, brokers by name, queue ids ascending."""
    columns = [
        [QueueRef(broker, queue_id) for queue_id in sorted(ids)] for broker, ids in sorted(layout)
    ]
    depth = max((len(column) for column in columns), default=0)
    return tuple(column[i] for i in range(depth) for column in columns if i < len(column))


class Routed(NamedTuple, Generic[T]):
    """A send's outcome: the send function's result and where it was stored."""

    result: T
    queue: QueueRef
    """The queue (and broker) that stored it."""
    attempts: int
    """Tries it took (1 when the first broker took it)."""


SendTo = Callable[[QueueRef], Awaitable[T]]
"""The caller's send of one request to one queue of one broker."""

Sleep = Callable[[float], Awaitable[object]]
"""asyncio.sleep, or a fake one that moves a fake clock in tests."""

_IN_DOUBT_BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)
"""Pause before each repeat of a send with an unknown outcome on its broker (the last one
again after that): quick first, for a connection that dropped and reconnects at once."""


_REFUSAL_LOG_EVERY_S = 60.0
"""A repeat refused the wait (quarantine_max_waiting reached) is logged at most this often:
a cut under load refuses many at once."""
_QUARANTINE_POLL_S = 0.1
"""How often a repeat waiting for its broker's quarantine to end looks at it (the probe
looks at the connection every 0.25 s, quarantine.py)."""


class SendRouter:
    """The attempts loop of a send: pick a queue, send, record, retry a broker failure. It
    has no I/O of its own; the cluster proxy gives it the send function.

    Where a retry goes depends on whether the failed try may have been stored
    (send_outcome.py). One the broker provably did not store (it refused before writing, or
    the request never left) goes to another broker at once: a send is tried on at most
    `max_attempts` distinct brokers. RocketMQ's client, with two brokers and three attempts,
    comes back to the first on the third try; popmq does not: that broker failed moments ago
    and is isolated, and the client's own retry, after its backoff, is the better chance.

    One that may have been stored (a timeout, a connection dropped mid-call) stays on its
    broker, whose dedup window answers a repeat with the stored copy's result: it is
    tried there again, with a short backoff, for up to `in_doubt_retry_s`, and then fails
    with a retriable OutcomeUnknownError naming the broker; the stored copy, if any, is the
    only one. Sent to another broker it would be stored twice, since dedup is per broker.
    A client's repeat of such a send (`pinned` to its broker) whose broker is quarantined
    waits for the quarantine to end, within the same in_doubt_retry_s, rather than fail at
    once: an application told at once could send the message again under a new id, which
    any broker would store as a second copy.
    The one exception: a broker whose address refuses connections is known down (no process
    listens there), and the send moves on, so that a killed broker costs the clients no
    error; the copy it may have written before dying is then a second one if it restarts
    (docs/cluster.md states the guarantee and this exception). Half messages follow the
    same rules: a broker's dedup window answers a repeated half with its first transaction.
    """

    def __init__(self, table: FaultTable, *, sleep: Sleep = asyncio.sleep) -> None:
        self.table = table
        self._sleep = sleep
        self._in_doubt = 0
        self._in_doubt_failed = 0
        self._moved_off_dead = 0
        self._waiting = 0  # sends waiting for a quarantine to end now (quarantine_max_waiting)
        self._waited = 0
        self._refused = 0  # repeats refused the wait: quarantine_max_waiting were waiting
        self._refusal_logged_at = -math.inf

    @property
    def in_doubt_counts(self) -> tuple[int, int, int]:
        """(tries whose outcome was unknown, sends failed with an unknown outcome, sends with
        an unknown outcome moved off a broker known down), since start."""
        return (self._in_doubt, self._in_doubt_failed, self._moved_off_dead)

    @property
    def quarantine_waits(self) -> tuple[int, int]:
        """(sends waiting now for their broker's quarantine to end, sends that waited since
        start)."""
        return (self._waiting, self._waited)

    @property
    def quarantine_wait_refusals(self) -> int:
        """Repeats failed at once since start because quarantine_max_waiting were waiting."""
        return self._refused

    async def send(
        self,
        topic: str,
        queues: Mapping[str, Sequence[int]],
        send: SendTo[T],
        *,
        deadline: float | None = None,
        pinned: str | None = None,
    ) -> Routed[T]:
        """Send a non-FIFO request of `topic`, retrying broker failures (class docstring).

        Args:
            topic: The topic sent to.
            queues: Its writable queues on live brokers (broker -> local queue ids).
            send: Sends the request to the given queue; raises a PopMQError on failure.
            deadline: On the table's clock (a unary call's, less a margin): no new broker
                is tried after it, nor a send of unknown outcome tried again on its broker.
            pinned: A broker an earlier send of these messages went to and may have stored
                them on (InDoubtSends): the send goes there, as a retry of unknown outcome,
                whether or not the broker has writable queues now; while that broker is
                quarantined (its connection down) it waits for the quarantine to end, for
                up to in_doubt_retry_s (and not past `deadline`: a unary call's, less a
                margin), then fails as of unknown outcome; at most quarantine_max_waiting
                sends wait, the others fail at once.

        Raises:
            UnavailableError: no broker holds a writable queue of the topic.
            OutcomeUnknownError: the send may have been stored on a broker that did not
                answer, or stayed quarantined, within in_doubt_retry_s (retriable: the
                repeat belongs there).
            PopMQError: the last broker failure when every attempt failed, or at once any
                error that is not a broker failure (see is_broker_failure).
        """
        clock = self.table.clock
        config = self.table.config

        def window_end() -> float:
            # Tries of unknown outcome stop in_doubt_retry_s after the first, and not past
            # the client's deadline: a client told before it retries, not cut off.
            end = clock() + config.in_doubt_retry_s
            return end if deadline is None else min(end, deadline)

        doubt_until = window_end()
        queue: QueueRef | None
        if pinned is not None:
            if not self.table.is_reachable(pinned):
                # Its broker's connection is down (quarantined), and another broker could
                # store a second copy: the repeat waits for the connection, within the
                # window a send of unknown outcome is retried in.
                await self._until_reachable(topic, pinned, doubt_until)
            ids = queues.get(pinned)
            queue = QueueRef(pinned, min(ids) if ids else 0)
        else:
            queue = self.table.pick(topic, queues)
        if queue is None:
            raise UnavailableError(
                f"topic {topic!r} has no writable queue on a live broker; retry when a broker"
                " holding it is back"
            )
        in_doubt = pinned is not None
        repeats = 0
        tried: list[str] = []
        attempt = 0
        while True:
            attempt += 1
            try:
                result = await self._attempt(queue, send)
            except (PopMQError, TimeoutError) as error:
                if not is_broker_failure(error):
                    raise
                if in_doubt or may_be_stored(error):
                    if not in_doubt:
                        in_doubt = True
                        doubt_until = window_end()
                    self._in_doubt += 1
                    self.table.record_unknown_outcome(queue.broker)
                    if not known_down(error):
                        if clock() >= doubt_until:
                            self._in_doubt_failed += 1
                            self.table.record_exhausted()
                            raise _outcome_unknown(topic, queue.broker, attempt, error) from error
                        await self._sleep(
                            _IN_DOUBT_BACKOFF_S[min(repeats, len(_IN_DOUBT_BACKOFF_S) - 1)]
                        )
                        repeats += 1
                        self.table.record_retry()
                        continue
                    # Nothing listens at the broker's address: it stores nothing more, so
                    # the send moves on (the class docstring says what that costs).
                    self._moved_off_dead += 1
                    in_doubt = False
                tried.append(queue.broker)
                next_queue = self._next(topic, queues, tried, len(tried), deadline)
                if next_queue is None:
                    self.table.record_exhausted()
                    raise
                queue = next_queue
                self.table.record_retry()
                continue
            return Routed(result=result, queue=queue, attempts=attempt)

    async def _until_reachable(self, topic: str, broker: str, until: float) -> None:
        """Wait until `broker`'s quarantine ends (its probe saw its connection up, or it
        left the cluster), looking every _QUARANTINE_POLL_S. A cancelled call (the client
        went away) stops waiting at once; a unary call's deadline is in `until` (the
        caller's), while a send on a stream carries none: one its client gave up on waits
        until `until`.

        Raises:
            OutcomeUnknownError: `until` passed first, or quarantine_max_waiting sends wait
                already (retriable: the client repeats it later, with the same ids).
        """
        table = self.table
        clock = table.clock
        began = clock()
        if until <= began:  # in_doubt_retry_s is 0, or the call's deadline is (nearly) past
            why = "not waited: no time was left within in_doubt_retry_s and the call's deadline"
            raise self._unreachable(topic, broker, why)
        limit = table.config.quarantine_max_waiting
        if self._waiting >= limit:
            table.record_wait_refused(broker)
            self._refused += 1
            if began >= self._refusal_logged_at + _REFUSAL_LOG_EVERY_S:
                self._refusal_logged_at = began
                log.warning(
                    "a repeat of a send for quarantined broker %s failed at once: %d repeats"
                    " wait already (fault_tolerance.quarantine_max_waiting); %d refused so far"
                    " (logged at most every %.0f s)",
                    broker,
                    limit,
                    self._refused,
                    _REFUSAL_LOG_EVERY_S,
                )
            why = f"not waited: fault_tolerance.quarantine_max_waiting is {limit}"
            raise self._unreachable(topic, broker, why)
        self._waiting += 1
        self._waited += 1
        table.record_wait(broker, began=True)
        try:
            while not table.is_reachable(broker):
                left = until - clock()
                if left <= 0:
                    raise self._unreachable(topic, broker, f"waited {clock() - began:.1f} s")
                await self._sleep(min(_QUARANTINE_POLL_S, left))
        finally:
            self._waiting -= 1
            table.record_wait(broker, began=False)

    def _unreachable(self, topic: str, broker: str, waited: str) -> OutcomeUnknownError:
        """The error of a repeat whose broker stayed quarantined (counted as failed)."""
        self._in_doubt_failed += 1
        self.table.record_exhausted()
        return OutcomeUnknownError(
            f"a send to topic {topic!r} may or may not be stored on broker {broker!r} (an"
            f" earlier try of it went there unanswered), which cannot be reached now: its"
            f" connection is down ({waited}); the send was not tried on another"
            f" broker, which would store a second copy; retry later with the same message ids"
        )

    async def send_fifo(
        self,
        topic: str,
        message_group: str,
        queues: Sequence[QueueRef],
        send: SendTo[T],
        *,
        live: Container[str] | None = None,
    ) -> Routed[T]:
        """Send a FIFO request (one message group) to its group's queue, once.

        No retry on another broker: the group's queue is fixed (see FaultTable.pick_fifo).
        The broker is still charged the send's latency or failure, and the error reaches the
        client, whose retry (with backoff) finds the broker back or refused at once.
        """
        queue = self.table.pick_fifo(topic, message_group, queues, live=live)
        try:
            result = await self._attempt(queue, send)
        except (PopMQError, TimeoutError) as error:
            if is_broker_failure(error):
                self.table.record_exhausted()
            raise
        return Routed(result=result, queue=queue, attempts=1)

    async def _attempt(self, queue: QueueRef, send: SendTo[T]) -> T:
        """One try, timed on the table's clock and recorded. A cancelled send (the client
        went away) records nothing: it says nothing about the broker."""
        clock = self.table.clock
        started = clock()
        try:
            result = await send(queue)
        except (PopMQError, TimeoutError) as error:
            # A request error (bad argument, ...) is still an answer: the broker is up. So is
            # a replicated shard refusing sends for want of in-sync followers, or because the
            # replica just elected is still opening its store: the send is tried elsewhere,
            # but the shard is not isolated, since it takes sends again within moments (a
            # 10 s isolation would outlast that).
            failed = is_broker_failure(error) and not isinstance(
                error, (NotEnoughReplicasError, NotLeaderError)
            )
            self.table.update(queue.broker, clock() - started, failed=failed)
            raise
        self.table.update(queue.broker, clock() - started, failed=False)
        return result

    def _next(
        self,
        topic: str,
        queues: Mapping[str, Sequence[int]],
        tried: list[str],
        attempt: int,
        deadline: float | None,
    ) -> QueueRef | None:
        """The queue of the attempt after a broker failure, or None to give up: attempts
        used up, the deadline passed, or no untried broker holds a queue of the topic."""
        if attempt >= self.table.config.max_attempts:
            return None
        clock = self.table.clock  # a property holding a function: called as a local (mypyc)
        if deadline is not None and clock() >= deadline:
            return None
        return self.table.pick(topic, queues, avoid=tried)


def _outcome_unknown(
    topic: str, broker: str, attempts: int, last: BaseException
) -> OutcomeUnknownError:
    return OutcomeUnknownError(
        f"a send to topic {topic!r} may or may not be stored on broker {broker!r}: no try "
        f"there was answered ({attempts} tries in all; the last: "
        f"{str(last) or type(last).__name__}); the send was not tried on another broker, "
        f"which would store a second copy if {broker!r} has one; retry with the same message "
        "ids (this proxy sends the repeat to the same broker, whose dedup window answers it)"
    )
