"""The coordination interface cluster mode needs, and its two implementations.

What brokers and proxies need from a coordination service (issue 22):

- register a member (a broker or a proxy) under a session lease with an info value, keep it
  alive, and learn when the session is lost (then it re-registers by itself, with a new
  epoch);
- list the members;
- read and write cluster metadata (topic routes, group settings) with compare-and-swap on
  the entry's revision;
- list a prefix, then watch it from the listed revision, re-listing when the history was
  compacted: `watch()` yields whole snapshots, so a route cache is one assignment.
- write entries that expire (`put` / `compare_and_set` with `ttl_s`): state that must
  outlive the process that wrote it, but not by much (Spark lease tokens, proxy/leases.py).

`LocalCoordinator` keeps all of it in memory for one process (what `popmq serve` uses);
`EtcdCoordinator` keeps it in etcd under `/popmq/<cluster>/` (docs/cluster.md has the key
layout and the value schema). Values are JSON objects. Both run on the event loop.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import heapq
import itertools
import json
import logging
import math
import re
import types
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from popmq.cluster.errors import (
    CompactedError,
    ConflictError,
    CoordinationArgumentError,
    CoordinationUnavailableError,
    CorruptValueError,
    LeaseNotFoundError,
    MemberExistsError,
    SessionClosedError,
)
from popmq.cluster.etcd import (
    DEFAULT_TIMEOUT_S,
    MAX_LEASE_TTL_S,
    EtcdClient,
    Get,
    KeyValue,
    Lease,
    LeaseKeeper,
    Put,
    RangeResult,
    cancel_and_wait,
    check_ttl,
)

logger = logging.getLogger(__name__)

MemberKind = Literal["broker", "proxy"]
MEMBER_FOLDERS: Mapping[str, str] = types.MappingProxyType(
    {"broker": "brokers", "proxy": "proxies"}
)
"""Where each kind of member registers, under the cluster's root."""
DEFAULT_SESSION_TTL_S = 10
"""A member's lease TTL: Kafka's broker session is 9 s, RocketMQ's NameServer waits 120 s."""
MAX_VALUE_BYTES = 1 << 20
"""Largest encoded value (etcd refuses requests over 1.5 MiB by default)."""
MAX_PATH_CHARS = 512
_SEGMENT = re.compile(r"^[A-Za-z0-9%_.:-]+$")
_SEGMENT_ALLOWED = "letters, digits, '%', '_', '.', ':', '-'"
_REREGISTER_PAUSE_S = (0.1, 2.0)
"""First and longest pause between attempts to register again after a lost session."""
_MIN_SLACK_S = 2.0
_MAX_SLACK_S = 60.0
_MAX_SHARED_LEASES = 1024
"""etcd leases an EtcdCoordinator keeps for reuse by expiring writes (expiry_slack_s)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One metadata entry.

    Attributes:
        path: Its path under the cluster root, e.g. "topics/orders".
        value: The JSON object stored.
        revision: The revision of its last write: the token `compare_and_set` takes.
        created_revision: The revision that created it; it changes when the entry is deleted
            and created again, so a member's entry's one is its epoch (fencing token).
        version: Writes since it was created (1 after creation).
    """

    path: str
    value: Mapping[str, Any]
    revision: int
    created_revision: int
    version: int


