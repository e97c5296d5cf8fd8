"""The client registry: live consumers per group, queue assignments and queue leases.

Queue-exclusive consumers (RocketMQ's classic push) register with Heartbeat and ask which
queues of a topic they own with QueryAssignment. The registry computes every member's
queues with the group's strategy (proxy/allocation.py) over the sorted live members, the
way each RocketMQ client does for itself, but once and centrally.

A queue is never consumed by two members at once, including during a rebalance, because
a computed assignment is only a target. The right to consume a queue is a **lease**:

- QueryAssignment grants a target queue only when no other member holds its lease. The
  grant lasts ``missed_heartbeats`` heartbeat intervals of the client (its lease time).
- Every QueryAssignment carries the queues the client still consumes (``held``): those
  leases are renewed, and a lease on a queue the client no longer holds is released. A
  client told to give a queue up finishes what it is processing, commits its offset, and
  then reports the queue as no longer held; only then can the new owner get it.
- A client that stops calling loses its leases when they time out, the same moment it
  counts as gone (``missed_heartbeats`` intervals without a call). The client stops by
  itself at that time too: it measures the lease from before it sent the request.
- After a restart the registry knows no leases. Members report what they hold and get it
  back; a queue nobody reports stays unassigned for ``restart_grace_s`` in groups that
  existed before the restart, so a member that has not called yet has stopped by then.

Everything is in memory and synchronous (dict lookups and sorting a few members): it runs
inline on the proxy's event loop. Dead members are found lazily, on the next call that
looks at their group; there is no background task.
"""

from __future__ import annotations

import enum
import math
import re
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from popmq.broker_core import (
    MAX_QUEUES,
    FailedPreconditionError,
    InvalidArgumentError,
    ResourceExhaustedError,
    check_name,
    check_range,
)
from popmq.proxy.allocation import (
    DEFAULT_VIRTUAL_NODES,
    MessageQueue,
    Strategy,
    allocate_averagely,
    allocate_averagely_by_circle,
    allocate_consistent_hash,
    allocate_machine_room_nearby,
)

__all__ = [
    "Assignment",
    "ClientInfo",
    "ClientRegistry",
    "ClientRegistryConfig",
    "ConsumeMode",
    "Registration",
    "compute_assignment",
]

MAX_CLIENT_ID_LENGTH = 255
MAX_TOPICS_PER_CLIENT = 64
MAX_MACHINE_ROOM_LENGTH = 64
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ROOM = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass(frozen=True, kw_only=True)
class ClientRegistryConfig:
    """Heartbeat timing, limits, and the machine room of this server's queues.

    The broker name in the queues' ``MessageQueue`` strings is not set here: it is the
    broker's own (``[broker] broker_name``), given to ClientRegistry by the server.
    """

    default_heartbeat_interval_s: float = 10.0
    """Interval of a client that asks for none (RocketMQ 5 clients: 10 s)."""
    min_heartbeat_interval_s: float = 0.05
    """Shortest interval a client may ask for (short intervals are for tests)."""
    max_heartbeat_interval_s: float = 30.0
    """Longest interval a client may ask for (RocketMQ 4 clients: 30 s)."""
    missed_heartbeats: int = 3
    """A client silent for this many of its intervals is gone; also its lease time."""
    restart_grace_s: float | None = None
    """After a restart, queues of existing groups that no member reports holding are not
    granted for this long. None: missed_heartbeats * max_heartbeat_interval_s, the
    longest lease a member may still hold from before the restart."""
    machine_room: str = ""
    """Machine room of this server's queues, for BY_MACHINE_ROOM. Empty: not in any room,
    so no member is near and every member shares them (AVERAGE)."""
    max_clients: int = 100_000
    """Registered (group, client) pairs at most; past it Heartbeat is RESOURCE_EXHAUSTED."""

    def __post_init__(self) -> None:
        if not 0 < self.min_heartbeat_interval_s <= self.default_heartbeat_interval_s:
            raise ValueError("heartbeat intervals must satisfy 0 < min <= default")
        if self.default_heartbeat_interval_s > self.max_heartbeat_interval_s:
            raise ValueError("heartbeat intervals must satisfy default <= max")
        if self.missed_heartbeats < 1:
            raise ValueError("missed_heartbeats must be at least 1")
        if self.restart_grace_s is not None and self.restart_grace_s < 0:
            raise ValueError("restart_grace_s must be >= 0")
        if self.machine_room and not _ROOM.match(self.machine_room):
            raise ValueError(f"machine_room {self.machine_room!r} must match {_ROOM.pattern}")
        if self.max_clients < 1:
            raise ValueError("max_clients must be at least 1")

    @property
    def grace_s(self) -> float:
        """The restart grace in effect."""
        if self.restart_grace_s is not None:
            return self.restart_grace_s
        return self.missed_heartbeats * self.max_heartbeat_interval_s


