"""The coordination interface cluster mode needs, and its two implementations.

What brokers and proxies need from a coordination service:

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

`LocalCoordinator` (local_coordinator.py) keeps all of it in memory for one process (what
`popmq serve` uses); `EtcdCoordinator` (etcd_coordinator.py) keeps it in etcd under
`/popmq/<cluster>/` (docs/coordination.md has the key layout and the value schema). Values are
JSON objects. Both run on the event loop. This module holds the interface and what both
share (values, paths, member sessions).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import types
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from popmq.coordination.errors import (
    ConflictError,
    CoordinationArgumentError,
    CorruptValueError,
    SessionClosedError,
)
from popmq.coordination.etcd import (
    check_ttl,
)

logger = logging.getLogger(__name__)

MemberKind = Literal["broker", "proxy", "replica"]
MEMBER_FOLDERS: Mapping[str, str] = types.MappingProxyType(
    {"broker": "brokers", "proxy": "proxies", "replica": "replicas"}
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
MIN_SLACK_S = 2.0
"""Least extra life of an expiring entry (expiry_slack_s)."""
_MAX_SLACK_S = 60.0


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
    waits in `wait_lost()` wakes. The session then registers again by itself, with a new
    lease; `wait_registered()` waits for that. Its `epoch` is new unless its key outlived
    the loss (etcd restarted and restored it): then nobody can have registered the name in
    between, and the registration goes on under the same epoch. If the name turns out to be
    registered by another live member instead, `rival` says by whom until the session has
    registered again.
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

    @property
    def rival(self) -> str | None:
        """While lost: who holds the name, when registering again found it registered by
        another live member (its epoch and info); None otherwise."""

    async def wait_changed(self) -> None:
        """Return at the session's next change: registered, lost, a rival seen or closed
        (SessionClosedError once closed). Read the state, then wait: nothing is missed."""

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


class MemberSession:
    """The state of a Session both coordinators share; the coordinator drives it."""

    def __init__(self, kind: MemberKind, name: str, info: Mapping[str, Any], ttl_s: int) -> None:
        self.kind = kind
        self.name = name
        self.info: Mapping[str, Any] = types.MappingProxyType(dict(info))
        self.ttl_s = ttl_s
        self._epoch = 0
        self.last_epoch = 0
        """The epoch of the latest registration, kept while lost (a re-registration may
        take the key over if it outlived the loss)."""
        self._losses = 0
        self._closed = False
        self._lost_reason = ""
        self._rival: str | None = None
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

    @property
    def rival(self) -> str | None:
        return self._rival

    async def wait_changed(self) -> None:
        if self._closed:
            raise SessionClosedError(f"{self.kind} {self.name!r}: the session is closed")
        await self._changed.wait()

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
        self._epoch = self.last_epoch = epoch
        self._rival = None
        self._notify()

    def _mark_rival(self, rival: str) -> None:
        """Registering again found the name held by another live member."""
        if rival != self._rival:
            self._rival = rival
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


def check_member(kind: str, name: str, info: Mapping[str, Any], ttl_s: int) -> tuple[str, int]:
    path = member_path(kind, name)
    encode_value(info)
    return path, check_ttl(ttl_s)


def pause_after(attempt: int) -> float:
    first, longest = _REREGISTER_PAUSE_S
    return float(min(longest, first * 2 ** min(attempt, 10)))


def expiry_slack_s(ttl_s: int) -> float:
    """How much longer than its TTL an expiring entry may live: a tenth of the TTL, 2 s to
    60 s. EtcdCoordinator shares one etcd lease among the writes of that window."""
    return min(_MAX_SLACK_S, max(MIN_SLACK_S, ttl_s / 10))


def check_entry_ttl(ttl_s: int | None) -> int | None:
    return None if ttl_s is None else check_ttl(ttl_s)


def check_revision(revision: int) -> int:
    if isinstance(revision, bool) or not isinstance(revision, int) or revision < 0:
        raise CoordinationArgumentError(
            f"revision {revision!r} is not a revision: use 0 (absent) or an entry's revision",
            field="revision",
            value=revision,
            allowed=">= 0",
        )
    return revision


def conflict_error(path: str, expected: int, current: int) -> ConflictError:
    now = f"is at revision {current}" if current else "does not exist"
    wanted = f"revision {expected}" if expected else "absent"
    return ConflictError(
        f"{path!r} changed: expected {wanted}, but it {now}; read it again and retry",
        key=path,
        current_revision=current,
    )
