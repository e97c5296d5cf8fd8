"""Push consumers: the SDK receives messages and calls your listener for each one.

``PushConsumer(endpoint, group, subscriptions={"orders": "TagA || TagB"}, listener=fn)``
calls ``fn(message)`` on a pool of ``consume_threads`` threads (an ``async def`` listener
runs on the SDK's event loop instead). The listener returns ``ConsumeResult.SUCCESS`` (the
message is acked) or ``ConsumeResult.FAILURE`` (nacked: redelivered after the group's
backoff for its delivery attempt, and moved to ``%DLQ%<group>`` by the server after the
group's last attempt). An exception, or any other return value, counts as FAILURE.

Two modes:

- ``mode="pop"`` (default, RocketMQ 5's push consumer): one long-polling receive loop per
  topic pops from any queue, so consumers are not limited by the queue count.

  - Flow control: receiving pauses while ``max_cached_messages`` or ``max_cached_bytes``
    are held (received and not yet acked or nacked); a receive asks only for the room left.
  - Acks: successes are acked in batches that ride on the topic's next receive
    (``receive(ack=...)``: one round trip for both). A batch no receive took within 5 ms
    goes in an Ack call of its own. A message's cache room is freed once its ack is on
    its way.
  - Lease renewal: every held message is made invisible again ahead of its expiry (at two
    thirds of ``invisible_duration_s``) with the new receipt handle each time, for up to
    ``max_processing_s`` (RocketMQ's consumeTimeout, 15 min) after it was received; then
    it is released (nack with no delay) so another consumer gets it.
  - FIFO: messages of one ``message_group`` are handed to the listener one at a time, in
    the order received; different groups run in parallel. When one fails, the group's
    later cached messages are released at once, and the server (which delivers a group in
    order) redelivers them after the failed one.

- ``mode="queue_exclusive"`` (RocketMQ's classic push): the consumer registers with the
  server (Heartbeat), asks which queues it owns (QueryAssignment, with the group's
  ``strategy``), reads those queues by offset and commits the group's offset. Each queue is
  consumed in order, one message at a time (orderly); different queues run in parallel. A
  failed message is retried in place after ``orderly_retry_delay_s`` (RocketMQ's
  suspendCurrentQueueTimeMillis), without limit, as RocketMQ's orderly consumer does. A
  queue is handed over only after its previous owner committed and released it. A group
  with no committed offset in a queue starts where ``consume_from`` says.

``close()`` stops receiving, releases the messages that were received but not started
(POP: nack with no delay, so others get them at once), lets running listeners finish,
then unregisters. It is also what leaving a ``with`` block does.

Threading: all network work runs on the SDK's event loop thread; sync listeners run on a
``ThreadPoolExecutor`` of ``consume_threads`` workers, so a slow listener never blocks
receiving, acking or lease renewal.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import enum
import heapq
import inspect
import itertools
import logging
import math
import os
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, Self

from google.protobuf import timestamp_pb2

from popmq._gen.popmq.v1 import messaging_pb2
from popmq.sdk._channel import DEFAULT_TIMEOUT_S, AsyncClient, unary
from popmq.sdk._sync import SyncClient
from popmq.sdk.consumer import AsyncSimpleConsumer
from popmq.sdk.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PopMQError,
)
from popmq.sdk.types import ReceivedMessage, Sql, duration_from_seconds, seconds_from_duration

__all__ = [
    "DEFAULT_MAX_CACHED_BYTES",
    "DEFAULT_MAX_CACHED_MESSAGES",
    "DEFAULT_MAX_PROCESSING_S",
    "AsyncPushConsumer",
    "ConsumeResult",
    "PushConsumer",
    "PushConsumerStats",
]

logger = logging.getLogger(__name__)

DEFAULT_CONSUME_THREADS = 20
DEFAULT_MAX_CACHED_MESSAGES = 1024
DEFAULT_MAX_CACHED_BYTES = 64 * 1024 * 1024
"""RocketMQ's Python PushConsumer cache: 1024 messages, 64 MiB, 20 threads."""
DEFAULT_MAX_PROCESSING_S = 15 * 60.0
"""RocketMQ's consumeTimeout: 15 minutes."""
DEFAULT_INVISIBLE_DURATION_S = 30.0
DEFAULT_WAIT_S = 20.0
DEFAULT_RECEIVE_BATCH = 32
DEFAULT_HEARTBEAT_INTERVAL_S = 10.0
DEFAULT_ORDERLY_RETRY_DELAY_S = 1.0
DEFAULT_PULL_BATCH = 32

_RENEW_AT = 2 / 3
"""A held message is renewed when this fraction of its invisible time has passed."""
_RENEW_CONCURRENCY = 64
_RAISED = "push consumer %s: the listener raised on message %s; treated as FAILURE"
_COMMIT_INTERVAL_S = 1.0
"""While busy, a queue worker commits its offset at most this often; it commits at once when
it catches up and before it lets go of the queue (RocketMQ persists offsets every 5 s). A
crash repeats at most this much."""
_ACK_DELAY_S = 0.005
"""A success waits at most this long for a receive to carry its ack, or others to share its
Ack call."""
_MAX_ACK_BATCH = 1024
"""Handles that make a pending batch due at once (the default cache holds 1024 messages)."""
_RETRY_MIN_S = 0.1
_RETRY_MAX_S = 5.0
_IDLE_POLL_MIN_S = 0.01
_IDLE_POLL_MAX_S = 0.5
_PENDING_RECHECK = 0.1
"""While assigned queues wait for their previous owner, ask again this often (x interval)."""
_LEASE_MARGIN = 0.1
"""A queue-exclusive consumer stops this fraction of its lease before the lease ends."""

Mode = Literal["pop", "queue_exclusive"]
StrategyName = Literal[
    "average", "average_by_circle", "consistent_hash", "by_config", "by_machine_room"
]
_STRATEGIES: dict[str, messaging_pb2.AssignmentStrategy] = {
    "average": messaging_pb2.ASSIGNMENT_STRATEGY_AVERAGE,
    "average_by_circle": messaging_pb2.ASSIGNMENT_STRATEGY_AVERAGE_BY_CIRCLE,
    "consistent_hash": messaging_pb2.ASSIGNMENT_STRATEGY_CONSISTENT_HASH,
    "by_config": messaging_pb2.ASSIGNMENT_STRATEGY_BY_CONFIG,
    "by_machine_room": messaging_pb2.ASSIGNMENT_STRATEGY_BY_MACHINE_ROOM,
}


class ConsumeResult(enum.Enum):
    """What a listener returns: SUCCESS acks the message, FAILURE has it redelivered."""

    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"


Listener = Callable[[ReceivedMessage], Any]
"""``(message) -> ConsumeResult``, or an ``async def`` returning one."""


