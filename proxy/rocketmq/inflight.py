"""Receipt handles the proxy holds for RocketMQ 5 clients: auto-renewal and release.

RocketMQ's push consumers receive with `auto_renew`: the proxy, not the client, keeps their
messages invisible while they wait in the client's cache or its listener runs (renewed
`renew_ahead_s` before expiry, by 1, 3, 5, 10, 30, 60 min steps, for up to 3 h). A renewal
gives the message a new receipt handle, but the client keeps acking with the handle it
received, so the proxy maps the client's handle to the current one.

Every delivery is tracked per client id, so when a client says goodbye
(NotifyClientTermination) or falls silent for `client_idle_s`, its unacknowledged messages
are made visible again after `release_invisible_s` instead of waiting out their invisible
time. popmq does this for SimpleConsumer deliveries too (RocketMQ tracks only auto-renewed
ones).

Threading: everything runs on the server's event loop; one background task renews, drops
expired entries and ends idle sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from popmq.broker_core import BrokerAPI, PopMQError, PoppedMessage
from popmq.proxy.rocketmq.config import RocketMQConfig
from popmq.proxy.rocketmq.sessions import Sessions

log = logging.getLogger(__name__)

Key = tuple[str, str]
"""(group, the receipt handle the client holds)."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class Delivery:
    """One message a client holds."""

    client_id: str
    group: str
    client_handle: str
    handle: str
    """The broker's current handle (differs from client_handle after a renewal)."""
    deadline_ms: int
    auto_renew: bool
    received_ms: int
    due_ms: int = 0
    """When the maintenance task looks at it next (renew, or drop once expired)."""
    renewals: int = 0
    busy: asyncio.Future[None] | None = None
    """Set while the proxy moves the message (renewal, release): users wait for it."""


