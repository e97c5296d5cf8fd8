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
  - Invisible-time renewal: every held message is made invisible again ahead of its expiry (at two
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
receiving, acking or invisible-time renewal.

This module is the public face; the parts (flow control, listener runner, dispatcher,
acker, invisible-time renewal, POP receiver, registration, assignment, queue worker) are in
``popmq.sdk._push``, and the settings in ``PushConsumerOptions``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, Self

from popmq.sdk._channel import DEFAULT_TIMEOUT_S, AsyncClient, Endpoints
from popmq.sdk._push.acker import Acker
from popmq.sdk._push.assignment import Assignment
from popmq.sdk._push.dispatcher import Dispatcher
from popmq.sdk._push.flow_control import FlowControl, HeldMessages
from popmq.sdk._push.invisible_renewal import InvisibleRenewal
from popmq.sdk._push.listener import (
    ConsumeResult,
    Listener,
    ListenerRunner,
    called_from_listener,
)
from popmq.sdk._push.options import (
    DEFAULT_CONSUME_THREADS,
    DEFAULT_HEARTBEAT_INTERVAL_S,
    DEFAULT_INVISIBLE_DURATION_S,
    DEFAULT_MAX_CACHED_BYTES,
    DEFAULT_MAX_CACHED_MESSAGES,
    DEFAULT_MAX_PROCESSING_S,
    DEFAULT_ORDERLY_RETRY_DELAY_S,
    DEFAULT_PULL_BATCH,
    DEFAULT_RECEIVE_BATCH,
    DEFAULT_WAIT_S,
    Mode,
    PushConsumerOptions,
    StrategyName,
    resolve_options,
)
from popmq.sdk._push.pop_receiver import PopReceiver
from popmq.sdk._push.queue_worker import WorkerContext
from popmq.sdk._push.registration import Registration
from popmq.sdk._push.shared import Counters
from popmq.sdk._sync import SyncClient
from popmq.sdk.consumer import AsyncSimpleConsumer, new_client_id
from popmq.sdk.credentials import Credentials
from popmq.sdk.errors import InvalidArgumentError, PopMQError
from popmq.sdk.tls import TLS
from popmq.sdk.types import ReceivedMessage, Sql

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MAX_CACHED_BYTES",
    "DEFAULT_MAX_CACHED_MESSAGES",
    "DEFAULT_MAX_PROCESSING_S",
    "AsyncPushConsumer",
    "ConsumeResult",
    "PushConsumer",
    "PushConsumerOptions",
    "PushConsumerStats",
]


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


def _matchers(
    subscriptions: Mapping[str, str | Sql], mode: Mode
) -> dict[str, Callable[[str], bool]]:
    """Check each topic's filter; queue-exclusive mode filters by tag here, on the client."""
    matchers: dict[str, Callable[[str], bool]] = {}
    for topic, expression in subscriptions.items():
        if mode == "queue_exclusive":
            if isinstance(expression, Sql):
                raise InvalidArgumentError(
                    "SQL filters are evaluated by Pop; queue-exclusive consumers read "
                    "by offset and take tag expressions only"
                )
            matchers[topic] = _tag_matcher(expression)
        elif not isinstance(expression, str | Sql):
            raise TypeError(f"the filter of {topic!r} must be a str or Sql")
    return matchers


