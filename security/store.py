"""Where users and their policies live, and the authorizer that reads them.

- `SecurityStore`: the users (with their policies) of the server, answered synchronously
  from memory (`user(access_key)` is the authentication gate's UserDirectory) and changed
  durably by the admin RPCs (proxy/security_admin.py).
  - `LocalSecurityStore` (`popmq serve`): the embedded broker's store, meta family, one
    fsynced write batch per change; the one process is the only reader.
  - `ClusterSecurityStore` (`popmq proxy`): etcd through the Coordinator, one entry per
    user at `users/<access key>`, changed by compare-and-set; every proxy follows
    `users/` with a watch, so a change reaches every proxy's memory within the watch's
    delivery time (tens of milliseconds; tests/cluster/test_security_store.py measures it).
- `AclAuthorizer(store)`: the gate's Authorizer: `checks(method, request)` from
  rpc_table, `authorize(principal, checks)` by acl.py over the principal's stored
  policies.

The root user of `[security]` is not stored (the authentication gate's directory adds
it); its access key is reserved here so no stored user can shadow it.

Everything runs on the event loop. Lookups are dict reads of an immutable mapping that a
change replaces whole. Writes: the local store's batch is fsynced by the broker's group
commit writer (its fsync runs off the loop); the cluster store's are etcd round trips.
"""

from __future__ import annotations

import abc
import asyncio
import json
import logging
import types
from collections.abc import Callable, Collection, Mapping, Sequence

from google.protobuf.message import Message

from popmq.broker_core import (
    Broker,
    InternalError,
    InvalidArgumentError,
    UnavailableError,
    now_ms,
)
from popmq.coordination.coordinator import Coordinator, Snapshot
from popmq.coordination.errors import CoordinationError
from popmq.coordination.metadata import (
    FollowingCache,
    delete_with_marker,
    marker,
    write_once,
)
from popmq.security import acl, records, rpc_table
from popmq.security.model import Check, Policy, Principal, User, UserType
from popmq.security.records import UserRecord

log = logging.getLogger(__name__)

USERS_FOLDER = "users/"
"""Cluster mode: `users/<access key>` in the coordinator holds a user and its policies."""

Change = Callable[[UserRecord | None], UserRecord | None]
"""A change of one user: its current record (None: absent) -> the new one (None: delete)."""


def user_path(access_key: str) -> str:
    return f"{USERS_FOLDER}{access_key}"


