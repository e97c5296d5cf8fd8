"""`EtcdCoordinator`: the Coordinator on etcd, through popmq's own v3 client (etcd.py).

Everything lives under `/popmq/<cluster>/` (docs/coordination.md has the key layout). Member
sessions are etcd leases kept alive every TTL/3; metadata writes are transactions comparing
the key's mod revision; watches list a prefix, then watch from the listed revision and list
again after a compaction; expiring entries share leases whose expiry falls within the slack.
Everything runs on the event loop.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import logging
import math
import types
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from popmq.coordination.coordinator import (
    DEFAULT_SESSION_TTL_S,
    MIN_SLACK_S,
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
    expiry_slack_s,
    member_folder,
    member_path,
    pause_after,
)
from popmq.coordination.errors import (
    CompactedError,
    CoordinationUnavailableError,
    CorruptValueError,
    LeaseNotFoundError,
    MemberExistsError,
)
from popmq.coordination.etcd import (
    DEFAULT_TIMEOUT_S,
    MAX_LEASE_TTL_S,
    Compare,
    EtcdClient,
    Get,
    KeyValue,
    Lease,
    Put,
    RangeResult,
)
from popmq.coordination.etcd_streams import LeaseKeeper, cancel_and_wait

logger = logging.getLogger(__name__)


# -- etcd ----------------------------------------------------------------------------------


_RETRY_AFTER_ANSWER_S = 0.1
"""A session that failed to register again because etcd did not answer tries again this
long after etcd's next answer (to anyone): not in the same instant as every other waiter."""
_MAX_SHARED_LEASES = 1024
"""etcd leases an EtcdCoordinator keeps for reuse by expiring writes (expiry_slack_s)."""
_PROMPT_LEASE_TRIES = 3
"""Lease grants a registration makes before it takes one answered late (_prompt_lease)."""


class _EtcdSession(MemberSession):
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
        del leases[: bisect.bisect_left(leases, (now + MIN_SLACK_S,))]  # about to expire
        at = bisect.bisect_left(leases, (need,))
        if at < len(leases) and leases[at][0] <= need + slack:
            return leases[at][1]
        granted = await self._client.lease_grant(min(MAX_LEASE_TTL_S, math.ceil(ttl_s + slack)))
        bisect.insort(self._leases, (granted.granted_at + granted.ttl_s, granted.id))
        if len(self._leases) > _MAX_SHARED_LEASES:
            self._leases.pop(0)
        return granted.id


async def prompt_lease(client: EtcdClient, ttl_s: int) -> Lease:
    """A lease whose grant was answered within a keepalive interval.

    This side counts a lease from when it asked for it (etcd may have granted it any time
    after), so a grant answered late, as one sent to an etcd that was paused resumes,
    leaves little or nothing of the lease: its keeper would call it lost at once, and the
    member would lose the registration it just made. Such a lease is revoked and another
    asked for; etcd answers again, so that one comes promptly."""
    loop = asyncio.get_running_loop()
    for _ in range(_PROMPT_LEASE_TRIES - 1):
        lease = await client.lease_grant(ttl_s)
        late = loop.time() - lease.granted_at
        if late < lease.ttl_s / 3:
            return lease
        logger.info("etcd answered a lease grant after %.1fs: asking again", late)
        with contextlib.suppress(LeaseNotFoundError, CoordinationUnavailableError):
            await client.lease_revoke(lease.id)
    return await client.lease_grant(ttl_s)


