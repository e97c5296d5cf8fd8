"""Topic routes in cluster mode: the route value, admin operations on it, and RouteCache.

A topic's route says which brokers hold its queues and how many each holds. It lives in
the coordinator under `topics/<topic>` as a JSON object (docs/coordination.md, "Routes", has the
schema) and changes only through `RouteAdmin`, with compare-and-set on the entry's revision,
so two admins writing at once never lose an update.

A queue is addressed as (broker name, local queue id), RocketMQ's MessageQueue without the
topic. popmq.v1 clients address a queue by one int, so a route also numbers its queues
globally: the route is a list of segments (broker, count) and global ids run through the
segments in order. Growing a topic appends a segment, so existing global ids never move.

`RouteCache` follows the `topics/`, `brokers/` and `numbers/` (broker_numbers.py) prefixes
and answers the proxy's hot path
synchronously (dict lookups, no I/O); everything here runs on the event loop and nothing
blocks it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import types
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from popmq.broker_core import (
    MAX_QUEUES,
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
    check_name,
    check_range,
    now_ms,
)
from popmq.broker_core.catalog import MESSAGE_TYPES, dlq_topic_name
from popmq.broker_core.validation import RETRY_PREFIX
from popmq.coordination.broker_numbers import NUMBERS_FOLDER, NUMBERS_PATH, decode_numbers
from popmq.coordination.coordinator import Coordinator, Entry, Member, Snapshot
from popmq.coordination.errors import (
    CorruptValueError,
)
from popmq.coordination.metadata import (
    SCHEMA_VERSION,
    FollowingCache,
    delete_with_marker,
    marker,
    write_once,
)

logger = logging.getLogger(__name__)

TOPICS_FOLDER = "topics/"
BROKERS_FOLDER = "brokers/"
PERM_READ = 4
PERM_WRITE = 2
PERM_READ_WRITE = PERM_READ | PERM_WRITE
PERMS: Mapping[int, str] = types.MappingProxyType(
    {0: "none", PERM_WRITE: "write", PERM_READ: "read", PERM_READ_WRITE: "read+write"}
)
"""Permissions a route may carry: RocketMQ's READ (4) and WRITE (2) bits."""
TopicKind = Literal["normal", "dlq", "retry"]
KINDS: tuple[TopicKind, ...] = ("normal", "dlq", "retry")
DEFAULT_QUEUES_PER_BROKER = 8
"""RocketMQ's default read/write queue count per broker (mqadmin updateTopic)."""
MAX_SEGMENTS = 1024
"""Segments in one route: bounds the value (each append adds one, unless it merges)."""


def topic_path(topic: str) -> str:
    return f"{TOPICS_FOLDER}{topic}"


@dataclass(frozen=True, order=True, slots=True)
class QueueRef:
    """A queue as cluster mode addresses it: its broker and the broker's local queue id."""

    broker: str
    queue_id: int


@dataclass(frozen=True, slots=True)
class Segment:
    """`count` queues on `broker`, numbered after the broker's queues in earlier segments."""

    broker: str
    count: int