@dataclass(frozen=True, slots=True)
class Member:
    """A registered broker or proxy: its info value and its registration epoch."""

    kind: MemberKind
    name: str
    info: Mapping[str, Any]
    epoch: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every entry under a watched prefix as of `revision`.

    Attributes:
        revision: The state includes every change up to this revision.
        entries: Path to entry (read-only; each snapshot has its own).
        changed: Paths added, changed or removed since the previous snapshot (every path of
            this and the previous snapshot after a re-list).
        relisted: True for the first snapshot and after a re-list (history compacted).
    """

    revision: int
    entries: Mapping[str, Entry]
    changed: frozenset[str]
    relisted: bool


def check_path(path: str, *, prefix: bool = False) -> str:
    """A metadata path: segments of `_SEGMENT_ALLOWED` joined by '/'.

    With `prefix`, the empty path (everything) or a path ending in '/' (a folder).
    """
    allowed = f"segments of {_SEGMENT_ALLOWED} joined by '/', at most {MAX_PATH_CHARS} chars"
    body = path
    if prefix:
        allowed = f"'' or {allowed} ending in '/'"
        if path == "":
            return path
        if not isinstance(path, str) or not path.endswith("/"):
            raise CoordinationArgumentError(
                f"prefix {path!r} must be '' or end in '/' (a folder such as 'topics/')",
                field="prefix",
                value=path,
                allowed=allowed,
            )
        body = path[:-1]
    if (
        not isinstance(body, str)
        or not body
        or len(path) > MAX_PATH_CHARS
        or not all(_SEGMENT.match(segment) for segment in body.split("/"))
    ):
        raise CoordinationArgumentError(
            f"path {path!r} is invalid: use {allowed}",
            field="path",
            value=path,
            allowed=allowed,
        )
    return path


def check_cluster(cluster: str) -> str:
    """A cluster name is one path segment."""
    if not isinstance(cluster, str) or not _SEGMENT.match(cluster) or len(cluster) > 64:
        raise CoordinationArgumentError(
            f"cluster name {cluster!r} is invalid: use 1..64 of {_SEGMENT_ALLOWED}",
            field="cluster",
            value=cluster,
            allowed=f"1..64 of {_SEGMENT_ALLOWED}",
        )
    return cluster


def member_folder(kind: str) -> str:
    """The folder a kind of member registers in, e.g. "brokers/"."""
    folder = MEMBER_FOLDERS.get(kind)
    if folder is None:
        raise CoordinationArgumentError(
            f"member kind {kind!r} is unknown: use one of {sorted(MEMBER_FOLDERS)}",
            field="kind",
            value=kind,
            allowed=", ".join(sorted(MEMBER_FOLDERS)),
        )
    return f"{folder}/"


def member_path(kind: str, name: str) -> str:
    """The path a member registers at, e.g. "brokers/broker-a"."""
    folder = member_folder(kind)
    if not isinstance(name, str) or not _SEGMENT.match(name) or len(name) > 128:
        raise CoordinationArgumentError(
            f"{kind} name {name!r} is invalid: use 1..128 of {_SEGMENT_ALLOWED}",
            field="name",
            value=name,
            allowed=f"1..128 of {_SEGMENT_ALLOWED}",
        )
    return folder + name


def encode_value(value: Mapping[str, Any]) -> bytes:
    """A JSON object as compact, key-sorted UTF-8 (so equal values are equal bytes)."""
    if not isinstance(value, Mapping):
        raise CoordinationArgumentError(
            f"value must be a JSON object (a mapping), not {type(value).__name__}",
            field="value",
            value=value,
            allowed="a mapping of str to JSON values",
        )
    try:
        raw = json.dumps(
            value,
            sort_keys=True,
            separators=(",", ":"),
            allow_nan=False,
            ensure_ascii=False,
            default=_read_only_mapping,
        ).encode()
    except (TypeError, ValueError) as error:
        raise CoordinationArgumentError(
            f"value is not JSON: {error}",
            field="value",
            value=value,
            allowed="str keys; str, int, float (finite), bool, None, list and dict values",
        ) from error
    if len(raw) > MAX_VALUE_BYTES:
        raise CoordinationArgumentError(
            f"value is {len(raw)} B encoded: at most {MAX_VALUE_BYTES} B are allowed",
            field="value",
            value=raw,
            allowed=f"1..{MAX_VALUE_BYTES} B",
        )
    return raw


def _read_only_mapping(value: object) -> dict[str, Any]:
    """json's fallback: the read-only mappings decode_value returns encode as objects."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def decode_value(path: str, raw: bytes) -> Mapping[str, Any]:
    """A stored value back as a read-only mapping; CorruptValueError if not a JSON object."""
    try:
        value = json.loads(raw)
    except ValueError as error:
        raise CorruptValueError(f"value of {path!r} is not JSON: {error}") from error
    if not isinstance(value, dict):
        raise CorruptValueError(
            f"value of {path!r} is a JSON {type(value).__name__}, not an object"
        )
    return types.MappingProxyType(value)


class Session(Protocol):
    """A member's registration, kept alive until `close()`.

    When it is lost (lease expired or revoked, or etcd unreachable for a whole TTL), whoever
    waits in `wait_lost()` wakes: a broker stops taking writes. The session then registers
    again by itself, with a new lease and a new `epoch`; `wait_registered()` waits for that.
    """

    kind: MemberKind
    name: str
    info: Mapping[str, Any]

    @property
    def alive(self) -> bool:
        """Registered now (as far as this process can tell)."""

    @property
    def epoch(self) -> int:
        """The current registration's epoch (its key's create revision); 0 while lost."""

    @property
    def losses(self) -> int:
        """How many times the registration was lost."""

    async def wait_lost(self, epoch: int | None = None) -> str:
        """Wait until the registration of `epoch` (default: the current one) is lost; at
        once if it is already. Returns why. A broker does `epoch = await
        wait_registered()`, serves, then `await wait_lost(epoch)` and stops its writes."""

    async def wait_registered(self) -> int:
        """Wait until registered (now, if it is); returns the epoch."""

    async def close(self) -> None:
        """Deregister (revoke the lease) and stop; idempotent."""


