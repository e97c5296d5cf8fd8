"""Consumer groups in cluster mode: the group record in the coordinator, its admin
operations, and the proxies' cache of it.

A group's settings (delivery attempts, backoff, FIFO flag, subscriptions, consume_from) are
cluster-wide metadata: `groups/<group>` holds them as a JSON object (docs/coordination.md,
"Groups", has the schema), changed only with compare-and-set. Creates and updates are
checked and merged by broker_core's own rules (group_rules.py), so a group set through a
proxy obeys exactly what a broker would have enforced. Every broker keeps its own copy of
the group for its pops and revives (its offsets stay local): the proxy pushes a change to
the live brokers and each broker follows `groups/` (broker/catalog_sync.py) to catch up after it
was away.

`GroupCache` answers the proxy's synchronous lookups (get_group, group_settings,
subscription_filter) from a watch of `groups/`.
"""

from __future__ import annotations

import dataclasses
import logging
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from popmq.broker_core import (
    AlreadyExistsError,
    ExponentialBackoff,
    GroupDefaults,
    GroupInfo,
    GroupSettings,
    GroupState,
    InvalidArgumentError,
    NotFoundError,
    Subscription,
    UnavailableError,
    check_name,
    new_group_state,
    now_ms,
    updated_group_state,
)
from popmq.coordination.coordinator import Coordinator, Entry, Snapshot
from popmq.coordination.errors import CorruptValueError
from popmq.coordination.metadata import (
    SCHEMA_VERSION,
    FollowingCache,
    delete_with_marker,
    marker,
    write_once,
)

logger = logging.getLogger(__name__)

GROUPS_FOLDER = "groups/"


def group_path(group: str) -> str:
    return f"{GROUPS_FOLDER}{group}"


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """A group as the cluster stores it.

    Attributes:
        name: The group name.
        state: Delivery attempts, backoff and settings (broker_core.GroupState).
        create_time_ms: When it was created (Unix ms).
        auto_created: Created by its first use, with the defaults; an explicit create
            takes it over with its own settings (as a broker's auto-created group).
        revision: The coordinator revision of this value (0 before it is stored).
        group_id: The coordinator revision that created it: a cluster-wide id (each broker
            numbers the group in its own store independently).
    """

    name: str
    state: GroupState
    create_time_ms: int
    auto_created: bool = False
    revision: int = field(default=0, compare=False)
    group_id: int = field(default=0, compare=False)

    @property
    def settings(self) -> GroupSettings:
        return self.state.settings

    def info(self) -> GroupInfo:
        """The group as BrokerAPI reports it."""
        return GroupInfo(
            self.name,
            self.group_id,
            self.state.max_delivery_attempts,
            self.state.retry_backoff_ms,
            self.create_time_ms,
            self.auto_created,
        )

    def to_value(self) -> dict[str, Any]:
        """The JSON object stored in the coordinator (schema in docs/coordination.md)."""
        settings = self.state.settings
        backoff = settings.exponential_backoff
        return {
            "schema": SCHEMA_VERSION,
            "group": self.name,
            "max_delivery_attempts": self.state.max_delivery_attempts,
            "retry_backoff_ms": list(self.state.retry_backoff_ms),
            "fifo": settings.fifo,
            "subscriptions": [
                {"topic": s.topic, "filter_type": s.filter_type, "expression": s.expression}
                for s in settings.subscriptions
            ],
            "consume_from": settings.consume_from,
            "consume_from_ms": settings.consume_from_ms,
            "exponential_backoff": None
            if backoff is None
            else {
                "initial_s": backoff.initial_s,
                "max_s": backoff.max_s,
                "multiplier": backoff.multiplier,
            },
            "create_time_ms": self.create_time_ms,
            "auto_created": self.auto_created,
        }

    @classmethod
    def from_entry(cls, entry: Entry) -> GroupRecord | None:
        """Decode a stored group; None for a deletion marker. CorruptValueError when the
        value is not a group record this version understands (unknown fields are ignored)."""
        try:
            return _decode(entry)
        except (KeyError, TypeError, ValueError, InvalidArgumentError) as error:
            raise CorruptValueError(
                f"group {entry.path!r} is not a popmq group record: {error}"
            ) from error