class AsyncPushConsumer(AsyncClient):
    """Receives messages for a consumer group and calls a listener for each (asyncio).

    See the module docstring for the two modes and the guarantees.

    Args:
        endpoint: ``host:port`` of the popmq proxy, or several (``"h1:8081,h2:8081"`` or a
            list) to fail over between (docs/operations.md, "Endpoints and failover").
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
        options: All of the settings above in one ``PushConsumerOptions``, instead of
            the keywords (giving both raises ``TypeError``).
        tls: Connect with TLS: ``True`` (the system's roots) or a ``TLSConfig`` (a CA file,
            a client certificate); default plaintext. A connection setting, not one of the
            ``options``.
        credentials: Access key and secret key that sign every call (servers with
            authentication on: docs/security.md); not one of the ``options``.
    """

    def __init__(
        self,
        endpoint: Endpoints,
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
        options: PushConsumerOptions | None = None,
        tls: TLS = False,
        credentials: Credentials | None = None,
    ) -> None:
        if not callable(listener):
            raise TypeError(f"listener must be callable, got {type(listener).__name__}")
        if not isinstance(subscriptions, Mapping) or not subscriptions:
            raise InvalidArgumentError("subscriptions is empty: give {topic: filter}")
        options = resolve_options(
            options,
            {
                "consume_threads": consume_threads,
                "max_cached_messages": max_cached_messages,
                "max_cached_bytes": max_cached_bytes,
                "mode": mode,
                "invisible_duration_s": invisible_duration_s,
                "max_processing_s": max_processing_s,
                "receive_batch_size": receive_batch_size,
                "wait_s": wait_s,
                "strategy": strategy,
                "heartbeat_interval_s": heartbeat_interval_s,
                "consume_from": consume_from,
                "orderly_retry_delay_s": orderly_retry_delay_s,
                "machine_room": machine_room,
                "configured_queues": configured_queues,
                "pull_batch_size": pull_batch_size,
                "client_id": client_id,
                "timeout_s": timeout_s,
            },
        )
        matchers = _matchers(subscriptions, options.mode)
        super().__init__(endpoint, timeout_s=options.timeout_s, tls=tls, credentials=credentials)
        self.group = group
        self.subscriptions: dict[str, str | Sql] = dict(subscriptions)
        self.listener = listener
        self.options = options
        """The settings this consumer runs with."""
        self.mode: Mode = options.mode
        self.client_id = options.client_id or new_client_id()
        # The parts shared by both modes; the POP parts that need the topics' simple
        # consumers are made by start().
        self._counters = Counters()
        self._flow = FlowControl(options.max_cached_messages, options.max_cached_bytes)
        self._held = HeldMessages(self._flow)
        self._runner = ListenerRunner(
            listener,
            consume_threads=options.consume_threads,
            counters=self._counters,
            client_id=self.client_id,
        )
        self._registration = Registration(
            conn=self._conn,
            client_id=self.client_id,
            group=group,
            topics=list(self.subscriptions),
            options=options,
        )
        self._assignment = Assignment(
            registration=self._registration,
            topics=list(self.subscriptions),
            matchers=matchers,
            context=WorkerContext(
                conn=self._conn,
                group=group,
                client_id=self.client_id,
                options=options,
                flow=self._flow,
                counters=self._counters,
                runner=self._runner,
            ),
            spawn=self._spawn,
        )
        self._dispatcher: Dispatcher | None = None
        self._consumers: dict[str, AsyncSimpleConsumer] = {}
        self._ackers: dict[str, Acker] = {}
        self._started = False
        self._closing: asyncio.Future[None] | None = None
        # Background tasks (receivers, invisible-time renewal, heartbeats, queue workers), so close
        # can stop them and a crash of one is logged rather than lost.
        self._tasks: set[asyncio.Task[None]] = set()

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
            cached_messages=self._flow.messages,
            cached_bytes=self._flow.bytes,
            assigned_queues=self._assignment.assigned_queues(),
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
        options = self.options
        for topic, expression in self.subscriptions.items():
            consumer = AsyncSimpleConsumer(
                self.endpoint,
                group=self.group,
                topic=topic,
                filter=expression,
                timeout_s=options.timeout_s,
                channel=self._conn,  # one connection: the topics fail over together
                on_ack_failure=self._ride_failed,
                client_id=self.client_id,  # its pops name the id it registers with
            )
            self._consumers[topic] = consumer
            self._ackers[topic] = Acker(
                topic,
                # The simple consumer's batch ack (stream or unary) with a result per
                # handle; an SDK-internal call, not public API.
                ack_handles=consumer._ack_handles,
                flow=self._flow,
                held=self._held,
                counters=self._counters,
                client_id=self.client_id,
            )
        # Fails fast on unknown topics and conflicts.
        self._registration.interval_s = await self._registration.heartbeat()
        self._started = True
        self._runner.start()
        if self.mode == "pop":
            self._start_pop()
        else:
            self._spawn(self._assignment.run(), "popmq-assignment")

    def _start_pop(self) -> None:
        options = self.options
        dispatcher = Dispatcher(
            runner=self._runner,
            held=self._held,
            ackers=self._ackers,
            counters=self._counters,
            client_id=self.client_id,
        )
        self._dispatcher = dispatcher
        renewal = InvisibleRenewal(
            invisible_s=options.invisible_duration_s,
            max_processing_s=options.max_processing_s,
            release=dispatcher.release,
            counters=self._counters,
            client_id=self.client_id,
        )
        for topic in self.subscriptions:
            receiver = PopReceiver(
                topic,
                consumer=self._consumers[topic],
                acker=self._ackers[topic],
                flow=self._flow,
                held=self._held,
                renewal=renewal,
                dispatcher=dispatcher,
                counters=self._counters,
                batch_size=options.receive_batch_size,
                invisible_s=options.invisible_duration_s,
                wait_s=options.wait_s,
                client_id=self.client_id,
            )
            self._spawn(receiver.run(), f"popmq-receive-{topic}")
        self._spawn(renewal.run(), "popmq-renew")
        self._spawn(self._registration.run_pop_heartbeats(), "popmq-heartbeat")

    def _ride_failed(self, message: ReceivedMessage, error: PopMQError) -> None:
        """An ack that rode on a receive failed: the topic's acker counts and logs it."""
        self._ackers[message.topic].ride_failed(message, error)

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
        if called_from_listener():
            raise RuntimeError("close() was called from a listener; it would wait for itself")
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        # Shielded: a caller that gives up waiting does not cut the shutdown short.
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        if self._started:
            self._assignment.stop_starting()
            try:
                await self._shutdown()
            finally:
                self._runner.shutdown()
        for consumer in self._consumers.values():
            await consumer.close()
        await super().close()

    async def _shutdown(self) -> None:
        if self.mode == "pop":
            assert self._dispatcher is not None, "start() made it"
            receivers = [t for t in self._tasks if t.get_name().startswith("popmq-receive")]
            for task in receivers:
                task.cancel()
            await asyncio.gather(*receivers, return_exceptions=True)
            await self._dispatcher.close()
            await asyncio.gather(*(a.drain() for a in self._ackers.values()))
        else:
            assigner = [t for t in self._tasks if t.get_name() == "popmq-assignment"]
            for task in assigner:
                task.cancel()
            await asyncio.gather(*assigner, return_exceptions=True)
            await self._assignment.stop_all_workers()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        await self._registration.unregister()


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
        endpoint: Endpoints,
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
        options: PushConsumerOptions | None = None,
        tls: TLS = False,
        credentials: Credentials | None = None,
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
                options=options,
                tls=tls,
                credentials=credentials,
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
    def options(self) -> PushConsumerOptions:
        """The settings this consumer runs with."""
        return self._core.options

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
        if called_from_listener():
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
