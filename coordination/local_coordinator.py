"""`LocalCoordinator`: the Coordinator in one process's memory (what `popmq serve` uses).

Members, metadata, expiring entries and watches, with the same contract as the etcd one
(tests/cluster/test_coordination.py runs both): revisions are a counter, a session lives
until it is closed or expired by `expire_member`, and an expiring entry is deleted by a
timer (and before any read). Everything runs on the event loop.
"""

from __future__ import annotations

import asyncio
import heapq
import types
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from popmq.coordination.coordinator import (
    DEFAULT_SESSION_TTL_S,
    Entry,
    Member,
    MemberKind,
    MemberSession,
    Session,
    Snapshot,
    check_cluster,
    check_entry_ttl,
    check_member,
    check_path,
    check_revision,
    conflict_error,
    decode_value,
    encode_value,
    member_folder,
    member_path,
)
from popmq.coordination.errors import (
    MemberExistsError,
    SessionClosedError,
)

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


class _LocalSession(MemberSession):
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
        path, ttl = check_member(kind, name, info, ttl_s)
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
        ttl = check_entry_ttl(ttl_s)
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
        ttl = check_entry_ttl(ttl_s)
        stored = self._data.get(check_path(path))
        current = stored.mod_revision if stored else 0
        if current != check_revision(revision):
            raise conflict_error(path, revision, current)
        self._write(path, raw)
        if ttl is not None:
            self._schedule_expiry(path, ttl)
        return self._entry(path, self._data[path])

    async def delete(self, path: str, *, revision: int | None = None) -> bool:
        self._check_open()
        stored = self._data.get(check_path(path))
        if revision is not None:
            current = stored.mod_revision if stored else 0
            if current != check_revision(revision):
                raise conflict_error(path, revision, current)
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