class SecurityStore(abc.ABC):
    """Users and their policies: synchronous lookups from memory, durable changes.

    Args:
        reserved: Access keys no stored user may have (the root user's).
    """

    def __init__(self, *, reserved: Collection[str] = ()) -> None:
        self._reserved = frozenset(k for k in reserved if k)
        # Replaced whole on every change (never mutated): lookups need no lock.
        self._records: Mapping[str, UserRecord] = types.MappingProxyType({})

    # -- lookups (synchronous; the gate calls them on every request) --------------------------

    def user(self, access_key: str) -> User | None:
        """The stored user (enabled or not), or None: the gate's UserDirectory."""
        record = self._records.get(access_key)
        return None if record is None else record.user

    def record(self, access_key: str) -> UserRecord | None:
        return self._records.get(access_key)

    def records(self) -> Mapping[str, UserRecord]:
        """Every stored user by access key (a read-only snapshot)."""
        return self._records

    # -- lifecycle ------------------------------------------------------------------------

    @abc.abstractmethod
    async def start(self) -> None:
        """Load the users (and, in cluster mode, follow their changes); idempotent."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop following changes; lookups keep answering from the last state."""

    # -- changes --------------------------------------------------------------------------

    async def create_user(
        self,
        access_key: str,
        secret_key: str,
        *,
        user_type: UserType = UserType.NORMAL,
        enabled: bool = True,
    ) -> UserRecord:
        """Create a user with no policies. AlreadyExistsError if it exists."""
        self._check_key(access_key)
        records.check_secret_key(secret_key)
        user_type = _check_type(user_type)
        return await self._apply(
            access_key,
            lambda current: records.created(
                current,
                access_key=access_key,
                secret_key=secret_key,
                user_type=user_type,
                enabled=enabled,
                now_ms=now_ms(),
            ),
        )

    async def update_user(
        self,
        access_key: str,
        *,
        secret_key: str | None = None,
        user_type: UserType | None = None,
        enabled: bool | None = None,
    ) -> UserRecord:
        """Change a user's secret, type or state (None keeps it). NotFoundError if absent."""
        self._check_key(access_key)
        if secret_key is None and user_type is None and enabled is None:
            raise InvalidArgumentError(
                f"updating user {access_key!r} changes nothing: give a secret key, a user "
                "type or enabled"
            )
        if secret_key is not None:
            records.check_secret_key(secret_key)
        if user_type is not None:
            user_type = _check_type(user_type)
        return await self._apply(
            access_key,
            lambda current: records.updated(
                current,
                access_key,
                secret_key=secret_key,
                user_type=user_type,
                enabled=enabled,
                now_ms=now_ms(),
            ),
        )

    async def delete_user(self, access_key: str) -> None:
        """Delete a user and its policies. NotFoundError if absent."""
        self._check_key(access_key)
        await self._change(access_key, lambda current: records.deleted(current, access_key))

    async def grant(self, access_key: str, policy: Policy) -> UserRecord:
        """Add a policy to a user's ACL; a policy with the same resource, decision and
        source CIDRs gets the new actions added instead."""
        self._check_key(access_key)
        policy = records.check_policy(policy)
        return await self._apply(
            access_key,
            lambda current: records.granted(current, access_key, policy, now_ms=now_ms()),
        )

    async def revoke(self, access_key: str, policy: Policy) -> UserRecord:
        """Remove actions (none given: all) from the user's policy with `policy`'s
        resource, decision and source CIDRs. NotFoundError if it has none such."""
        self._check_key(access_key)
        policy = records.check_policy(policy, for_revoke=True)
        return await self._apply(
            access_key,
            lambda current: records.revoked(current, access_key, policy, now_ms=now_ms()),
        )

    def _check_key(self, access_key: str) -> None:
        records.check_access_key(access_key)
        if access_key in self._reserved:
            raise InvalidArgumentError(
                f"access key {access_key!r} is the root user's ([security] root_access_key): "
                "it is not stored, and cannot be created, changed or given policies here",
                field="access_key",
                value=access_key,
            )

    async def _apply(self, access_key: str, change: Change) -> UserRecord:
        record = await self._change(access_key, change)
        if record is None:  # the change functions above never delete
            raise InternalError(f"a change of user {access_key!r} deleted it")
        return record

    @abc.abstractmethod
    async def _change(self, access_key: str, change: Change) -> UserRecord | None:
        """Apply `change` to the user's current record, durably; the new record."""

    def _set(self, access_key: str, record: UserRecord | None) -> None:
        updated = dict(self._records)
        if record is None:
            updated.pop(access_key, None)
        else:
            updated[access_key] = record
        self._records = types.MappingProxyType(updated)


def _check_type(user_type: UserType) -> UserType:
    if not isinstance(user_type, UserType):
        raise InvalidArgumentError(
            f"user type {user_type!r} is not SUPER or NORMAL", field="user_type", value=user_type
        )
    return user_type


def _decode(access_key: str, value: Mapping[str, object]) -> UserRecord | None:
    """A stored record, or None for a marker or a value this version cannot read (logged:
    that user cannot sign in until it is fixed, and no other user is affected)."""
    try:
        return UserRecord.from_value(access_key, value)
    except ValueError as error:
        log.warning("ignoring user %r: %s", access_key, error)
        return None


class LocalSecurityStore(SecurityStore):
    """Users in the embedded broker's store (`popmq serve`).

    Args:
        broker: The embedded broker (started before `start`).
        reserved: Access keys no stored user may have.
    """

    def __init__(self, broker: Broker, *, reserved: Collection[str] = ()) -> None:
        super().__init__(reserved=reserved)
        self._broker = broker
        # Serialises the read-change-write of every change: held across its fsync.
        self._writing = asyncio.Lock()

    async def start(self) -> None:
        loaded: dict[str, UserRecord] = {}
        for access_key, raw in self._broker.security_records().items():
            try:
                value = json.loads(raw)
            except ValueError as error:
                log.warning("ignoring user %r: its record is not JSON (%s)", access_key, error)
                continue
            record = _decode(access_key, value)
            if record is not None:
                loaded[access_key] = record
        self._records = types.MappingProxyType(loaded)
        log.info("security: %d users loaded from the store", len(loaded))

    async def close(self) -> None:
        """Nothing to stop: the broker's store is closed by its owner."""

    async def _change(self, access_key: str, change: Change) -> UserRecord | None:
        # A task of its own, awaited shielded: a caller cancelled meanwhile (an admin RPC
        # whose client went away) must not leave a record stored but not in memory, such
        # as a deleted user still signing in until a restart.
        changing = asyncio.get_running_loop().create_task(self._changed(access_key, change))
        return await asyncio.shield(changing)

    async def _changed(self, access_key: str, change: Change) -> UserRecord | None:
        async with self._writing:
            current = self._records.get(access_key)
            record = change(current)
            if record is current:
                return record  # nothing to write (a grant of what is granted)
            raw = None
            if record is not None:
                raw = json.dumps(record.to_value(), sort_keys=True, separators=(",", ":"))
            await self._broker.put_security_record(
                access_key, None if raw is None else raw.encode()
            )
            self._set(access_key, record)
            return record


