"""A cluster proxy's pop: across the brokers that hold a topic, with one long poll.

A pop names no broker, so it reads the brokers holding readable queues of the topic, one
after another from a start that rotates per (group, topic), taking what each has until the
batch is full (each broker try-locks its queues as in one process: a queue another pop
holds is skipped, never waited for). Brokers answer with wait 0 in this sweep.

When the sweep finds nothing and the pop may wait, it holds one probe on every such broker:
a pop with `max_bytes=0`, which takes nothing and answers, with the bytes the smallest
message needs, as soon as the broker has one to give (pop/reader.py). The first probe to
answer wins; the others are cancelled (a broker hands a cancelled waiter's wake-up on), and
the proxy sweeps again starting at that broker. So a message stored on any broker wakes a
held pop within a round trip, with no sweep timer; and a held pop costs each broker one
parked pop, as a local long poll does.

A broker that does not answer (UnavailableError) is skipped for `pop_isolation_s` and the
pop goes on with the others; only when every broker failed does the pop fail, retriably.
A broker that does not know the topic yet (its catalog sync is behind, or a dead-letter
topic it never wrote to) counts as empty.

A pop answers PoppedMessages (`pop`, `pop_queue`), or the same deliveries already encoded as
the client gets them (`pop_received`, `pop_queue_received`: each broker writes them with
the route's global queue ids, and the proxy routes each answer by its count and size
without reading its messages; docs/broker-service.md). The sweep, its byte budget and its
errors are the same code for both.

Everything runs on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from popmq.broker.hop_wire import globalize
from popmq.broker_core import (
    MAX_RESPONSE_BYTES,
    MESSAGE_OVERHEAD_BYTES,
    AnswerBoundError,
    NotFoundError,
    PopMQError,
    PoppedMessage,
    ReceivedBatch,
    UnavailableError,
)
from popmq.cluster.broker_pool import BrokerPool
from popmq.cluster.pop_wire import pop_request
from popmq.cluster.topology import Topology

log = logging.getLogger(__name__)

_Found = TypeVar("_Found", list[PoppedMessage], ReceivedBatch)
"""What a pop answers: PoppedMessages, or the deliveries encoded for the client."""
_Take = Callable[[str, int, int | None], Awaitable[tuple[_Found, int]]]
"""Pops (broker, max_messages, max_bytes) without a wait: its deliveries and their bytes."""

_MAX_ROTATIONS = 100_000
"""(group, topic) rotation positions kept; the least recently used beyond are forgotten."""


@dataclass(frozen=True, slots=True)
class PopRequest:
    """One pop's arguments, checked by the caller (ClusterBroker.pop)."""

    group: str
    topic: str
    max_messages: int
    invisible_s: float
    filter_expression: str
    filter_type: str
    max_bytes: int | None
    client_id: str = ""
    """The popping client, recorded by each broker with its deliveries ("" unknown)."""


