"""The client registry: live consumers per group, queue assignments and queue claims.

Queue-exclusive consumers (RocketMQ's classic push) register with Heartbeat and ask which
queues of a topic they own with QueryAssignment. The registry computes every member's
queues with the group's strategy (proxy/allocation.py) over the sorted live members, the
way each RocketMQ client does for itself, but once and centrally.

A queue is never consumed by two members at once, including during a rebalance, because
a computed assignment is only a target. The right to consume a queue is a **claim**: a
member claims a queue until a deadline, and renews the claim by calling again. (Names
older than the word keep "lease": the wire field ``lease_duration`` and the stored field
``leases``. A Spark lease token, proxy/leases.py, is another thing.)

- QueryAssignment grants a target queue only when no other member holds its claim. The
  grant lasts ``missed_heartbeats`` heartbeat intervals of the client (its claim time).
- Every QueryAssignment carries the queues the client still consumes (``held``): those
  claims are renewed, and a claim on a queue the client no longer holds is released. A
  client told to give a queue up finishes what it is processing, commits its offset, and
  then reports the queue as no longer held; only then can the new owner get it.
- A client that stops calling loses its claims when they time out, the same moment it
  counts as gone (``missed_heartbeats`` intervals without a call). The client stops by
  itself at that time too: it measures the claim from before it sent the request.
- After a restart the registry knows no claims. Members report what they hold and get it
  back; a queue nobody reports stays unassigned for ``restart_grace_s`` in groups that
  existed before the restart, so a member that has not called yet has stopped by then.

**One registry for all proxies.** Members of queue-exclusive groups and their claims live
in the coordinator (popmq.coordination.Coordinator), one entry per group (consumer_groups.py):
every proxy of a cluster computes the same assignment over the same members, and a claim
granted through one proxy holds at all of them, so a member may call any proxy and move
between them. `popmq serve` keeps the same entries in its in-memory LocalCoordinator. A
call that changes a group reads it (from a cache while that is current), applies the rules
above and writes it back with compare-and-set, applying them again after a lost race: a
claim is granted only over the group as last written, never beside another member's.

- Last calls and claim deadlines are wall-clock seconds (``time.time``): proxies on
  different hosts compare them. Their clocks are assumed to agree within ``clock_skew_s``
  (NTP keeps them within milliseconds); another member's claim blocks a grant until
  ``clock_skew_s`` past its deadline, so a proxy whose clock runs ahead gives no queue away
  early.
- "A restart" is a restart of the coordinator's consumer state: every start of `popmq
  serve` (its state is in memory), or an etcd that never held it. `consumer-state` records
  when that grace ends; a proxy restarting in a cluster finds the claims in etcd.
- POP-mode members take no part in assignment and stay in the memory of the proxy they
  call (a coordinator write for every simple consumer's heartbeat would buy nothing). A POP
  member's heartbeat reads its group's entry to refuse a second mode; a queue-exclusive
  member that joins through another proxy than the group's POP members is accepted, and
  they are refused at their next heartbeat.
- ``max_clients`` bounds the (group, client) pairs one registry has heard from;
  ``max_group_members`` the live queue-exclusive members of a group, all proxies together.

**While the coordinator does not answer** (an etcd outage, or this proxy cut off from
etcd), Heartbeat and QueryAssignment of members in this proxy's cache are answered from it,
their claims renewed in memory for at most ``outage_hold_s`` past their recorded deadlines,
and nothing is granted (claim_hold_over.py says why no queue gets two consumers). So every
registry lets another member take a claimed queue only ``outage_hold_s`` plus the clock
skew past its recorded deadline.

Dead members are found lazily, on the next call that changes their group; a sweep every
``sweep_interval_s`` deletes the entries of groups nobody calls about any more. Everything
runs on the event loop. With a LocalCoordinator nothing waits: a call is the rules' dict
work plus the JSON of one group's entry (bench/client_registry_cost.py measures it).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import math
import re
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from popmq.broker_core import (
    MAX_QUEUES,
    FailedPreconditionError,
    InvalidArgumentError,
    ResourceExhaustedError,
    check_name,
    check_range,
)
from popmq.coordination.coordinator import Coordinator
from popmq.coordination.errors import CoordinationError, CoordinationUnavailableError
from popmq.coordination.local_coordinator import LocalCoordinator
from popmq.proxy.allocation import (
    DEFAULT_VIRTUAL_NODES,
    MessageQueue,
    Strategy,
    allocate_averagely,
    allocate_averagely_by_circle,
    allocate_consistent_hash,
    allocate_machine_room_nearby,
)
from popmq.proxy.claim_hold_over import ClaimHoldOver
from popmq.proxy.consumer_groups import (
    Claim,
    ConsumerGroups,
    StoredGroup,
    StoredMember,
    TopicClaims,
    digest,
    new_writer_id,
)
from popmq.runtime.config import MACHINE_ROOM, ClientRegistryConfig

__all__ = [
    "CLUSTER_CLOCK_SKEW_S",
    "AssignedMember",
    "Assignment",
    "ClientInfo",
    "ClientRegistry",
    "ConsumeMode",
    "Registration",
    "compute_assignment",
]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

MAX_CLIENT_ID_LENGTH = 255
MAX_TOPICS_PER_CLIENT = 64
MAX_MACHINE_ROOM_LENGTH = 64
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
CLUSTER_CLOCK_SKEW_S = 1.0
"""The clock skew assumed between proxies sharing an etcd, unless configured."""
CLUSTER_OUTAGE_HOLD_S = 60.0
"""How long past its recorded deadline a claim may be renewed in memory while etcd does not
answer, unless configured."""


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
    """Wall-clock time of the client's last call (the registry's clock)."""

    @property
    def client_id(self) -> str:
        return self.registration.client_id


@dataclass(frozen=True, slots=True)
class Assignment:
    """The answer to QueryAssignment.

    Attributes:
        queue_ids: Queues the client may consume now (it holds their claims).
        pending_queue_ids: Queues assigned to the client whose previous owner has not
            released them yet; ask again soon.
        epoch: Changes whenever the group's computed assignment of the topic changes.
        claim_s: How long the grants last from the client's request without renewal.
    """

    queue_ids: tuple[int, ...]
    pending_queue_ids: tuple[int, ...]
    epoch: int
    claim_s: float


class AssignedMember(Protocol):
    """What an assignment strategy reads of a member (a Registration, a stored member)."""

    @property
    def client_id(self) -> str: ...

    @property
    def machine_room(self) -> str: ...

    @property
    def configured_queues(self) -> Mapping[str, tuple[int, ...]]: ...


@dataclass(slots=True)
class _Client:
    """A client this registry heard from: a POP member (kept only here), or a
    queue-exclusive one (kept in the coordinator; here to count it against max_clients)."""

    registration: Registration
    interval_s: float
    last_seen: float

    def alive(self, now: float, missed: int) -> bool:
        return now - self.last_seen <= self.interval_s * missed


def compute_assignment(
    strategy: Strategy,
    topic: str,
    queue_count: int,
    members: Sequence[AssignedMember],
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
    """Registered consumer clients, their assignments and queue claims.

    Args:
        config: Timing and limits.
        broker_name: The broker's name (BrokerAPI.server_info().broker_name): its queues'
            name in the ``MessageQueue`` strings that CONSISTENT_HASH hashes, the same
            name routes and receipt handles carry.
        coordinator: Where queue-exclusive groups live, shared by the proxies of a cluster
            (the caller opens and closes it). None: a LocalCoordinator of this registry's.
        existing_groups: Groups that existed when the server started; if the coordinator's
            consumer state is new, their queues are granted only after the restart grace
            unless a member reports holding them.
        clock: Wall-clock seconds (deadlines are compared across proxies); a seam for tests.
    """

    def __init__(
        self,
        config: ClientRegistryConfig | None = None,
        *,
        broker_name: str,
        coordinator: Coordinator | None = None,
        existing_groups: Collection[str] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config or ClientRegistryConfig()
        self.broker_name = broker_name
        self.instance = new_writer_id()
        """This registry's id: members' entries name the registry of their last call."""
        self._owns_coordinator = coordinator is None
        self.coordinator: Coordinator = LocalCoordinator() if coordinator is None else coordinator
        self._groups = ConsumerGroups(self.coordinator, writer=self.instance)
        self._clock = clock
        one_clock = isinstance(self.coordinator, LocalCoordinator)
        skew = self.config.clock_skew_s
        if skew is None:
            skew = 0.0 if one_clock else CLUSTER_CLOCK_SKEW_S
        self._skew = skew
        hold = self.config.outage_hold_s
        if hold is None:
            hold = 0.0 if one_clock else CLUSTER_OUTAGE_HOLD_S
        self._hold = hold
        # Another member's claim blocks a grant this long past its recorded deadline: the
        # hold-over a cut-off proxy may give it, and the clock skew.
        self._block = hold + skew
        # The restart grace ends at clock() + grace_s if the coordinator's consumer state
        # is new, else when the state's first registry said (read once, at first need). A
        # claim may outlive its recorded deadline by the hold-over.
        grace = self.config.grace_s
        if self.config.restart_grace_s is None:
            grace += hold
        self._proposed_grace_until = clock() + grace
        self._grace_until: float | None = None
        self._restarted_groups = frozenset(existing_groups)
        # group -> client id -> a client heard from here. Guarded by running on one loop.
        self._local: dict[str, dict[str, _Client]] = {}
        self._count = 0
        # (group, topic) -> the last assignment inputs seen and their digest (hashing them
        # at every query would cost more than comparing).
        self._signatures: dict[tuple[str, str], tuple[tuple[object, ...], str]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._hold_over = ClaimHoldOver(
            self._groups, hold_s=hold, missed_heartbeats=self.config.missed_heartbeats, clock=clock
        )

    async def start(self) -> None:
        """Learn the restart grace and start the sweep; idempotent."""
        await self._grace()
        if self._sweeper is None and self.config.sweep_interval_s:
            self._sweeper = asyncio.get_running_loop().create_task(
                self._sweep_forever(), name="popmq-client-registry-sweep"
            )

    async def close(self) -> None:
        """Stop the sweep (and close the coordinator if it is this registry's own)."""
        if self._sweeper is not None:
            sweeper, self._sweeper = self._sweeper, None
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
        if self._owns_coordinator:
            await self.coordinator.close()

    # -- heartbeat ------------------------------------------------------------------------

    async def heartbeat(self, registration: Registration, queue_counts: Mapping[str, int]) -> float:
        """Register or refresh a client; returns its heartbeat interval in seconds.

        Args:
            registration: What the client says about itself.
            queue_counts: Queue count of each subscribed topic (the caller checked that
                the topics exist).

        Raises:
            InvalidArgumentError: A field is malformed or out of range.
            FailedPreconditionError: Live members of the group use another mode or strategy
                for one of the topics.
            ResourceExhaustedError: Too many clients are registered (here, or in the group).
            CoordinationError: The coordinator failed (UNAVAILABLE when unreachable).
        """
        interval = self._check_registration(registration, queue_counts)
        now = self._clock()
        group = registration.group
        client_id = registration.client_id
        self._expire_local(group, now)
        for topic in registration.topics:
            for other in self._local_members(group, topic, ConsumeMode.POP):
                if other.registration.client_id != client_id:
                    _check_mode(group, topic, other.registration, registration.mode)
        if registration.mode is ConsumeMode.QUEUE_EXCLUSIVE:

            def register(state: StoredGroup) -> tuple[None, bool]:
                now = self._clock()
                self._expire(state, now)
                self._join(state, registration, interval, now)
                return None, True

            try:
                await self._change(group, register)
            except CoordinationUnavailableError:
                if not self._hold_over.heartbeat(
                    group, client_id, interval, lambda member: _same(member, registration), now
                ):
                    raise
        else:
            await self._leave_exclusive_mode(registration)
            self._check_capacity(group, client_id, self._clock())
        self._remember(registration, interval, self._clock())
        return interval

    def _join(
        self, state: StoredGroup, registration: Registration, interval: float, now: float
    ) -> None:
        """Add or renew a queue-exclusive member in its group's (expired) state."""
        group = registration.group
        client_id = registration.client_id
        for topic in registration.topics:
            for other in _subscribers(state, topic):
                if other.client_id != client_id and other.strategy is not registration.strategy:
                    raise FailedPreconditionError(
                        f"group {group!r} assigns queues of topic {topic!r} with "
                        f"{other.strategy.value} (client {other.client_id!r}), not "
                        f"{registration.strategy.value}; every member must use one strategy"
                    )
        if client_id not in state.members:
            members = len(state.members)
            if members >= self.config.max_group_members:
                raise ResourceExhaustedError(
                    f"group {group!r} has {members} queue-exclusive members, the maximum "
                    f"is {self.config.max_group_members}; try again later"
                )
        self._check_capacity(group, client_id, now)
        state.members[client_id] = StoredMember(
            client_id=client_id,
            topics=registration.topics,
            strategy=registration.strategy,
            machine_room=registration.machine_room,
            configured_queues=dict(registration.configured_queues),
            interval_s=interval,
            seen=now,
            via=self.instance,
        )

    async def _leave_exclusive_mode(self, registration: Registration) -> None:
        """A POP heartbeat: refuse it beside queue-exclusive members of its topics, and
        take the client out of the coordinator if it was one of them itself."""
        group = registration.group
        client_id = registration.client_id
        try:
            state = await self._groups.read(group)
        except CoordinationUnavailableError:
            # Checked against the cache instead: a POP member accepted beside queue-exclusive
            # ones it cannot see is refused at its next heartbeat, as across proxies.
            state = self._groups.cached(group)
        if state is None:
            return
        now = self._clock()
        was_member = False
        for member in self._live_members(state, now):
            if member.client_id == client_id:
                was_member = True
                continue
            for topic in registration.topics:
                if topic in member.topics:
                    _check_mode(group, topic, _registration(group, member), registration.mode)
        if was_member:

            def leave(state: StoredGroup) -> tuple[None, bool]:
                # Its claims stay until they run out, as a member's who stopped calling.
                return None, state.members.pop(client_id, None) is not None

            self._hold_over.forget(group, client_id)
            await self._change(group, leave)

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
        if room and (len(room) > MAX_MACHINE_ROOM_LENGTH or not MACHINE_ROOM.match(room)):
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

    async def query_assignment(
        self,
        client_id: str,
        group: str,
        topic: str,
        queue_count: int,
        held: Sequence[int] = (),
    ) -> Assignment:
        """Renew the client's claims, release what it no longer holds, grant what is free.

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
            CoordinationError: The coordinator failed (UNAVAILABLE when unreachable).
        """
        check_client_id(client_id)
        check_name("group", group)
        check_name("topic", topic)
        check_queue_ids("held_queue_ids", held, None)
        grace_until = await self._grace()
        now = self._clock()
        self._expire_local(group, now)
        local = self._local.get(group, {}).get(client_id)
        if local is not None and local.registration.mode is ConsumeMode.POP:
            _check_assignable(client_id, topic, local.registration)
        in_grace = group in self._restarted_groups and now < grace_until

        def query(state: StoredGroup) -> tuple[Assignment, bool]:
            now = self._clock()
            self._expire(state, now)
            member = state.members.get(client_id)
            if member is None:
                raise FailedPreconditionError(
                    f"client {client_id!r} is not registered in group {group!r}: send "
                    f"Heartbeat first (a client silent for {self.config.missed_heartbeats} "
                    "heartbeat intervals must register again)"
                )
            _check_assignable(client_id, topic, _registration(group, member))
            member.seen = now
            member.via = self.instance
            assignment = self._claim(state, group, member, topic, queue_count, held, now, in_grace)
            return assignment, True

        try:
            assignment = await self._change(group, query)
        except CoordinationUnavailableError:
            held_over = self._hold_over.query(group, client_id, topic, queue_count, held, now)
            if held_over is None:
                raise
            assignment = Assignment(held_over.queue_ids, (), held_over.epoch, held_over.claim_s)
        if local is not None:
            local.last_seen = self._clock()
        return assignment

    def _claim(
        self,
        state: StoredGroup,
        group: str,
        member: StoredMember,
        topic: str,
        queue_count: int,
        held: Sequence[int],
        now: float,
        in_grace: bool,
    ) -> Assignment:
        """The claim rules (module docstring) for one query, over the expired state."""
        client_id = member.client_id
        claim_s = member.interval_s * self.config.missed_heartbeats
        topic_state = self._target(state, group, topic, queue_count)
        claims = topic_state.claims
        block = self._block
        held_set = set(held)
        for queue_id, mine in list(claims.items()):
            if mine.owner != client_id:
                continue
            if queue_id in held_set:
                mine.expires = now + claim_s
            else:
                del claims[queue_id]  # the client stopped consuming it
        for queue_id in held_set:
            claim = claims.get(queue_id)
            if queue_id < queue_count and (claim is None or claim.expires + block <= now):
                # Consuming without a claim on record (the registry restarted): keep it
                # exclusive until the client lets go.
                claims[queue_id] = Claim(client_id, now + claim_s)
        granted: list[int] = []
        pending: list[int] = []
        for queue_id in topic_state.target.get(client_id, ()):
            claim = claims.get(queue_id)
            if claim is not None and claim.owner == client_id:
                granted.append(queue_id)
            elif (claim is None or claim.expires + block <= now) and not in_grace:
                claims[queue_id] = Claim(client_id, now + claim_s)
                granted.append(queue_id)
            else:
                pending.append(queue_id)
        return Assignment(tuple(granted), tuple(pending), topic_state.epoch, claim_s)

    async def unregister(self, client_id: str, group: str, *, if_last_here: bool = False) -> bool:
        """Forget a client that stopped consuming and release its claims at once.

        Args:
            client_id: The client.
            group: Its group.
            if_last_here: Only if its last call came through this registry (a client whose
                session here ended may be calling another proxy of the cluster now). Its
                claims that still block a grant are then left to run out: with a hold-over
                (claim_hold_over.py) its last calls may have gone to a proxy cut off from
                the coordinator, which renews them meanwhile.

        Returns whether the client was registered.
        """
        check_client_id(client_id)
        check_name("group", group)
        self._hold_over.forget(group, client_id)
        members = self._local.get(group)
        local = members.pop(client_id, None) if members else None
        if local is not None:
            self._count -= 1
            if not members:
                del self._local[group]
            if local.registration.mode is ConsumeMode.POP:
                return True

        def leave(state: StoredGroup) -> tuple[bool, bool]:
            member = state.members.get(client_id)
            if member is None or (if_last_here and member.via != self.instance):
                return False, False
            del state.members[client_id]
            now = self._clock()
            keep_live = if_last_here and self._hold > 0
            for topic_state in state.topics.values():
                for queue_id, claim in list(topic_state.claims.items()):
                    if claim.owner != client_id:
                        continue
                    if keep_live and claim.expires + self._block > now:
                        continue
                    del topic_state.claims[queue_id]
            self._expire(state, now)
            return True, True

        return await self._change(group, leave)

    # -- introspection --------------------------------------------------------------------

    async def clients(self, group: str) -> list[ClientInfo]:
        """The live clients of a group, sorted by client id: its queue-exclusive members
        (through any proxy) and the POP members calling this one."""
        state = await self._groups.read(group)
        now = self._clock()
        self._expire_local(group, now)
        found = {
            c.registration.client_id: ClientInfo(c.registration, c.interval_s, c.last_seen)
            for c in self._local.get(group, {}).values()
            if c.registration.mode is ConsumeMode.POP
        }
        for member in self._live_members(state, now) if state is not None else []:
            found[member.client_id] = ClientInfo(
                _registration(group, member), member.interval_s, member.seen
            )
        return [found[c] for c in sorted(found)]

    def owners(self, group: str, topic: str) -> dict[int, str]:
        """Queue id -> the client holding its claim now, as this registry last read or wrote
        the group: exact for the members that call this registry (only their own calls
        change their claims), no round trip (FIFO receives check it)."""
        state = self._groups.cached(group)
        topic_state = state.topics.get(topic) if state is not None else None
        if topic_state is None:
            return {}
        now = self._clock()
        owners = {q: claim.owner for q, claim in topic_state.claims.items() if claim.expires > now}
        self._hold_over.owners(group, topic, owners)
        return owners

    async def sweep(self) -> int:
        """Delete the coordinator entries of groups with nothing live, and forget the dead
        clients heard from here; returns how many entries went."""
        now = self._clock()
        for group in list(self._local):
            self._expire_local(group, now)
        for group in self._groups.cached_groups():
            cached = self._groups.cached(group)
            if cached is not None and not self._hold_over.holds(group) and self._dead(cached, now):
                self._groups.forget(group)
        self._hold_over.sweep(self.config.missed_heartbeats * self.config.max_heartbeat_interval_s)
        live = set(self._groups.cached_groups())
        for key in [k for k in self._signatures if k[0] not in live]:
            del self._signatures[key]
        return await self._groups.sweep(lambda state: self._dead(state, self._clock()))

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.sweep_interval_s)
            try:
                removed = await self.sweep()
            except CoordinationError as error:
                logger.warning(
                    "consumer group sweep failed (next in %ss): %s",
                    self.config.sweep_interval_s,
                    error,
                )
            else:
                if removed:
                    logger.info("consumer group sweep removed %d idle groups", removed)

    # -- internals ------------------------------------------------------------------------

    async def _change(self, group: str, apply: Callable[[StoredGroup], tuple[_T, bool]]) -> _T:
        """ConsumerGroups.change, storing first what the hold-over answered meanwhile."""
        if not self._hold_over.holds(group):
            return await self._groups.change(group, apply)
        applied = {}

        def restoring(state: StoredGroup) -> tuple[_T, bool]:
            nonlocal applied
            applied = self._hold_over.restore(group, state, self._block)
            result, _ = apply(state)
            return result, True

        result = await self._groups.change(group, restoring)
        self._hold_over.stored(group, applied)
        return result

    async def _grace(self) -> float:
        """When the restart grace ends (read from, or recorded in, the coordinator once)."""
        if self._grace_until is None:
            self._grace_until = await self._groups.grace_until(self._proposed_grace_until)
        return self._grace_until

    def _live_members(self, state: StoredGroup, now: float) -> list[StoredMember]:
        missed = self.config.missed_heartbeats
        return [m for m in state.members.values() if now - m.seen <= m.interval_s * missed]

    def _expire(self, state: StoredGroup, now: float) -> None:
        """Drop the group's members that missed their heartbeats, claims that ran out (and
        the clock skew past them), and topics with neither a claim nor a subscriber.

        A client's claims end no later than the client counts as gone: both are measured
        from its last call, and a claim is renewed only by a call.
        """
        missed = self.config.missed_heartbeats
        members = state.members
        for client_id, member in list(members.items()):
            if now - member.seen > member.interval_s * missed:
                del members[client_id]
        block = self._block
        for topic, topic_state in list(state.topics.items()):
            claims = topic_state.claims
            for queue_id, claim in list(claims.items()):
                if claim.expires + block <= now:
                    del claims[queue_id]
            if not claims and not any(topic in m.topics for m in members.values()):
                del state.topics[topic]  # nothing to remember; a new epoch starts at 1

    def _dead(self, state: StoredGroup, now: float) -> bool:
        """Nothing live: no member counts as alive and no claim blocks a grant."""
        block = self._block
        return not self._live_members(state, now) and not any(
            claim.expires + block > now
            for t in state.topics.values()
            for claim in t.claims.values()
        )

    def _target(self, state: StoredGroup, group: str, topic: str, queue_count: int) -> TopicClaims:
        """The topic's assignment state, its target recomputed when its inputs changed."""
        topic_state = state.topics.get(topic)
        if topic_state is None:
            topic_state = state.topics[topic] = TopicClaims()
        members = sorted(_subscribers(state, topic), key=_client_id)
        strategy = members[0].strategy if members else Strategy.AVERAGE
        inputs: tuple[object, ...] = (
            queue_count,
            strategy.name,
            self.broker_name,
            self.config.machine_room,
            tuple(
                (m.client_id, m.machine_room, m.configured_queues.get(topic, ())) for m in members
            ),
        )
        key = (group, topic)
        known = self._signatures.get(key)
        if known is not None and known[0] == inputs:
            signature = known[1]
        else:
            signature = digest(inputs)
            self._signatures[key] = (inputs, signature)
        if signature != topic_state.signature:
            target = compute_assignment(
                strategy,
                topic,
                queue_count,
                members,
                broker_name=self.broker_name,
                machine_room=self.config.machine_room,
            )
            if target != topic_state.target or topic_state.epoch == 0:
                topic_state.epoch += 1
            topic_state.signature = signature
            topic_state.target = target
            for queue_id in [q for q in topic_state.claims if q >= queue_count]:
                del topic_state.claims[queue_id]  # the topic was recreated with fewer queues
        return topic_state

    def _local_members(self, group: str, topic: str, mode: ConsumeMode) -> list[_Client]:
        """Clients of the group heard from here in `mode`, subscribed to the topic."""
        return [
            c
            for c in self._local.get(group, {}).values()
            if c.registration.mode is mode and topic in c.registration.topics
        ]

    def _expire_local(self, group: str, now: float) -> None:
        """Forget the group's clients heard from here that went silent."""
        members = self._local.get(group)
        if not members:
            return
        missed = self.config.missed_heartbeats
        for client_id, client in list(members.items()):
            if not client.alive(now, missed):
                del members[client_id]
                self._count -= 1
        if not members:
            del self._local[group]

    def _check_capacity(self, group: str, client_id: str, now: float) -> None:
        """Refuse a new (group, client) pair past max_clients (after forgetting the dead)."""
        if client_id in self._local.get(group, {}) or self._count < self.config.max_clients:
            return
        for other in list(self._local):
            self._expire_local(other, now)
        if self._count >= self.config.max_clients:
            raise ResourceExhaustedError(
                f"{self._count} clients are registered, the maximum is "
                f"{self.config.max_clients}; try again later"
            )

    def _remember(self, registration: Registration, interval: float, now: float) -> None:
        members = self._local.setdefault(registration.group, {})
        client = members.get(registration.client_id)
        if client is None:
            members[registration.client_id] = _Client(registration, interval, now)
            self._count += 1
        else:
            client.registration = registration
            client.interval_s = interval
            client.last_seen = now