class EtcdCoordinator:
    """Coordination in etcd, under `/popmq/<cluster>/` (docs/coordination.md).

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
        path, ttl = check_member(kind, name, info, ttl_s)
        session = _EtcdSession(self, kind, name, info, ttl)
        await self._register(session, path)
        self._sessions.add(session)
        session._task = asyncio.get_running_loop().create_task(
            self._keep(session, path), name=f"popmq-session-{kind}-{name}"
        )
        session._task.add_done_callback(session._loop_done)
        return session

    async def _register(self, session: _EtcdSession, path: str) -> None:
        """Grant a lease and put the member's key under it: create it (put-if-absent), or,
        after a loss, take it over if it is still the key of the last registration."""
        lease = await prompt_lease(self.client, session.ttl_s)
        try:
            current = await self._claim(session, self._key(path), lease.id)
        except BaseException:
            with contextlib.suppress(LeaseNotFoundError, CoordinationUnavailableError):
                await self.client.lease_revoke(lease.id)
            raise
        old, session.lease = session.lease, lease
        session._keeper = self.client.keep_alive(lease)
        session._mark_registered(current.create_revision)
        if old is not None:  # it holds nothing now; if etcd does not answer, it lapses
            with contextlib.suppress(LeaseNotFoundError, CoordinationUnavailableError):
                await self.client.lease_revoke(old.id)

    async def _claim(self, session: _EtcdSession, key: str, lease: int) -> KeyValue:
        """Put the member's key under `lease`: taken over, or created; returns it.

        Raises:
            MemberExistsError: Another member holds the name.
        """
        current = await self._take_over(session, key, lease)
        if current is not None:
            return current
        created, current = await self.client.put_if_absent(
            key, encode_value(session.info), lease=lease
        )
        if not created:
            raise self._member_exists(session, current)
        assert current is not None  # the transaction read the key it wrote
        return current

    async def _take_over(self, session: _EtcdSession, key: str, lease: int) -> KeyValue | None:
        """After a loss: move the member's key to `lease` if it is still the key of the last
        registration (created at `last_epoch`), returning it; None when it is gone.

        etcd restores leases when it restarts, with their whole TTL, so after a restart the
        key is usually still there. Nobody else can have registered the name meanwhile
        (the key never went), so the registration goes on under the same epoch, and the
        proxies watching `brokers/` see no change but the lease. Revoking the old lease
        first would delete the key, and every proxy would drop the member until the new
        key arrives (unless its connection is up: RouteCache holds it a while). An etcd
        that resumes after a pause past the TTL has revoked every lease, so the key is gone
        and a new one (a new epoch) is created.

        Raises:
            MemberExistsError: Another member holds the name now.
        """
        if session.last_epoch == 0 or session.lease is None:
            return None  # the first registration
        result = await self.client.txn(
            [Compare(key, "create_revision", "==", session.last_epoch)],
            [Put(key, encode_value(session.info), lease), Get(key)],
            [Get(key)],
        )
        reads = [r for r in result.results if isinstance(r, RangeResult)]
        current = reads[-1].kvs[0] if reads and reads[-1].kvs else None
        if result.succeeded:
            return current
        if current is not None:
            raise self._member_exists(session, current)
        return None  # gone (its lease lapsed or was revoked): a new key and epoch

    def _member_exists(self, session: _EtcdSession, current: KeyValue | None) -> MemberExistsError:
        epoch = current.create_revision if current else 0
        held = f"epoch {epoch}"
        if current is not None:
            with contextlib.suppress(CorruptValueError):
                addr = decode_value(member_path(session.kind, session.name), current.value).get(
                    "addr"
                )
                if addr:
                    held += f", at {addr}"
        return MemberExistsError(
            f"{session.kind} {session.name!r} is registered already ({held}): "
            "names must be unique while alive",
            field="name",
            value=session.name,
        )

    async def _keep(self, session: _EtcdSession, path: str) -> None:
        """Wait for the session's loss, then register again until it works (or close)."""
        longest = max(0.1, session.ttl_s / 3)
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
                except MemberExistsError as error:
                    if session.rival is None:
                        logger.warning(
                            "%s %r cannot register again: %s", session.kind, session.name, error
                        )
                    session._mark_rival(str(error))
                except CoordinationUnavailableError as error:
                    (logger.warning if attempt == 0 else logger.debug)(
                        "%s %r cannot register again yet: %s", session.kind, session.name, error
                    )
                    # Calls to a hung etcd are refused at once; its first answer when it
                    # resumes (to a probe, a keepalive) is the moment to try again.
                    pause = min(longest, pause_after(attempt))
                    if await self.client.reachability.next_answer(pause):
                        await asyncio.sleep(_RETRY_AFTER_ANSWER_S)
                    continue
                # At most a keepalive interval apart: etcd keeps a restored key for one TTL
                # after it restarts, and taking it over spares the watchers a gap.
                await asyncio.sleep(min(longest, pause_after(attempt)))

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
        ttl = check_entry_ttl(ttl_s)

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
        expected = check_revision(revision)
        ttl = check_entry_ttl(ttl_s)

        async def write(lease: int) -> Entry:
            written, current = await self.client.compare_and_swap(
                key, raw, mod_revision=expected, lease=lease
            )
            if not written:
                raise conflict_error(path, revision, current.mod_revision if current else 0)
            assert current is not None
            return self._entry(current)

        return await self._expiring.run(ttl, write)

    async def delete(self, path: str, *, revision: int | None = None) -> bool:
        key = self._key(check_path(path))
        if revision is None:
            return (await self.client.delete(key)).deleted > 0
        if check_revision(revision) == 0:
            existing = await self.get(path)
            if existing is not None:
                raise conflict_error(path, 0, existing.revision)
            return False
        deleted, current = await self.client.delete_if(key, mod_revision=revision)
        if not deleted:
            raise conflict_error(path, revision, current.mod_revision if current else 0)
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
                await asyncio.sleep(pause_after(attempt))
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
