"""Shared mechanics of cluster metadata kept in the coordinator (topic routes, groups).

- `write_once`: a compare-and-set tagged with a fresh write id, which tells a conflict with
  one's own retried write from a lost race;
- `delete_with_marker`: a delete that yields a revision a cache can wait for;
- `follow`: keeps a prefix's snapshots coming to a cache for as long as it runs, starting the
  watch again after a failure;
- `FollowingCache`: the lifecycle a watched cache shares (RouteCache, GroupCache).

Everything runs on the event loop; nothing here blocks it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from popmq.broker_core import FailedPreconditionError
from popmq.coordination.coordinator import Coordinator, Entry, Snapshot
from popmq.coordination.errors import (
    ConflictError,
    CoordinationError,
    CoordinationUnavailableError,
    SessionClosedError,
)

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1
"""The metadata schema this code writes and reads; a reader refuses a newer one."""
RESTART_PAUSE_S = (0.1, 2.0)
"""First and longest pause before a failed watch is started again."""


def marker(name_field: str, name: str) -> dict[str, Any]:
    """The deletion marker of an entry: every reader treats it as absent."""
    return {"schema": SCHEMA_VERSION, name_field: name, "deleted": True}


async def write_once(
    coordinator: Coordinator, path: str, value: Mapping[str, Any], revision: int
) -> Entry | None:
    """Compare-and-set `value` at `path`, tagged with a fresh write id; None if another
    write came first.

    The etcd client retries a write on the next endpoint when its endpoint fails mid-call,
    so a CAS can report a conflict with its own, already applied, write (docs/coordination.md).
    The write id tells that case apart: without it, a retried add_queues would add its
    queues twice, or a create would fail as already existing.
    """
    write_id = secrets.token_hex(8)
    try:
        return await coordinator.compare_and_set(
            path, {**value, "write_id": write_id}, revision=revision
        )
    except ConflictError:
        current = await coordinator.get(path)
        if current is not None and current.value.get("write_id") == write_id:
            return current  # ours landed; the conflict was with itself
        return None


async def delete_with_marker(
    coordinator: Coordinator, path: str, marker_value: Mapping[str, Any], revision: int
) -> int | None:
    """Delete the entry at `path` (last read at `revision`); the revision to wait for, or
    None if it changed since it was read.

    The entry is first replaced by a deletion marker with compare-and-set (so a concurrent
    change is not lost silently), then deleted at the marker's revision. The marker's
    revision is one the watch delivers, which gives the caller a revision to wait for; a
    reader treats a marker as absent, so a marker left by an admin that died in between
    does no harm."""
    written = await write_once(coordinator, path, marker_value, revision)
    if written is None:
        return None
    with contextlib.suppress(ConflictError):  # recreated meanwhile: theirs now
        await coordinator.delete(path, revision=written.revision)
    return written.revision


async def follow(coordinator: Coordinator, prefix: str, apply: Callable[[Snapshot], None]) -> None:
    """Call `apply` with every snapshot of `prefix`, for as long as the task runs.

    A watch that fails with anything but a closed coordinator is started again after a
    pause (listing first, so nothing is missed): a cache that silently stopped following
    would serve stale data with no error anywhere. While the coordinator is unreachable the
    watch itself resumes where it stopped, and the cache keeps its last state.
    """
    pause = RESTART_PAUSE_S[0]
    while True:
        snapshots: AsyncIterator[Snapshot] = aiter(coordinator.watch(prefix))
        try:
            async for snapshot in snapshots:
                apply(snapshot)
                pause = RESTART_PAUSE_S[0]
        except SessionClosedError:
            raise
        except CoordinationError as error:
            logger.warning(
                "watch of %r failed (%s); starting it again in %.1fs", prefix, error, pause
            )
        finally:
            close = getattr(snapshots, "aclose", None)
            if close is not None:
                await close()
        await asyncio.sleep(pause)
        pause = min(pause * 2, RESTART_PAUSE_S[1])


class FollowingCache:
    """What a cache fed by coordinator watches shares: the watch tasks, one change event
    its readers wait on, the first-listing wait at start, and a failure that ends waits.

    A subclass calls `_follow_all` from its `start`, with an `apply` per prefix that
    updates its state and calls `_wake`. Everything runs on the event loop.
    """

    def __init__(self, coordinator: Coordinator, what: str) -> None:
        self.coordinator = coordinator
        self._what = what
        # Set and replaced on every change: what wait_for / wait_changed wait on.
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._failure: BaseException | None = None
        self._closed = False

    async def _follow_all(
        self,
        applies: Mapping[str, Callable[[Snapshot], None]],
        ready: Callable[[], bool],
        timeout_s: float,
        listed: str,
    ) -> None:
        """Start a watch per prefix and wait until `ready()` (its first listings);
        CoordinationUnavailableError after `timeout_s`, naming what was not `listed`.
        Idempotent."""
        if self._tasks:
            return
        self._tasks = [
            asyncio.create_task(
                follow(self.coordinator, prefix, apply), name=f"{self._what}-{prefix}"
            )
            for prefix, apply in applies.items()
        ]
        for task in self._tasks:
            task.add_done_callback(self._task_done)
        try:
            async with asyncio.timeout(timeout_s):
                while not ready():
                    await self._wait_change()
        except TimeoutError:
            await self.close()
            raise CoordinationUnavailableError(
                f"the {self._what} got no listing of {listed} within "
                f"{timeout_s:g}s: is the coordinator reachable?"
            ) from None
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Stop the watches (idempotent); lookups keep answering from the last state."""
        self._closed = True
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._wake()

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or self._closed:
            return
        self._failure = task.exception() or RuntimeError(f"watch {task.get_name()} ended")
        logger.error("%s watch %s failed: %r", self._what, task.get_name(), self._failure)
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait_change(self) -> None:
        if self._failure is not None:
            raise self._failure
        await self._changed.wait()
        if self._failure is not None:
            raise self._failure

    async def _wait_revision(
        self, current: Callable[[], int], revision: int, timeout_s: float | None
    ) -> None:
        """Return once `current()` reaches `revision` (read your writes)."""
        async with asyncio.timeout(timeout_s):
            while current() < revision:
                if self._closed:
                    raise FailedPreconditionError(f"the {self._what} is closed")
                await self._wait_change()