@runtime_checkable
class Coordinator(Protocol):
    """What brokers and proxies coordinate through (module docstring).

    Paths are relative to the cluster's root: "topics/orders", "groups/billing";
    "brokers/<name>" and "proxies/<name>" belong to members.
    """

    cluster: str

    async def register(
        self,
        kind: MemberKind,
        name: str,
        info: Mapping[str, Any],
        *,
        ttl_s: int = DEFAULT_SESSION_TTL_S,
    ) -> Session:
        """Register a member under a new session; MemberExistsError if the name is live."""

    async def members(self, kind: MemberKind) -> dict[str, Member]:
        """The live members of a kind, by name."""

    async def expire_member(self, kind: MemberKind, name: str) -> bool:
        """End a member's session now, as if its lease lapsed (fencing it: it registers
        again with a new epoch). False if it was not registered."""

    async def get(self, path: str) -> Entry | None:
        """One entry, or None."""

    async def list(self, prefix: str = "") -> Snapshot:
        """Every entry under `prefix` ('' or ending in '/'), and the revision read."""

    async def put(self, path: str, value: Mapping[str, Any], *, ttl_s: int | None = None) -> Entry:
        """Write an entry unconditionally.

        With `ttl_s` (whole seconds, MIN_LEASE_TTL_S..MAX_LEASE_TTL_S) the entry expires:
        it lives at least `ttl_s` seconds after the write and is deleted (watchers see the
        delete) within `ttl_s + expiry_slack_s(ttl_s)` plus a second or so. Without it the
        entry stays until deleted, even if an earlier write gave it a TTL.
        """

    async def compare_and_set(
        self,
        path: str,
        value: Mapping[str, Any],
        *,
        revision: int,
        ttl_s: int | None = None,
    ) -> Entry:
        """Write an entry only if its revision is still `revision` (0: it must not exist);
        ConflictError (with the current revision) otherwise. `ttl_s` as in `put`."""

    async def delete(self, path: str, *, revision: int | None = None) -> bool:
        """Delete an entry (only at `revision` when given: ConflictError otherwise);
        False if it did not exist."""

    def watch(self, prefix: str = "") -> AsyncIterator[Snapshot]:
        """List `prefix`, then yield a new Snapshot after every change."""

    async def close(self) -> None:
        """Close every session and watch; idempotent."""


# -- sessions (shared) ---------------------------------------------------------------------


class _MemberSession:
    """The state of a Session both coordinators share; the coordinator drives it."""

    def __init__(self, kind: MemberKind, name: str, info: Mapping[str, Any], ttl_s: int) -> None:
        self.kind = kind
        self.name = name
        self.info: Mapping[str, Any] = types.MappingProxyType(dict(info))
        self.ttl_s = ttl_s
        self._epoch = 0
        self._losses = 0
        self._closed = False
        self._lost_reason = ""
        # Replaced and set at every change of _epoch or _closed: what the waiters wait on.
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None  # the coordinator's keep-alive loop
        self._closing: asyncio.Task[None] | None = None  # close() after the loop failed

    @property
    def alive(self) -> bool:
        return self._epoch != 0

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def losses(self) -> int:
        return self._losses

    async def wait_lost(self, epoch: int | None = None) -> str:
        target = self._epoch if epoch is None else epoch
        while target != 0 and self._epoch == target and not self._closed:
            await self._changed.wait()
        if self._closed:
            raise SessionClosedError(f"{self.kind} {self.name!r}: the session is closed")
        return self._lost_reason

    async def wait_registered(self) -> int:
        while self._epoch == 0 and not self._closed:
            await self._changed.wait()
        if self._closed:
            raise SessionClosedError(f"{self.kind} {self.name!r}: the session is closed")
        return self._epoch

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _mark_registered(self, epoch: int) -> None:
        self._epoch = epoch
        self._notify()

    def _mark_lost(self, reason: str) -> None:
        if self._epoch:
            self._losses += 1
        logger.warning("%s %r lost its session: %s", self.kind, self.name, reason)
        self._epoch = 0
        self._lost_reason = reason
        self._notify()

    def _loop_done(self, task: asyncio.Task[None]) -> None:
        """The keep-alive loop ends only by close(); anything else loses the session."""
        if task.cancelled() or self._closed:
            return
        error = task.exception()
        logger.error("%s %r: the session loop failed: %r", self.kind, self.name, error)
        self._mark_lost(f"the session loop failed: {error!r}")
        # Nothing renews it any more: close it (stops the keeper, revokes the lease).
        self._closing = asyncio.get_running_loop().create_task(self.close())

    async def close(self) -> None:
        raise NotImplementedError  # each coordinator's session closes its own way

    def _mark_closed(self) -> None:
        self._closed = True
        self._epoch = 0
        self._lost_reason = "closed"
        self._notify()


