"""Transaction check-back: the broker's due checks, handed to online producers.

A transaction left open (no EndTransaction after its half send) is checked back: the broker
schedules the checks (broker_core/transactions.py: first after `transactions.check_first_s`,
then every `check_interval_s`, at most `check_max` times) and hands out each due one once
(`due_checks` claims it). This loop asks for them (a long poll) and gives each to one online
producer of the check's topic, which runs its transaction checker and answers with an
EndTransaction (source SERVER_CHECK). Producers are registered by the front ends:
an official client's Telemetry session (RecoverOrphanedTransactionCommand) and a popmq SDK
producer's check stream each call `add_producer(topics, deliver)` while they are online.

The loop claims only the checks of topics it has an online producer for, so in cluster mode
each proxy takes the checks its own producers can answer. A check no proxy claims for a whole
check interval counts as an attempt nobody answered (the broker reschedules it), as in
RocketMQ, where a check without a channel only logs; after check_max it is discarded. A
producer that leaves between the claim and the delivery loses that attempt. Producers of a
topic take its checks in turn; one whose delivery fails is skipped for that check and the
next is tried.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from popmq.broker_core import PopMQError, TransactionAPI, TransactionCheck

log = logging.getLogger(__name__)

Deliver = Callable[[TransactionCheck], Awaitable[None]]
"""Sends one check to a producer; raises when it could not be sent."""

POLL_WAIT_S = 5.0
"""How long one `due_checks` call waits for a check to come due."""
MAX_CHECKS = 32
"""Checks taken per call."""
_ERROR_PAUSE_S = 1.0
_EMPTY_PAUSE_S = 0.2


@dataclass(eq=False)
class _Producer:
    topics: frozenset[str]
    deliver: Deliver
    name: str


@dataclass
class CheckStats:
    """Counters for metrics: checks handed to producers, and dropped for want of one."""

    delivered: int = 0
    no_producer: int = 0
    failed: int = 0
    by_topic: dict[str, int] = field(default_factory=dict)


class TransactionCheckLoop:
    """Takes due checks from `broker` and hands them to producers (module docstring).

    Args:
        broker: What schedules the checks (a Broker, or a cluster's ClusterBroker).
        poll_wait_s: How long each `due_checks` call may wait.
    """

    def __init__(self, broker: TransactionAPI, *, poll_wait_s: float = POLL_WAIT_S) -> None:
        self._broker = broker
        self._poll_wait_s = poll_wait_s
        # Online producers by topic, in registration order; changed on the loop only.
        self._by_topic: dict[str, list[_Producer]] = {}
        self._turns: dict[str, itertools.count[int]] = {}
        self._task: asyncio.Task[None] | None = None
        # Set when a producer registers: the loop waiting without producers claims at once.
        self._producers_changed = asyncio.Event()
        self.stats = CheckStats()

    def add_producer(
        self, topics: Iterable[str], deliver: Deliver, *, name: str = ""
    ) -> Callable[[], None]:
        """Register an online producer of `topics`; returns what unregisters it."""
        producer = _Producer(frozenset(topics), deliver, name)
        for topic in producer.topics:
            if topic not in self._by_topic:
                self._producers_changed.set()  # a topic to claim checks of
            self._by_topic.setdefault(topic, []).append(producer)

        def remove() -> None:
            for topic in producer.topics:
                producers = self._by_topic.get(topic)
                if producers is not None and producer in producers:
                    producers.remove(producer)
                    if not producers:
                        del self._by_topic[topic]
                        self._producers_changed.set()

        return remove

    def producers(self, topic: str) -> int:
        """Online producers of `topic` registered here."""
        return len(self._by_topic.get(topic, ()))

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="popmq-transaction-checks"
            )

    async def close(self) -> None:
        if self._task is not None:
            task, self._task = self._task, None
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            topics = list(self._by_topic)
            if not topics:
                # No producer here: claim nothing (another proxy's producers may answer);
                # add_producer wakes the loop.
                self._producers_changed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._poll_wait_s):
                        await self._producers_changed.wait()
                continue
            began = loop.time()
            self._producers_changed.clear()
            claim = asyncio.ensure_future(
                self._broker.due_checks(MAX_CHECKS, wait_s=self._poll_wait_s, topics=topics)
            )
            changed = asyncio.ensure_future(self._producers_changed.wait())
            await asyncio.wait((claim, changed), return_when=asyncio.FIRST_COMPLETED)
            changed.cancel()
            if not claim.done():
                # Producers came or went: ask again with their topics rather than holding a
                # wait for the old ones (a new producer's checks would wait it out).
                claim.cancel()
                with contextlib.suppress(asyncio.CancelledError, PopMQError):
                    await claim
                continue
            try:
                checks = claim.result()
            except PopMQError as exc:
                log.warning("cannot take due transaction checks: %s", exc)
                await asyncio.sleep(_ERROR_PAUSE_S)
                continue
            if not checks and loop.time() - began < _EMPTY_PAUSE_S:
                # Answered empty at once: a broker draining for shutdown (it holds no wait),
                # or a cluster with no live broker. Do not spin.
                await asyncio.sleep(_EMPTY_PAUSE_S)
            for check in checks:
                await self.dispatch(check)

    async def dispatch(self, check: TransactionCheck) -> bool:
        """Hand one check to a producer of its topic; False when none took it."""
        producers = list(self._by_topic.get(check.topic, ()))
        if not producers:
            self.stats.no_producer += 1
            log.info(
                "transaction %s of topic %s is due for check %d, but no producer of the "
                "topic is online here; the next check comes an interval later",
                check.transaction_id,
                check.topic,
                check.attempt,
            )
            return False
        turn = next(self._turns.setdefault(check.topic, itertools.count()))
        for i in range(len(producers)):
            producer = producers[(turn + i) % len(producers)]
            try:
                await producer.deliver(check)
            except Exception as exc:  # noqa: BLE001 - a producer gone mid-send: try the next
                self.stats.failed += 1
                log.info(
                    "check of %s not delivered to %s: %s", check.transaction_id, producer.name, exc
                )
                continue
            self.stats.delivered += 1
            self.stats.by_topic[check.topic] = self.stats.by_topic.get(check.topic, 0) + 1
            return True
        return False