@dataclass(frozen=True, slots=True)
class PushConsumerStats:
    """Counters of one push consumer since it started.

    Attributes:
        receive_calls: Pop (POP mode) or PullMessages (queue-exclusive) calls made.
        received: Messages received.
        succeeded: Listener calls that returned SUCCESS.
        failed: Listener calls that returned FAILURE, another value, or raised.
        acked: Messages acked (POP), counted when the server answered the ack.
        acked_on_receive: Of ``acked``, those whose ack rode on a receive rather than an
            Ack call of its own (POP; see the module docs).
        nacked: Messages nacked after a failure (POP).
        renewed: Invisible-time renewals (POP).
        released: Messages given back unprocessed: at close, after ``max_processing_s``,
            or behind a failed message of the same FIFO group (POP).
        cached_messages: Messages held now (received, not yet settled).
        cached_bytes: Body bytes held now.
        assigned_queues: Queue-exclusive: ``topic -> queue ids`` consumed now.
    """

    receive_calls: int
    received: int
    succeeded: int
    failed: int
    acked: int
    acked_on_receive: int
    nacked: int
    renewed: int
    released: int
    cached_messages: int
    cached_bytes: int
    assigned_queues: dict[str, tuple[int, ...]]


@dataclass
class _Counters:
    receive_calls: int = 0
    received: int = 0
    succeeded: int = 0
    failed: int = 0
    acked: int = 0
    acked_on_receive: int = 0
    nacked: int = 0
    renewed: int = 0
    released: int = 0


@dataclass(eq=False)
class _Held:
    """A POP delivery from receipt until it is acked, nacked or released."""

    message: ReceivedMessage
    consumer: AsyncSimpleConsumer
    size: int
    received_at: float
    # Serializes renewals with the final ack/nack, so each uses the newest handle.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    started: bool = False
    settled: bool = False


class _Cache:
    """Counts held messages and bytes; receivers wait here for room (flow control)."""

    def __init__(self, max_messages: int, max_bytes: int) -> None:
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.messages = 0
        self.bytes = 0
        # Set whenever there is room; receivers wait on it while the cache is full.
        self._room = asyncio.Event()
        self._room.set()

    def room(self) -> int:
        """How many more messages may be received now (0 when full)."""
        if self.bytes >= self.max_bytes:
            return 0
        return max(0, self.max_messages - self.messages)

    async def wait_for_room(self) -> int:
        await self.wait_until(lambda: self.room() > 0)
        return self.room()

    async def wait_until(self, ready: Callable[[], bool]) -> None:
        """Wait until ``ready()``, checked whenever room is freed or ``wake`` is called."""
        while not ready():
            self._room.clear()
            await self._room.wait()

    def wake(self) -> None:
        """Have the receivers waiting in ``wait_until`` check their condition again."""
        self._room.set()

    def add(self, size: int, count: int = 1) -> None:
        self.messages += count
        self.bytes += size

    def remove(self, size: int, count: int = 1) -> None:
        self.messages -= count
        self.bytes -= size
        if self.room() > 0:
            self._room.set()


# Marks the consume threads, so a listener that calls close() fails instead of deadlocking.
_in_listener = threading.local()


def _client_id() -> str:
    """``host@pid@random``, like RocketMQ's ``ip@pid`` client ids but unique per consumer."""
    return f"{socket.gethostname()}@{os.getpid()}@{uuid.uuid4().hex[:12]}"


def _tag_matcher(expression: str) -> Callable[[str], bool]:
    """A tag expression (``"*"``, ``"TagA || TagB"``) as a predicate on a message's tag."""
    text = expression.strip()
    if text in ("", "*"):
        return lambda _tag: True
    tags = frozenset(t.strip() for t in text.split("||"))
    if "" in tags or "*" in tags:
        raise InvalidArgumentError(
            f"tag expression {expression!r} is invalid: use '*', 'TagA' or 'TagA || TagB'"
        )
    return tags.__contains__


def _check_positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise InvalidArgumentError(f"{name} must be a positive number, got {value!r}")
    if not math.isfinite(value):
        raise InvalidArgumentError(f"{name} must be finite, got {value!r}")