def _decode(entry: Entry) -> GroupRecord | None:
    value = entry.value
    name = entry.path[len(GROUPS_FOLDER) :]
    schema = _typed(value["schema"], int)
    if schema < 1:
        raise TypeError(f"schema {schema} is not a positive version")
    if schema > SCHEMA_VERSION:
        raise CorruptValueError(
            f"group {entry.path!r} has schema {schema}, newer than this popmq's "
            f"{SCHEMA_VERSION}: upgrade popmq to read it"
        )
    if value.get("deleted") is True:
        return None
    if value["group"] != name:
        raise TypeError(f"its group {value['group']!r} is not the key's {name!r}")
    check_name("group", name)
    raw_backoff = value.get("exponential_backoff")
    backoff = None
    if raw_backoff is not None:
        backoff = ExponentialBackoff(
            initial_s=_number(raw_backoff["initial_s"]),
            max_s=_number(raw_backoff["max_s"]),
            multiplier=_number(raw_backoff["multiplier"]),
        )
    settings = GroupSettings(
        fifo=_typed(value["fifo"], bool),
        subscriptions=tuple(
            Subscription(
                _typed(s["topic"], str), _typed(s["filter_type"], str), _typed(s["expression"], str)
            )
            for s in value["subscriptions"]
        ),
        consume_from=_typed(value["consume_from"], str),
        consume_from_ms=_typed(value["consume_from_ms"], int),
        exponential_backoff=backoff,
    )
    state = GroupState(
        _typed(value["max_delivery_attempts"], int),
        tuple(_typed(ms, int) for ms in value["retry_backoff_ms"]),
        settings,
    )
    return GroupRecord(
        name=name,
        state=state,
        create_time_ms=_typed(value["create_time_ms"], int),
        auto_created=_typed(value["auto_created"], bool),
        revision=entry.revision,
        group_id=entry.created_revision,
    )


def _typed(value: Any, kind: type[Any]) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"{value!r} is not a {kind.__name__}")
    return value


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{value!r} is not a number")
    return float(value)


def decode_groups(snapshot: Snapshot) -> dict[str, GroupRecord]:
    """The groups of a `groups/` snapshot by name; a value that does not decode is logged
    and left out, so one bad key cannot take every group down."""
    groups: dict[str, GroupRecord] = {}
    for entry in snapshot.entries.values():
        try:
            record = GroupRecord.from_entry(entry)
        except CorruptValueError as error:
            logger.warning("ignoring group %s: %s", entry.path, error)
            continue
        if record is not None:
            groups[record.name] = record
    return groups


@dataclass(frozen=True, kw_only=True, slots=True)
class GroupRules:
    """What checks a group change: the defaults of a group created without settings and the
    longest backoff, as a broker's config has them (the proxy's `[groups]` and `[pop]`)."""

    defaults: GroupDefaults = field(default_factory=GroupDefaults)
    max_invisible_s: float = 12 * 3600.0
    cas_attempts: int = 16
    """Compare-and-set tries of one operation before it fails with a retriable error."""


class GroupAdmin:
    """Creates, updates and deletes group records with compare-and-set.

    Args:
        coordinator: Where the records live.
        rules: Defaults and limits.
        topic_exists: Raises NotFoundError for a topic that does not exist (a subscription
            must name an existing topic, as on a broker).
    """

    def __init__(
        self,
        coordinator: Coordinator,
        rules: GroupRules,
        topic_exists: Callable[[str], object],
    ) -> None:
        self.coordinator = coordinator
        self.rules = rules
        self._topic_exists = topic_exists

    async def get(self, name: str) -> GroupRecord:
        """The stored record (NotFoundError if there is none)."""
        _, record = await self._read(name)
        if record is None:
            raise _not_found(name)
        return record

    async def list(self) -> dict[str, GroupRecord]:
        return decode_groups(await self.coordinator.list(GROUPS_FOLDER))

    async def _read(self, name: str) -> tuple[int, GroupRecord | None]:
        check_name("group", name)
        entry = await self.coordinator.get(group_path(name))
        if entry is None:
            return 0, None
        return entry.revision, GroupRecord.from_entry(entry)

    async def _write(self, record: GroupRecord, revision: int) -> GroupRecord | None:
        entry = await write_once(
            self.coordinator, group_path(record.name), record.to_value(), revision
        )
        if entry is None:
            return None
        return dataclasses.replace(record, revision=entry.revision, group_id=entry.created_revision)

    async def create(
        self,
        name: str,
        *,
        max_delivery_attempts: int | None = None,
        retry_backoff_s: Sequence[float] | None = None,
        settings: GroupSettings | None = None,
    ) -> GroupRecord:
        """Create a group; an auto-created one takes these settings. AlreadyExistsError if
        it was created explicitly before."""
        check_name("group", name)
        state = new_group_state(
            max_delivery_attempts=max_delivery_attempts,
            retry_backoff_s=retry_backoff_s,
            settings=settings,
            defaults=self.rules.defaults,
            max_invisible_s=self.rules.max_invisible_s,
            topic_exists=self._topic_exists,
        )
        for _ in range(self.rules.cas_attempts):
            revision, existing = await self._read(name)
            if existing is not None and not existing.auto_created:
                raise AlreadyExistsError(f"group {name!r} already exists")
            record = GroupRecord(
                name=name,
                state=state,
                create_time_ms=existing.create_time_ms if existing else now_ms(),
            )
            written = await self._write(record, revision)
            if written is not None:
                logger.info("group %s created", name)
                return written
        raise self._contended(name)

    async def ensure(self, name: str) -> GroupRecord:
        """The group, created with the defaults on first use (auto_created)."""
        check_name("group", name)
        defaults = self.rules.defaults
        state = GroupState(
            defaults.max_delivery_attempts,
            tuple(round(s * 1000) for s in defaults.retry_backoff_s),
            GroupSettings(),
        )
        for _ in range(self.rules.cas_attempts):
            revision, existing = await self._read(name)
            if existing is not None:
                return existing
            record = GroupRecord(name=name, state=state, create_time_ms=now_ms(), auto_created=True)
            written = await self._write(record, revision)
            if written is not None:
                logger.info("group %s created on first use", name)
                return written
        raise self._contended(name)

    async def update(
        self,
        name: str,
        *,
        max_delivery_attempts: int | None = None,
        retry_backoff_s: Sequence[float] | None = None,
        exponential_backoff: ExponentialBackoff | None = None,
        fifo: bool | None = None,
        set_subscriptions: Sequence[Subscription] = (),
        remove_subscriptions: Sequence[str] = (),
        consume_from: str | None = None,
        consume_from_ms: int = 0,
    ) -> GroupRecord:
        """Change a group's settings (None / empty keep a value), as a broker's update."""
        for _ in range(self.rules.cas_attempts):
            revision, current = await self._read(name)
            if current is None:
                raise _not_found(name)
            state = updated_group_state(
                name,
                current.state,
                max_delivery_attempts=max_delivery_attempts,
                retry_backoff_s=retry_backoff_s,
                exponential_backoff=exponential_backoff,
                fifo=fifo,
                set_subscriptions=set_subscriptions,
                remove_subscriptions=remove_subscriptions,
                consume_from=consume_from,
                consume_from_ms=consume_from_ms,
                max_invisible_s=self.rules.max_invisible_s,
                topic_exists=self._topic_exists,
            )
            record = dataclasses.replace(current, state=state, auto_created=False)
            written = await self._write(record, revision)
            if written is not None:
                logger.info("group %s updated", name)
                return written
        raise self._contended(name)

    async def delete(self, name: str) -> int:
        """Delete the record; the revision to pass to `GroupCache.wait_for`."""
        for _ in range(self.rules.cas_attempts):
            revision, current = await self._read(name)
            if current is None:
                raise _not_found(name)
            deleted = await delete_with_marker(
                self.coordinator, group_path(name), marker("group", name), revision
            )
            if deleted is not None:
                logger.info("group %s deleted", name)
                return deleted
        raise self._contended(name)

    def _contended(self, name: str) -> UnavailableError:
        return UnavailableError(
            f"group {name!r} changed under {self.rules.cas_attempts} attempts in a row "
            "(other admins are writing it); retry"
        )