class Inflight:
    """Deliveries by (group, client handle) and by client id."""

    def __init__(self, broker: BrokerAPI, config: RocketMQConfig, sessions: Sessions) -> None:
        self._broker = broker
        self._config = config
        self._sessions = sessions
        # All three are guarded by running on one event loop.
        self._deliveries: dict[Key, Delivery] = {}
        self._by_client: dict[str, set[Key]] = {}
        # (due_ms, seq, key); an entry whose Delivery.due_ms differs is stale and skipped.
        self._due: list[tuple[int, int, Key]] = []
        self._seq = itertools.count()
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.renewed = 0
        self.released = 0

    def __len__(self) -> int:
        return len(self._deliveries)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start the maintenance task (idempotent; needs the running loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._maintain())
            self._task.add_done_callback(self._task_done)

    @staticmethod
    def _task_done(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("rocketmq in-flight maintenance stopped", exc_info=task.exception())

    async def close(self) -> None:
        """Stop renewing; held messages keep their deadlines in the broker.

        The task is asked to stop rather than cancelled, so a renewal or release it is
        writing finishes cleanly in the broker first.
        """
        task, self._task = self._task, None
        if task is not None:
            self._stopping = True
            self._wakeup.set()
            await task

    # -- tracking --------------------------------------------------------------------------

    def track(self, client_id: str, group: str, popped: PoppedMessage, auto_renew: bool) -> None:
        delivery = Delivery(
            client_id=client_id,
            group=group,
            client_handle=popped.receipt_handle,
            handle=popped.receipt_handle,
            deadline_ms=popped.invisible_until_ms,
            auto_renew=auto_renew,
            received_ms=_now_ms(),
        )
        self._add(delivery)

    def _add(self, delivery: Delivery) -> None:
        key = (delivery.group, delivery.client_handle)
        self._deliveries[key] = delivery
        self._by_client.setdefault(delivery.client_id, set()).add(key)
        self._schedule(delivery)

    def _schedule(self, delivery: Delivery) -> None:
        due = delivery.deadline_ms
        if delivery.auto_renew and self._renewable(delivery):
            due -= round(self._config.renew_ahead_s * 1000)
        delivery.due_ms = due
        key = (delivery.group, delivery.client_handle)
        if not self._due or due < self._due[0][0]:
            self._wakeup.set()
        heapq.heappush(self._due, (due, next(self._seq), key))

    def _renewable(self, delivery: Delivery) -> bool:
        limit = delivery.received_ms + round(self._config.renew_max_s * 1000)
        return delivery.deadline_ms < limit

    def _forget(self, key: Key) -> Delivery | None:
        delivery = self._deliveries.pop(key, None)
        if delivery is not None:
            keys = self._by_client.get(delivery.client_id)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_client[delivery.client_id]
        return delivery

    async def current_handle(self, group: str, client_handle: str) -> str:
        """The broker handle for the one a client holds (they differ after renewals)."""
        delivery = self._deliveries.get((group, client_handle))
        if delivery is None:
            return client_handle
        if delivery.busy is not None:
            await asyncio.shield(delivery.busy)
        return delivery.handle

    def acked(self, group: str, client_handle: str) -> None:
        """The client acked (or the handle is dead): stop tracking it."""
        self._forget((group, client_handle))

    def changed(self, group: str, client_handle: str, new_handle: str, deadline_ms: int) -> None:
        """The client changed the invisible time and now holds `new_handle`.

        An auto-renewed delivery is given back this way (a push consumer's nack): it is no
        longer renewed. A simple consumer keeps holding the message under the new handle.
        """
        delivery = self._forget((group, client_handle))
        if delivery is None or delivery.auto_renew:
            return
        delivery.client_handle = delivery.handle = new_handle
        delivery.deadline_ms = deadline_ms
        self._add(delivery)

    def holding(self, client_id: str) -> int:
        return len(self._by_client.get(client_id, ()))

    # -- release and renewal ---------------------------------------------------------------

    async def release_client(self, client_id: str) -> int:
        """Make the client's unacknowledged messages visible again soon; returns how many."""
        keys = list(self._by_client.get(client_id, ()))
        moved = await asyncio.gather(*(self._release(key) for key in keys))
        count = sum(moved)
        if count:
            log.info("released %d in-flight messages of client %s", count, client_id)
        return count

    async def release_handles(self, group: str, client_handles: list[str]) -> int:
        """Make these deliveries visible again soon (their receive never reached the client)."""
        moved = await asyncio.gather(*(self._release((group, h)) for h in client_handles))
        return sum(moved)

    async def _release(self, key: Key) -> bool:
        delivery = self._deliveries.get(key)
        if delivery is None:
            return False
        ok = await self._move(delivery, self._config.release_invisible_s, "release")
        self._forget(key)
        if ok:
            self.released += 1
        return ok

    async def _renew(self, delivery: Delivery) -> None:
        steps = self._config.renew_steps_s
        step = steps[min(delivery.renewals, len(steps) - 1)]
        key = (delivery.group, delivery.client_handle)
        if await self._move(delivery, step, "renew"):
            delivery.renewals += 1
            self.renewed += 1
            if key in self._deliveries:
                self._schedule(delivery)
        else:
            self._forget(key)

    async def _move(self, delivery: Delivery, invisible_s: float, why: str) -> bool:
        """Give the message a new invisible time; False when it is no longer ours to move."""
        if delivery.busy is not None:
            await asyncio.shield(delivery.busy)
        busy: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        delivery.busy = busy
        try:
            handle, deadline = await self._broker.change_invisible_time(
                delivery.group, delivery.handle, invisible_s
            )
        except PopMQError as exc:
            # Acked through another path, expired, or the group/topic is gone: nothing to do.
            log.debug("%s of a message of client %s skipped: %s", why, delivery.client_id, exc)
            return False
        else:
            delivery.handle = handle
            delivery.deadline_ms = deadline
            return True
        finally:
            delivery.busy = None
            busy.set_result(None)

    async def _maintain(self) -> None:
        while not self._stopping:
            await self._run_due()
            for client_id in self._sessions.idle():
                log.info("client %s is idle: ending its session", client_id)
                self._sessions.remove(client_id)
                await self.release_client(client_id)
            if self._stopping:
                return
            delays = [self._sessions.next_idle_in()]
            if self._due:
                delays.append(max(0.0, (self._due[0][0] - _now_ms()) / 1000))
            # Sessions appear without waking this task: look at them at least this often.
            delays.append(self._config.client_idle_s / 4)
            timeout = min(d for d in delays if d is not None)
            self._wakeup.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout)

    async def _run_due(self) -> None:
        now = _now_ms()
        work: list[Coroutine[Any, Any, object]] = []
        while self._due and self._due[0][0] <= now:
            due, _, key = heapq.heappop(self._due)
            delivery = self._deliveries.get(key)
            if delivery is None or delivery.due_ms != due:
                continue  # acked, changed or rescheduled since
            if not delivery.auto_renew or not self._renewable(delivery):
                self._forget(key)  # expired: the broker redelivers it
            elif not self._sessions.is_live(delivery.client_id):
                work.append(self._release(key))
            else:
                work.append(self._renew(delivery))
        if work:
            await asyncio.gather(*work)