class ClusterPop:
    """Pops across brokers (module docstring).

    Args:
        topology: Routes and global queue ids.
        pool: Connections to the live brokers.
        pop_isolation_s: How long a broker that did not answer a pop is left out of pops
            (it is tried again when every other broker failed too).
    """

    def __init__(
        self, topology: Topology, pool: BrokerPool, *, pop_isolation_s: float = 2.0
    ) -> None:
        self._topology = topology
        self._pool = pool
        self._isolation_s = pop_isolation_s
        # (group, topic) -> pops made, for the rotating start; LRU-bounded.
        self._rotations: OrderedDict[tuple[str, str], int] = OrderedDict()
        # broker -> monotonic time until which pops skip it.
        self._down: dict[str, float] = {}
        self.draining = False

    async def pop_queue(
        self, request: PopRequest, queue_id: int, wait_s: float
    ) -> list[PoppedMessage]:
        """A pop of one global queue: its broker's, with its own long poll."""
        queue = self._topology.locate(request.topic, queue_id)
        found = await self._pool.get(queue.broker).pop(
            request.group,
            request.topic,
            max_messages=request.max_messages,
            invisible_s=request.invisible_s,
            wait_s=0.0 if self.draining else wait_s,
            filter_expression=request.filter_expression,
            filter_type=request.filter_type,
            queue_id=queue.queue_id,
            max_bytes=request.max_bytes,
            client_id=request.client_id,
        )
        self._globalize(request.topic, queue.broker, found)
        return found

    async def pop_queue_received(
        self, request: PopRequest, queue_id: int, wait_s: float
    ) -> ReceivedBatch:
        """`pop_queue`'s deliveries, encoded for the client."""
        queue = self._topology.locate(request.topic, queue_id)
        asked = pop_request(
            request.group,
            request.topic,
            max_messages=request.max_messages,
            invisible_s=request.invisible_s,
            wait_s=0.0 if self.draining else wait_s,
            filter_expression=request.filter_expression,
            filter_type=request.filter_type,
            queue_id=queue.queue_id,
            max_bytes=request.max_bytes,
            client_id=request.client_id,
        )
        global_ids = self._topology.global_ids(request.topic, queue.broker)
        return await self._pool.get(queue.broker).hop_calls.pop_received(asked, global_ids)

    async def pop(self, request: PopRequest, wait_s: float) -> list[PoppedMessage]:
        """Up to max_messages from the topic's brokers; wait up to wait_s for one."""

        async def take(
            broker: str, want: int, budget: int | None
        ) -> tuple[list[PoppedMessage], int]:
            popped = await self._pool.get(broker).pop(
                request.group,
                request.topic,
                max_messages=want,
                invisible_s=request.invisible_s,
                wait_s=0.0,
                filter_expression=request.filter_expression,
                filter_type=request.filter_type,
                max_bytes=budget,
                client_id=request.client_id,
            )
            return popped, self._globalize(request.topic, broker, popped)

        return await self._pop(request, wait_s, take, [])

    async def pop_received(self, request: PopRequest, wait_s: float) -> ReceivedBatch:
        """`pop`'s deliveries, encoded for the client by the brokers."""
        global_ids = self._topology.global_ids
        topic = request.topic

        async def take(broker: str, want: int, budget: int | None) -> tuple[ReceivedBatch, int]:
            asked = pop_request(
                request.group,
                request.topic,
                max_messages=want,
                invisible_s=request.invisible_s,
                wait_s=0.0,
                filter_expression=request.filter_expression,
                filter_type=request.filter_type,
                max_bytes=budget,
                client_id=request.client_id,
            )
            remote = self._pool.get(broker)
            batch = await remote.hop_calls.pop_received(asked, global_ids(topic, broker))
            return batch, batch.stored_bytes + batch.count * MESSAGE_OVERHEAD_BYTES

        return await self._pop(request, wait_s, take, ReceivedBatch([], [], 0, 0))

    async def _pop(
        self, request: PopRequest, wait_s: float, take: _Take[_Found], empty: _Found
    ) -> _Found:
        loop = asyncio.get_running_loop()
        give_up = loop.time() + wait_s
        first: str | None = None
        while True:
            brokers = self._order(request, first)
            if not brokers:
                raise UnavailableError(
                    f"topic {request.topic!r} has no readable queue on a live broker; retry "
                    "when a broker holding it is back"
                )
            found = await self._sweep(request, brokers, take, empty)
            remaining = give_up - loop.time()
            if found or remaining <= 0 or self.draining:
                return found
            first = await self._probe(request, brokers, remaining)
            if first is None:
                return empty

    def _order(self, request: PopRequest, first: str | None) -> list[str]:
        """The live brokers holding readable queues, from a rotating start (`first` first)."""
        brokers = list(self._topology.readable(request.topic))
        if not brokers:
            return []
        key = (request.group, request.topic)
        count = self._rotations.pop(key, 0)
        if len(self._rotations) >= _MAX_ROTATIONS:
            self._rotations.popitem(last=False)
        self._rotations[key] = count + 1
        start = count % len(brokers)
        ordered = brokers[start:] + brokers[:start]
        if first is not None and first in ordered:
            ordered.remove(first)
            ordered.insert(0, first)
        now = time.monotonic()
        up = [b for b in ordered if self._down.get(b, 0.0) <= now]
        return up or ordered  # every one failed lately: try them all rather than none

    async def _sweep(
        self, request: PopRequest, brokers: list[str], take: _Take[_Found], empty: _Found
    ) -> _Found:
        """Pop each broker in turn (no wait, `take`) until the batch is full."""
        found = empty
        limit = MAX_RESPONSE_BYTES if request.max_bytes is None else request.max_bytes
        used = 0
        needed = 0
        failure: PopMQError | None = None
        failed = 0
        for broker in brokers:
            want = request.max_messages - len(found)
            if want <= 0:
                break
            if found:
                budget: int | None = limit - used
                if budget is not None and budget <= 0:
                    break
            else:
                budget = request.max_bytes
            try:
                popped, size = await take(broker, want, budget)
            except AnswerBoundError as error:
                if found:
                    break  # the answer is full: the rest waits for the next pop
                needed = min(needed or error.needed_bytes, error.needed_bytes)
                continue
            except UnavailableError as error:
                self._isolate(broker, error)
                failure, failed = error, failed + 1
                continue
            except NotFoundError:
                continue  # the broker does not have the topic (yet): nothing to pop there
            self._down.pop(broker, None)
            used += size
            if found:
                found.extend(popped)
            else:
                found = popped
        if not found:
            if needed:
                raise AnswerBoundError(
                    f"the next message needs {needed} bytes: more than max_bytes "
                    f"{request.max_bytes}",
                    needed,
                )
            if failure is not None and failed == len(brokers):
                raise failure
        return found

    async def _probe(self, request: PopRequest, brokers: list[str], wait_s: float) -> str | None:
        """Hold a probe on every broker; the first that has a message to give, or None when
        the wait ends with none."""
        probes: dict[asyncio.Task[list[PoppedMessage]], str] = {}
        for broker in brokers:
            try:
                remote = self._pool.get(broker)
            except UnavailableError:
                continue
            task = asyncio.ensure_future(
                remote.pop(
                    request.group,
                    request.topic,
                    max_messages=1,
                    invisible_s=request.invisible_s,
                    wait_s=wait_s,
                    filter_expression=request.filter_expression,
                    filter_type=request.filter_type,
                    max_bytes=0,
                )
            )
            probes[task] = broker
        pending = set(probes)
        # Not a try/finally: compiled, a coroutine that awaits in a finally can raise a
        # cancelled call's CancelledError again in a later call (broker/hop_serve.py).
        try:
            found = await self._first_with_message(probes, pending)
        except BaseException:
            await _cancel_probes(pending)
            raise
        await _cancel_probes(pending)
        return found

    async def _first_with_message(
        self,
        probes: dict[asyncio.Task[list[PoppedMessage]], str],
        pending: set[asyncio.Task[list[PoppedMessage]]],
    ) -> str | None:
        """The broker of the first of `probes` that has a message to give, or None once all
        ended with none; `pending` loses each probe as it ends."""
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            pending -= done
            # Every finished probe's outcome is read before one is acted on, so none is
            # left unretrieved ("Task exception was never retrieved") when one returns.
            outcomes = [(task, task.exception()) for task in done]
            for task, error in outcomes:
                broker = probes[task]
                if isinstance(error, AnswerBoundError):
                    return broker  # it has a message to give
                if isinstance(error, UnavailableError):
                    self._isolate(broker, error)
                elif isinstance(error, NotFoundError):
                    pass  # no such topic there (yet)
                elif error is not None:
                    raise error
                # [] : its wait ended with nothing for us
        return None

    def _isolate(self, broker: str, error: PopMQError) -> None:
        if self._down.get(broker, 0.0) <= time.monotonic():
            log.warning("pops skip broker %s for %.1fs: %s", broker, self._isolation_s, error)
        self._down[broker] = time.monotonic() + self._isolation_s

    def _globalize(self, topic: str, broker: str, messages: list[PoppedMessage]) -> int:
        """Give the messages the queue ids the route numbers them by (global ids); returns
        the bytes they count for in an answer (hop_wire.globalize)."""
        global_id = self._topology.global_id
        return globalize(messages, lambda local_id: global_id(topic, broker, local_id))


async def _cancel_probes(pending: set[asyncio.Task[list[PoppedMessage]]]) -> None:
    """Cancel the probes still waiting and wait for each to end."""
    for task in pending:
        task.cancel()
    for task in pending:
        with contextlib.suppress(asyncio.CancelledError, PopMQError):
            await task
