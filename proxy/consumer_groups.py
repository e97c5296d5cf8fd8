"""Queue-exclusive consumer groups in the coordinator: one entry per group, read through a
cache and written with compare-and-set.

`consumers/<group>` holds the group's queue-exclusive members (with the wall-clock time of
each one's last call), and per topic its queue claims (owner and wall-clock deadline), the
computed target and its epoch (docs/cluster-consumers.md, "Queue-exclusive consumers across
proxies"). ClientRegistry (clients.py) applies its rules to a `StoredGroup`; this module
reads the group, writes the result only if nobody wrote the group in between, and otherwise
reads it again and lets the rules run again. So every change is made over the entry as last
written, by whichever proxy: a claim is never granted over another member's claim that a
concurrent write just renewed.

- **The cache**: the last state this process read or wrote of each group, with its
  revision. A change starts from it and writes with compare-and-set on that revision: one
  round trip when no other proxy wrote the group since (with a LocalCoordinator no wait at
  all); otherwise the conflict costs a read and a second write, and the next change of
  that group reads first (two round trips) until a read finds the cache was current.
  Reads that decide nothing alone (`owners`) use the cache as it is.
- **Why no watch of `consumers/`**: every heartbeat of every queue-exclusive client is a
  write, and a watch would bring all of them to every proxy (the coordinator's watch also
  copies its whole snapshot at each change), while a proxy needs a group only when one of
  its members calls it.
- **A lock per group** serializes this process's changes of one group: a change edits its
  cached state in place, and a failed write drops it from the cache.
- **`consumer-state`** records when the coordinator's consumer state began and until when
  its restart grace lasts, the same for every proxy.
- **The sweep** deletes the entries of groups whose members and claims all ran out, which
  nobody would otherwise touch again.
- **Unsure releases**: a write that fails because the coordinator did not answer may still
  have landed. The claims it would have released (or handed to another member) are
  remembered as unsure until the group is next read or written, so an etcd outage's
  hold-over (clients.py) never keeps a claim the coordinator may already have freed.

Everything runs on the event loop; only the coordinator calls wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from popmq.broker_core import ResourceExhaustedError, UnavailableError
from popmq.coordination.coordinator import MAX_VALUE_BYTES, Coordinator, Entry
from popmq.coordination.errors import (
    ConflictError,
    CoordinationArgumentError,
    CoordinationUnavailableError,
    CorruptValueError,
)
from popmq.proxy.allocation import Strategy

__all__ = [
    "GROUPS_FOLDER",
    "STATE_PATH",
    "Claim",
    "ConsumerGroups",
    "StoredGroup",
    "StoredMember",
    "TopicClaims",
    "digest",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

SCHEMA_VERSION = 1
"""The schema of `consumers/<group>` and `consumer-state` this code writes and reads."""
GROUPS_FOLDER = "consumers/"
STATE_PATH = "consumer-state"
_STRATEGY_NAMES = {s: s.value for s in Strategy}  # Enum.value is a slow descriptor
MAX_WRITE_ATTEMPTS = 8
"""Compare-and-set attempts of one change before it gives up (UNAVAILABLE, retriable):
each lost race means another proxy changed the group meanwhile."""


@dataclass(slots=True)
class StoredMember:
    """A live queue-exclusive member, as every proxy sees it."""

    client_id: str
    topics: tuple[str, ...]
    strategy: Strategy
    machine_room: str
    configured_queues: dict[str, tuple[int, ...]]
    interval_s: float
    seen: float
    """Wall-clock time of its last Heartbeat or QueryAssignment."""
    via: str
    """The registry (ClientRegistry.instance) that served that call."""


@dataclass(slots=True)
class Claim:
    owner: str
    expires: float
    """Wall-clock deadline."""


@dataclass(slots=True)
class TopicClaims:
    """Assignment state of one (group, topic)."""

    epoch: int = 0
    signature: str = ""
    """Digest of the inputs `target` was computed from (clients.py); a change recomputes it."""
    target: dict[str, tuple[int, ...]] = field(default_factory=dict)
    claims: dict[int, Claim] = field(default_factory=dict)
    """Queue id -> the claim of the member consuming it."""


@dataclass(slots=True)
class StoredGroup:
    """A group's entry: its queue-exclusive members and its topics' claims."""

    members: dict[str, StoredMember] = field(default_factory=dict)
    topics: dict[str, TopicClaims] = field(default_factory=dict)

    def empty(self) -> bool:
        return not self.members and not any(t.claims for t in self.topics.values())

    def copy(self) -> StoredGroup:
        """A copy a change can edit while the cache keeps this one (values are replaced,
        never edited, except the members' and claims' own fields, which are copied)."""
        return StoredGroup(
            {
                c: StoredMember(
                    m.client_id,
                    m.topics,
                    m.strategy,
                    m.machine_room,
                    m.configured_queues,
                    m.interval_s,
                    m.seen,
                    m.via,
                )
                for c, m in self.members.items()
            },
            {
                name: TopicClaims(
                    t.epoch,
                    t.signature,
                    t.target,
                    {q: Claim(claim.owner, claim.expires) for q, claim in t.claims.items()},
                )
                for name, t in self.topics.items()
            },
        )

    def to_value(self) -> dict[str, Any]:
        """The JSON object stored (docs/cluster-consumers.md has the schema). Members and claims are
        arrays, not objects: a group is written at every call of every member, and the
        arrays make it about a third cheaper to encode and to read."""
        members: dict[str, Any] = {}
        for client_id, m in self.members.items():
            strategy = _STRATEGY_NAMES[m.strategy]
            member: list[Any] = [list(m.topics), strategy, m.interval_s, m.seen, m.via]
            if m.machine_room or m.configured_queues:
                member.append(m.machine_room)
            if m.configured_queues:
                member.append({t: list(q) for t, q in m.configured_queues.items()})
            members[client_id] = member
        topics = {
            name: {
                "epoch": t.epoch,
                "signature": t.signature,
                "target": {c: list(q) for c, q in t.target.items()},
                # Stored as "leases": the name predates the word claim.
                "leases": [[q, claim.owner, claim.expires] for q, claim in t.claims.items()],
            }
            for name, t in self.topics.items()
        }
        return {"schema": SCHEMA_VERSION, "members": members, "topics": topics}

    @classmethod
    def from_entry(cls, entry: Entry) -> StoredGroup:
        """Decode a stored group; CorruptValueError when it is not one this version reads."""
        try:
            return _decode(entry.value)
        except (KeyError, TypeError, ValueError) as error:
            raise CorruptValueError(
                f"{entry.path!r} is not a popmq consumer group entry ({error}): delete it "
                "(its members register again at their next heartbeat)"
            ) from error


def _decode(value: Mapping[str, Any]) -> StoredGroup:
    schema = _typed(value["schema"], int)
    if not 1 <= schema <= SCHEMA_VERSION:
        raise ValueError(f"schema {schema} is not 1..{SCHEMA_VERSION}: upgrade popmq to read it")
    members = {
        _typed(client_id, str): _member(client_id, m) for client_id, m in value["members"].items()
    }
    topics = {
        _typed(name, str): TopicClaims(
            epoch=_typed(t["epoch"], int),
            signature=_typed(t["signature"], str),
            target={
                _typed(c, str): tuple(_typed(q, int) for q in ids) for c, ids in t["target"].items()
            },
            claims={
                _typed(q, int): Claim(_typed(owner, str), _number(expires))
                for q, owner, expires in t["leases"]  # "leases": the stored name
            },
        )
        for name, t in value["topics"].items()
    }
    return StoredGroup(members, topics)


def _member(client_id: str, fields: list[Any]) -> StoredMember:
    topics, strategy, interval_s, seen, via = fields[:5]
    room = fields[5] if len(fields) > 5 else ""
    queues = fields[6] if len(fields) > 6 else {}
    return StoredMember(
        client_id=client_id,
        topics=tuple(_typed(t, str) for t in topics),
        strategy=Strategy(strategy),
        machine_room=_typed(room, str),
        configured_queues={
            _typed(t, str): tuple(_typed(q, int) for q in ids) for t, ids in queues.items()
        },
        interval_s=_number(interval_s),
        seen=_number(seen),
        via=_typed(via, str),
    )


def _typed(value: Any, kind: type[Any]) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"{value!r} is not a {kind.__name__}")
    return value


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{value!r} is not a number")
    return float(value)


def digest(signature: tuple[object, ...]) -> str:
    """A short stable digest of an assignment's inputs (the same in every process)."""
    return hashlib.blake2b(repr(signature).encode(), digest_size=8).hexdigest()


