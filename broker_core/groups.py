"""Consumer groups: create, update, read and delete them with their settings.

One path creates a group explicitly (`create`): the group record, its settings record and
the start offsets of its subscribed topics go in one batch. A group created by first use is
made by autocreate.py with default settings and may be given settings by a later `create`.

In cluster mode the group's settings live in etcd; `apply` sets the broker's copy to
exactly the cluster's record (pushed by a proxy, or found by the catalog sync,
broker/catalog_sync.py), ignoring a record older than the one it applied last.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Sequence

from popmq.broker_core import group_rules, keys, validation
from popmq.broker_core.autocreate import AutoCreate
from popmq.broker_core.catalog import Catalog, GroupInfo
from popmq.broker_core.clock import Clock
from popmq.broker_core.config import BrokerConfig
from popmq.broker_core.consume_queues import ConsumeQueues
from popmq.broker_core.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
)
from popmq.broker_core.group_commit import GroupCommitWriter
from popmq.broker_core.group_settings import GroupSettingsStore, settings_key
from popmq.broker_core.long_polling import LongPolling
from popmq.broker_core.offsets import OffsetReads, QueueOffsets
from popmq.broker_core.pop.live_checkpoints import LiveCheckpoints
from popmq.broker_core.queue_lock import QueueLocks
from popmq.broker_core.store import Batch
from popmq.broker_core.to_the_end import runs_to_the_end
from popmq.broker_core.types import ExponentialBackoff, GroupSettings, Subscription

log = logging.getLogger(__name__)

TOMBSTONES_KEPT = 10_000
"""Deleted groups whose deletion revision `apply` remembers (the most recent ones)."""


class Groups:
    """Group administration; every change is one synced batch, then memory."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        catalog: Catalog,
        writer: GroupCommitWriter,
        offsets: QueueOffsets,
        offset_reads: OffsetReads,
        queues: ConsumeQueues,
        checkpoints: LiveCheckpoints,
        settings: GroupSettingsStore,
        locks: QueueLocks,
        polling: LongPolling,
        create: AutoCreate,
        forget_pop_counts: Callable[[int], None],
        clock: Clock,
    ) -> None:
        self._config = config
        self._catalog = catalog
        self._writer = writer
        self._offsets = offsets
        self._offset_reads = offset_reads
        self._queues = queues
        self._checkpoints = checkpoints
        self._settings = settings
        self._locks = locks
        self._polling = polling
        self._create = create
        self._forget_pop_counts = forget_pop_counts
        self._clock = clock
        # The highest cluster revision `apply` applied per group name, so a push that
        # arrives after a newer one cannot roll the group back. Memory only: after a restart
        # the catalog sync applies every group's current record again. Guarded by
        # _apply_lock; delete() moves a group's entry to _deleted_revisions.
        self._applied_revisions: dict[str, int] = {}
        # Deleted groups -> the cluster revision of the deletion (or the last one applied),
        # so a push of an older record that arrives late does not create the group again;
        # the oldest beyond TOMBSTONES_KEPT are forgotten (a push is seconds late, not
        # thousands of deletes).
        self._deleted_revisions: dict[str, int] = {}
        # Serializes apply() and delete(): a revision check and the write it admits are one
        # step.
        self._apply_lock = asyncio.Lock()

    def get_group(self, name: str) -> GroupInfo:
        validation.check_name("group", name)
        return self._catalog.group(name)

    def list_groups(self) -> list[GroupInfo]:
        return sorted(self._catalog.groups.values(), key=lambda g: g.name)

    def group_settings(self, name: str) -> GroupSettings:
        """A group's FIFO flag, subscriptions, consume_from and backoff policy."""
        validation.check_name("group", name)
        return self._settings.load(self._catalog.group(name).group_id)

    def _consume_from_starts(
        self, group_id: int, settings: GroupSettings
    ) -> list[tuple[int, int, int]]:
        """(topic_id, queue_id, offset) where the group starts in every queue of its
        subscribed topics that it has never consumed (RocketMQ ConsumeFromWhere)."""
        starts: list[tuple[int, int, int]] = []
        for sub in settings.subscriptions:
            info = self._catalog.topic(sub.topic)
            at: dict[int, int] = {}
            if settings.consume_from == "timestamp":
                at = dict(self._offset_reads.offsets_at(sub.topic, settings.consume_from_ms))
            for queue_id in range(info.queues):
                if (group_id, info.topic_id, queue_id) in self._queues:
                    continue
                if settings.consume_from == "last":
                    offset = self._offsets.max_offset(info.topic_id, queue_id)
                elif settings.consume_from == "timestamp":
                    offset = at[queue_id]
                else:
                    offset = self._offsets.min_offset(info.topic_id, queue_id)
                starts.append((info.topic_id, queue_id, offset))
        return starts

    async def _write_group(
        self, info: GroupInfo, settings: GroupSettings, starts: list[tuple[int, int, int]]
    ) -> None:
        """Write the group record, its settings and its starting offsets in one batch."""
        record = self._settings.record(settings)

        def apply(batch: Batch, _: QueueOffsets) -> None:
            self._catalog.write_group(batch, info)
            batch.put("meta", settings_key(info.group_id), record)
            for topic_id, queue_id, offset in starts:
                batch.put(
                    "offsets",
                    keys.offset_key(info.group_id, topic_id, queue_id),
                    keys.encode_u64(offset),
                )

        await self._writer.submit(apply, sync=True)
        self._settings.written(info.group_id, settings)

    async def create(
        self,
        name: str,
        *,
        max_delivery_attempts: int | None = None,
        retry_backoff_s: Sequence[float] | None = None,
        settings: GroupSettings | None = None,
    ) -> GroupInfo:
        """Create a group with every admin setting, atomically; a group that exists only
        because it was used (auto-created) takes the settings."""
        validation.check_name("group", name)
        state = group_rules.new_group_state(
            max_delivery_attempts=max_delivery_attempts,
            retry_backoff_s=retry_backoff_s,
            settings=settings,
            defaults=self._config.groups,
            max_invisible_s=self._config.pop.max_invisible_s,
            topic_exists=self._catalog.topic,
        )
        settings = state.settings
        # One creation of a group at a time, first uses included: an explicit create racing
        # a consumer's first pop must not write a second id under the same name (the pop's
        # handles would then name a group id the catalog no longer has).
        return await self._create.exclusively(
            ("group", name), lambda: self._create_now(name, state, settings)
        )

    async def _create_now(
        self, name: str, state: group_rules.GroupState, settings: GroupSettings
    ) -> GroupInfo:
        existing = self._catalog.groups.get(name)
        if existing is not None and not existing.auto_created:
            raise AlreadyExistsError(f"group {name!r} already exists")
        info = self._catalog.new_group(
            name,
            max_delivery_attempts=state.max_delivery_attempts,
            retry_backoff_ms=state.retry_backoff_ms,
            now_ms=existing.create_time_ms if existing else self._clock.now_ms(),
            auto_created=False,
            group_id=existing.group_id if existing else None,
        )
        starts = self._consume_from_starts(info.group_id, settings)
        await self._write_group(info, settings, starts)
        current = self._catalog.groups.get(name)
        if current is not None and not current.auto_created:
            raise AlreadyExistsError(f"group {name!r} already exists")
        self._catalog.register_group(info)
        self._queues.place(info.group_id, starts)
        log.info(
            "group %s created: fifo=%s subscriptions=%s consume_from=%s",
            name,
            settings.fifo,
            [s.topic for s in settings.subscriptions],
            settings.consume_from,
        )
        return info

    @runs_to_the_end
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
    ) -> GroupInfo:
        """Change a group's settings; None / empty arguments keep the current value.

        A newly subscribed topic starts where consume_from says; queues the group already
        consumed keep their offsets. Deliveries in flight keep their deadlines.
        """
        validation.check_name("group", name)
        current = self._catalog.group(name)
        state = group_rules.updated_group_state(
            name,
            group_rules.GroupState(
                current.max_delivery_attempts,
                current.retry_backoff_ms,
                self._settings.load(current.group_id),
            ),
            max_delivery_attempts=max_delivery_attempts,
            retry_backoff_s=retry_backoff_s,
            exponential_backoff=exponential_backoff,
            fifo=fifo,
            set_subscriptions=set_subscriptions,
            remove_subscriptions=remove_subscriptions,
            consume_from=consume_from,
            consume_from_ms=consume_from_ms,
            max_invisible_s=self._config.pop.max_invisible_s,
            topic_exists=self._catalog.topic,
        )
        settings = state.settings
        info = self._catalog.new_group(
            name,
            max_delivery_attempts=state.max_delivery_attempts,
            retry_backoff_ms=state.retry_backoff_ms,
            now_ms=current.create_time_ms,
            auto_created=False,
            group_id=current.group_id,
        )
        starts = self._consume_from_starts(info.group_id, settings)
        await self._write_group(info, settings, starts)
        if self._catalog.groups.get(name) is not current:
            raise FailedPreconditionError(f"group {name!r} changed while it was updated; retry")
        self._catalog.register_group(info)
        self._queues.place(info.group_id, starts)
        log.info("group %s updated", name)
        return info

    async def apply(
        self,
        name: str,
        state: group_rules.GroupState,
        *,
        create_time_ms: int,
        revision: int,
    ) -> GroupInfo:
        """Set group `name` to exactly `state`: cluster mode's group record at `revision`.

        The group is created if absent; a group that exists here (auto-created by first use,
        or applied before) is taken over and keeps its local group_id, offsets and in-flight
        state. Subscriptions naming topics this broker does not hold are left out of the
        local copy (the cluster's record keeps them): the catalog sync applies the record
        again when such a topic arrives here. A newly subscribed topic starts where
        consume_from says. The group record, its settings and those start offsets are one
        synced batch, as in create() and update().

        A group here with another birth (`create_time_ms`) than the record's, and not
        auto-created, is another incarnation of the group (deleted and created again while
        this broker was away): it is deleted (forced) and the group created anew, starting
        where consume_from says.

        A record older than the last one applied to this group (`revision` below it) is
        ignored and the current group returned: a stale push that arrives after a newer
        sync must not roll the group back. The same revision again is applied (so the sync
        can re-apply it when a topic arrives). The revisions are kept in memory; delete()
        forgets a group's.
        """
        validation.check_name("group", name)
        validation.check_range("revision", revision, 1, 2**63 - 1)
        validation.check_range("create_time_ms", create_time_ms, 0, 2**63 - 1)
        async with self._apply_lock:
            existing = self._catalog.groups.get(name)
            applied = self._applied_revisions.get(name, 0)
            deleted = self._deleted_revisions.get(name, 0)
            if revision <= deleted:
                log.info(
                    "group %s: ignoring its record of revision %d: the group was deleted at %d",
                    name,
                    revision,
                    deleted,
                )
                if existing is not None:  # created again since by a first use: keep that
                    return existing
                raise NotFoundError(
                    f"group {name!r} was deleted at cluster revision {deleted}; its record of "
                    f"revision {revision} is older",
                    field="group",
                    value=name,
                )
            if existing is not None and revision < applied:
                log.info(
                    "group %s: ignoring its record of revision %d, older than the applied %d",
                    name,
                    revision,
                    applied,
                )
                return existing
            self._check_state(name, state)
            settings = self._held_settings(state.settings)
            if (
                existing is not None
                and not existing.auto_created
                and existing.create_time_ms != create_time_ms
            ):
                # Applied records carry their record's birth; another birth means the group
                # was deleted and created again while this broker was away: its offsets and
                # in-flight state belong to the deleted group, not to this one.
                log.warning(
                    "group %s here was created at %d ms, its record at %d ms: another "
                    "incarnation of the group (deleted and created again meanwhile); "
                    "replacing the old one",
                    name,
                    existing.create_time_ms,
                    create_time_ms,
                )
                await self._delete(name, force=True)
                existing = None
            if existing is None:
                # Shared with a first use creating the group meanwhile (autocreate.py).
                info = await self._create.once(
                    ("group", name),
                    lambda: self._apply_new(name, state, settings, create_time_ms),
                )
                if info.auto_created:  # that first use came first: take its group over
                    info = await self._apply_existing(info, state, settings, create_time_ms)
            else:
                info = await self._apply_existing(existing, state, settings, create_time_ms)
            self._applied_revisions[name] = max(applied, revision)
            self._deleted_revisions.pop(name, None)
            return info

    def _check_state(self, name: str, state: group_rules.GroupState) -> None:
        """The limits group_rules enforces on a create, for a state made elsewhere."""
        validation.check_range(
            "max_delivery_attempts",
            state.max_delivery_attempts,
            1,
            validation.MAX_DELIVERY_ATTEMPTS,
        )
        if not state.retry_backoff_ms:
            raise InvalidArgumentError(
                f"group {name!r} has an empty retry_backoff: give at least one delay",
                field="retry_backoff",
            )
        group_rules.check_backoff(
            [ms / 1000 for ms in state.retry_backoff_ms],
            max_invisible_s=self._config.pop.max_invisible_s,
        )

    def _held_settings(self, settings: GroupSettings) -> GroupSettings:
        """The settings with only the subscriptions of topics this broker holds, checked
        by the broker's rules (sorted by topic)."""
        held = tuple(s for s in settings.subscriptions if s.topic in self._catalog.topics)
        return group_rules.check_group_settings(
            dataclasses.replace(settings, subscriptions=held), self._catalog.topic
        )

    async def _apply_new(
        self,
        name: str,
        state: group_rules.GroupState,
        settings: GroupSettings,
        create_time_ms: int,
    ) -> GroupInfo:
        info = self._catalog.new_group(
            name,
            max_delivery_attempts=state.max_delivery_attempts,
            retry_backoff_ms=state.retry_backoff_ms,
            now_ms=create_time_ms,
            auto_created=False,
        )
        starts = self._consume_from_starts(info.group_id, settings)
        await self._write_group(info, settings, starts)
        if name in self._catalog.groups:
            raise FailedPreconditionError(f"group {name!r} changed while it was applied; retry")
        self._catalog.register_group(info)
        self._queues.place(info.group_id, starts)
        log.info(
            "group %s applied (created): subscriptions=%s",
            name,
            [s.topic for s in settings.subscriptions],
        )
        return info

    async def _apply_existing(
        self,
        current: GroupInfo,
        state: group_rules.GroupState,
        settings: GroupSettings,
        create_time_ms: int,
    ) -> GroupInfo:
        name = current.name
        info = self._catalog.new_group(
            name,
            max_delivery_attempts=state.max_delivery_attempts,
            retry_backoff_ms=state.retry_backoff_ms,
            now_ms=create_time_ms,
            auto_created=False,
            group_id=current.group_id,
        )
        starts = self._consume_from_starts(info.group_id, settings)
        if info == current and not starts and self._settings.load(info.group_id) == settings:
            return current  # already so: no write (the sync re-applies every group at start)
        await self._write_group(info, settings, starts)
        if self._catalog.groups.get(name) is not current:
            raise FailedPreconditionError(f"group {name!r} changed while it was applied; retry")
        self._catalog.register_group(info)
        self._queues.place(info.group_id, starts)
        log.info(
            "group %s applied: subscriptions=%s", name, [s.topic for s in settings.subscriptions]
        )
        return info

    async def delete(self, name: str, *, force: bool = False, revision: int = 0) -> None:
        """Delete a group, its offsets, settings, retry queues and in-flight state.

        Refused while the group has messages in flight unless forced. Its dead-letter topic
        stays: it is an ordinary topic, deleted on its own. `revision` (cluster mode) is the
        deletion's cluster revision: `apply` ignores records at or below it from now on,
        even if the group is not here (a push of it may still be on its way); without it,
        the last revision applied to the group counts.
        """
        validation.check_name("group", name)
        validation.check_range("revision", revision, 0, 2**63 - 1)
        async with self._apply_lock:
            if revision:
                self._bury(name, revision)
            await self._delete(name, force=force)

    def _bury(self, name: str, revision: int) -> None:
        buried = self._deleted_revisions
        buried[name] = max(revision, buried.pop(name, 0))  # re-inserted last: the newest
        while len(buried) > TOMBSTONES_KEPT:
            del buried[next(iter(buried))]

    async def _delete(self, name: str, *, force: bool) -> None:
        info = self._catalog.group(name)
        gid = info.group_id
        queues = [cq for (g, _, _), cq in self._queues.items() if g == gid]
        inflight = sum(len(cq.inflight) for cq in queues)
        if inflight and not force:
            raise FailedPreconditionError(
                f"group {name!r} has {inflight} messages in flight; wait until they are "
                "acked or redelivered, or delete with force"
            )
        retries = {k: t for k, t in self._catalog.retry_topics.items() if k[0] == gid}
        cks = self._checkpoints.select(lambda ck: ck.queue.group_id == gid)
        locked = self._locks.acquire_all(cq.lock_key for cq in queues)
        try:

            def apply(batch: Batch, _: QueueOffsets) -> None:
                batch.delete("meta", keys.group_meta_key(name))
                batch.delete("meta", settings_key(gid))
                for (g, tid), retry in retries.items():
                    batch.delete("meta", keys.retry_meta_key(g, tid))
                    start, end = keys.topic_range(retry.topic_id)
                    batch.delete_range("messages", start, end)
                batch.delete_range(
                    "offsets", keys.offset_key(gid, 0, 0), keys.offset_key(gid + 1, 0, 0)
                )
                for ck in cks:
                    if ck.persisted:
                        batch.delete("checkpoints", keys.checkpoint_key(ck.ck_id))
                        batch.delete("revive", keys.revive_key(ck.deadline_ms, ck.ck_id))

            def forget(_: object) -> None:
                # In the flush's callback: it runs even when this call was cancelled
                # meanwhile (a gRPC handler whose client went away), so a group gone from
                # the store is gone from memory too.
                if self._catalog.groups.get(name) is info:
                    del self._catalog.groups[name]
                    self._settings.forget(gid)
                    applied = self._applied_revisions.pop(name, 0)
                    if applied:
                        self._bury(name, applied)
                self._catalog.groups_by_id.pop(gid, None)
                for retry_key, retry in retries.items():
                    self._catalog.retry_topics.pop(retry_key, None)
                    self._catalog.topics_by_id.pop(retry.topic_id, None)
                    self._offsets.forget_topic(retry.topic_id)
                for queue_key in [k for k in self._queues if k[0] == gid]:
                    self._queues.remove(queue_key)
                self._checkpoints.drop(
                    self._checkpoints.select(lambda ck: ck.queue.group_id == gid)
                )
                self._forget_pop_counts(gid)

            written = self._writer.submit(apply, sync=True, committed=forget)
            await asyncio.shield(written)  # a cancelled call does not cancel its write
        finally:
            for lock_key in locked:
                self._locks.release(lock_key)
        for topic in {cq.topic for cq in queues}:
            # Held pops of the group look again and find it gone.
            self._polling.notify(topic, self._config.long_polling.max_per_key, group=name)
        log.info("deleted group %s (%d in-flight messages dropped)", name, inflight)