@dataclass(frozen=True, slots=True)
class TopicRoute:
    """Where a topic's queues live.

    Attributes:
        topic: The topic name.
        segments: The queues in global order; see the module docstring.
        message_type: "normal", "fifo", "delay", "transaction" or "mixed".
        perm: READ (4) and WRITE (2) bits for the whole topic.
        kind: "normal", or "dlq" / "retry" for a group's dead-letter or retry topic.
        owner_group: The group a DLQ or retry topic belongs to ("" for a normal one).
        create_time_ms: When the topic was created (Unix ms).
        revision: The coordinator revision of this value (0 before it is stored); pass it
            to `RouteCache.wait_for` to read your own write.
    """

    topic: str
    segments: tuple[Segment, ...]
    message_type: str = "normal"
    perm: int = PERM_READ_WRITE
    kind: TopicKind = "normal"
    owner_group: str = ""
    create_time_ms: int = 0
    revision: int = field(default=0, compare=False)
    _queues: tuple[QueueRef, ...] = field(default=(), init=False, repr=False, compare=False)
    _global: Mapping[QueueRef, int] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _by_broker: Mapping[str, tuple[int, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        _check_segments(self.topic, self.segments)  # before expanding them into queues
        queues: list[QueueRef] = []
        next_local: dict[str, int] = {}
        for segment in self.segments:
            first = next_local.get(segment.broker, 0)
            queues.extend(QueueRef(segment.broker, first + i) for i in range(segment.count))
            next_local[segment.broker] = first + segment.count
        object.__setattr__(self, "_queues", tuple(queues))
        numbers = {queue: number for number, queue in enumerate(queues)}
        object.__setattr__(self, "_global", types.MappingProxyType(numbers))
        # A broker's local ids grow with the global ones, so its global ids in order are
        # indexed by local id.
        by_broker: dict[str, list[int]] = {}
        for number, queue in enumerate(queues):
            by_broker.setdefault(queue.broker, []).append(number)
        object.__setattr__(
            self,
            "_by_broker",
            types.MappingProxyType({b: tuple(ids) for b, ids in by_broker.items()}),
        )

    @property
    def queues(self) -> tuple[QueueRef, ...]:
        """Every queue, in global order (index = global queue id)."""
        return self._queues

    @property
    def queue_counts(self) -> dict[str, int]:
        """Queues per broker, brokers in name order."""
        counts: dict[str, int] = {}
        for segment in self.segments:
            counts[segment.broker] = counts.get(segment.broker, 0) + segment.count
        return dict(sorted(counts.items()))

    @property
    def brokers(self) -> tuple[str, ...]:
        return tuple(self.queue_counts)

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    def queue(self, global_id: int) -> QueueRef:
        """The queue with this global id (InvalidArgumentError naming the allowed range)."""
        if isinstance(global_id, bool) or not isinstance(global_id, int):
            raise InvalidArgumentError(
                f"queue id {global_id!r} is not an integer", field="queue_id", value=global_id
            )
        if not 0 <= global_id < len(self._queues):
            raise InvalidArgumentError(
                f"queue {global_id} does not exist in topic {self.topic!r}: "
                f"its queues are 0..{len(self._queues) - 1}",
                field="queue_id",
                value=global_id,
                allowed=f"0..{len(self._queues) - 1}",
            )
        return self._queues[global_id]

    def global_ids(self, broker: str) -> tuple[int, ...]:
        """The global id of each of `broker`'s queues, by local id (none for a broker the
        route does not name)."""
        return self._by_broker.get(broker, ())

    def global_id(self, queue: QueueRef) -> int:
        """The global id of (broker, local id); NotFoundError if the route has no such queue."""
        number = self._global.get(queue)
        if number is None:
            raise NotFoundError(
                f"topic {self.topic!r} has no queue {queue.queue_id} on broker {queue.broker!r}"
                f" (its queues per broker: {self.queue_counts})",
                field="queue",
                value=f"{queue.broker}/{queue.queue_id}",
            )
        return number

    def to_value(self) -> dict[str, Any]:
        """The JSON object stored in the coordinator (schema in docs/coordination.md)."""
        return {
            "schema": SCHEMA_VERSION,
            "topic": self.topic,
            "kind": self.kind,
            "owner_group": self.owner_group,
            "message_type": self.message_type,
            "perm": self.perm,
            "create_time_ms": self.create_time_ms,
            "queues": [{"broker": s.broker, "count": s.count} for s in self.segments],
        }

    @classmethod
    def from_entry(cls, entry: Entry) -> TopicRoute | None:
        """Decode a stored route; None for a deletion marker. CorruptValueError when the value
        is not a route this version understands (unknown fields are ignored)."""
        try:
            route = _decode(cls, entry)
            if route is not None:
                check_route(route)
        except (KeyError, TypeError, InvalidArgumentError) as error:
            raise CorruptValueError(
                f"route {entry.path!r} is not a popmq topic route: {error}"
            ) from error
        return route


def _decode(cls: type[TopicRoute], entry: Entry) -> TopicRoute | None:
    value = entry.value
    topic = entry.path[len(TOPICS_FOLDER) :]
    schema = _int(value["schema"])
    if schema < 1:
        raise TypeError(f"schema {schema} is not a positive version")
    if schema > SCHEMA_VERSION:
        raise CorruptValueError(
            f"route {entry.path!r} has schema {schema}, newer than this popmq's "
            f"{SCHEMA_VERSION}: upgrade popmq to read it"
        )
    if value.get("deleted") is True:
        return None
    if value["topic"] != topic:
        raise TypeError(f"its topic {value['topic']!r} is not the key's {topic!r}")
    return cls(
        topic=topic,
        segments=tuple(Segment(_str(s["broker"]), _int(s["count"])) for s in value["queues"]),
        message_type=_str(value["message_type"]),
        perm=_int(value["perm"]),
        kind=value["kind"],
        owner_group=_str(value.get("owner_group", "")),
        create_time_ms=_int(value["create_time_ms"]),
        revision=entry.revision,
    )


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{value!r} is not an integer")
    return value


def check_perm(perm: int) -> int:
    if isinstance(perm, bool) or not isinstance(perm, int) or perm not in PERMS:
        raise InvalidArgumentError(
            f"perm {perm!r} is not a route permission: use 6 (read+write), 4 (read), "
            "2 (write) or 0 (none)",
            field="perm",
            value=perm,
            allowed="0, 2, 4, 6",
        )
    return perm


def check_queue_count(what: str, count: int) -> int:
    if isinstance(count, bool) or not isinstance(count, int):
        raise InvalidArgumentError(f"{what} {count!r} is not an integer", field="queues")
    check_range(what, count, 1, MAX_QUEUES, field="queues")
    return count


def check_topic_identity(topic: str, kind: str, owner_group: str) -> None:
    """A normal topic has a plain name; a DLQ is `%DLQ%<group>` and a retry topic
    `%RETRY%<group>_<topic>`, both naming their owner group."""
    if kind not in KINDS:
        raise InvalidArgumentError(
            f"topic kind {kind!r} is unknown: use one of {', '.join(KINDS)}",
            field="kind",
            value=kind,
            allowed=", ".join(KINDS),
        )
    if kind == "normal":
        check_name("topic", topic)
        if owner_group:
            raise InvalidArgumentError(
                f"a normal topic has no owner group (got {owner_group!r}): owner_group is "
                "for dlq and retry topics",
                field="owner_group",
                value=owner_group,
            )
        return
    check_name("group", owner_group)
    if kind == "dlq":
        expected = dlq_topic_name(owner_group)
        if topic != expected:
            raise InvalidArgumentError(
                f"the dead-letter topic of group {owner_group!r} is named {expected!r}, "
                f"not {topic!r}",
                field="topic",
                value=topic,
                allowed=expected,
            )
        return
    prefix = f"{RETRY_PREFIX}{owner_group}_"
    if not topic.startswith(prefix):
        raise InvalidArgumentError(
            f"a retry topic of group {owner_group!r} is named '{prefix}<topic>', not {topic!r}",
            field="topic",
            value=topic,
            allowed=f"{prefix}<topic>",
        )
    check_name("topic", topic[len(prefix) :], allow_dlq=True)


def check_topic_name(topic: str) -> None:
    """A name any kind of topic may have: plain, `%DLQ%<group>` or `%RETRY%<group>_<topic>`."""
    if isinstance(topic, str) and topic.startswith(RETRY_PREFIX):
        check_name("topic", topic[len(RETRY_PREFIX) :])
    else:
        check_name("topic", topic, allow_dlq=True)


def check_route(route: TopicRoute) -> None:
    """Every rule a stored route obeys (InvalidArgumentError naming what is allowed)."""
    check_topic_identity(route.topic, route.kind, route.owner_group)
    if route.message_type not in MESSAGE_TYPES:
        raise InvalidArgumentError(
            f"message type {route.message_type!r} is unknown: use one of "
            f"{', '.join(MESSAGE_TYPES)}",
            field="message_type",
            value=route.message_type,
            allowed=", ".join(MESSAGE_TYPES),
        )
    check_perm(route.perm)
    for broker, count in route.queue_counts.items():
        check_queue_count(f"queues of topic {route.topic!r} on broker {broker!r}", count)


def _check_segments(topic: str, segments: tuple[Segment, ...]) -> None:
    if not segments:
        raise InvalidArgumentError(
            f"topic {topic!r} needs queues on at least one broker", field="queues"
        )
    if len(segments) > MAX_SEGMENTS:
        raise InvalidArgumentError(
            f"topic {topic!r} would have {len(segments)} queue segments: at most "
            f"{MAX_SEGMENTS} are allowed",
            field="queues",
            allowed=f"1..{MAX_SEGMENTS}",
        )
    for segment in segments:
        check_name("broker", segment.broker)
        check_queue_count(f"queues on broker {segment.broker!r}", segment.count)


VANISHED_GRACE_S = 10.0
"""The default of `[cluster] vanished_grace_s` (RoutesConfig.vanished_grace_s)."""
MAX_VANISHED_GRACE_S = 60.0
"""The longest `vanished_grace_s`. A held broker that was really replaced (a shard replica
that stopped leading while it runs on) answers its calls NOT_LEADER for the whole grace, and
members register again within a second or two of etcd's resume: a minute is ample."""


_CAS_BACKOFF_S = 0.005
_CAS_BACKOFF_MAX_S = 0.2
"""A lost compare-and-set waits up to 5 ms, doubled after each further loss, at most 200 ms:
16 attempts then wait up to 2.3 s in all, where retrying at once lost in step."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RoutesConfig:
    """How admin operations write routes and how a RouteCache starts."""

    default_queues_per_broker: int = DEFAULT_QUEUES_PER_BROKER
    """Queues on each live broker when a topic is created without a per-broker map."""
    cas_attempts: int = 16
    """Compare-and-set tries of one operation before it fails with a retriable error
    (each conflict means another admin wrote the same topic in between; each is followed
    by a short random wait, growing with the conflicts)."""
    ready_timeout_s: float = 10.0
    """How long `RouteCache.start` waits for its first listings (routes, brokers, numbers)."""
    vanished_grace_s: float = VANISHED_GRACE_S
    """How long a RouteCache keeps serving a broker whose registration vanished while its
    connection stayed up (RouteCache's `answering`), waiting for it to register again.
    An etcd that resumes after a pause (or a cut-off from everyone) longer than the session
    TTL revokes every lease at once, before any keepalive lands: every broker's key vanishes
    together although every broker is serving, and each registers again within about a
    keepalive interval. 0: drop such a broker at once; at most MAX_VANISHED_GRACE_S."""

    def __post_init__(self) -> None:
        check_queue_count("default_queues_per_broker", self.default_queues_per_broker)
        check_range("cas_attempts", self.cas_attempts, 1, 1000)
        check_range("ready_timeout_s", self.ready_timeout_s, 0.001, 3600, "s")
        check_range("vanished_grace_s", self.vanished_grace_s, 0, MAX_VANISHED_GRACE_S, "s")


class RouteAdmin:
    """Admin operations on routes: each reads the route, changes it and writes it back with
    compare-and-set, reading again after a conflict (up to `cas_attempts` times)."""

    def __init__(self, coordinator: Coordinator, config: RoutesConfig | None = None) -> None:
        self.coordinator = coordinator
        self.config = config or RoutesConfig()

    async def live_brokers(self) -> dict[str, Member]:
        return await self.coordinator.members("broker")

    async def _require_live(self, brokers: Iterable[str]) -> None:
        live = await self.live_brokers()
        for broker in brokers:
            check_name("broker", broker)
            if broker not in live:
                raise NotFoundError(
                    f"broker {broker!r} is not a live member: live brokers are "
                    f"{sorted(live) or 'none'}",
                    field="broker",
                    value=broker,
                    allowed=", ".join(sorted(live)),
                )

    async def get(self, topic: str) -> TopicRoute:
        """The stored route (NotFoundError if there is none)."""
        _, route = await self._read(topic)
        if route is None:
            raise _not_found(topic)
        return route

    async def list(self) -> dict[str, TopicRoute]:
        """Every stored route by topic (routes that do not decode are left out, logged)."""
        snapshot = await self.coordinator.list(TOPICS_FOLDER)
        return decode_routes(snapshot)

    async def _write(self, topic: str, value: Mapping[str, Any], revision: int) -> Entry | None:
        """Compare-and-set one route value (metadata.write_once); None if another write
        came first."""
        return await write_once(self.coordinator, topic_path(topic), value, revision)

    async def _read(self, topic: str) -> tuple[int, TopicRoute | None]:
        """The entry's revision (0: absent) and its route (None: absent or deleted)."""
        check_topic_name(topic)
        entry = await self.coordinator.get(topic_path(topic))
        if entry is None:
            return 0, None
        return entry.revision, TopicRoute.from_entry(entry)

    async def create_topic(
        self,
        topic: str,
        *,
        queues_per_broker: int | None = None,
        queues: Mapping[str, int] | None = None,
        message_type: str = "normal",
        perm: int = PERM_READ_WRITE,
        kind: TopicKind = "normal",
        owner_group: str = "",
        if_absent: bool = False,
    ) -> TopicRoute:
        """Create a topic's route.

        Args:
            topic: Its name.
            queues_per_broker: Queues on every live broker (default
                `config.default_queues_per_broker`); not with `queues`.
            queues: Broker name -> queue count, explicitly; every broker must be live.
            message_type: See TopicRoute.
            perm: See TopicRoute.
            kind: See TopicRoute.
            owner_group: See TopicRoute.
            if_absent: Return the existing route instead of raising AlreadyExistsError
                (the existing one is returned as it is, even if its settings differ).

        Brokers are numbered in name order, so the global queue ids run broker by broker.
        """
        if queues is not None and queues_per_broker is not None:
            raise InvalidArgumentError(
                "give queues_per_broker or a per-broker queues map, not both", field="queues"
            )
        check_topic_identity(topic, kind, owner_group)
        if queues is None:
            count = check_queue_count(
                "queues_per_broker",
                self.config.default_queues_per_broker
                if queues_per_broker is None
                else queues_per_broker,
            )
            live = await self.live_brokers()
            if not live:
                raise UnavailableError(
                    f"cannot create topic {topic!r}: no broker is a live member yet"
                )
            layout = {broker: count for broker in live}
        else:
            if not queues:
                raise InvalidArgumentError(
                    f"queues of topic {topic!r} is empty: name at least one broker",
                    field="queues",
                )
            for broker, count in queues.items():
                check_name("broker", broker)
                check_queue_count(f"queues on broker {broker!r}", count)
            await self._require_live(queues)
            layout = dict(queues)
        route = TopicRoute(
            topic=topic,
            segments=tuple(Segment(b, c) for b, c in sorted(layout.items())),
            message_type=message_type,
            perm=check_perm(perm),
            kind=kind,
            owner_group=owner_group,
            create_time_ms=now_ms(),
        )
        check_route(route)
        for attempt in range(self.config.cas_attempts):
            revision, existing = await self._read(topic)
            if existing is not None:
                if if_absent:
                    return existing
                raise AlreadyExistsError(
                    f"topic {topic!r} already exists (queues per broker "
                    f"{existing.queue_counts}); use add_queues to grow it",
                    field="topic",
                    value=topic,
                )
            entry = await self._write(topic, route.to_value(), revision)
            if entry is None:
                await self._back_off(attempt)
                continue
            logger.info("topic %s created: %s", topic, route.queue_counts)
            return _with_revision(route, entry)
        raise self._contended(topic)

    async def _update(
        self, topic: str, change: Callable[[TopicRoute], TopicRoute | None]
    ) -> TopicRoute:
        for attempt in range(self.config.cas_attempts):
            revision, route = await self._read(topic)
            if route is None:
                raise _not_found(topic)
            changed = change(route)
            if changed is None:
                return route
            check_route(changed)
            entry = await self._write(topic, changed.to_value(), revision)
            if entry is None:
                await self._back_off(attempt)
                continue
            return _with_revision(changed, entry)
        raise self._contended(topic)

    async def add_queues(self, topic: str, broker: str, count: int) -> TopicRoute:
        """Add `count` queues on `broker` (a live member): grows the topic or spreads it to a
        new broker. The new queues take the next global ids; existing ids do not move."""
        check_name("broker", broker)
        check_queue_count("count", count)
        await self._require_live([broker])

        def grow(route: TopicRoute) -> TopicRoute:
            segments = list(route.segments)
            if segments and segments[-1].broker == broker:
                segments[-1] = Segment(broker, segments[-1].count + count)
            else:
                segments.append(Segment(broker, count))
            return _replace(route, segments=tuple(segments))

        grown = await self._update(topic, grow)
        logger.info("topic %s: %d queues added on %s", topic, count, broker)
        return grown

    async def update_perm(self, topic: str, perm: int) -> TopicRoute:
        """Set the topic's READ/WRITE bits (e.g. 4 stops sends while consumers drain it)."""
        check_perm(perm)
        return await self._update(
            topic, lambda route: None if route.perm == perm else _replace(route, perm=perm)
        )

    async def delete_topic(self, topic: str) -> int:
        """Delete a topic's route; returns the revision to pass to `RouteCache.wait_for`.

        The route is first replaced by a deletion marker (with compare-and-set, so a
        concurrent change is not lost silently) and then the key is deleted at the marker's
        revision. The marker's revision is one the topics watch delivers, which gives the
        caller a revision to wait for; a reader treats a marker as an absent topic, so a
        marker left by an admin that died in between does no harm."""
        for attempt in range(self.config.cas_attempts):
            revision, route = await self._read(topic)
            if route is None:
                raise _not_found(topic)
            deleted = await delete_with_marker(
                self.coordinator, topic_path(topic), marker("topic", topic), revision
            )
            if deleted is None:
                await self._back_off(attempt)
                continue
            logger.info("topic %s deleted", topic)
            return deleted
        raise self._contended(topic)

    async def _back_off(self, attempt: int) -> None:
        """After a lost compare-and-set: wait a random while, up to twice as long each time,
        so admins racing on one topic spread out instead of colliding again in step (not
        after the last attempt: the caller gives up at once)."""
        if attempt + 1 < self.config.cas_attempts:
            ceiling = min(_CAS_BACKOFF_MAX_S, _CAS_BACKOFF_S * 2**attempt)
            await asyncio.sleep(random.uniform(0, ceiling))

    def _contended(self, topic: str) -> UnavailableError:
        return UnavailableError(
            f"topic {topic!r} changed under {self.config.cas_attempts} attempts in a row "
            "(other admins are writing it); retry"
        )


def _replace(route: TopicRoute, **changes: Any) -> TopicRoute:
    return dataclasses.replace(route, **changes)


def _with_revision(route: TopicRoute, entry: Entry) -> TopicRoute:
    return _replace(route, revision=entry.revision)


def _not_found(topic: str) -> NotFoundError:
    return NotFoundError(f"topic {topic!r} does not exist", field="topic", value=topic)


def decode_routes(snapshot: Snapshot) -> dict[str, TopicRoute]:
    """The routes of a `topics/` snapshot by topic; a value that does not decode is logged
    and left out, so one bad key cannot take every route down."""
    routes: dict[str, TopicRoute] = {}
    for entry in snapshot.entries.values():
        try:
            route = TopicRoute.from_entry(entry)
        except CorruptValueError as error:
            logger.warning("ignoring route %s: %s", entry.path, error)
            continue
        if route is not None:
            routes[route.topic] = route
    return routes


@dataclass(frozen=True, slots=True)
class _State:
    """What a RouteCache serves: replaced whole on every change, so a reader on the loop
    sees one consistent state.

    `writable` and `readable` are filled on first lookup of a topic and belong to this
    state only, so a change costs O(changed routes), not O(topics x queues).
    """

    revision: int
    routes: Mapping[str, TopicRoute]
    brokers: Mapping[str, Entry]
    numbers: Mapping[str, int] = field(default_factory=lambda: types.MappingProxyType({}))
    writable: dict[str, Mapping[str, tuple[int, ...]]] = field(default_factory=dict)
    readable: dict[str, Mapping[str, tuple[int, ...]]] = field(default_factory=dict)


def _by_broker(route: TopicRoute, live: Mapping[str, Entry]) -> Mapping[str, tuple[int, ...]]:
    ids: dict[str, list[int]] = {}
    for queue in route.queues:
        if queue.broker in live:
            ids.setdefault(queue.broker, []).append(queue.queue_id)
    return types.MappingProxyType({broker: tuple(v) for broker, v in sorted(ids.items())})


def _decode_into(routes: dict[str, TopicRoute], snapshot: Snapshot, paths: Iterable[str]) -> None:
    """Bring `routes` up to `snapshot` for `paths` (a bad value is logged and left out)."""
    for path in paths:
        if not path.startswith(TOPICS_FOLDER):
            continue
        topic = path[len(TOPICS_FOLDER) :]
        entry = snapshot.entries.get(path)
        route = None
        if entry is not None:
            try:
                route = TopicRoute.from_entry(entry)
            except CorruptValueError as error:
                logger.warning("ignoring route %s: %s", path, error)
        if route is None:
            routes.pop(topic, None)
        else:
            routes[topic] = route


_EMPTY: Mapping[str, tuple[int, ...]] = types.MappingProxyType({})


_RECHECK_HELD_S = 0.5
"""How often a RouteCache looks again at the brokers it holds past their registration (for
a connection that dropped); sooner when one's grace ends, so none is held past it."""


class RouteCache(FollowingCache):
    """A proxy's view of the routes and the live brokers, kept current by two watches.

    Lookups are synchronous and read one immutable `_State`. While the coordinator is
    unreachable the watches keep retrying and the cache keeps serving its last state; when
    they resume the cache catches up (the coordinator re-lists after a compaction).

    A broker whose registration vanishes stays live for `config.vanished_grace_s` while
    `answering(name)` says its connection is up and has not dropped since the registration
    was seen (a connection that came back may reach another process started on the same
    address), until it registers again (its new entry, a new epoch, replaces the held one):
    an etcd that resumes after a pause longer than the TTL expires every lease at once, and
    dropping every broker until each registers again would fail sends, pops and acks that
    the brokers could serve. Holding one is safe: a broker decides itself whether it may
    write (broker/fencing.py), so one that was really replaced refuses what still reaches
    it. A shard replica that stops leading while it keeps running (its connection stays
    up) is held until the new leader registers (which replaces the held entry) or the grace
    ends, answering every call with NOT_LEADER (retriable) meanwhile. A broker that stops
    deregisters after it stopped listening, so its connection is down and it is dropped at
    once.

    Use it as an async context (`async with RouteCache(coordinator) as cache:`).
    """

    def __init__(
        self,
        coordinator: Coordinator,
        config: RoutesConfig | None = None,
        *,
        answering: Callable[[str], bool] | None = None,
    ) -> None:
        super().__init__(coordinator, "route cache")
        self.config = config or RoutesConfig()
        self._answering = answering
        # Brokers held live past their registration (class docstring): name -> loop time
        # their registration was first seen gone. Changed by _rebuild only.
        self._vanished_at: dict[str, float] = {}
        # The timer that looks again at the held brokers (None while none is held).
        self._recheck: asyncio.TimerHandle | None = None
        self._topics: Snapshot | None = None
        self._brokers: Snapshot | None = None
        self._numbers: Snapshot | None = None
        self._broker_numbers: Mapping[str, int] = types.MappingProxyType({})
        self._decoded_from: Snapshot | None = None  # the topics snapshot routes came from
        self._state = _State(0, types.MappingProxyType({}), types.MappingProxyType({}))

    async def __aenter__(self) -> RouteCache:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._recheck is not None:
            self._recheck.cancel()
            self._recheck = None
        await super().close()

    async def start(self) -> None:
        """Start the watches and wait for their first listing (CoordinationUnavailableError
        after `ready_timeout_s`). Idempotent."""
        await self._follow_all(
            {
                TOPICS_FOLDER: self._topics_changed,
                BROKERS_FOLDER: self._brokers_changed,
                NUMBERS_FOLDER: self._numbers_changed,
            },
            lambda: None not in (self._topics, self._brokers, self._numbers),
            self.config.ready_timeout_s,
            "routes, brokers and broker numbers",
        )

    def _topics_changed(self, snapshot: Snapshot) -> None:
        self._topics = snapshot
        self._rebuild()

    def _brokers_changed(self, snapshot: Snapshot) -> None:
        self._brokers = snapshot
        self._rebuild()

    def _numbers_changed(self, snapshot: Snapshot) -> None:
        self._numbers = snapshot
        try:
            numbers = decode_numbers(snapshot.entries.get(NUMBERS_PATH))
        except CorruptValueError as error:
            logger.warning("ignoring the broker numbers: %s", error)  # keeps the last good ones
        else:
            self._broker_numbers = types.MappingProxyType(numbers)
        self._rebuild()

    def _rebuild(self) -> None:
        topics, brokers = self._topics, self._brokers
        if topics is None or brokers is None or self._numbers is None:
            self._wake()
            return
        state = self._state
        routes = dict(state.routes)
        if topics is not self._decoded_from:
            incremental = self._decoded_from is not None and not topics.relisted
            _decode_into(routes, topics, topics.changed if incremental else topics.entries)
            if not incremental:  # a re-list: drop what is gone
                for topic in [t for t in routes if topic_path(t) not in topics.entries]:
                    del routes[topic]
            self._decoded_from = topics
        live = {entry.path[len(BROKERS_FOLDER) :]: entry for entry in brokers.entries.values()}
        held = self._held(live)
        self._hold(held, live)
        live.update((name, state.brokers[name]) for name in held)
        self._state = _State(
            revision=topics.revision,
            routes=types.MappingProxyType(routes),
            brokers=types.MappingProxyType(live),
            numbers=self._broker_numbers,
        )
        self._wake()

    def _held(self, registered: Container[str]) -> dict[str, float]:
        """The brokers served now but not `registered` that stay live (class docstring):
        name -> when their registration vanished."""
        answering, grace = self._answering, self.config.vanished_grace_s
        if answering is None or grace <= 0 or self._closed:
            return {}
        now = asyncio.get_running_loop().time()
        held: dict[str, float] = {}
        for name in self._state.brokers:
            if name in registered:
                continue
            since = self._vanished_at.get(name, now)
            if now - since < grace and answering(name):
                held[name] = since
        return held

    def _hold(self, held: dict[str, float], registered: Container[str]) -> None:
        """Keep `held` (from _held), log what changed, and look again in a while if any."""
        for name in held.keys() - self._vanished_at.keys():
            logger.warning(
                "broker %s's registration vanished while its connection is up: still routing "
                "to it for up to %gs, until it registers again",
                name,
                self.config.vanished_grace_s,
            )
        for name in self._vanished_at.keys() - held.keys():
            if name in registered:
                logger.info("broker %s registered again", name)
            else:
                logger.warning(
                    "broker %s did not register again in time, or its connection went down: "
                    "it left the cluster",
                    name,
                )
        self._vanished_at = held
        if self._recheck is not None:
            self._recheck.cancel()
            self._recheck = None
        self._schedule_recheck()

    def _schedule_recheck(self) -> None:
        """Look at the held brokers again in _RECHECK_HELD_S, or when the first one's grace
        ends if sooner (cluster status shows how long each is held at most)."""
        if not self._vanished_at:
            return
        loop = asyncio.get_running_loop()
        due = min(self._vanished_at.values()) + self.config.vanished_grace_s - loop.time()
        self._recheck = loop.call_later(max(0.0, min(_RECHECK_HELD_S, due)), self._recheck_held)

    def _registered(self) -> set[str]:
        """The brokers the last brokers/ snapshot holds."""
        brokers = self._brokers
        return set() if brokers is None else {p[len(BROKERS_FOLDER) :] for p in brokers.entries}

    def _recheck_held(self) -> None:
        """The timer: rebuild once a held broker is due to be dropped, else look again."""
        self._recheck = None
        if self._closed:
            return
        if self._held(self._registered()).keys() != self._vanished_at.keys():
            self._rebuild()
        else:
            self._schedule_recheck()

    # -- the hot path: synchronous lookups ---------------------------------------------

    @property
    def revision(self) -> int:
        """The coordinator revision of the routes served (the topics watch's last one)."""
        return self._state.revision

    @property
    def routes(self) -> Mapping[str, TopicRoute]:
        return self._state.routes

    def route(self, topic: str) -> TopicRoute:
        """The topic's route; NotFoundError if the cache knows no such topic."""
        return self._route(self._state, topic)

    @staticmethod
    def _route(state: _State, topic: str) -> TopicRoute:
        route = state.routes.get(topic)
        if route is None:
            raise _not_found(topic)
        return route

    def writable_queues(self, topic: str) -> Mapping[str, tuple[int, ...]]:
        """Broker -> local queue ids a send may use: none unless the route has WRITE, and
        only brokers that are live members (FaultTable.pick's `queues`)."""
        state = self._state
        found = state.writable.get(topic)
        if found is None:
            route = self._route(state, topic)
            found = _by_broker(route, state.brokers) if route.writable else _EMPTY
            state.writable[topic] = found
        return found

    def readable_queues(self, topic: str) -> Mapping[str, tuple[int, ...]]:
        """Broker -> local queue ids a pop may read: the route has READ, brokers live."""
        state = self._state
        found = state.readable.get(topic)
        if found is None:
            route = self._route(state, topic)
            found = _by_broker(route, state.brokers) if route.readable else _EMPTY
            state.readable[topic] = found
        return found

    def queue(self, topic: str, global_id: int) -> QueueRef:
        """Which broker (and local id) holds a popmq.v1 client's global queue id."""
        return self.route(topic).queue(global_id)

    @property
    def live_brokers(self) -> Mapping[str, Entry]:
        """Live broker members by name: their entries (info value; epoch = created_revision).
        Held brokers (`held`) are among them, under their vanished registration."""
        return self._state.brokers

    @property
    def held(self) -> Mapping[str, float]:
        """The brokers served although their registration vanished (class docstring): name
        -> seconds since it vanished. Each is dropped once `config.vanished_grace_s` has
        passed (or its connection drops) unless it registers again first. On the loop."""
        now = asyncio.get_running_loop().time()
        return {name: now - since for name, since in self._vanished_at.items()}

    @property
    def broker_numbers(self) -> Mapping[str, int]:
        """Each numbered broker's number (coordination/broker_numbers.py)."""
        return self._state.numbers

    def broker_addr(self, broker: str) -> str:
        """The BrokerService address of a live broker (handles name their broker);
        UnavailableError (retriable) when it is not a live member now."""
        entry = self._state.brokers.get(broker)
        if entry is None:
            raise UnavailableError(
                f"broker {broker!r} is not a live member now (its lease lapsed or it never "
                f"registered); live brokers: {sorted(self._state.brokers) or 'none'}"
            )
        addr = entry.value.get("addr")
        if not isinstance(addr, str) or not addr:
            raise FailedPreconditionError(
                f"broker {broker!r} registered no address (its member info: {dict(entry.value)})"
            )
        return addr

    # -- read your writes ----------------------------------------------------------------

    async def wait_for(self, revision: int, *, timeout_s: float | None = None) -> None:
        """Return once the routes served include every change up to `revision` (the
        `revision` of a route RouteAdmin returned, or what delete_topic returned), so a
        write through this proxy is visible to its next request. TimeoutError after
        `timeout_s`; the watch's failure if it ended."""
        await self._wait_revision(lambda: self._state.revision, revision, timeout_s)

    async def wait_changed(self) -> None:
        """Return at the next change of routes, live brokers or broker numbers (for a
        proxy that rebuilds derived state, e.g. the fault table's forget)."""
        await self._wait_change()