class AsyncPushConsumer(AsyncClient):
    """Receives messages for a consumer group and calls a listener for each (asyncio).

    See the module docstring for the two modes and the guarantees.

    Args:
        endpoint: ``host:port`` of the popmq proxy.
        group: Consumer group.
        subscriptions: ``topic -> filter``: a tag expression (``"*"``, ``"TagA || TagB"``)
            or, in POP mode, ``Sql("...")``.
        listener: ``(ReceivedMessage) -> ConsumeResult``; sync listeners run on
            ``consume_threads`` threads, ``async def`` ones on the event loop (at most
            ``consume_threads`` at once).
        consume_threads: Listener calls running at once.
        max_cached_messages: Messages held at most (received and not yet settled).
        max_cached_bytes: Body bytes held at most; receiving pauses at this size.
        mode: ``"pop"`` (default) or ``"queue_exclusive"``.
        invisible_duration_s: POP: invisible time of a receive and of each renewal.
        max_processing_s: POP: a message is renewed for at most this long after it was
            received, then released for redelivery.
        receive_batch_size: POP: messages per receive at most (1..32 by default).
        wait_s: POP: long-polling time of a receive that finds nothing.
        strategy: Queue-exclusive: how the group splits queues (every member must agree).
        heartbeat_interval_s: How often the consumer heartbeats (queue-exclusive: also
            the pace of assignment checks; it is gone after 3 missed intervals).
        consume_from: Queue-exclusive: where a queue with no committed group offset
            starts: ``"last"`` (the queue's end, RocketMQ's default), ``"first"`` (the
            earliest retained message) or an aware ``datetime`` (the first message stored
            at or after it).
        orderly_retry_delay_s: Queue-exclusive: pause before a failed message is retried.
        machine_room: This consumer's machine room (strategy ``"by_machine_room"``).
        configured_queues: Strategy ``"by_config"``: ``topic -> queue ids`` to consume.
        pull_batch_size: Queue-exclusive: messages read per queue per call.
        client_id: Identifies this consumer to the server; unique by default.
        timeout_s: Timeout of each call (a receive waits ``wait_s`` longer).
    """

    def __init__(
        self,
        endpoint: str,
        group: str,
        *,
        subscriptions: Mapping[str, str | Sql],
        listener: Listener,
        consume_threads: int = DEFAULT_CONSUME_THREADS,
        max_cached_messages: int = DEFAULT_MAX_CACHED_MESSAGES,
        max_cached_bytes: int = DEFAULT_MAX_CACHED_BYTES,
        mode: Mode = "pop",
        invisible_duration_s: float = DEFAULT_INVISIBLE_DURATION_S,
        max_processing_s: float = DEFAULT_MAX_PROCESSING_S,
        receive_batch_size: int = DEFAULT_RECEIVE_BATCH,
        wait_s: float = DEFAULT_WAIT_S,
        strategy: StrategyName = "average",
        heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S,
        consume_from: Literal["last", "first"] | datetime = "last",
        orderly_retry_delay_s: float = DEFAULT_ORDERLY_RETRY_DELAY_S,
        machine_room: str = "",
        configured_queues: Mapping[str, Sequence[int]] | None = None,
        pull_batch_size: int = DEFAULT_PULL_BATCH,
        client_id: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if not callable(listener):
            raise TypeError(f"listener must be callable, got {type(listener).__name__}")
        if not isinstance(subscriptions, Mapping) or not subscriptions:
            raise InvalidArgumentError("subscriptions is empty: give {topic: filter}")
        for name, value in [
            ("consume_threads", consume_threads),
            ("max_cached_messages", max_cached_messages),
            ("max_cached_bytes", max_cached_bytes),
            ("receive_batch_size", receive_batch_size),
            ("pull_batch_size", pull_batch_size),
        ]:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgumentError(f"{name} must be an integer >= 1, got {value!r}")
        for name, seconds in [
            ("invisible_duration_s", invisible_duration_s),
            ("max_processing_s", max_processing_s),
            ("heartbeat_interval_s", heartbeat_interval_s),
            ("orderly_retry_delay_s", orderly_retry_delay_s),
        ]:
            _check_positive(name, seconds)
        if isinstance(wait_s, bool) or not isinstance(wait_s, int | float) or not wait_s >= 0:
            raise InvalidArgumentError(f"wait_s must be >= 0, got {wait_s!r}")
        if mode not in ("pop", "queue_exclusive"):
            raise InvalidArgumentError(f"mode {mode!r} is unknown: use 'pop' or 'queue_exclusive'")
        if strategy not in _STRATEGIES:
            raise InvalidArgumentError(
                f"strategy {strategy!r} is unknown: use one of {', '.join(_STRATEGIES)}"
            )
        if isinstance(consume_from, datetime):
            if consume_from.tzinfo is None:
                raise InvalidArgumentError("consume_from must be timezone-aware")
        elif consume_from not in ("last", "first"):
            raise InvalidArgumentError(
                f"consume_from {consume_from!r} is unknown: use 'last', 'first' or a datetime"
            )
        self._matchers: dict[str, Callable[[str], bool]] = {}
        for topic, expression in subscriptions.items():
            if mode == "queue_exclusive":
                if isinstance(expression, Sql):
                    raise InvalidArgumentError(
                        "SQL filters are evaluated by Pop; queue-exclusive consumers read "
                        "by offset and take tag expressions only"
                    )
                self._matchers[topic] = _tag_matcher(expression)
            elif not isinstance(expression, str | Sql):
                raise TypeError(f"the filter of {topic!r} must be a str or Sql")
        if configured_queues and strategy != "by_config":
            raise InvalidArgumentError("configured_queues is only for strategy 'by_config'")
        super().__init__(endpoint, timeout_s=timeout_s)
        self.group = group
        self.subscriptions: dict[str, str | Sql] = dict(subscriptions)
        self.listener = listener
        self.mode: Mode = mode
        self.client_id = client_id or _client_id()
        self._consume_threads = consume_threads
        self._invisible_s = float(invisible_duration_s)
        self._max_processing_s = float(max_processing_s)
        self._batch = receive_batch_size
        self._wait_s = float(wait_s)
        self._strategy = strategy
        self._heartbeat_s = float(heartbeat_interval_s)
        self._consume_from = consume_from
        self._retry_delay_s = float(orderly_retry_delay_s)
        self._machine_room = machine_room
        self._configured = {t: tuple(q) for t, q in (configured_queues or {}).items()}
        self._pull_batch = pull_batch_size
        self._is_async_listener = inspect.iscoroutinefunction(listener)
        self._cache = _Cache(max_cached_messages, max_cached_bytes)
        self._counters = _Counters()
        self._started = False
        self._stopping = False
        self._closing: asyncio.Future[None] | None = None
        # Background tasks (receivers, lease renewal, heartbeats, queue workers), so close
        # can stop them and a crash of one is logged rather than lost.
        self._tasks: set[asyncio.Task[None]] = set()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._slots: asyncio.Semaphore | None = None
        # POP state: every held delivery; listener tasks running or waiting for a slot;
        # per FIFO message group, the deliveries waiting for the one in progress.
        self._held: set[_Held] = set()
        self._dispatch: set[asyncio.Task[None]] = set()
        self._fifo: dict[tuple[str, str], deque[_Held]] = {}
        # Lease renewal timer: (renew_at, seq, held); settled entries are skipped.
        self._renewals: list[tuple[float, int, _Held]] = []
        self._renewal_wakeup = asyncio.Event()
        self._seq = itertools.count()
        self._consumers: dict[str, AsyncSimpleConsumer] = {}
        self._ackers: dict[str, _Acker] = {}
        # Queue-exclusive state: per topic, queue id -> worker.
        self._workers: dict[str, dict[int, _QueueWorker]] = {t: {} for t in subscriptions}
        self._assignment_wakeup = asyncio.Event()

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def stats(self) -> PushConsumerStats:
        """A snapshot of the counters."""
        c = self._counters
        return PushConsumerStats(
            receive_calls=c.receive_calls,
            received=c.received,
            succeeded=c.succeeded,
            failed=c.failed,
            acked=c.acked,
            acked_on_receive=c.acked_on_receive,
            nacked=c.nacked,
            renewed=c.renewed,
            released=c.released,
            cached_messages=self._cache.messages,
            cached_bytes=self._cache.bytes,
            assigned_queues={
                t: tuple(sorted(q for q, w in ws.items() if not w.stopping))
                for t, ws in self._workers.items()
            },
        )

    async def start(self) -> None:
        """Register, then start receiving and calling the listener. Idempotent.

        Raises:
            NotFoundError: A subscribed topic does not exist.
            FailedPreconditionError: The group consumes a topic in another mode or with
                another strategy.
            InvalidArgumentError: The server refused an argument.
        """
        self._check_open()
        if self._started:
            return
        channel = self._conn.channel()
        for topic, expression in self.subscriptions.items():
            self._consumers[topic] = AsyncSimpleConsumer(
                self.endpoint,
                group=self.group,
                topic=topic,
                filter=expression,
                timeout_s=self._timeout_s,
                channel=channel,
                on_ack_failure=self._ride_failed,
            )
            self._ackers[topic] = _Acker(self, topic)
        interval = await self._heartbeat()  # fails fast on unknown topics and conflicts
        self._heartbeat_s = interval
        self._started = True
        if not self._is_async_listener:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=self._consume_threads, thread_name_prefix="popmq-consume"
            )
        self._slots = asyncio.Semaphore(self._consume_threads)
        if self.mode == "pop":
            for topic in self.subscriptions:
                self._spawn(self._receive_loop(topic), f"popmq-receive-{topic}")
            self._spawn(self._renewal_loop(), "popmq-renew")
            self._spawn(self._heartbeat_loop(), "popmq-heartbeat")
        else:
            self._spawn(self._assignment_loop(), "popmq-assignment")

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error(
                "push consumer %s: task %s died", self.client_id, task.get_name(),
                exc_info=task.exception(),
            )  # fmt: skip

    async def close(self) -> None:
        """Stop receiving, release unstarted messages, finish running listeners, unregister.

        Idempotent. Waits for running listener calls to return (their messages are kept
        invisible meanwhile).

        Raises:
            RuntimeError: Called from inside a listener (it would wait for itself).
        """
        if getattr(_in_listener, "active", False):
            raise RuntimeError("close() was called from a listener; it would wait for itself")
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        # Shielded: a caller that gives up waiting does not cut the shutdown short.
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        if self._started:
            self._stopping = True
            try:
                await self._shutdown()
            finally:
                if self._executor is not None:
                    self._executor.shutdown(wait=False)
        for consumer in self._consumers.values():
            await consumer.close()
        await super().close()

    async def _shutdown(self) -> None:
        if self.mode == "pop":
            receivers = [t for t in self._tasks if t.get_name().startswith("popmq-receive")]
            for task in receivers:
                task.cancel()
            await asyncio.gather(*receivers, return_exceptions=True)
            unstarted = [h for h in self._held if not h.started and not h.settled]
            self._fifo.clear()
            await asyncio.gather(*(self._release(h, "close") for h in unstarted))
            if self._dispatch:
                await asyncio.gather(*list(self._dispatch), return_exceptions=True)
            await asyncio.gather(*(a.drain() for a in self._ackers.values()))
        else:
            assigner = [t for t in self._tasks if t.get_name() == "popmq-assignment"]
            for task in assigner:
                task.cancel()
            await asyncio.gather(*assigner, return_exceptions=True)
            await self._stop_all_workers()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        with contextlib.suppress(PopMQError):
            await unary(
                self._conn.messaging().NotifyClientTermination,
                messaging_pb2.NotifyClientTerminationRequest(
                    client_id=self.client_id, group=self.group
                ),
                self._timeout_s,
            )

    # -- heartbeats -----------------------------------------------------------------------

    async def _heartbeat(self) -> float:
        exclusive = self.mode == "queue_exclusive"
        request = messaging_pb2.HeartbeatRequest(
            client_id=self.client_id,
            group=self.group,
            topics=list(self.subscriptions),
            mode=(
                messaging_pb2.CONSUME_MODE_QUEUE_EXCLUSIVE
                if exclusive
                else messaging_pb2.CONSUME_MODE_POP
            ),
            strategy=(
                _STRATEGIES[self._strategy]
                if exclusive
                else messaging_pb2.ASSIGNMENT_STRATEGY_UNSPECIFIED
            ),
            heartbeat_interval=duration_from_seconds(
                self._heartbeat_s, name="heartbeat_interval_s"
            ),
            machine_room=self._machine_room,
        )
        for topic, queue_ids in self._configured.items():
            request.configured_queues[topic].queue_ids.extend(queue_ids)
        response: messaging_pb2.HeartbeatResponse = await unary(
            self._conn.messaging().Heartbeat, request, self._timeout_s
        )
        return seconds_from_duration(response.heartbeat_interval)

    async def _heartbeat_loop(self) -> None:
        """POP mode: keep the registration (it takes no part in assignment)."""
        while True:
            await asyncio.sleep(self._heartbeat_s)
            try:
                await self._heartbeat()
            except PopMQError as exc:
                logger.warning("push consumer %s: heartbeat failed: %s", self.client_id, exc)

    # -- POP mode: receive ----------------------------------------------------------------

    async def _receive_loop(self, topic: str) -> None:
        consumer = self._consumers[topic]
        acker = self._ackers[topic]
        cache = self._cache
        backoff = _RETRY_MIN_S
        while True:
            riders = self._take_riders(acker)
            if cache.room() == 0:
                # Full: wait for room, or for a batch of acks to carry (which frees room).
                acker.riders_wanted = True
                try:
                    await cache.wait_until(lambda: cache.room() > 0 or acker.ready)
                finally:
                    acker.riders_wanted = False
                riders += self._take_riders(acker)
            room = cache.room()
            if room == 0:  # still over max_cached_bytes: ack them on their own
                acker.send(riders)
                continue
            self._counters.receive_calls += 1
            failures = acker.ride_failures
            try:
                messages = await consumer.receive(
                    max_messages=min(room, self._batch),
                    invisible_duration_s=self._invisible_s,
                    wait_s=self._wait_s,
                    ack=[held.message for held in riders],
                )
            except PopMQError as exc:
                acker.send(riders)  # they may have been acked; acking again is harmless
                logger.warning(
                    "push consumer %s: receive from %s failed (%s); retrying in %.1fs",
                    self.client_id, topic, exc, backoff,
                )  # fmt: skip
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _RETRY_MAX_S)
                continue
            except BaseException:
                acker.send(riders)  # cancelled (close): the acks still go out
                raise
            rode = len(riders) - (acker.ride_failures - failures)
            self._counters.acked += rode
            self._counters.acked_on_receive += rode
            backoff = _RETRY_MIN_S
            now = time.monotonic()
            for message in messages:
                held = _Held(message, consumer, len(message.body), now)
                self._counters.received += 1
                self._held.add(held)
                cache.add(held.size)
                self._schedule_renewal(held, now)
                self._enqueue(held)

    def _take_riders(self, acker: _Acker) -> list[_Held]:
        """The acks to carry on the next receive; their cache room is free from now."""
        riders = acker.take()
        for held in riders:
            self._forget(held)
        return riders

    def _ride_failed(self, message: ReceivedMessage, error: PopMQError) -> None:
        """An ack that rode on a receive failed: the message will be delivered again."""
        self._ackers[message.topic].ride_failures += 1
        logger.warning(
            "push consumer %s: ack of message %s failed (%s %s); it will be redelivered",
            self.client_id, message.message_id, error.code, error,
        )  # fmt: skip

    def _enqueue(self, held: _Held) -> None:
        group = held.message.message_group
        if not group:
            self._start_dispatch(held)
            return
        key = (held.message.topic, group)
        waiting = self._fifo.get(key)
        if waiting is not None:
            waiting.append(held)  # one of the group is in progress; this one waits
            return
        self._fifo[key] = deque()
        self._start_dispatch(held)

    def _start_dispatch(self, held: _Held) -> None:
        task = asyncio.ensure_future(self._consume(held))
        self._dispatch.add(task)
        task.add_done_callback(self._dispatch.discard)

    async def _consume(self, held: _Held) -> None:
        assert self._slots is not None
        group = held.message.message_group
        async with self._slots:
            if held.settled:
                # Released while it waited (close, or max_processing_s): its group's later
                # messages must not overtake it.
                if group:
                    self._next_in_group((held.message.topic, group), ok=False)
                return
            held.started = True
            ok = await self._call_listener(held.message)
        await self._settle(held, ok)
        if group:
            self._next_in_group((held.message.topic, group), ok)

    def _next_in_group(self, key: tuple[str, str], ok: bool) -> None:
        """Start the group's next message, or give all of them back after a failure."""
        waiting = self._fifo.get(key)
        if waiting is None:
            return
        if ok and waiting and not waiting[0].settled:
            self._start_dispatch(waiting.popleft())
            return
        del self._fifo[key]
        # The failed (or released) message comes back first; the later ones go back too
        # rather than overtaking it.
        for held in waiting:
            self._spawn_release(held, "behind a failed message of its group")

    async def _call_listener(self, message: ReceivedMessage) -> bool:
        """Run the listener once; True only for ConsumeResult.SUCCESS."""
        if self._is_async_listener:
            try:
                result = await self.listener(message)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.warning(_RAISED, self.client_id, message.message_id, exc_info=True)
                ok = False
            else:
                ok = self._judge(result, message)
        else:
            loop = asyncio.get_running_loop()
            ok = await loop.run_in_executor(self._executor, self._invoke, message)
        self._count(ok)
        return ok

    def _count(self, ok: bool) -> None:
        if ok:
            self._counters.succeeded += 1
        else:
            self._counters.failed += 1

    def _invoke(self, message: ReceivedMessage) -> bool:
        """Call a sync listener on a consume thread; True only for ConsumeResult.SUCCESS."""
        _in_listener.active = True
        try:
            result = self.listener(message)
        except Exception:
            logger.warning(_RAISED, self.client_id, message.message_id, exc_info=True)
            return False
        finally:
            _in_listener.active = False
        return self._judge(result, message)

    def _judge(self, result: object, message: ReceivedMessage) -> bool:
        if result is ConsumeResult.SUCCESS:
            return True
        if result is not ConsumeResult.FAILURE:
            logger.warning(
                "push consumer %s: listener returned %r for message %s; treated as FAILURE "
                "(return ConsumeResult.SUCCESS to ack)",
                self.client_id, result, message.message_id,
            )  # fmt: skip
        return False

    async def _settle(self, held: _Held, ok: bool) -> None:
        """Ack a success, nack a failure (the server applies the group's backoff)."""
        async with held.lock:
            if held.settled:
                # Released meanwhile (max_processing_s passed); it held a cache slot until
                # its listener returned.
                self._forget(held)
                return
            held.settled = True
            if ok:
                self._ackers[held.message.topic].add(held)  # acked in a batch, soon
                return
            try:
                await held.consumer.nack(held.message)
                self._counters.nacked += 1
            except PopMQError as exc:
                logger.warning(
                    "push consumer %s: nack of message %s failed (%s); it will be redelivered "
                    "when its invisible time ends",
                    self.client_id, held.message.message_id, exc,
                )  # fmt: skip
            finally:
                self._forget(held)

    def _forget(self, held: _Held) -> None:
        if held in self._held:
            self._held.discard(held)
            self._cache.remove(held.size)

    def _spawn_release(self, held: _Held, why: str) -> None:
        task = asyncio.ensure_future(self._release(held, why))
        self._dispatch.add(task)
        task.add_done_callback(self._dispatch.discard)

    async def _release(self, held: _Held, why: str) -> None:
        """Give a message back unprocessed: visible again at once (nack with no delay)."""
        if held.settled:
            return
        # Claimed before any await, so no listener starts it from now on; the lock then
        # waits for a renewal in flight, whose new handle the nack must use.
        held.settled = True
        async with held.lock:
            try:
                await held.consumer.nack(held.message, delay_s=0)
                self._counters.released += 1
                logger.debug(
                    "push consumer %s: released message %s (%s)",
                    self.client_id, held.message.message_id, why,
                )  # fmt: skip
            except PopMQError as exc:
                logger.warning(
                    "push consumer %s: releasing message %s (%s) failed: %s",
                    self.client_id, held.message.message_id, why, exc,
                )  # fmt: skip
            finally:
                if not held.started:
                    self._forget(held)  # a running listener keeps its slot until it returns

    # -- POP mode: lease renewal ----------------------------------------------------------

    def _schedule_renewal(self, held: _Held, since: float) -> None:
        renew_at = since + self._invisible_s * _RENEW_AT
        if not self._renewals or renew_at < self._renewals[0][0]:
            self._renewal_wakeup.set()
        heapq.heappush(self._renewals, (renew_at, next(self._seq), held))

    async def _renewal_loop(self) -> None:
        """Sleep until the earliest renewal is due, renew what is due, repeat."""
        gate = asyncio.Semaphore(_RENEW_CONCURRENCY)
        renewing: set[asyncio.Task[None]] = set()
        while True:
            self._renewal_wakeup.clear()
            now = time.monotonic()
            while self._renewals and self._renewals[0][0] <= now:
                _, _, held = heapq.heappop(self._renewals)
                if held.settled:
                    continue
                task = asyncio.ensure_future(self._renew(held, gate))
                renewing.add(task)
                task.add_done_callback(renewing.discard)
            timeout = self._renewals[0][0] - now if self._renewals else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._renewal_wakeup.wait(), timeout)

    async def _renew(self, held: _Held, gate: asyncio.Semaphore) -> None:
        now = time.monotonic()
        if now - held.received_at >= self._max_processing_s:
            logger.warning(
                "push consumer %s: message %s held for more than %.0fs; releasing it",
                self.client_id, held.message.message_id, self._max_processing_s,
            )  # fmt: skip
            await self._release(held, "max_processing_s reached")
            return
        async with gate, held.lock:
            if held.settled:
                return
            started = time.monotonic()
            try:
                await held.consumer.change_invisible_duration(held.message, self._invisible_s)
            except PopMQError as exc:
                logger.warning(
                    "push consumer %s: renewing message %s failed (%s); it may be redelivered",
                    self.client_id, held.message.message_id, exc,
                )  # fmt: skip
                return
            self._counters.renewed += 1
        self._schedule_renewal(held, started)

    # -- queue-exclusive mode -------------------------------------------------------------

    async def _assignment_loop(self) -> None:
        """Heartbeat, then ask for each topic's queues; start and stop queue workers."""
        next_heartbeat = time.monotonic() + self._heartbeat_s
        while True:
            pending = False
            now = time.monotonic()
            if now >= next_heartbeat:
                next_heartbeat = now + self._heartbeat_s
                try:
                    self._heartbeat_s = await self._heartbeat()
                except PopMQError as exc:
                    logger.warning("push consumer %s: heartbeat failed: %s", self.client_id, exc)
            for topic in self.subscriptions:
                try:
                    pending |= await self._rebalance(topic)
                except PopMQError as exc:
                    logger.warning(
                        "push consumer %s: assignment of %s failed: %s",
                        self.client_id, topic, exc,
                    )  # fmt: skip
                    if isinstance(exc, FailedPreconditionError):
                        next_heartbeat = 0.0  # e.g. dropped as silent: register again now
            self._assignment_wakeup.clear()
            delay = self._heartbeat_s / 2
            if pending:
                delay = min(delay, self._heartbeat_s * _PENDING_RECHECK)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._assignment_wakeup.wait(), delay)

    async def _rebalance(self, topic: str) -> bool:
        """One QueryAssignment; returns whether assigned queues are still pending."""
        workers = self._workers[topic]
        sent = time.monotonic()
        request = messaging_pb2.QueryAssignmentRequest(
            client_id=self.client_id,
            group=self.group,
            topic=topic,
            held_queue_ids=sorted(workers),
        )
        response: messaging_pb2.QueryAssignmentResponse = await unary(
            self._conn.messaging().QueryAssignment, request, self._timeout_s
        )
        lease_s = seconds_from_duration(response.lease_duration)
        fence = sent + lease_s * (1 - _LEASE_MARGIN)
        granted = list(response.queue_ids)
        for queue_id, worker in list(workers.items()):
            if queue_id not in granted:
                worker.stop()  # finish the current message, commit, then report released
            else:
                worker.fence = fence
        for queue_id in granted:
            if queue_id not in workers and not self._stopping:
                worker = _QueueWorker(self, topic, queue_id, fence)
                workers[queue_id] = worker
                worker.task = self._spawn(worker.run(), f"popmq-queue-{topic}-{queue_id}")
        return bool(response.pending_queue_ids)

    def _worker_done(self, worker: _QueueWorker) -> None:
        """A worker stopped: forget it and report the release at once."""
        workers = self._workers[worker.topic]
        if workers.get(worker.queue_id) is worker:
            del workers[worker.queue_id]
        self._assignment_wakeup.set()

    async def _stop_all_workers(self) -> None:
        workers = [w for ws in self._workers.values() for w in ws.values()]
        for worker in workers:
            worker.stop()
        await asyncio.gather(*(w.task for w in workers if w.task), return_exceptions=True)

    async def _run_in_order(
        self, worker: _QueueWorker, wires: Sequence[messaging_pb2.PulledMessage], attempt: int
    ) -> tuple[int, bool]:
        """Call the listener for ``wires`` in order until one fails or the worker must stop.

        ``attempt`` is the delivery attempt of the first message. Returns how many were
        done (succeeded or filtered out) and whether the next one failed. A sync listener
        runs the whole run on one consume thread: one hand-off per batch, not per message.
        """
        assert self._slots is not None
        async with self._slots:
            if self._is_async_listener:
                done = 0
                for wire in wires:
                    if not worker.may_continue():
                        return done, False
                    if worker.matches(wire.tag):
                        message = _received_message(wire, attempt if done == 0 else 1)
                        if not await self._call_listener(message):
                            return done, True
                    done += 1
                return done, False
            loop = asyncio.get_running_loop()
            done, failed, succeeded = await loop.run_in_executor(
                self._executor, self._invoke_in_order, worker, wires, attempt
            )
        self._counters.succeeded += succeeded
        self._counters.failed += int(failed)
        return done, failed

    def _invoke_in_order(
        self, worker: _QueueWorker, wires: Sequence[messaging_pb2.PulledMessage], attempt: int
    ) -> tuple[int, bool, int]:
        """On a consume thread: (done, failed, succeeded) for a run of one queue's messages."""
        succeeded = 0
        for done, wire in enumerate(wires):
            # Read from this thread: a plain flag and the monotonic clock, no loop state.
            if worker.stopping or time.monotonic() >= worker.fence:
                return done, False, succeeded
            if not worker.matches(wire.tag):
                continue
            if not self._invoke(_received_message(wire, attempt if done == 0 else 1)):
                return done, True, succeeded
            succeeded += 1
        return len(wires), False, succeeded