@dataclass(slots=True)
class _Cached:
    revision: int
    """0: the group has no entry."""
    state: StoredGroup


class _GroupLock:
    """One group's lock, in the table while anyone holds or waits for it (an async context
    manager of its own: an async generator per call would cost more than the lock)."""

    __slots__ = ("group", "lock", "table", "users")

    def __init__(self, table: dict[str, _GroupLock], group: str) -> None:
        self.table = table
        self.group = group
        self.lock = asyncio.Lock()
        self.users = 0

    async def __aenter__(self) -> None:
        self.users += 1
        try:
            await self.lock.acquire()
        except BaseException:
            self._leave()
            raise

    async def __aexit__(self, *exc: object) -> None:
        self.lock.release()
        self._leave()

    def _leave(self) -> None:
        self.users -= 1
        if not self.users:
            del self.table[self.group]


class ConsumerGroups:
    """The `consumers/` entries of one registry: cached reads and compare-and-set changes.

    Args:
        coordinator: Where the entries live.
        writer: This registry's id, part of each write's id (a write retried by the etcd
            client on another endpoint can report a conflict with itself; the id tells).
    """

    def __init__(self, coordinator: Coordinator, *, writer: str) -> None:
        self.coordinator = coordinator
        self._writer = writer
        self._writes = itertools.count()
        # group -> the last state read or written here. Changed only by the holder of the
        # group's lock (or dropped by anyone: the next change reads again).
        self._cache: dict[str, _Cached] = {}
        # group -> its lock while in use; guards the group's cache entry during a change.
        self._locks: dict[str, _GroupLock] = {}
        # Cached groups another proxy wrote behind our cache at our last change of them.
        self._contended: set[str] = set()
        # group -> (topic, queue id) of claims a write that failed unanswered would have
        # released or moved; cleared when the group is next read or written.
        self._unsure: dict[str, set[tuple[str, int]]] = {}

    def cached(self, group: str) -> StoredGroup | None:
        """The group as last read or written here (maybe stale); None if not cached."""
        cached = self._cache.get(group)
        return None if cached is None else cached.state

    def unsure(self, group: str) -> frozenset[tuple[str, int]]:
        """(topic, queue id) of the group's cached claims that a write which failed without
        an answer may have released or moved (it may have landed)."""
        return frozenset(self._unsure.get(group, ()))

    def cached_groups(self) -> list[str]:
        return list(self._cache)

    def forget(self, group: str) -> None:
        """Drop a group from the cache (nothing of it is live any more)."""
        if group not in self._locks:
            self._cache.pop(group, None)
            self._contended.discard(group)
            self._unsure.pop(group, None)

    def _locked(self, group: str) -> _GroupLock:
        held = self._locks.get(group)
        if held is None:
            held = self._locks[group] = _GroupLock(self._locks, group)
        return held

    async def read(self, group: str) -> StoredGroup | None:
        """The group as stored now (None: no entry); refreshes the cache."""
        async with self._locked(group):
            cached = await self._load(group)
            return cached.state if cached.revision else None

    async def change(self, group: str, apply: Callable[[StoredGroup], tuple[T, bool]]) -> T:
        """Apply `apply` to a copy of the group's state and store the result; returns its
        result.

        `apply(state)` edits the state in place and returns (result, changed); it may be
        called again, on a fresh read, when another proxy wrote the group meanwhile, and
        whatever it raises is raised here. A group left empty is deleted. The cache keeps
        the stored state until the new one is stored.

        Raises:
            UnavailableError: The group kept changing under every attempt; try again.
            ResourceExhaustedError: The group's entry would exceed the coordinator's limit.
            CoordinationError: The coordinator failed (UNAVAILABLE when unreachable).
        """
        path = GROUPS_FOLDER + group
        async with self._locked(group):
            # A group another proxy wrote at our last change is likely written again: read
            # it first (2 round trips a change, not 3: a lost write, a read, a write).
            cached = None if group in self._contended else self._cache.get(group)
            for _ in range(MAX_WRITE_ATTEMPTS):
                if cached is None:
                    cached = await self._load(group)
                working = cached.state.copy()
                result, changed = apply(working)
                if not changed:
                    return result
                try:
                    stored = await self._store(path, cached.revision, working)
                except CoordinationUnavailableError:
                    self._unsure.setdefault(group, set()).update(_released(cached.state, working))
                    raise
                if stored is None:
                    self._contended.add(group)
                    cached = None  # another proxy wrote it: read again, apply again
                    continue
                self._remember(group, stored)
                return result
        raise UnavailableError(
            f"consumer group {group!r} changed {MAX_WRITE_ATTEMPTS} times while this call "
            "tried to update it (other proxies serve its members too); try again"
        )

    def _remember(self, group: str, cached: _Cached) -> None:
        self._unsure.pop(group, None)  # the cache is what the coordinator holds again
        if cached.revision:
            self._cache[group] = cached
        else:
            self._cache.pop(group, None)
            self._contended.discard(group)

    async def _load(self, group: str) -> _Cached:
        """The group as stored now, into the cache (decoded only if it changed)."""
        entry = await self.coordinator.get(GROUPS_FOLDER + group)
        cached = self._cache.get(group)
        if entry is None:
            loaded = _Cached(0, StoredGroup())
        elif cached is not None and cached.revision == entry.revision:
            loaded = cached
            self._contended.discard(group)  # nobody else wrote it since our last change
        else:
            loaded = _Cached(entry.revision, StoredGroup.from_entry(entry))
        self._remember(group, loaded)
        return loaded

    async def _store(self, path: str, revision: int, state: StoredGroup) -> _Cached | None:
        """Write `state` (or delete the entry, when it is empty) if the entry is still at
        `revision`; the stored state, or None when another write came first."""
        if state.empty():
            if not revision:
                return _Cached(0, state)
            try:
                await self.coordinator.delete(path, revision=revision)
            except ConflictError as conflict:
                if conflict.current_revision:
                    return None
                # Gone already (deleted by a sweep, or by our own retried delete): as wanted.
            return _Cached(0, state)
        write_id = f"{self._writer}.{next(self._writes)}"
        value = {**state.to_value(), "write_id": write_id}
        try:
            entry = await self.coordinator.compare_and_set(path, value, revision=revision)
        except ConflictError:
            current = await self.coordinator.get(path)
            if current is not None and current.value.get("write_id") == write_id:
                return _Cached(current.revision, state)  # ours landed; it conflicted with itself
            return None
        except CoordinationArgumentError as error:
            if error.field == "value":
                raise ResourceExhaustedError(
                    f"consumer group {path[len(GROUPS_FOLDER) :]!r} is too large to store "
                    f"(the coordinator takes {MAX_VALUE_BYTES} B an entry): fewer members, "
                    "topics or configured queues"
                ) from error
            raise
        return _Cached(entry.revision, state)

    async def grace_until(self, proposed: float) -> float:
        """Until when the restart grace lasts: as `consumer-state` records it, or
        `proposed`, recorded now when the coordinator has no consumer state yet."""
        entry = await self.coordinator.get(STATE_PATH)
        if entry is None:
            try:
                entry = await self.coordinator.compare_and_set(
                    STATE_PATH,
                    {"schema": SCHEMA_VERSION, "grace_until": proposed},
                    revision=0,
                )
            except ConflictError:
                entry = await self.coordinator.get(STATE_PATH)
                if entry is None:  # deleted right after being written: use ours
                    return proposed
        try:
            return _number(entry.value["grace_until"])
        except (KeyError, TypeError) as error:
            raise CorruptValueError(
                f"{STATE_PATH!r} is not a popmq consumer state entry ({error}): delete it"
            ) from error

    async def sweep(self, dead: Callable[[StoredGroup], bool]) -> int:
        """Delete every stored group that `dead` says has nothing live; how many were.

        An entry that changed since it was listed is left alone (it is live again). A
        corrupt one is logged and kept (an operator deletes it).
        """
        snapshot = await self.coordinator.list(GROUPS_FOLDER)
        removed = 0
        for path, entry in snapshot.entries.items():
            try:
                state = StoredGroup.from_entry(entry)
            except CorruptValueError as error:
                logger.warning("consumer group sweep: %s", error)
                continue
            if not dead(state):
                continue
            with contextlib.suppress(ConflictError):
                if await self.coordinator.delete(path, revision=entry.revision):
                    removed += 1
            group = path[len(GROUPS_FOLDER) :]
            cached = self._cache.get(group)
            if cached is not None and cached.revision == entry.revision:
                self.forget(group)
        return removed


def _released(before: StoredGroup, after: StoredGroup) -> set[tuple[str, int]]:
    """(topic, queue id) of the claims of `before` that `after` drops or gives another owner."""
    released: set[tuple[str, int]] = set()
    for topic, claims in before.topics.items():
        now = after.topics.get(topic)
        for queue_id, claim in claims.claims.items():
            kept = now.claims.get(queue_id) if now is not None else None
            if kept is None or kept.owner != claim.owner:
                released.add((topic, queue_id))
    return released


def new_writer_id() -> str:
    """A registry's id: random, so two registries (two proxies) never share one."""
    return secrets.token_hex(6)
