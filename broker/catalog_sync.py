"""Each `popmq broker` keeps its own catalog in step with the cluster's topics and groups.

Cluster-wide metadata lives in the coordinator: `topics/<topic>` (routes,
coordination/routes.py) and `groups/<group>` (group records, coordination/groups.py). A
proxy changes it there and then pushes the change to every live broker; a broker that was
down, partitioned or restarting misses the push, so `CatalogSync` follows both prefixes
(metadata.follow) and applies them itself:

- a route of kind "normal" naming this broker: the local topic exists with the route's
  message type and at least the route's local queue count (created, or grown; never
  shrunk). A local topic of another message type is left alone and reported;
- a route of kind "normal", naming this broker or not: a local topic of the same name that
  is the part of another route's incarnation (another route create time: the topic was
  deleted and created again while this broker was away) is deleted with its messages
  (`Broker.apply_topic`), so the name's new topic never serves the old one's messages;
- a group record: `Broker.apply_group` with its state, creation time and revision (the
  broker ignores one older than it applied), and again when a topic it subscribes to
  arrives on, or leaves, this broker (the local copy subscribes only to local topics);
- a route or record deleted while the sync watches (present in the previous snapshot, now
  gone or a deletion marker): the local topic or group is deleted (forced), unless the
  coordinator holds a new one by the time the deletion is applied. What disappeared while
  the broker was away (absent at the first listing or a re-list) is never deleted: the
  sync logs such orphans once, by name, for an operator to decide.

One worker task applies the changes, in passes: topics first, then groups (so a group sees
the topics of the same pass). An item that fails is logged (once per distinct error) and
tried again at its next change or after a pause (`retry_initial_s`, doubling to
`retry_max_s`); it never holds up other items. While the coordinator is unreachable the
watches resume by themselves (follow) and the broker keeps its catalog.

Everything runs on the event loop: the watch callbacks only record what changed; the
worker awaits the broker's admin operations (each one synced write batch).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import types
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from popmq.broker_core import AlreadyExistsError, Broker, NotFoundError, PopMQError
from popmq.broker_core.catalog import KIND_NORMAL, TopicInfo
from popmq.broker_core.errors import FailedPreconditionError
from popmq.coordination.coordinator import Coordinator, Entry, Snapshot
from popmq.coordination.errors import CorruptValueError
from popmq.coordination.groups import GROUPS_FOLDER, GroupRecord
from popmq.coordination.metadata import follow
from popmq.coordination.routes import TOPICS_FOLDER, TopicRoute

logger = logging.getLogger(__name__)

_T = TypeVar("_T", TopicRoute, GroupRecord)
_PREFIXES = (TOPICS_FOLDER, GROUPS_FOLDER)


@dataclass(frozen=True, kw_only=True, slots=True)
class CatalogSyncConfig:
    """How the catalog sync retries an item it failed to apply."""

    retry_initial_s: float = 0.5
    """Pause before the first retry of a failed item."""
    retry_max_s: float = 30.0
    """Longest pause between retries (the pause doubles up to it)."""

    def __post_init__(self) -> None:
        if not 0 < self.retry_initial_s <= self.retry_max_s:
            raise ValueError(
                f"retry_initial_s {self.retry_initial_s} must be above 0 and at most "
                f"retry_max_s {self.retry_max_s}"
            )


@dataclass(frozen=True, slots=True)
class CatalogSyncStatus:
    """What the sync has done (for `popmq cluster status`).

    Attributes:
        ready: Both first listings (topics and groups) have been taken in.
        topics_revision: Every change of `topics/` up to this revision has been taken in
            (applied, or failed and waiting for its retry).
        groups_revision: The same for `groups/`.
        pending: Items ("topics/<topic>", "groups/<group>") waiting to be applied.
        failed: Items whose last attempt failed -> that error; retried after a pause.
        orphans: Local topics and groups with no route or record in the coordinator, found
            at a listing; kept (never deleted at start).
    """

    ready: bool
    topics_revision: int
    groups_revision: int
    pending: tuple[str, ...]
    failed: Mapping[str, str]
    orphans: tuple[str, ...]

    @property
    def revision(self) -> int:
        """Every change of both prefixes up to this revision has been taken in."""
        return min(self.topics_revision, self.groups_revision)


class CatalogSync:
    """Follows `topics/` and `groups/` and keeps `broker`'s catalog in step.

    Args:
        coordinator: Where the cluster's metadata lives.
        broker: This broker's core (started).
        broker_name: This broker's name in the routes.
        config: Retry pauses.

    Use it as an async context, or `start()` / `close()`.
    """

    def __init__(
        self,
        coordinator: Coordinator,
        broker: Broker,
        broker_name: str,
        config: CatalogSyncConfig | None = None,
    ) -> None:
        self.coordinator = coordinator
        self.broker = broker
        self.broker_name = broker_name
        self.config = config or CatalogSyncConfig()
        # What the coordinator holds, as last received (routes of kind normal; records).
        self._routes: dict[str, TopicRoute] = {}
        self._groups: dict[str, GroupRecord] = {}
        # Topic -> the groups whose records subscribe to it; None: rebuild from _groups
        # (after every groups snapshot), so a topic's arrival is not O(groups).
        self._subscribers: dict[str, list[str]] | None = None
        # The last snapshot received per prefix, and the last one whose changes were all
        # taken in by the worker (what wait_applied and the status report).
        self._received: dict[str, Snapshot] = {}
        self._processed: dict[str, Snapshot] = {}
        # Per prefix, the revision up to which every change is known to be taken in: the
        # processed snapshot's, or later when a listing showed nothing changed since.
        self._covered: dict[str, int] = dict.fromkeys(_PREFIXES, 0)
        # Items ("topics/x", "groups/g") to apply in the next pass.
        self._dirty: set[str] = set()
        # Items whose route or record was deleted while the sync watched -> the revision
        # of the snapshot that showed it gone: delete locally.
        self._doomed: dict[str, int] = {}
        # Failed items -> (monotonic time of the next try, pause after it fails again).
        self._retry: dict[str, tuple[float, float]] = {}
        # Failed items -> the last error's text (logged once per distinct text).
        self._failed: dict[str, str] = {}
        # Local topics and groups with nothing in the coordinator, and those logged already.
        self._orphans: set[str] = set()
        self._logged_orphans: set[str] = set()
        # Set when a listing arrived: the next pass looks for orphans.
        self._look_for_orphans = False
        # Set and replaced at every change of the state above: the worker and waiters.
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._failure: str | None = None
        self._closed = False

    async def __aenter__(self) -> CatalogSync:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Start following (returns at once: `wait_ready` waits for the first listings).
        Idempotent."""
        if self._tasks or self._closed:
            return
        self._tasks = [
            asyncio.create_task(self._follow(TOPICS_FOLDER), name="catalog-sync-topics"),
            asyncio.create_task(self._follow(GROUPS_FOLDER), name="catalog-sync-groups"),
            asyncio.create_task(self._work(), name="catalog-sync-apply"),
        ]
        for task in self._tasks:
            task.add_done_callback(self._task_done)

    async def close(self) -> None:
        """Stop following and applying (idempotent); what was applied stays."""
        self._closed = True
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        # A task that died has said why already (_task_done).
        await asyncio.gather(*tasks, return_exceptions=True)
        self._wake()

    def _task_done(self, task: asyncio.Task[None]) -> None:
        """A task ended without close(): the sync has stopped. A cancellation counts too:
        closing the etcd client under a watch ends it with CancelledError."""
        if self._closed:
            return
        error = None if task.cancelled() else task.exception()
        if task.cancelled():
            why = "it was cancelled (not by close(): was its coordinator closed?)"
        else:
            why = f"{error!r}" if error is not None else "it returned"
        logger.error("catalog sync task %s died: %s", task.get_name(), why, exc_info=error)
        if self._failure is None:
            self._failure = f"catalog sync task {task.get_name()} died: {why}"
        self._wake()

    # -- what the tests and the broker process wait for ----------------------------------

    @property
    def ready(self) -> bool:
        """Both first listings have been taken in."""
        return all(prefix in self._processed for prefix in _PREFIXES)

    @property
    def failure(self) -> str | None:
        """Why the sync stopped (one of its tasks died), or None."""
        return self._failure

    def status(self) -> CatalogSyncStatus:
        return CatalogSyncStatus(
            ready=self.ready,
            topics_revision=self._covered[TOPICS_FOLDER],
            groups_revision=self._covered[GROUPS_FOLDER],
            pending=tuple(sorted(self._dirty | self._doomed.keys() | self._retry.keys())),
            failed=types.MappingProxyType(dict(self._failed)),
            orphans=tuple(sorted(self._orphans)),
        )

    async def wait_ready(self, *, timeout_s: float | None = None) -> None:
        """Return once both first listings have been taken in (TimeoutError after
        `timeout_s`; FailedPreconditionError if the sync stopped)."""
        async with asyncio.timeout(timeout_s):
            while not self.ready:
                await self._wait_change()

    async def wait_applied(self, revision: int, *, timeout_s: float | None = None) -> None:
        """Return once every change of `topics/` and `groups/` up to `revision` has been
        taken in: applied, or failed and waiting for its retry (see `status().failed`).

        A prefix whose last change is older than `revision` is confirmed with a listing:
        if it shows what the sync last took in, nothing changed there since.
        """
        async with asyncio.timeout(timeout_s):
            for prefix in _PREFIXES:
                while self._covered[prefix] < revision:
                    await self._confirm(prefix, revision)

    async def wait_failure(self) -> str:
        """Return why the sync stopped, once it has (for the broker process's health)."""
        while self._failure is None:
            await self._changed.wait()
        return self._failure

    async def _confirm(self, prefix: str, revision: int) -> None:
        changed = self._changed  # taken first: a change while listing is not missed
        processed = self._processed.get(prefix)
        if processed is not None and self._received.get(prefix) is processed:
            listing = await self.coordinator.list(prefix)
            if listing.revision >= revision and _same_entries(listing, processed):
                self._covered[prefix] = max(self._covered[prefix], listing.revision)
                return
        await self._wait_change(changed)

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait_change(self, changed: asyncio.Event | None = None) -> None:
        """Wait for the next change (or for `changed`, taken before an await)."""
        if self._failure is not None:
            raise FailedPreconditionError(f"the catalog sync stopped: {self._failure}")
        if self._closed:
            raise FailedPreconditionError("the catalog sync is closed")
        await (changed or self._changed).wait()

    # -- receiving: the watch callbacks only record what changed ------------------------

    async def _follow(self, prefix: str) -> None:
        receive = self._receive_topics if prefix == TOPICS_FOLDER else self._receive_groups
        await follow(self.coordinator, prefix, receive)

    def _receive_topics(self, snapshot: Snapshot) -> None:
        self._receive(
            snapshot,
            TOPICS_FOLDER,
            self._routes,
            _decode_route,
            lambda route: self.broker_name in route.queue_counts,
        )

    def _receive_groups(self, snapshot: Snapshot) -> None:
        self._receive(snapshot, GROUPS_FOLDER, self._groups, _decode_group, lambda _: True)
        self._subscribers = None

    def _receive(
        self,
        snapshot: Snapshot,
        prefix: str,
        known: dict[str, _T],
        decode: Callable[[Entry], _T | None],
        held_here: Callable[[_T], bool],
    ) -> None:
        """Record a snapshot: what changed becomes dirty; a deletion seen live of something
        this broker holds (`held_here`: a route naming it, any group) is doomed.

        After a listing (the first one, or a re-list) nothing is doomed: what vanished
        while the sync was not watching is an orphan, reported by the next pass.
        """
        paths: Iterable[str] = snapshot.entries if snapshot.relisted else snapshot.changed
        if snapshot.relisted:
            known.clear()
            self._look_for_orphans = True
        for path in paths:
            name = path[len(prefix) :]
            entry = snapshot.entries.get(path)
            try:
                item = None if entry is None else decode(entry)
            except CorruptValueError as error:
                logger.warning("catalog sync ignores %s: %s", path, error)
                continue  # keep what was known: a hand-written value deletes nothing
            if item is not None:
                known[name] = item
                self._dirty.add(path)
                continue
            gone = known.pop(name, None)
            if gone is not None and held_here(gone) and not snapshot.relisted:
                self._doomed[path] = snapshot.revision
                self._dirty.add(path)
        self._received[prefix] = snapshot
        self._wake()

    # -- applying: one worker, in passes --------------------------------------------------

    async def _work(self) -> None:
        while True:
            self._take_due_retries()
            if self._idle():
                await self._wait_for_work()
                continue
            received = dict(self._received)
            await self._pass()
            for prefix, snapshot in received.items():
                self._processed[prefix] = snapshot
                self._covered[prefix] = max(self._covered[prefix], snapshot.revision)
            self._wake()

    def _idle(self) -> bool:
        """Nothing to apply: no first pass before both first listings arrived (so a
        starting broker creates its topics before it applies the groups subscribing to
        them), then nothing dirty and every snapshot received taken in."""
        if self._received.keys() < set(_PREFIXES):
            return True
        return not self._dirty and all(
            self._processed.get(prefix) is snapshot for prefix, snapshot in self._received.items()
        )

    async def _wait_for_work(self) -> None:
        changed = self._changed.wait()
        if not self._retry:
            await changed
            return
        due = min(at for at, _ in self._retry.values())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, due - time.monotonic())):
                await changed

    def _take_due_retries(self) -> None:
        now = time.monotonic()
        for path, (at, _) in list(self._retry.items()):
            if at <= now:
                self._dirty.add(path)

    async def _pass(self) -> None:
        """Apply every dirty item: topics first, then groups (topic arrivals and removals
        of this pass make their subscribers dirty)."""
        topics = sorted(p for p in self._dirty if p.startswith(TOPICS_FOLDER))
        self._dirty.difference_update(topics)
        for path in topics:
            await self._attempt(path, self._apply_topic)
        if self._look_for_orphans and self._received.keys() >= set(_PREFIXES):
            self._look_for_orphans = False
            await self._find_orphans()
        groups = sorted(p for p in self._dirty if p.startswith(GROUPS_FOLDER))
        self._dirty.difference_update(groups)
        for path in groups:
            await self._attempt(path, self._apply_group)

    async def _attempt(self, path: str, apply: Callable[[str], Awaitable[None]]) -> None:
        """Apply one item; a failure is logged (once per distinct error) and retried."""
        try:
            await apply(path)
        except PopMQError as error:
            self._failed_item(path, str(error))
        except Exception as error:  # a bug in one item must not stop the others
            logger.exception("catalog sync: applying %s failed unexpectedly", path)
            self._failed_item(path, f"{error!r}")
        else:
            self._retry.pop(path, None)
            if self._failed.pop(path, None) is not None:
                logger.info("catalog sync: %s applied after earlier failures", path)

    def _failed_item(self, path: str, text: str) -> None:
        _, pause = self._retry.get(path, (0.0, self.config.retry_initial_s / 2))
        pause = min(pause * 2, self.config.retry_max_s)
        self._retry[path] = (time.monotonic() + pause, pause)
        if self._failed.get(path) != text:
            logger.error(
                "catalog sync cannot apply %s (retrying, next in %.1fs): %s",
                path,
                pause,
                text,
            )
        else:
            logger.debug("catalog sync: %s failed again: %s", path, text)
        self._failed[path] = text

    # -- topics ----------------------------------------------------------------------------

    async def _apply_topic(self, path: str) -> None:
        name = path[len(TOPICS_FOLDER) :]
        if path in self._doomed:
            if await self._still_gone(path, _decode_route):
                await self._delete_topic(name)
            self._doomed.pop(path, None)
        route = self._routes.get(name)
        count = route.queue_counts.get(self.broker_name, 0) if route is not None else 0
        local = self._local_topic(name)
        if count:
            self._orphans.discard(path)
        if route is not None and route.create_time_ms > 0:
            before = local
            local = await self.broker.apply_topic(
                name,
                queues=count,
                message_type=route.message_type,
                route_create_time_ms=route.create_time_ms,
            )
            if before is not None and (local is None or local.topic_id != before.topic_id):
                self._subscribers_changed(name)  # another incarnation's topic was deleted
            if local is not None and (before is None or local.topic_id != before.topic_id):
                logger.info("topic %s created from its route: %d queues", name, count)
                self._subscribers_changed(name)
                return
        if route is None or count == 0:
            if route is not None and local is not None and local.kind == KIND_NORMAL:
                logger.warning(
                    "the route of topic %s does not name broker %s: its local topic stays "
                    "(an orphan; delete it by hand if it is not wanted)",
                    name,
                    self.broker_name,
                )
            return
        if local is None:
            try:
                await self.broker.create_topic(name, count, message_type=route.message_type)
            except AlreadyExistsError:
                local = self._local_topic(name)  # a push created it meanwhile
            else:
                logger.info("topic %s created from its route: %d queues", name, count)
                self._subscribers_changed(name)
                return
            if local is None:
                raise FailedPreconditionError(f"topic {name!r} changed while it was created")
        if local.message_type_name != route.message_type:
            raise FailedPreconditionError(
                f"topic {name!r} has message type {route.message_type!r} in its route but "
                f"{local.message_type_name!r} on broker {self.broker_name!r}: left as it is; "
                "delete the local topic or recreate the route with the local type "
                "(docs/coordination.md, Catalog sync)"
            )
        if local.queues < count:
            await self.broker.update_topic(name, count)
            logger.info(
                "topic %s grown from %d to %d queues (its route)", name, local.queues, count
            )

    def _local_topic(self, name: str) -> TopicInfo | None:
        try:
            return self.broker.topic_info(name)
        except NotFoundError:
            return None

    async def _delete_topic(self, name: str) -> None:
        try:
            await self.broker.delete_topic_guarded(name, force=True)
        except NotFoundError:
            return
        logger.info("topic %s deleted: its route was deleted", name)
        self._subscribers_changed(name)

    def _subscribers_changed(self, topic: str) -> None:
        """A topic arrived on or left this broker: its subscribers' local copies change."""
        if self._subscribers is None:
            self._subscribers = {}
            for record in self._groups.values():
                for sub in record.state.settings.subscriptions:
                    self._subscribers.setdefault(sub.topic, []).append(record.name)
        for group in self._subscribers.get(topic, ()):
            self._dirty.add(f"{GROUPS_FOLDER}{group}")

    # -- groups ----------------------------------------------------------------------------

    async def _apply_group(self, path: str) -> None:
        name = path[len(GROUPS_FOLDER) :]
        deleted_at = self._doomed.get(path)
        if deleted_at is not None:
            if await self._still_gone(path, _decode_group):
                await self._delete_group(name, deleted_at)
            self._doomed.pop(path, None)
        record = self._groups.get(name)
        if record is None:
            return
        self._orphans.discard(path)
        try:
            await self.broker.apply_group(
                name, record.state, create_time_ms=record.create_time_ms, revision=record.revision
            )
        except NotFoundError as error:
            # A proxy's push deleted the group at a later revision than this record's: the
            # sync has not received the deletion yet, and will.
            logger.info("catalog sync: group %s not applied: %s", name, error)

    async def _delete_group(self, name: str, revision: int) -> None:
        try:
            await self.broker.delete_group_record(name, revision=revision)
        except NotFoundError:
            return
        logger.info("group %s deleted: its record was deleted", name)

    async def _still_gone(self, path: str, decode: Callable[[Entry], object | None]) -> bool:
        """Whether the coordinator still holds no route or record at `path`: one created
        again since (and perhaps pushed to this broker already) must not be deleted here."""
        entry = await self.coordinator.get(path)
        if entry is None:
            return True
        try:
            return decode(entry) is None
        except CorruptValueError:
            return False  # not ours to judge: keep the local data

    # -- orphans ---------------------------------------------------------------------------

    async def _find_orphans(self) -> None:
        """Log, once each, local topics and groups the coordinator has nothing for."""
        found = {
            f"{TOPICS_FOLDER}{topic.name}"
            for topic in await self.broker.list_topics()
            if topic.kind == KIND_NORMAL
            and self.broker_name not in _queue_counts(self._routes.get(topic.name))
        }
        found |= {
            f"{GROUPS_FOLDER}{group.name}"
            for group in await self.broker.list_groups()
            if group.name not in self._groups
        }
        self._orphans = found
        new = sorted(found - self._logged_orphans)
        if new:
            logger.warning(
                "broker %s holds %d topics and groups the cluster has no route or record for "
                "(kept; delete them by hand if they are not wanted): %s",
                self.broker_name,
                len(new),
                ", ".join(new),
            )
            self._logged_orphans.update(new)


def _decode_route(entry: Entry) -> TopicRoute | None:
    """A normal topic's route; None for a deletion marker or another kind (DLQ and retry
    topics are broker-local: the broker creates them itself)."""
    route = TopicRoute.from_entry(entry)
    return route if route is not None and route.kind == "normal" else None


def _decode_group(entry: Entry) -> GroupRecord | None:
    return GroupRecord.from_entry(entry)


def _queue_counts(route: TopicRoute | None) -> Mapping[str, int]:
    return route.queue_counts if route is not None else {}


def _same_entries(a: Snapshot, b: Snapshot) -> bool:
    """Whether two snapshots of a prefix hold the same entries at the same revisions."""
    return a.entries.keys() == b.entries.keys() and all(
        entry.revision == b.entries[path].revision for path, entry in a.entries.items()
    )