def _check_member(kind: str, name: str, info: Mapping[str, Any], ttl_s: int) -> tuple[str, int]:
    path = member_path(kind, name)
    encode_value(info)
    return path, check_ttl(ttl_s)


def _pause_after(attempt: int) -> float:
    first, longest = _REREGISTER_PAUSE_S
    return float(min(longest, first * 2 ** min(attempt, 10)))


def expiry_slack_s(ttl_s: int) -> float:
    """How much longer than its TTL an expiring entry may live: a tenth of the TTL, 2 s to
    60 s. EtcdCoordinator shares one etcd lease among the writes of that window."""
    return min(_MAX_SLACK_S, max(_MIN_SLACK_S, ttl_s / 10))


def _check_entry_ttl(ttl_s: int | None) -> int | None:
    return None if ttl_s is None else check_ttl(ttl_s)


# -- in memory -------------------------------------------------------------------------------


@dataclass(slots=True)
class _Stored:
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    session: _LocalSession | None = None
    expires_at: float | None = None
    """Loop time when an entry written with a TTL is deleted; None: it stays."""


class _LocalSession(_MemberSession):
    """A member of a LocalCoordinator: alive until closed or expired."""

    def __init__(
        self,
        coordinator: LocalCoordinator,
        kind: MemberKind,
        name: str,
        info: Mapping[str, Any],
        ttl_s: int,
    ) -> None:
        super().__init__(kind, name, info, ttl_s)
        self._coordinator = coordinator

    async def close(self) -> None:
        if self._closed:
            return
        self._mark_closed()
        self._coordinator._drop_session(self)