def _not_found(name: str) -> NotFoundError:
    return NotFoundError(f"group {name!r} does not exist", field="group", value=name)


class GroupCache(FollowingCache):
    """A proxy's view of the group records, kept current by a watch of `groups/`.

    Lookups are synchronous and read one immutable mapping, replaced at every change.
    While the coordinator is unreachable the cache serves its last state.
    """

    def __init__(self, coordinator: Coordinator, *, ready_timeout_s: float = 10.0) -> None:
        super().__init__(coordinator, "group cache")
        self._ready_timeout_s = ready_timeout_s
        self._snapshot: Snapshot | None = None
        self._groups: Mapping[str, GroupRecord] = types.MappingProxyType({})
        self._revision = 0

    async def start(self) -> None:
        """Start the watch and wait for its first listing (CoordinationUnavailableError
        after `ready_timeout_s`). Idempotent."""
        await self._follow_all(
            {GROUPS_FOLDER: self._apply},
            lambda: self._snapshot is not None,
            self._ready_timeout_s,
            "groups",
        )

    def _apply(self, snapshot: Snapshot) -> None:
        groups = dict(self._groups)
        paths = snapshot.entries if snapshot.relisted else snapshot.changed
        if snapshot.relisted:
            groups = {}
        for path in paths:
            entry = snapshot.entries.get(path)
            name = path[len(GROUPS_FOLDER) :]
            record = None
            if entry is not None:
                try:
                    record = GroupRecord.from_entry(entry)
                except CorruptValueError as error:
                    logger.warning("ignoring group %s: %s", path, error)
            if record is None:
                groups.pop(name, None)
            else:
                groups[name] = record
        self._groups = types.MappingProxyType(groups)
        self._snapshot = snapshot
        self._revision = snapshot.revision
        self._wake()

    @property
    def revision(self) -> int:
        return self._revision

    @property
    def groups(self) -> Mapping[str, GroupRecord]:
        return self._groups

    def get(self, name: str) -> GroupRecord:
        """The group's record; NotFoundError if the cache knows no such group."""
        record = self._groups.get(name)
        if record is None:
            check_name("group", name)
            raise _not_found(name)
        return record

    async def wait_for(self, revision: int, *, timeout_s: float | None = None) -> None:
        """Return once the cache serves every change up to `revision` (read your writes)."""
        await self._wait_revision(lambda: self._revision, revision, timeout_s)