class _Acker:
    """Acks the successes of one topic in batches, on the topic's receives where it can.

    The receive loop takes the pending batch whenever it receives, so with a backlog most
    acks ride on a receive (one round trip for both). A batch no receive took within
    ``_ACK_DELAY_S`` of its first success, or that reached ``_MAX_ACK_BATCH``, is due: it
    goes in an Ack call of its own (python-pubsub batches its acks on a timer too). While
    the loop waits for cache room (``riders_wanted``), a due batch, or one of
    ``DEFAULT_RECEIVE_BATCH``, is handed to the loop instead: its receive frees the room.
    """

    def __init__(self, owner: AsyncPushConsumer, topic: str) -> None:
        self.owner = owner
        self.topic = topic
        self._batch: list[_Held] = []
        self._timer: asyncio.TimerHandle | None = None
        # Ack calls in flight, so close can wait for them before closing the channel.
        self._sending: set[asyncio.Task[None]] = set()
        self.riders_wanted = False
        """Set by the receive loop while it waits for cache room."""
        self.ready = False
        """The batch is due and kept for the receive loop (see riders_wanted)."""
        self.ride_failures = 0
        """Acks that rode on a receive and failed (counted by ``_ride_failed``)."""

    def add(self, held: _Held) -> None:
        self._batch.append(held)
        if len(self._batch) >= (DEFAULT_RECEIVE_BATCH if self.riders_wanted else _MAX_ACK_BATCH):
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(_ACK_DELAY_S, self.flush)

    def flush(self) -> None:
        """The batch is due: hand it to a receive loop waiting for room, or send it now."""
        if self.riders_wanted and self._batch:
            self._cancel_timer()
            self.ready = True
            self.owner._cache.wake()
            return
        self.send(self.take())

    def take(self) -> list[_Held]:
        """The pending batch, for a receive to carry (its caller must ack what it takes)."""
        self._cancel_timer()
        self.ready = False
        batch, self._batch = self._batch, []
        return batch

    def send(self, batch: list[_Held]) -> None:
        """Ack ``batch`` in an Ack call of its own."""
        if not batch:
            return
        task = asyncio.ensure_future(self._send(batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def drain(self) -> None:
        self.riders_wanted = False
        self.flush()
        if self._sending:
            await asyncio.gather(*list(self._sending), return_exceptions=True)

    async def _send(self, batch: list[_Held]) -> None:
        owner = self.owner
        try:
            response = await owner._consumers[self.topic]._ack_handles(
                [h.message.receipt_handle for h in batch]
            )
            for held, result in zip(batch, response.results, strict=True):
                if result.code == "OK":
                    owner._counters.acked += 1
                else:
                    logger.warning(
                        "push consumer %s: ack of message %s failed (%s %s); it will be "
                        "redelivered",
                        owner.client_id, held.message.message_id, result.code, result.message,
                    )  # fmt: skip
        except PopMQError as exc:
            logger.warning(
                "push consumer %s: acking %d messages of %s failed (%s); they will be "
                "redelivered",
                owner.client_id, len(batch), self.topic, exc,
            )  # fmt: skip
        finally:
            for held in batch:
                owner._forget(held)


class _StartNotCommittedError(PopMQError):
    """The start offset of a new group could not be committed; the worker tries again."""

    retriable = True


class _QueueWorker:
    """Consumes one assigned queue in offset order and commits the group's offset."""

    def __init__(self, owner: AsyncPushConsumer, topic: str, queue_id: int, fence: float) -> None:
        self.owner = owner
        self.topic = topic
        self.queue_id = queue_id
        self.fence = fence
        """Monotonic time the lease ends (with a margin): stop before starting past it."""
        self.stopping = False
        self.task: asyncio.Task[None] | None = None
        # Set by stop(), so an idle or retrying worker wakes at once.
        self._stop = asyncio.Event()
        self.matches = owner._matchers[topic]

    def stop(self) -> None:
        self.stopping = True
        self._stop.set()

    def may_continue(self) -> bool:
        if self.stopping:
            return False
        if time.monotonic() >= self.fence:
            logger.warning(
                "push consumer %s: lease on %s queue %d ran out without renewal; stopping",
                self.owner.client_id, self.topic, self.queue_id,
            )  # fmt: skip
            self.stop()
            return False
        return True

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)

    async def run(self) -> None:
        try:
            await self._run()
        finally:
            self.owner._worker_done(self)

    async def _run(self) -> None:
        owner = self.owner
        offset = await self._start_offset()
        if offset is None:
            return
        committed = offset
        commit_due = time.monotonic() + _COMMIT_INTERVAL_S
        idle = _IDLE_POLL_MIN_S
        backoff = _RETRY_MIN_S
        try:
            while self.may_continue():
                room = await owner._cache.wait_for_room()
                if not self.may_continue():
                    break
                owner._counters.receive_calls += 1
                try:
                    response = await self._pull(offset, min(room, owner._pull_batch))
                except PopMQError as exc:
                    logger.warning(
                        "push consumer %s: pulling %s queue %d failed: %s",
                        owner.client_id, self.topic, self.queue_id, exc,
                    )  # fmt: skip
                    await self._sleep(backoff)
                    backoff = min(backoff * 2, _RETRY_MAX_S)
                    continue
                backoff = _RETRY_MIN_S
                if not response.messages:
                    offset = max(offset, response.next_offset)
                    if offset != committed and await self._commit(offset):
                        committed = offset  # caught up: lag tools see it at once
                    if not await self._await_arrival(offset):
                        await self._sleep(idle)  # the wait failed: poll, backing off
                        idle = min(idle * 2, _IDLE_POLL_MAX_S)
                    continue
                idle = _IDLE_POLL_MIN_S
                size = sum(len(m.body) for m in response.messages)
                owner._cache.add(size, len(response.messages))
                try:
                    offset = await self._consume_batch(response, offset)
                finally:
                    owner._cache.remove(size, len(response.messages))
                if offset != committed and time.monotonic() >= commit_due:
                    commit_due = time.monotonic() + _COMMIT_INTERVAL_S
                    if await self._commit(offset):
                        committed = offset
        finally:
            if offset != committed:
                await self._commit(offset)

    async def _consume_batch(
        self, response: messaging_pb2.PullMessagesResponse, offset: int
    ) -> int:
        """Process a pulled batch in order; returns the offset after the last one done."""
        owner = self.owner
        wires = list(response.messages)
        owner._counters.received += len(wires)
        attempt = 1
        while wires:
            done, failed = await owner._run_in_order(self, wires, attempt)
            if done:
                offset = wires[done - 1].offset + 1
                wires = wires[done:]
                attempt = 1
            if not failed:
                if wires:
                    return offset  # told to stop: the next owner starts at wires[0]
                break
            attempt += 1
            await self._sleep(owner._retry_delay_s)  # retried in place: the queue waits
            if not self.may_continue():
                return offset  # not done: the next owner starts at this message
        return max(offset, response.next_offset)

    async def _await_arrival(self, offset: int) -> bool:
        """Long-poll until the queue has a message at ``offset``, the wait ends, or stop.

        Returns False when the wait failed (the caller then polls with a backoff).
        """
        owner = self.owner
        wait = min(owner._wait_s, max(0.0, self.fence - time.monotonic()))
        request = messaging_pb2.AwaitMessagesRequest(
            topic=self.topic,
            positions=[messaging_pb2.QueueOffset(queue_id=self.queue_id, offset=offset)],
            long_polling_timeout=duration_from_seconds(wait, name="wait_s"),
        )
        call = asyncio.ensure_future(
            unary(owner._conn.messaging().AwaitMessages, request, wait + owner._timeout_s)
        )
        stopped = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait([call, stopped], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            call.cancel()  # when told to stop: do not hold the call any longer
            results: list[object] = await asyncio.gather(call, stopped, return_exceptions=True)
        outcome = results[0]
        if not isinstance(outcome, BaseException) or isinstance(outcome, asyncio.CancelledError):
            return True
        if not isinstance(outcome, PopMQError):
            raise outcome
        error = outcome
        logger.warning(
            "push consumer %s: waiting for messages on %s queue %d failed: %s",
            owner.client_id, self.topic, self.queue_id, error,
        )  # fmt: skip
        return False

    async def _pull(self, offset: int, max_messages: int) -> messaging_pb2.PullMessagesResponse:
        owner = self.owner
        request = messaging_pb2.PullMessagesRequest(
            topic=self.topic, queue_id=self.queue_id, offset=offset, max_messages=max_messages
        )
        response: messaging_pb2.PullMessagesResponse = await unary(
            owner._conn.messaging().PullMessages, request, owner._timeout_s
        )
        return response

    async def _start_offset(self) -> int | None:
        """The group's committed offset, or where consume_from says (committed at once)."""
        owner = self.owner
        backoff = _RETRY_MIN_S
        while self.may_continue():
            try:
                return await self._resolve_start()
            except PopMQError as exc:
                logger.warning(
                    "push consumer %s: reading the offset of %s queue %d failed: %s",
                    owner.client_id, self.topic, self.queue_id, exc,
                )  # fmt: skip
                await self._sleep(backoff)
                backoff = min(backoff * 2, _RETRY_MAX_S)
        return None

    async def _resolve_start(self) -> int:
        owner = self.owner
        messaging = owner._conn.messaging()
        try:
            response: messaging_pb2.GetOffsetResponse = await unary(
                messaging.GetOffset,
                messaging_pb2.GetOffsetRequest(group=owner.group, topic=self.topic),
                owner._timeout_s,
            )
            current = next((o for o in response.offsets if o.queue_id == self.queue_id), None)
        except NotFoundError:
            current = None  # the group does not exist yet
        if current is not None and current.committed:
            return int(current.offset)
        start_from = owner._consume_from
        if isinstance(start_from, datetime):
            stamp = timestamp_pb2.Timestamp()
            stamp.FromDatetime(start_from)
            at: messaging_pb2.GetOffsetsAtTimeResponse = await unary(
                messaging.GetOffsetsAtTime,
                messaging_pb2.GetOffsetsAtTimeRequest(topic=self.topic, time=stamp),
                owner._timeout_s,
            )
            start = next(o.offset for o in at.offsets if o.queue_id == self.queue_id)
        else:
            probe = await self._pull(0, 1)
            start = probe.min_offset if start_from == "first" else probe.max_offset
        # Commit the start now: a later owner must continue here, not at a newer "last".
        if not await self._commit(start):
            raise _StartNotCommittedError(f"offset {start} of queue {self.queue_id}")
        return int(start)

    async def _commit(self, offset: int) -> bool:
        """Commit the group's offset; a retriable failure is retried a few times.

        Returns False when it could not: the offset is committed with a later batch, or
        (when stopping) the next owner repeats the uncommitted messages: at least once.
        """
        owner = self.owner
        request = messaging_pb2.CommitOffsetRequest(
            group=owner.group,
            topic=self.topic,
            offsets=[messaging_pb2.QueueOffset(queue_id=self.queue_id, offset=offset)],
        )
        backoff = _RETRY_MIN_S
        for attempt in itertools.count(1):
            try:
                await unary(owner._conn.messaging().CommitOffset, request, owner._timeout_s)
            except PopMQError as exc:
                if not exc.retriable or attempt >= 5:
                    logger.warning(
                        "push consumer %s: committing offset %d of %s queue %d failed: %s",
                        owner.client_id, offset, self.topic, self.queue_id, exc,
                    )  # fmt: skip
                    return False
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _RETRY_MAX_S)
            else:
                return True
        return False


def _received_message(wire: messaging_pb2.PulledMessage, attempt: int) -> ReceivedMessage:
    """A pulled message as the listener sees it: no receipt handle; attempts are local."""
    return ReceivedMessage.from_proto(
        messaging_pb2.ReceivedMessage(
            message_id=wire.message_id,
            topic=wire.topic,
            queue_id=wire.queue_id,
            offset=wire.offset,
            body=wire.body,
            tag=wire.tag,
            keys=list(wire.keys),
            properties=dict(wire.properties),
            born_time=wire.born_time,
            store_time=wire.store_time,
            delivery_attempt=attempt,
            message_group=wire.message_group,
            body_encoding=wire.body_encoding,
            born_host=wire.born_host,
        )
    )


class PushConsumer(SyncClient[AsyncPushConsumer]):
    """Calls a listener for each message of the subscribed topics (blocking facade).

    ``with PushConsumer(...) as consumer:`` starts it and closes it at the end. Arguments
    and behaviour are those of ``AsyncPushConsumer``; the listener is a plain function run
    on ``consume_threads`` threads.

    Example:
        >>> def handle(message):
        ...     process(message.body)
        ...     return ConsumeResult.SUCCESS
        >>> with PushConsumer("127.0.0.1:8081", "billing",
        ...                   subscriptions={"orders": "TagA || TagB"}, listener=handle):
        ...     wait_for_shutdown()
    """

    def __init__(
        self,
        endpoint: str,
        group: str,
        *,
        subscriptions: Mapping[str, str | Sql],
        listener: Callable[[ReceivedMessage], ConsumeResult],
        consume_threads: int = DEFAULT_CONSUME_THREADS,
        max_cached_messages: int = DEFAULT_MAX_CACHED_MESSAGES,
        max_cached_bytes: int = DEFAULT_MAX_CACHED_BYTES,
        mode: Mode = "pop",
        invisible_duration_s: float = DEFAULT_INVISIBLE_DURATION_S,
        max_processing_s: float = DEFAULT_MAX_PROCESSING_S,
        receive_batch_size: int = DEFAULT_RECEIVE_BATCH,
        wait_s: float = DEFAULT_WAIT_S,
        strategy: StrategyName = "average",
        heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S,
        consume_from: Literal["last", "first"] | datetime = "last",
        orderly_retry_delay_s: float = DEFAULT_ORDERLY_RETRY_DELAY_S,
        machine_room: str = "",
        configured_queues: Mapping[str, Sequence[int]] | None = None,
        pull_batch_size: int = DEFAULT_PULL_BATCH,
        client_id: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        super().__init__(
            AsyncPushConsumer(
                endpoint,
                group,
                subscriptions=subscriptions,
                listener=listener,
                consume_threads=consume_threads,
                max_cached_messages=max_cached_messages,
                max_cached_bytes=max_cached_bytes,
                mode=mode,
                invisible_duration_s=invisible_duration_s,
                max_processing_s=max_processing_s,
                receive_batch_size=receive_batch_size,
                wait_s=wait_s,
                strategy=strategy,
                heartbeat_interval_s=heartbeat_interval_s,
                consume_from=consume_from,
                orderly_retry_delay_s=orderly_retry_delay_s,
                machine_room=machine_room,
                configured_queues=configured_queues,
                pull_batch_size=pull_batch_size,
                client_id=client_id,
                timeout_s=timeout_s,
            )
        )

    @property
    def group(self) -> str:
        """The consumer group."""
        return self._core.group

    @property
    def client_id(self) -> str:
        """This consumer's id as the server knows it."""
        return self._core.client_id

    @property
    def stats(self) -> PushConsumerStats:
        """A snapshot of the counters (see ``PushConsumerStats``); also after close."""
        if self.closed:
            return self._core.stats
        return self._run(_snapshot(self._core))

    def start(self) -> None:
        """Register and start consuming (see ``AsyncPushConsumer.start``). Idempotent."""
        self._run(self._core.start())

    def close(self) -> None:
        """Stop gracefully (see ``AsyncPushConsumer.close``). Idempotent.

        Raises:
            RuntimeError: Called from inside a listener.
        """
        if getattr(_in_listener, "active", False):
            raise RuntimeError("close() was called from a listener; it would wait for itself")
        super().close()

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


async def _snapshot(core: AsyncPushConsumer) -> PushConsumerStats:
    return core.stats