class LocalCoordinator:
    """The coordination of one process, in memory: `popmq serve`'s implementation.

    Same contract as EtcdCoordinator (tests/cluster run the same tests on both), with one
    process's limits: nothing survives a restart, sessions lapse only when closed or
    expired with `expire_member`, and the history is never compacted.
    """

    def __init__(self, cluster: str = "local") -> None:
        self.cluster = check_cluster(cluster)
        # The store: path -> entry, with etcd's revision rules (one counter for all writes).
        self._data: dict[str, _Stored] = {}
        self._revision = 1
        # Each live watch's queue of (revision, path, state after the write or None when
        # deleted); fed by every write.
        self._watchers: set[asyncio.Queue[tuple[int, str, _Stored | None]]] = set()
        self._sessions: set[_LocalSession] = set()
        self._closed = False
        # (expires_at, path, mod_revision) of entries written with a TTL; an entry rewritten
        # or deleted since leaves a stale item, skipped. _expire_timer fires at the first.
        self._expiry: list[tuple[float, str, int]] = []
        self._expire_timer: asyncio.TimerHandle | None = None

    async def __aenter__(self) -> LocalCoordinator:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        self._closed = True
        if self._expire_timer is not None:
            self._expire_timer.cancel()
            self._expire_timer = None
        for session in list(self._sessions):
            await session.close()

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError("the coordinator is closed")
        self._expire()  # a late timer never lets a read see an expired entry

    def _expire(self) -> None:
        """Delete the entries whose TTL ran out (as etcd does: watchers see a delete)."""
        now = asyncio.get_running_loop().time()
        expiry = self._expiry
        while expiry and expiry[0][0] <= now:
            _, path, revision = heapq.heappop(expiry)
            stored = self._data.get(path)
            if stored is not None and stored.mod_revision == revision:
                self._write(path, None)

    def _schedule_expiry(self, path: str, ttl_s: int) -> None:
        loop = asyncio.get_running_loop()
        stored = self._data[path]
        stored.expires_at = loop.time() + ttl_s
        heapq.heappush(self._expiry, (stored.expires_at, path, stored.mod_revision))
        first = self._expiry[0][0]
        timer = self._expire_timer
        if timer is None or timer.when() > first:
            if timer is not None:
                timer.cancel()
            self._expire_timer = loop.call_at(first, self._on_expire_timer)

    def _on_expire_timer(self) -> None:
        self._expire_timer = None
        if self._closed:
            return
        self._expire()
        if self._expiry:
            loop = asyncio.get_running_loop()
            self._expire_timer = loop.call_at(self._expiry[0][0], self._on_expire_timer)

    def _entry(self, path: str, stored: _Stored) -> Entry:
        return Entry(
            path=path,
            value=decode_value(path, stored.value),
            revision=stored.mod_revision,
            created_revision=stored.create_revision,
            version=stored.version,
        )

    def _write(self, path: str, raw: bytes | None, session: _LocalSession | None = None) -> int:
        """Put (raw) or delete (None) one path as a new revision; wake the watchers."""
        self._revision += 1
        if raw is None:
            del self._data[path]
        else:
            old = self._data.get(path)
            self._data[path] = _Stored(
                value=raw,
                create_revision=old.create_revision if old else self._revision,
                mod_revision=self._revision,
                version=old.version + 1 if old else 1,
                session=old.session if old and session is None else session,
            )
        for queue in self._watchers:
            queue.put_nowait((self._revision, path, self._data.get(path)))
        return self._revision

    async def register(
        self,
        kind: MemberKind,
        name: str,
        info: Mapping[str, Any],
        *,
        ttl_s: int = DEFAULT_SESSION_TTL_S,
    ) -> Session:
        self._check_open()
        path, ttl = _check_member(kind, name, info, ttl_s)
        session = _LocalSession(self, kind, name, info, ttl)
        self._register(session, path)
        self._sessions.add(session)
        return session

    def _register(self, session: _LocalSession, path: str) -> None:
        if path in self._data:
            raise MemberExistsError(
                f"{session.kind} {session.name!r} is registered already (epoch "
                f"{self._data[path].create_revision}): names must be unique while alive",
                field="name",
                value=session.name,
            )
        self._write(path, encode_value(session.info), session)
        session._mark_registered(self._data[path].create_revision)

    def _drop_session(self, session: _LocalSession) -> None:
        self._sessions.discard(session)
        path = member_path(session.kind, session.name)
        stored = self._data.get(path)
        if stored is not None and stored.session is session:
            self._write(path, None)

    async def members(self, kind: MemberKind) -> dict[str, Member]:
        self._check_open()
        folder = member_folder(kind)
        return {
            path[len(folder) :]: Member(
                kind=kind,
                name=path[len(folder) :],
                info=decode_value(path, stored.value),
                epoch=stored.create_revision,
            )
            for path, stored in sorted(self._data.items())
            if path.startswith(folder)
        }

    async def expire_member(self, kind: MemberKind, name: str) -> bool:
        self._check_open()
        path = member_path(kind, name)
        stored = self._data.get(path)
        if stored is None:
            return False
        self._write(path, None)
        session = stored.session
        if session is not None and not session._closed:
            session._mark_lost("expired by expire_member")
            # One process: the member is reachable at once, so it registers again now.
            self._register(session, path)
        return True

    async def get(self, path: str) -> Entry | None:
        self._check_open()
        stored = self._data.get(check_path(path))
        return None if stored is None else self._entry(path, stored)

    async def list(self, prefix: str = "") -> Snapshot:
        self._check_open()
        return self._snapshot(check_path(prefix, prefix=True), None)

    def _snapshot(self, prefix: str, previous: Snapshot | None) -> Snapshot:
        entries = {
            path: self._entry(path, stored)
            for path, stored in sorted(self._data.items())
            if path.startswith(prefix)
        }
        changed = set(entries) | (set(previous.entries) if previous else set())
        return Snapshot(
            revision=self._revision,
            entries=types.MappingProxyType(entries),
            changed=frozenset(changed),
            relisted=True,
        )

    async def put(self, path: str, value: Mapping[str, Any], *, ttl_s: int | None = None) -> Entry:
        self._check_open()
        raw = encode_value(value)
        ttl = _check_entry_ttl(ttl_s)
        self._write(check_path(path), raw)
        if ttl is not None:
            self._schedule_expiry(path, ttl)
        return self._entry(path, self._data[path])

    async def compare_and_set(
        self,
        path: str,
        value: Mapping[str, Any],
        *,
        revision: int,
        ttl_s: int | None = None,
    ) -> Entry:
        self._check_open()
        raw = encode_value(value)
        ttl = _check_entry_ttl(ttl_s)
        stored = self._data.get(check_path(path))
        current = stored.mod_revision if stored else 0
        if current != _check_revision(revision):
            raise _conflict(path, revision, current)
        self._write(path, raw)
        if ttl is not None:
            self._schedule_expiry(path, ttl)
        return self._entry(path, self._data[path])

    async def delete(self, path: str, *, revision: int | None = None) -> bool:
        self._check_open()
        stored = self._data.get(check_path(path))
        if revision is not None:
            current = stored.mod_revision if stored else 0
            if current != _check_revision(revision):
                raise _conflict(path, revision, current)
        if stored is None:
            return False
        self._write(path, None)
        return True

    async def watch(self, prefix: str = "") -> AsyncIterator[Snapshot]:
        self._check_open()
        check_path(prefix, prefix=True)
        queue: asyncio.Queue[tuple[int, str, _Stored | None]] = asyncio.Queue()
        self._watchers.add(queue)  # with the list, in one step: no change falls between
        try:
            snapshot = self._snapshot(prefix, None)
            yield snapshot
            while True:
                revision, path, stored = await queue.get()
                if revision <= snapshot.revision or not path.startswith(prefix):
                    continue
                entries = dict(snapshot.entries)
                if stored is None:
                    entries.pop(path, None)
                else:
                    entries[path] = self._entry(path, stored)
                snapshot = Snapshot(
                    revision=revision,
                    entries=types.MappingProxyType(entries),
                    changed=frozenset({path}),
                    relisted=False,
                )
                yield snapshot
        finally:
            self._watchers.discard(queue)