class ConsumeMode(enum.Enum):
    """How a registered consumer reads its topics."""

    POP = "POP"
    """Pops from any queue; registered for visibility, takes no part in assignment."""
    QUEUE_EXCLUSIVE = "QUEUE_EXCLUSIVE"
    """Reads only the queues assigned to it, by offset, in order (RocketMQ classic push)."""


@dataclass(frozen=True, kw_only=True)
class Registration:
    """What a Heartbeat says about a client."""

    client_id: str
    group: str
    topics: tuple[str, ...]
    mode: ConsumeMode = ConsumeMode.QUEUE_EXCLUSIVE
    strategy: Strategy = Strategy.AVERAGE
    heartbeat_interval_s: float | None = None
    """None: the registry's default."""
    machine_room: str = ""
    """The client's machine room (BY_MACHINE_ROOM)."""
    configured_queues: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    """BY_CONFIG: topic -> the queue ids this client is configured to consume."""


@dataclass(frozen=True, slots=True)
class ClientInfo:
    """A registered client as the registry sees it."""

    registration: Registration
    heartbeat_interval_s: float
    last_seen: float
    """Clock time of the client's last call."""

    @property
    def client_id(self) -> str:
        return self.registration.client_id


@dataclass(frozen=True, slots=True)
class Assignment:
    """The answer to QueryAssignment.

    Attributes:
        queue_ids: Queues the client may consume now (it holds their leases).
        pending_queue_ids: Queues assigned to the client whose previous owner has not
            released them yet; ask again soon.
        epoch: Changes whenever the group's computed assignment of the topic changes.
        lease_s: How long the grants last from the client's request without renewal.
    """

    queue_ids: tuple[int, ...]
    pending_queue_ids: tuple[int, ...]
    epoch: int
    lease_s: float


@dataclass(slots=True)
class _Client:
    registration: Registration
    interval_s: float
    last_seen: float

    def lease_s(self, missed: int) -> float:
        return self.interval_s * missed

    def alive(self, now: float, missed: int) -> bool:
        return now - self.last_seen <= self.interval_s * missed


@dataclass(slots=True)
class _Lease:
    owner: str
    expires: float


@dataclass(slots=True)
class _TopicState:
    """Assignment state of one (group, topic)."""

    epoch: int = 0
    # The inputs the current target was computed from; a change recomputes it.
    signature: tuple[object, ...] = ()
    target: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # queue id -> the lease of the member consuming it.
    leases: dict[int, _Lease] = field(default_factory=dict)


def compute_assignment(
    strategy: Strategy,
    topic: str,
    queue_count: int,
    members: Sequence[Registration],
    *,
    broker_name: str,
    machine_room: str = "",
) -> dict[str, tuple[int, ...]]:
    """Every member's queues of ``topic``: RocketMQ's strategy over the sorted inputs.

    ``broker_name`` names the queues in their ``MessageQueue`` strings, which
    CONSISTENT_HASH hashes. ``members`` must be sorted by client id. Each queue goes to at
    most one member: for BY_CONFIG, a queue configured by several members goes to the
    first of them.
    """
    queues = [MessageQueue(topic, broker_name, q) for q in range(queue_count)]
    ids = [m.client_id for m in members]
    result: dict[str, tuple[int, ...]] = {}
    taken: set[int] = set()
    for member in members:
        mine: list[MessageQueue]
        if not queues:
            mine = []
        elif strategy is Strategy.AVERAGE:
            mine = allocate_averagely(queues, ids, member.client_id)
        elif strategy is Strategy.AVERAGE_BY_CIRCLE:
            mine = allocate_averagely_by_circle(queues, ids, member.client_id)
        elif strategy is Strategy.CONSISTENT_HASH:
            mine = allocate_consistent_hash(
                queues, ids, member.client_id, virtual_nodes=DEFAULT_VIRTUAL_NODES
            )
        elif strategy is Strategy.BY_CONFIG:
            configured = member.configured_queues.get(topic, ())
            mine = [queues[q] for q in configured if q < queue_count]
        elif not machine_room:
            # Queues in no room: nobody is near them, so all members share them.
            mine = allocate_averagely(queues, ids, member.client_id)
        else:
            room_of = {m.client_id: m.machine_room for m in members}
            mine = allocate_machine_room_nearby(
                queues,
                ids,
                member.client_id,
                queue_room=lambda _q: machine_room,
                client_room=room_of.__getitem__,
            )
        owned = tuple(q.queue_id for q in mine if q.queue_id not in taken)
        taken.update(owned)
        result[member.client_id] = owned
    return result