class _UserCache(FollowingCache):
    """A proxy's copy of `users/`, kept current by a watch."""

    def __init__(self, coordinator: Coordinator, store: ClusterSecurityStore) -> None:
        super().__init__(coordinator, "user cache")
        self._store = store
        self.revision = 0
        self.listed = False

    async def start(self, timeout_s: float) -> None:
        await self._follow_all({USERS_FOLDER: self._apply}, lambda: self.listed, timeout_s, "users")

    def _apply(self, snapshot: Snapshot) -> None:
        self._store._follow(snapshot)
        self.revision = snapshot.revision
        self.listed = True
        self._wake()

    async def wait_for(self, revision: int, timeout_s: float) -> None:
        await self._wait_revision(lambda: self.revision, revision, timeout_s)


class ClusterSecurityStore(SecurityStore):
    """Users in the coordinator (`popmq proxy`: etcd), shared by every proxy.

    Args:
        coordinator: The cluster's coordinator.
        reserved: Access keys no stored user may have.
        ready_timeout_s: How long `start` waits for the first listing of `users/`.
        cas_attempts: Compare-and-set tries of one change before it fails (retriable).
    """

    def __init__(
        self,
        coordinator: Coordinator,
        *,
        reserved: Collection[str] = (),
        ready_timeout_s: float = 10.0,
        cas_attempts: int = 16,
    ) -> None:
        super().__init__(reserved=reserved)
        self._coordinator = coordinator
        self._cache = _UserCache(coordinator, self)
        self._ready_timeout_s = ready_timeout_s
        self._cas_attempts = cas_attempts

    @property
    def revision(self) -> int:
        """The coordinator revision this proxy's users are current to."""
        return self._cache.revision

    async def start(self) -> None:
        await self._cache.start(self._ready_timeout_s)
        log.info("security: following %d users in the coordinator", len(self._records))

    async def close(self) -> None:
        await self._cache.close()

    def _follow(self, snapshot: Snapshot) -> None:
        """Take a snapshot of `users/` (the cache's watch calls this)."""
        current = {} if snapshot.relisted else dict(self._records)
        paths = snapshot.entries if snapshot.relisted else snapshot.changed
        for path in paths:
            access_key = path[len(USERS_FOLDER) :]
            entry = snapshot.entries.get(path)
            record = None if entry is None else _decode(access_key, entry.value)
            if record is None:
                current.pop(access_key, None)
            else:
                current[access_key] = record
        self._records = types.MappingProxyType(current)

    async def _change(self, access_key: str, change: Change) -> UserRecord | None:
        path = user_path(access_key)
        for _ in range(self._cas_attempts):
            entry = await self._coordinator.get(path)
            current = None if entry is None else _decode(access_key, entry.value)
            revision = 0 if entry is None else entry.revision
            record = change(current)
            if record is current:
                return record
            written: int | None
            if record is None:
                written = await delete_with_marker(
                    self._coordinator, path, marker("access_key", access_key), revision
                )
            else:
                entry = await write_once(self._coordinator, path, record.to_value(), revision)
                written = None if entry is None else entry.revision
            if written is not None:
                await self._caught_up(written)
                return record
        raise UnavailableError(
            f"user {access_key!r} changed under {self._cas_attempts} attempts in a row "
            "(other admins are writing it); retry"
        )

    async def _caught_up(self, revision: int) -> None:
        """Wait until this proxy's cache has the write (read your writes); a cache that
        lags is logged, not failed: the write is stored, and the watch brings it."""
        try:
            await self._cache.wait_for(revision, self._ready_timeout_s)
        except (TimeoutError, CoordinationError) as error:
            log.warning(
                "security: the user cache has not seen revision %d yet (%r); it will",
                revision,
                error,
            )


class AclAuthorizer:
    """The authentication gate's Authorizer over a SecurityStore.

    `checks` is rpc_table's; `authorize` lets SUPER principals through and checks a NORMAL
    one's stored user and policies (acl.py). Lookups are from memory: a change made on
    any proxy applies to the next request (or stream message) once it reached this one.
    """

    def __init__(self, store: SecurityStore) -> None:
        self.store = store

    def checks(self, method: str, request: Message) -> Sequence[Check]:
        return rpc_table.checks(method, request)

    def authorize(self, principal: Principal, checks: Sequence[Check]) -> None:
        if principal.is_super:
            return
        record = self.store.record(principal.access_key)
        if record is None:
            acl.authorize(principal, None, (), checks)
        else:
            acl.authorize(principal, record.user, record.policies, checks)