def _check_revision(revision: int) -> int:
    if isinstance(revision, bool) or not isinstance(revision, int) or revision < 0:
        raise CoordinationArgumentError(
            f"revision {revision!r} is not a revision: use 0 (absent) or an entry's revision",
            field="revision",
            value=revision,
            allowed=">= 0",
        )
    return revision


def _conflict(path: str, expected: int, current: int) -> ConflictError:
    now = f"is at revision {current}" if current else "does not exist"
    wanted = f"revision {expected}" if expected else "absent"
    return ConflictError(
        f"{path!r} changed: expected {wanted}, but it {now}; read it again and retry",
        key=path,
        current_revision=current,
    )


# -- etcd ----------------------------------------------------------------------------------


class _EtcdSession(_MemberSession):
    """A member of an EtcdCoordinator: its lease, keeper and re-registration loop."""

    def __init__(
        self,
        coordinator: EtcdCoordinator,
        kind: MemberKind,
        name: str,
        info: Mapping[str, Any],
        ttl_s: int,
    ) -> None:
        super().__init__(kind, name, info, ttl_s)
        self._coordinator = coordinator
        self.lease: Lease | None = None
        self._keeper: LeaseKeeper | None = None

    async def close(self) -> None:
        if self._closed:
            return
        self._mark_closed()
        self._coordinator._sessions.discard(self)
        if self._task is not None:
            await cancel_and_wait(self._task)
        if self._keeper is not None:
            await self._keeper.close()
        if self.lease is not None:
            with contextlib.suppress(LeaseNotFoundError, CoordinationUnavailableError):
                # Gone already, or etcd is down: then the lease lapses after its TTL.
                await self._coordinator.client.lease_revoke(self.lease.id)


class _SharedLeases:
    """The etcd leases entries written with a TTL are attached to, shared by nearby writes.

    A lease per write would cost a LeaseGrant round trip per write and one etcd lease per
    entry. Instead a write asking for `ttl` takes a lease that expires between `ttl` and
    `ttl + expiry_slack_s(ttl)` from now if there is one, else grants one for
    `ttl + slack`, which the writes of the next `slack` seconds share (the Kubernetes API
    server reuses its etcd leases the same way). The leases are never kept alive or revoked:
    the entries must outlive this process.

    Expiry times are the loop's clock from when the grant was sent, so never later than
    etcd's own expiry. On the event loop only.
    """

    def __init__(self, client: EtcdClient) -> None:
        self._client = client
        # (expires_at loop time, lease id) of granted leases, sorted; pruned as they age.
        self._leases: list[tuple[float, int]] = []

    async def run(self, ttl_s: int | None, write: Callable[[int], Awaitable[Entry]]) -> Entry:
        """`write(lease id)` with a lease for `ttl_s` (0, no lease, when None)."""
        if ttl_s is None:
            return await write(0)
        lease = await self._lease(ttl_s)
        try:
            return await write(lease)
        except LeaseNotFoundError:
            # Revoked by hand, or etcd lost it: forget it and write once more with a new one.
            self._leases = [item for item in self._leases if item[1] != lease]
            return await write(await self._lease(ttl_s))

    async def _lease(self, ttl_s: int) -> int:
        slack = expiry_slack_s(ttl_s)
        now = asyncio.get_running_loop().time()
        need = now + ttl_s
        leases = self._leases
        del leases[: bisect.bisect_left(leases, (now + _MIN_SLACK_S,))]  # about to expire
        at = bisect.bisect_left(leases, (need,))
        if at < len(leases) and leases[at][0] <= need + slack:
            return leases[at][1]
        granted = await self._client.lease_grant(min(MAX_LEASE_TTL_S, math.ceil(ttl_s + slack)))
        bisect.insort(self._leases, (granted.granted_at + granted.ttl_s, granted.id))
        if len(self._leases) > _MAX_SHARED_LEASES:
            self._leases.pop(0)
        return granted.id