class ClientRegistry:
    """Registered consumer clients, their assignments and queue leases.

    Args:
        config: Timing and limits.
        broker_name: The broker's name (BrokerAPI.server_info().broker_name): its queues'
            name in the ``MessageQueue`` strings that CONSISTENT_HASH hashes, the same
            name routes and receipt handles carry.
        existing_groups: Groups that existed when the server started; their queues are
            granted only after the restart grace unless a member reports holding them.
        clock: Monotonic seconds; a seam for tests.
    """

    def __init__(
        self,
        config: ClientRegistryConfig | None = None,
        *,
        broker_name: str,
        existing_groups: Collection[str] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config or ClientRegistryConfig()
        self.broker_name = broker_name
        self._clock = clock
        self._grace_until = clock() + self.config.grace_s
        self._restarted_groups = frozenset(existing_groups)
        # group -> client id -> client. Guarded by running on one event loop only.
        self._groups: dict[str, dict[str, _Client]] = {}
        self._count = 0
        # group -> topic -> assignment state (kept while the group has members or leases).
        self._topics: dict[str, dict[str, _TopicState]] = {}

    # -- heartbeat ------------------------------------------------------------------------

    def heartbeat(self, registration: Registration, queue_counts: Mapping[str, int]) -> float:
        """Register or refresh a client; returns its heartbeat interval in seconds.

        Args:
            registration: What the client says about itself.
            queue_counts: Queue count of each subscribed topic (the caller checked that
                the topics exist).

        Raises:
            InvalidArgumentError: A field is malformed or out of range.
            FailedPreconditionError: Live members of the group use another mode or strategy
                for one of the topics.
            ResourceExhaustedError: Too many clients are registered.
        """
        interval = self._check_registration(registration, queue_counts)
        now = self._clock()
        group = registration.group
        self._expire(group, now)
        for topic in registration.topics:
            for other in self._members(group, topic):
                if other.registration.client_id == registration.client_id:
                    continue
                if other.registration.mode is not registration.mode:
                    raise FailedPreconditionError(
                        f"group {group!r} consumes topic {topic!r} in "
                        f"{other.registration.mode.value} mode (client "
                        f"{other.registration.client_id!r}); every member must use one mode"
                    )
                if (
                    registration.mode is ConsumeMode.QUEUE_EXCLUSIVE
                    and other.registration.strategy is not registration.strategy
                ):
                    raise FailedPreconditionError(
                        f"group {group!r} assigns queues of topic {topic!r} with "
                        f"{other.registration.strategy.value} (client "
                        f"{other.registration.client_id!r}), not "
                        f"{registration.strategy.value}; every member must use one strategy"
                    )
        client = self._groups.get(group, {}).get(registration.client_id)
        if client is None:
            if self._count >= self.config.max_clients:
                raise ResourceExhaustedError(
                    f"{self._count} clients are registered, the maximum is "
                    f"{self.config.max_clients}; try again later"
                )
            self._groups.setdefault(group, {})[registration.client_id] = _Client(
                registration, interval, now
            )
            self._count += 1
        else:
            client.registration = registration
            client.interval_s = interval
            client.last_seen = now
        return interval

    def _check_registration(
        self, registration: Registration, queue_counts: Mapping[str, int]
    ) -> float:
        check_client_id(registration.client_id)
        check_name("group", registration.group)
        config = self.config
        interval = registration.heartbeat_interval_s
        if interval is None:
            interval = config.default_heartbeat_interval_s
        if not math.isfinite(interval):
            raise InvalidArgumentError(f"heartbeat_interval {interval}s is not a finite duration")
        check_range(
            "heartbeat_interval",
            interval,
            config.min_heartbeat_interval_s,
            config.max_heartbeat_interval_s,
            "s",
        )
        topics = registration.topics
        if not topics:
            raise InvalidArgumentError("topics is empty: subscribe to at least one topic")
        if len(topics) > MAX_TOPICS_PER_CLIENT:
            raise InvalidArgumentError(
                f"{len(topics)} topics: a client may subscribe to at most {MAX_TOPICS_PER_CLIENT}"
            )
        if len(set(topics)) != len(topics):
            raise InvalidArgumentError(f"topics {list(topics)} repeat a topic")
        for topic in topics:
            check_name("topic", topic)
        room = registration.machine_room
        if room and (len(room) > MAX_MACHINE_ROOM_LENGTH or not _ROOM.match(room)):
            raise InvalidArgumentError(
                f"machine_room {room!r} is invalid: use 1 to {MAX_MACHINE_ROOM_LENGTH} "
                "letters, digits, '.', '_' or '-'"
            )
        exclusive = registration.mode is ConsumeMode.QUEUE_EXCLUSIVE
        if exclusive and registration.strategy is Strategy.BY_MACHINE_ROOM and not room:
            raise InvalidArgumentError("strategy BY_MACHINE_ROOM needs the client's machine_room")
        configured = registration.configured_queues
        if configured and not (exclusive and registration.strategy is Strategy.BY_CONFIG):
            raise InvalidArgumentError(
                "configured_queues is only for queue-exclusive clients with strategy BY_CONFIG"
            )
        for topic, queue_ids in configured.items():
            if topic not in topics:
                raise InvalidArgumentError(
                    f"configured_queues names topic {topic!r}, which is not subscribed"
                )
            check_queue_ids(f"configured_queues[{topic!r}]", queue_ids, queue_counts[topic])
        return interval

    # -- assignment -----------------------------------------------------------------------

    def query_assignment(
        self,
        client_id: str,
        group: str,
        topic: str,
        queue_count: int,
        held: Sequence[int] = (),
    ) -> Assignment:
        """Renew the client's leases, release what it no longer holds, grant what is free.

        Args:
            client_id: The asking client.
            group: Its consumer group.
            topic: The topic; the client must have subscribed to it by Heartbeat.
            queue_count: The topic's queue count now.
            held: Queues the client is consuming right now (including ones it is giving up
                but still finishing).

        Raises:
            InvalidArgumentError: ``held`` has a negative or repeated queue id.
            FailedPreconditionError: The client is not registered (or was gone), did not
                subscribe to the topic, or is not in queue-exclusive mode.
        """
        check_client_id(client_id)
        check_name("group", group)
        check_name("topic", topic)
        check_queue_ids("held_queue_ids", held, None)
        now = self._clock()
        self._expire(group, now)
        client = self._groups.get(group, {}).get(client_id)
        if client is None:
            raise FailedPreconditionError(
                f"client {client_id!r} is not registered in group {group!r}: send Heartbeat "
                f"first (a client silent for {self.config.missed_heartbeats} heartbeat "
                "intervals must register again)"
            )
        if topic not in client.registration.topics:
            raise FailedPreconditionError(
                f"client {client_id!r} did not subscribe to topic {topic!r} in its Heartbeat"
            )
        if client.registration.mode is not ConsumeMode.QUEUE_EXCLUSIVE:
            raise FailedPreconditionError(
                f"client {client_id!r} registered in {client.registration.mode.value} mode; "
                "assignments are only for QUEUE_EXCLUSIVE consumers"
            )
        client.last_seen = now
        lease_s = client.lease_s(self.config.missed_heartbeats)
        state = self._state(group, topic, queue_count)
        held_set = set(held)
        for queue_id, mine in list(state.leases.items()):
            if mine.owner != client_id:
                continue
            if queue_id in held_set:
                mine.expires = now + lease_s
            else:
                del state.leases[queue_id]  # the client stopped consuming it
        for queue_id in held_set:
            lease = state.leases.get(queue_id)
            if queue_id < queue_count and (lease is None or lease.expires <= now):
                # Consuming without a lease on record (the registry restarted): keep it
                # exclusive until the client lets go.
                state.leases[queue_id] = _Lease(client_id, now + lease_s)
        granted: list[int] = []
        pending: list[int] = []
        in_grace = group in self._restarted_groups and now < self._grace_until
        for queue_id in state.target.get(client_id, ()):
            lease = state.leases.get(queue_id)
            if lease is not None and lease.owner == client_id:
                granted.append(queue_id)
            elif (lease is None or lease.expires <= now) and not in_grace:
                state.leases[queue_id] = _Lease(client_id, now + lease_s)
                granted.append(queue_id)
            else:
                pending.append(queue_id)
        return Assignment(tuple(granted), tuple(pending), state.epoch, lease_s)

    def unregister(self, client_id: str, group: str) -> bool:
        """Forget a client that stopped consuming and release its leases at once.

        Returns whether the client was registered.
        """
        check_client_id(client_id)
        check_name("group", group)
        members = self._groups.get(group)
        client = members.pop(client_id, None) if members else None
        if client is None:
            return False
        self._count -= 1
        if not members:
            del self._groups[group]
        for state in self._topics.get(group, {}).values():
            for queue_id, lease in list(state.leases.items()):
                if lease.owner == client_id:
                    del state.leases[queue_id]
        return True

    # -- introspection --------------------------------------------------------------------

    def clients(self, group: str) -> list[ClientInfo]:
        """The live clients of a group, sorted by client id."""
        self._expire(group, self._clock())
        return [
            ClientInfo(c.registration, c.interval_s, c.last_seen)
            for _, c in sorted(self._groups.get(group, {}).items())
        ]

    def owners(self, group: str, topic: str) -> dict[int, str]:
        """Queue id -> the client holding its lease now (for tests and admin tools)."""
        now = self._clock()
        state = self._topics.get(group, {}).get(topic)
        if state is None:
            return {}
        return {q: lease.owner for q, lease in state.leases.items() if lease.expires > now}

    # -- internals ------------------------------------------------------------------------

    def _members(self, group: str, topic: str) -> list[_Client]:
        """Live clients of the group subscribed to the topic, sorted by client id."""
        members = sorted(self._groups.get(group, {}).items())
        return [c for _, c in members if topic in c.registration.topics]

    def _expire(self, group: str, now: float) -> None:
        """Drop the group's clients that missed their heartbeats and leases that ran out.

        A client's leases end no later than the client counts as gone: both are measured
        from its last call, and a lease is renewed only by a call.
        """
        members = self._groups.get(group)
        if members:
            missed = self.config.missed_heartbeats
            for client_id, client in list(members.items()):
                if not client.alive(now, missed):
                    del members[client_id]
                    self._count -= 1
            if not members:
                del self._groups[group]
        states = self._topics.get(group)
        if not states:
            return
        for state in states.values():
            for queue_id, lease in list(state.leases.items()):
                if lease.expires <= now:
                    del state.leases[queue_id]
        if group not in self._groups and not any(s.leases for s in states.values()):
            del self._topics[group]  # nothing left to remember; a new epoch starts at 1

    def _state(self, group: str, topic: str, queue_count: int) -> _TopicState:
        """The topic's assignment state, its target recomputed when its inputs changed."""
        state = self._topics.setdefault(group, {}).setdefault(topic, _TopicState())
        members = [
            c.registration
            for c in self._members(group, topic)
            if c.registration.mode is ConsumeMode.QUEUE_EXCLUSIVE
        ]
        strategy = members[0].strategy if members else Strategy.AVERAGE
        signature: tuple[object, ...] = (
            queue_count,
            strategy,
            tuple(
                (m.client_id, m.machine_room, m.configured_queues.get(topic, ())) for m in members
            ),
        )
        if signature != state.signature:
            target = compute_assignment(
                strategy,
                topic,
                queue_count,
                members,
                broker_name=self.broker_name,
                machine_room=self.config.machine_room,
            )
            if target != state.target or state.epoch == 0:
                state.epoch += 1
            state.signature = signature
            state.target = target
            for queue_id in [q for q in state.leases if q >= queue_count]:
                del state.leases[queue_id]  # the topic was recreated with fewer queues
        return state


def check_client_id(client_id: str) -> None:
    """A client id is 1..255 characters without control characters."""
    if not client_id:
        raise InvalidArgumentError(
            f"client_id is empty: use 1 to {MAX_CLIENT_ID_LENGTH} characters"
        )
    if len(client_id) > MAX_CLIENT_ID_LENGTH:
        raise InvalidArgumentError(
            f"client_id is {len(client_id)} characters long: at most "
            f"{MAX_CLIENT_ID_LENGTH} are allowed"
        )
    if _CONTROL.search(client_id):
        raise InvalidArgumentError("client_id contains control characters")


def check_queue_ids(field_name: str, queue_ids: Sequence[int], queue_count: int | None) -> None:
    """Queue ids are unique and within 0..queue_count-1 (only >= 0 when the count is None)."""
    limit = MAX_QUEUES if queue_count is None else queue_count
    if len(queue_ids) > limit:
        raise InvalidArgumentError(
            f"{field_name} has {len(queue_ids)} queue ids: the topic has at most {limit} queues"
        )
    seen: set[int] = set()
    for queue_id in queue_ids:
        if queue_id < 0 or (queue_count is not None and queue_id >= queue_count):
            allowed = f"0..{queue_count - 1}" if queue_count is not None else ">= 0"
            raise InvalidArgumentError(
                f"{field_name} has queue id {queue_id}: the topic's queues are {allowed}"
            )
        if queue_id in seen:
            raise InvalidArgumentError(f"{field_name} repeats queue id {queue_id}")
        seen.add(queue_id)
