"""Queue-exclusive mode: asks the server which queues this member owns, runs their workers.

One task on the event loop heartbeats and sends QueryAssignment for each topic every half
heartbeat interval (sooner while granted queues wait for their previous owner), starting a
``QueueWorker`` for each new queue and stopping the workers of queues taken away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

from popmq._gen.popmq.v1 import messaging_pb2
from popmq.sdk._push.queue_worker import QueueWorker, WorkerContext
from popmq.sdk._push.registration import Registration
from popmq.sdk._push.shared import LOGGER_NAME
from popmq.sdk.errors import FailedPreconditionError, PopMQError
from popmq.sdk.types import seconds_from_duration

logger = logging.getLogger(LOGGER_NAME)

PENDING_RECHECK = 0.1
"""While assigned queues wait for their previous owner, ask again this often (x interval)."""
CLAIM_MARGIN = 0.1
"""A queue-exclusive consumer stops this fraction of its claim on a queue before the claim
ends."""

Spawn = Callable[[Coroutine[Any, Any, None], str], "asyncio.Task[None]"]
"""Starts a named background task the consumer keeps (and stops at close)."""


class Assignment:
    """The queues this member owns, per topic, and the worker consuming each."""

    def __init__(
        self,
        *,
        registration: Registration,
        topics: Sequence[str],
        matchers: Mapping[str, Callable[[str], bool]],
        context: WorkerContext,
        spawn: Spawn,
    ) -> None:
        self._registration = registration
        self._topics = list(topics)
        self._matchers = matchers
        self._ctx = context
        self._spawn = spawn
        # Per topic: queue id -> its worker (until the worker's task ends).
        self._workers: dict[str, dict[int, QueueWorker]] = {t: {} for t in topics}
        # Set when a worker ends, so its release is reported at once.
        self._wakeup = asyncio.Event()
        self._stopping = False

    def assigned_queues(self) -> dict[str, tuple[int, ...]]:
        """``topic -> queue ids`` consumed now (workers told to stop are left out)."""
        return {
            t: tuple(sorted(q for q, w in ws.items() if not w.stopping))
            for t, ws in self._workers.items()
        }

    async def run(self) -> None:
        """Heartbeat, then ask for each topic's queues; start and stop queue workers."""
        registration = self._registration
        next_heartbeat = time.monotonic() + registration.interval_s
        while True:
            pending = False
            now = time.monotonic()
            if now >= next_heartbeat:
                next_heartbeat = now + registration.interval_s
                try:
                    registration.interval_s = await registration.heartbeat()
                except PopMQError as exc:
                    logger.warning(
                        "push consumer %s: heartbeat failed: %s", self._ctx.client_id, exc
                    )
            for topic in self._topics:
                try:
                    pending |= await self._rebalance(topic)
                except PopMQError as exc:
                    logger.warning(
                        "push consumer %s: assignment of %s failed: %s",
                        self._ctx.client_id, topic, exc,
                    )  # fmt: skip
                    if isinstance(exc, FailedPreconditionError):
                        next_heartbeat = 0.0  # e.g. dropped as silent: register again now
            self._wakeup.clear()
            delay = registration.interval_s / 2
            if pending:
                delay = min(delay, registration.interval_s * PENDING_RECHECK)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), delay)

    async def _rebalance(self, topic: str) -> bool:
        """One QueryAssignment; returns whether assigned queues are still pending."""
        ctx = self._ctx
        workers = self._workers[topic]
        sent = time.monotonic()
        request = messaging_pb2.QueryAssignmentRequest(
            client_id=ctx.client_id,
            group=ctx.group,
            topic=topic,
            held_queue_ids=sorted(workers),
        )
        response: messaging_pb2.QueryAssignmentResponse = await ctx.conn.call(
            "QueryAssignment", request, ctx.options.timeout_s, retry=True
        )
        # How long the claims last (the field's name predates the word claim).
        claim_s = seconds_from_duration(response.lease_duration)
        fence = sent + claim_s * (1 - CLAIM_MARGIN)
        granted = list(response.queue_ids)
        for queue_id, worker in list(workers.items()):
            if queue_id not in granted:
                worker.stop()  # finish the current message, commit, then report released
            else:
                worker.fence = fence
        for queue_id in granted:
            if queue_id not in workers and not self._stopping:
                worker = QueueWorker(
                    ctx, topic, queue_id, fence, self._matchers[topic], self.worker_done
                )
                workers[queue_id] = worker
                worker.task = self._spawn(worker.run(), f"popmq-queue-{topic}-{queue_id}")
        return bool(response.pending_queue_ids)

    def worker_done(self, worker: QueueWorker) -> None:
        """A worker stopped: forget it and report the release at once."""
        workers = self._workers[worker.topic]
        if workers.get(worker.queue_id) is worker:
            del workers[worker.queue_id]
        self._wakeup.set()

    def stop_starting(self) -> None:
        """Start no more workers (close has begun)."""
        self._stopping = True

    async def stop_all_workers(self) -> None:
        """Stop every worker and wait for each to commit and end."""
        workers = [w for ws in self._workers.values() for w in ws.values()]
        for worker in workers:
            worker.stop()
        await asyncio.gather(*(w.task for w in workers if w.task), return_exceptions=True)