class EtcdCoordinator:
    """Coordination in etcd, under `/popmq/<cluster>/` (docs/cluster.md).

    Args:
        endpoints: etcd's client endpoints, `"host:port[,host:port...]"`.
        cluster: The cluster's name: its root is `/popmq/<cluster>/`.
        timeout_s: Time limit of each etcd call, failover included.
    """

    def __init__(
        self,
        endpoints: str | list[str] | tuple[str, ...],
        *,
        cluster: str = "default",
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.cluster = check_cluster(cluster)
        self.root = f"/popmq/{cluster}/"
        self.client = EtcdClient(endpoints, timeout_s=timeout_s)
        self._sessions: set[_EtcdSession] = set()
        self._expiring = _SharedLeases(self.client)

    async def __aenter__(self) -> EtcdCoordinator:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        for session in list(self._sessions):
            await session.close()
        await self.client.close()

    def _key(self, path: str) -> str:
        return self.root + path

    def _entry(self, kv: KeyValue) -> Entry:
        path = kv.key.decode()[len(self.root) :]
        return Entry(
            path=path,
            value=decode_value(path, kv.value),
            revision=kv.mod_revision,
            created_revision=kv.create_revision,
            version=kv.version,
        )

    async def register(
        self,
        kind: MemberKind,
        name: str,
        info: Mapping[str, Any],
        *,
        ttl_s: int = DEFAULT_SESSION_TTL_S,
    ) -> Session:
        path, ttl = _check_member(kind, name, info, ttl_s)
        session = _EtcdSession(self, kind, name, info, ttl)
        await self._register(session, path)
        self._sessions.add(session)
        session._task = asyncio.get_running_loop().create_task(
            self._keep(session, path), name=f"popmq-session-{kind}-{name}"
        )
        session._task.add_done_callback(session._loop_done)
        return session

    async def _register(self, session: _EtcdSession, path: str) -> None:
        """Grant a lease and create the member's key under it (put-if-absent)."""
        if session.lease is not None:  # the old lease may still hold the key: end it
            with contextlib.suppress(LeaseNotFoundError):
                await self.client.lease_revoke(session.lease.id)
            session.lease = None
        lease = await self.client.lease_grant(session.ttl_s)
        created, current = await self.client.put_if_absent(
            self._key(path), encode_value(session.info), lease=lease.id
        )
        if not created:
            with contextlib.suppress(LeaseNotFoundError):
                await self.client.lease_revoke(lease.id)
            epoch = current.create_revision if current else 0
            raise MemberExistsError(
                f"{session.kind} {session.name!r} is registered already (epoch {epoch}): "
                "names must be unique while alive",
                field="name",
                value=session.name,
            )
        assert current is not None  # the transaction read the key it created
        session.lease = lease
        session._keeper = self.client.keep_alive(lease)
        session._mark_registered(current.create_revision)

    async def _keep(self, session: _EtcdSession, path: str) -> None:
        """Wait for the session's loss, then register again until it works (or close)."""
        while True:
            assert session._keeper is not None
            reason = await session._keeper.wait_lost()
            session._mark_lost(reason)
            for attempt in itertools.count():
                try:
                    await self._register(session, path)
                    logger.info(
                        "%s %r registered again (epoch %d)",
                        session.kind,
                        session.name,
                        session.epoch,
                    )
                    break
                except (CoordinationUnavailableError, MemberExistsError) as error:
                    logger.warning(
                        "%s %r cannot register again yet: %s", session.kind, session.name, error
                    )
                    await asyncio.sleep(_pause_after(attempt))

    async def members(self, kind: MemberKind) -> dict[str, Member]:
        folder = member_folder(kind)
        snapshot = await self.list(folder)
        return {
            path[len(folder) :]: Member(
                kind=kind, name=path[len(folder) :], info=entry.value, epoch=entry.created_revision
            )
            for path, entry in snapshot.entries.items()
        }

    async def expire_member(self, kind: MemberKind, name: str) -> bool:
        result = await self.client.get(self._key(member_path(kind, name)))
        if not result.kvs or not result.kvs[0].lease:
            return False
        try:
            await self.client.lease_revoke(result.kvs[0].lease)
        except LeaseNotFoundError:
            return False
        return True

    async def get(self, path: str) -> Entry | None:
        result = await self.client.get(self._key(check_path(path)))
        return self._entry(result.kvs[0]) if result.kvs else None

    async def list(self, prefix: str = "") -> Snapshot:
        return await self._list(check_path(prefix, prefix=True), None)

    async def _list(self, prefix: str, previous: Snapshot | None) -> Snapshot:
        result = await self.client.get(self._key(prefix) if prefix else self.root, prefix=True)
        entries: dict[str, Entry] = {}
        for kv in result.kvs:
            entry = self._decoded(kv)
            if entry is not None:
                entries[entry.path] = entry
        changed = set(entries) | (set(previous.entries) if previous else set())
        return Snapshot(
            revision=result.revision,
            entries=types.MappingProxyType(entries),
            changed=frozenset(changed),
            relisted=True,
        )

    def _decoded(self, kv: KeyValue) -> Entry | None:
        """The entry, or None (logged) for a value popmq did not write: a watch must not die
        of one hand-written key."""
        try:
            return self._entry(kv)
        except CorruptValueError as error:
            logger.warning("ignoring %r: %s", kv.key, error)
            return None

    async def put(self, path: str, value: Mapping[str, Any], *, ttl_s: int | None = None) -> Entry:
        raw = encode_value(value)
        key = self._key(check_path(path))
        ttl = _check_entry_ttl(ttl_s)

        async def write(lease: int) -> Entry:
            result = await self.client.txn([], [Put(key, raw, lease), Get(key)])
            (read,) = (r for r in result.results if isinstance(r, RangeResult))
            return self._entry(read.kvs[0])

        return await self._expiring.run(ttl, write)

    async def compare_and_set(
        self,
        path: str,
        value: Mapping[str, Any],
        *,
        revision: int,
        ttl_s: int | None = None,
    ) -> Entry:
        raw = encode_value(value)
        key = self._key(check_path(path))
        expected = _check_revision(revision)
        ttl = _check_entry_ttl(ttl_s)

        async def write(lease: int) -> Entry:
            written, current = await self.client.compare_and_swap(
                key, raw, mod_revision=expected, lease=lease
            )
            if not written:
                raise _conflict(path, revision, current.mod_revision if current else 0)
            assert current is not None
            return self._entry(current)

        return await self._expiring.run(ttl, write)

    async def delete(self, path: str, *, revision: int | None = None) -> bool:
        key = self._key(check_path(path))
        if revision is None:
            return (await self.client.delete(key)).deleted > 0
        if _check_revision(revision) == 0:
            existing = await self.get(path)
            if existing is not None:
                raise _conflict(path, 0, existing.revision)
            return False
        deleted, current = await self.client.delete_if(key, mod_revision=revision)
        if not deleted:
            raise _conflict(path, revision, current.mod_revision if current else 0)
        return True

    async def watch(self, prefix: str = "") -> AsyncIterator[Snapshot]:
        check_path(prefix, prefix=True)
        key = self._key(prefix) if prefix else self.root
        snapshot: Snapshot | None = None
        attempt = 0
        while True:
            try:
                snapshot = await self._list(prefix, snapshot)
            except CoordinationUnavailableError as error:
                logger.warning("cannot list %r yet: %s", key, error)
                await asyncio.sleep(_pause_after(attempt))
                attempt += 1
                continue
            attempt = 0
            yield snapshot
            try:
                async for batch in self.client.watch(
                    key, prefix=True, start_revision=snapshot.revision + 1
                ):
                    entries = dict(snapshot.entries)
                    changed: set[str] = set()
                    for event in batch.events:
                        path = event.kv.key.decode()[len(self.root) :]
                        changed.add(path)
                        entry = self._decoded(event.kv) if event.type == "put" else None
                        if entry is None:
                            entries.pop(path, None)
                        else:
                            entries[path] = entry
                    snapshot = Snapshot(
                        revision=batch.revision,
                        entries=types.MappingProxyType(entries),
                        changed=frozenset(changed),
                        relisted=False,
                    )
                    yield snapshot
            except CompactedError as error:
                logger.info("watch of %r fell behind a compaction (%s); re-listing", key, error)