def _same(member: StoredMember, registration: Registration) -> bool:
    """Whether a stored member is registered as `registration` says (interval aside)."""
    return (
        member.topics == registration.topics
        and member.strategy is registration.strategy
        and member.machine_room == registration.machine_room
        and member.configured_queues == dict(registration.configured_queues)
    )


def _subscribers(state: StoredGroup, topic: str) -> list[StoredMember]:
    return [m for m in state.members.values() if topic in m.topics]


def _client_id(member: StoredMember) -> str:
    return member.client_id


def _registration(group: str, member: StoredMember) -> Registration:
    return Registration(
        client_id=member.client_id,
        group=group,
        topics=member.topics,
        mode=ConsumeMode.QUEUE_EXCLUSIVE,
        strategy=member.strategy,
        heartbeat_interval_s=member.interval_s,
        machine_room=member.machine_room,
        configured_queues=member.configured_queues,
    )


def _check_mode(group: str, topic: str, other: Registration, mode: ConsumeMode) -> None:
    if other.mode is not mode:
        raise FailedPreconditionError(
            f"group {group!r} consumes topic {topic!r} in {other.mode.value} mode (client "
            f"{other.client_id!r}); every member must use one mode"
        )


def _check_assignable(client_id: str, topic: str, registration: Registration) -> None:
    if topic not in registration.topics:
        raise FailedPreconditionError(
            f"client {client_id!r} did not subscribe to topic {topic!r} in its Heartbeat"
        )
    if registration.mode is not ConsumeMode.QUEUE_EXCLUSIVE:
        raise FailedPreconditionError(
            f"client {client_id!r} registered in {registration.mode.value} mode; "
            "assignments are only for QUEUE_EXCLUSIVE consumers"
        )


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
