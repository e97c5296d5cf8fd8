"""Producers: send messages to a topic, one message or an atomic batch per RPC.

Before anything goes on the wire, a send is built once (``build_send_request``):

1. every argument is checked with the server's rules and messages (``popmq.sdk._validation``);
2. each message without an id gets one (``popmq.sdk._message_id``), so a retried request carries
   the same ids and the server's dedup window drops a copy that was stored after all;
3. bodies over 4 KiB are zlib-compressed when that shrinks them (``popmq.sdk._compression``);
4. the bodies of a batch, as sent, must fit in 4 MiB.

Single-message sends made while one is on the wire wait and go out together as the next
request (``popmq.sdk._coalesce``), each with its own receipt or error, so a busy producer spends
one request per round trip instead of one per message; a request being retried without FIFO
messages lets the next ones go meanwhile. Requests go over one ``SendStream``
call per producer (``popmq.sdk._send_stream``), which costs the server and the client less CPU
than a unary call each; ``multiplex=False`` makes each a unary ``SendMessages`` call. Sends
that fail with a retriable error (a broken stream's among them) are retried
(``RetryPolicy``: 3 attempts, 10 ms -> 1 s x2), oneway sends never. A producer given several
endpoints sends to one proxy at a time; after a proxy fails, the retry goes to the next one
(``popmq.sdk._channel``). A repeat reaches the broker the first attempt may have been stored
on, whose dedup window answers it: a cluster proxy retries such a send on that broker only and
routes a repeat it remembers there; on a stream, a timed-out or refused send's repeat goes to
the same proxy, and so does a unary send's that the proxy answered as of unknown outcome.
Retries are marked ``repeat``, so that a proxy that did not see the first attempt (the client
failed over to it) asks the brokers where it was stored (docs/cluster.md, "A retried send is
stored once", has the exceptions). The
sync ``Producer`` builds requests on the caller's thread (zlib releases the GIL), and bounds
its unfinished ``send_async`` and ``send_oneway`` calls by count and bytes, blocking the
caller when the window is full, as RocketMQ's async back-pressure does. Closing a producer
waits for the sends it has accepted.

Transactions (``popmq.sdk.transactions``): ``transaction()`` / ``begin_transaction()`` send
half messages, committed or rolled back together; a producer given a ``transaction_checker``
keeps a check stream open for its ``transaction_topics`` and every topic it sent a half
message to, and answers the server's checks of transactions left open.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import socket
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from popmq._gen.popmq.v1 import messaging_pb2
from popmq.sdk import _loop
from popmq.sdk._channel import DEFAULT_TIMEOUT_S, AsyncClient, Endpoints
from popmq.sdk._coalesce import SendCoalescer
from popmq.sdk._compression import encode_body
from popmq.sdk._message_id import new_message_ids
from popmq.sdk._retry import RetryPolicy
from popmq.sdk._send_stream import SendStream
from popmq.sdk._sync import SyncClient
from popmq.sdk._validation import (
    check_batch_size,
    check_message,
    check_message_extras,
    check_name,
    check_request_size,
    check_schedule,
)
from popmq.sdk.credentials import Credentials
from popmq.sdk.errors import InvalidArgumentError, PopMQError, ServerError
from popmq.sdk.tls import TLS
from popmq.sdk.transactions import (
    AsyncTransaction,
    CheckStream,
    Transaction,
    TransactionChecker,
    TransactionInfo,
    end_transaction,
)
from popmq.sdk.types import Message, SendReceipt, duration_from_seconds

__all__ = [
    "DEFAULT_MAX_IN_FLIGHT",
    "DEFAULT_MAX_IN_FLIGHT_BYTES",
    "AsyncProducer",
    "Producer",
    "build_send_request",
]

logger = logging.getLogger(__name__)

DEFAULT_MAX_IN_FLIGHT = 1_000
"""Unfinished async and oneway sends per producer. RocketMQ allows 10,000
(backPressureForAsyncSendNum), but a popmq server handles about 1,000 send RPCs a second on
a small machine, so 10,000 queued sends outlast the 10 s call timeout (measured: 10% of 3,000
queued sends failed); 1,000 keeps the server busy with every wait well inside it."""
DEFAULT_MAX_IN_FLIGHT_BYTES = 100 * 1024 * 1024
"""Their bodies, as sent (RocketMQ backPressureForAsyncSendSize, 100 MiB)."""

# The server takes up to 255 characters (a DNS name's limit), as does any real host name.
_BORN_HOST = socket.gethostname()[:255]

_BUILD_IN_THREAD_BYTES = 256 * 1024
"""AsyncProducer builds larger requests in a worker thread: zlib takes milliseconds per
few hundred KiB, which must not stall the event loop (and zlib releases the GIL)."""

T = TypeVar("T")


def build_send_request(
    topic: str, messages: Sequence[Message]
) -> messaging_pb2.SendMessagesRequest:
    """Check, number and compress a batch of messages to one topic into its request.

    Raises:
        InvalidArgumentError: A message breaks a limit, or the batch has over 1,024 messages
            or 4 MiB of bodies as sent.
    """
    check_name("topic", topic)
    check_batch_size(0, len(messages))
    request = messaging_pb2.SendMessagesRequest()
    add = request.messages.add  # filled in place: an appended message would be copied
    body_bytes = 0
    ids = new_message_ids(len(messages))  # one lock for the batch; unused ones are skipped
    for index, message in enumerate(messages):
        body = message.body
        check_message(
            index,
            body=body,
            tag=message.tag,
            keys=message.keys,
            properties=message.properties,
            message_id=message.message_id,
        )
        check_message_extras(
            index,
            message_group=message.message_group,
            dedup_id=message.dedup_id,
            body_encoding="",
            # One host for the whole batch: checking it with the first message is enough.
            born_host=_BORN_HOST if index == 0 else "",
        )
        check_schedule(
            index,
            deliver_at=message.deliver_at,
            delay_s=message.delay_s,
            delay_level=message.delay_level,
        )
        wire = message.to_proto(topic, into=add())
        if not wire.message_id:
            wire.message_id = ids[index]
        wire.born_host = _BORN_HOST
        encoded, encoding = encode_body(body)
        if encoding:
            wire.body, wire.body_encoding = encoded, encoding
        body_bytes += len(encoded)
    check_batch_size(body_bytes)
    if len(messages) > 1:  # one message always fits (its parts are each bounded)
        check_request_size(request.ByteSize())
    return request


async def _build_off_loop(
    topic: str, messages: Sequence[Message]
) -> messaging_pb2.SendMessagesRequest:
    """``build_send_request``, in a worker thread when the bodies are large."""
    if sum(len(m.body) for m in messages) > _BUILD_IN_THREAD_BYTES:
        return await asyncio.to_thread(build_send_request, topic, messages)
    return build_send_request(topic, messages)


def _request_bytes(request: messaging_pb2.SendMessagesRequest) -> int:
    return sum(len(m.body) for m in request.messages)


def _check_transaction_options(
    checker: object,
    topics: Sequence[str],
    producer_group: str,
    check_delay_s: float | None,
) -> None:
    if checker is not None and not callable(checker):
        raise TypeError(f"transaction_checker must be callable, got {checker!r}")
    if isinstance(topics, str):
        raise TypeError("transaction_topics must be a sequence of topic names, not a str")
    for topic in topics:
        check_name("transaction_topics entry", topic)
    if topics and checker is None:
        raise ValueError("transaction_topics needs a transaction_checker to answer the checks")
    if producer_group:
        check_name("producer_group", producer_group)
    if check_delay_s is not None and not check_delay_s > 0:
        raise ValueError(f"transaction_check_delay_s must be positive seconds, got {check_delay_s}")


def _check_max_in_flight(max_in_flight: int, max_in_flight_bytes: int | None = None) -> None:
    if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int):
        raise TypeError(f"max_in_flight must be an int, got {max_in_flight!r}")
    if max_in_flight < 1:
        raise ValueError(f"max_in_flight must be 1 or more, got {max_in_flight}")
    if max_in_flight_bytes is not None and max_in_flight_bytes < 1:
        raise ValueError(f"max_in_flight_bytes must be 1 or more, got {max_in_flight_bytes}")


class AsyncProducer(AsyncClient):
    """Sends messages to topics (asyncio).

    Args:
        endpoint: ``host:port`` of the popmq proxy, or several (``"h1:8081,h2:8081"`` or a
            list) to fail over between (docs/operations.md, "Endpoints and failover").
        timeout_s: Timeout of each attempt, in seconds.
        channel: Optional ``grpc.aio`` channel to use instead of opening one.
        retry: How failed sends are retried; default: 3 attempts, 10 ms -> 1 s x2.
        max_in_flight: Unfinished ``send_oneway`` calls; one more waits for a slot.
        coalesce: Single-message sends made while one is on the wire wait and share the
            next request (see ``popmq.sdk._coalesce``); each still gets its own receipt or
            error. False sends every message in its own request.
        multiplex: Send over one ``SendStream`` call, opened on the first send and again
            after it broke (see ``popmq.sdk._send_stream``). False makes each request its own
            unary ``SendMessages`` call (for example behind a proxy that does not carry
            bidirectional streams).
        tls: Connect with TLS: ``True`` (the system's roots) or a ``TLSConfig`` (a CA file,
            a client certificate); default plaintext.
        credentials: Access key and secret key that sign every call (servers with
            authentication on: docs/security.md).
        transaction_checker: Decides transactions left open when the server checks them
            back: called with the ``HalfMessage``, returns a ``TransactionResolution``
            (a coroutine function is awaited; a plain one runs in a worker thread). With
            it, the producer keeps a check stream open for ``transaction_topics`` and every
            topic it sent a half message to. Without it, open transactions of this producer
            are discarded after the server's last check.
        transaction_topics: Topics whose checks this producer answers from its start (a
            restarted producer is asked about the transactions its predecessor left open).
        producer_group: Producer group recorded with each half message (listings, checks).
        transaction_check_delay_s: When the server first checks this producer's open
            transactions; None: the server's ``[transactions] check_first_s`` (6 s).
    """

    def __init__(
        self,
        endpoint: Endpoints,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        channel: Any = None,
        retry: RetryPolicy | None = None,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        coalesce: bool = True,
        multiplex: bool = True,
        tls: TLS = False,
        credentials: Credentials | None = None,
        transaction_checker: TransactionChecker | None = None,
        transaction_topics: Sequence[str] = (),
        producer_group: str = "",
        transaction_check_delay_s: float | None = None,
    ) -> None:
        _check_max_in_flight(max_in_flight)
        _check_transaction_options(
            transaction_checker, transaction_topics, producer_group, transaction_check_delay_s
        )
        super().__init__(
            endpoint, timeout_s=timeout_s, channel=channel, tls=tls, credentials=credentials
        )
        self._producer_group = producer_group
        self._check_delay_s = transaction_check_delay_s
        self._transaction_topics = tuple(transaction_topics)
        self._checks = (
            None
            if transaction_checker is None
            else CheckStream(
                self._conn,
                transaction_checker,
                self._answer_check,
                timeout_s=timeout_s,
                client_id=f"{_BORN_HOST}@{os.getpid()}",
            )
        )
        self._retry = retry or RetryPolicy()
        self._max_in_flight = max_in_flight
        self._coalescer = SendCoalescer(self._send_coalesced) if coalesce else None
        self._stream = SendStream(self._conn) if multiplex else None
        # Sends under way (being built or on the wire), and the futures close() waits on
        # until that count is back to 0. Touched only on the event loop.
        self._in_flight = 0
        self._idle_waiters: list[asyncio.Future[None]] = []
        # The count belongs to this process; a forked child's copy never drains.
        self._pid = os.getpid()
        # Oneway sends under way: strong references (the loop keeps only weak ones), and
        # the count that max_in_flight bounds.
        self._oneway: set[asyncio.Task[None]] = set()

    # _begin() then try/finally _end() around each send: a contextmanager costs ~2 us a
    # use, and a single send would pass through three.
    def _begin(self) -> None:
        self._in_flight += 1

    def _end(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            for waiter in self._idle_waiters:
                if not waiter.done():
                    waiter.set_result(None)
            self._idle_waiters.clear()

    async def send(
        self,
        topic: str,
        body: bytes,
        *,
        tag: str = "",
        keys: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
        message_id: str = "",
        message_group: str = "",
        deliver_at: datetime | float | None = None,
        delay_s: float | None = None,
        delay_level: int | None = None,
        dedup_id: str = "",
    ) -> SendReceipt:
        """Send one message and return where it was stored.

        See ``Message`` for the arguments. Retriable failures are retried with the same
        message id.

        Raises:
            NotFoundError: The topic does not exist.
            InvalidArgumentError: The message breaks a limit (checked before sending).
        """
        self._check_open()
        message = Message(
            body,
            tag=tag,
            keys=keys,
            properties=properties or {},
            message_id=message_id,
            message_group=message_group,
            deliver_at=deliver_at,
            delay_s=delay_s,
            delay_level=delay_level,
            dedup_id=dedup_id,
        )
        self._begin()
        try:
            return await self._send_one(await _build_off_loop(topic, [message]))
        finally:
            self._end()

    async def send_batch(self, topic: str, messages: Sequence[Message]) -> list[SendReceipt]:
        """Send messages in one atomic write (all or none); receipts in input order.

        An empty batch sends nothing and returns an empty list.

        Raises:
            InvalidArgumentError: A message breaks a limit, or the bodies take more than
                4 MiB as sent; nothing was sent.
        """
        self._check_open()
        if not messages:
            return []
        self._begin()
        try:
            return await self._send(await _build_off_loop(topic, messages), retry=True)
        finally:
            self._end()

    async def send_oneway(
        self,
        topic: str,
        body: bytes,
        *,
        tag: str = "",
        keys: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
        message_id: str = "",
        message_group: str = "",
        deliver_at: datetime | float | None = None,
        delay_s: float | None = None,
        delay_level: int | None = None,
        dedup_id: str = "",
    ) -> None:
        """Start sending one message and return without waiting for the result.

        No result and no retry: the message is lost if the send fails (server down, topic
        missing); failures are only logged, at WARNING. Arguments are still checked before
        anything is sent. Waits only when ``max_in_flight`` oneway sends are unfinished.
        ``close`` waits for the sends already started.
        """
        self._check_open()
        message = Message(
            body,
            tag=tag,
            keys=keys,
            properties=properties or {},
            message_id=message_id,
            message_group=message_group,
            deliver_at=deliver_at,
            delay_s=delay_s,
            delay_level=delay_level,
            dedup_id=dedup_id,
        )
        self._begin()
        try:
            request = await _build_off_loop(topic, [message])
            loop = asyncio.get_running_loop()
            while True:
                running = [t for t in self._oneway if t.get_loop() is loop]
                if len(running) < self._max_in_flight:
                    break
                await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            task = loop.create_task(self.send_request_oneway(request))
            self._begin()
            self._oneway.add(task)
            task.add_done_callback(self._oneway_done)
        finally:
            self._end()

    def _oneway_done(self, task: asyncio.Task[None]) -> None:
        self._oneway.discard(task)
        self._end()

    async def recall(self, topic: str, recall_handle: str) -> str:
        """Cancel a delayed message before it is due; returns its message id.

        Not retried, on this endpoint or another: a repeat after a lost response would be
        answered NOT_FOUND. An ``UnavailableError`` leaves it unknown whether it was recalled.

        Raises:
            NotFoundError: The message was delivered or recalled already, or the handle
                names no delayed message of ``topic``.
        """
        self._check_open()
        check_name("topic", topic)
        if not recall_handle:
            raise InvalidArgumentError(
                "recall_handle is empty: pass SendReceipt.recall_handle of a delayed message"
            )
        response: messaging_pb2.RecallMessageResponse = await self._conn.call(
            "RecallMessage",
            messaging_pb2.RecallMessageRequest(topic=topic, recall_handle=recall_handle),
            self._timeout_s,
            retry=False,
        )
        return response.message_id

    # -- transactions (popmq.sdk.transactions) ------------------------------------------

    def transaction(self) -> AsyncTransaction:
        """A new transaction: ``async with producer.transaction() as tx: await tx.send(...)``
        commits when the block ends and rolls back when it raises."""
        self._check_open()
        return AsyncTransaction(self)

    def begin_transaction(self) -> AsyncTransaction:
        """A new transaction to send in, then ``commit()`` or ``rollback()`` explicitly."""
        return self.transaction()

    async def start_transaction_checks(self) -> None:
        """Open the check stream for ``transaction_topics`` now, and wait until the server
        registered it (the first transactional send does this when not called). Needs a
        ``transaction_checker``."""
        self._check_open()
        if self._checks is None:
            raise ValueError("start_transaction_checks needs a transaction_checker")
        await self._checks.cover(self._transaction_topics)

    async def send_half(self, topic: str, messages: Sequence[Message]) -> list[SendReceipt]:
        """Send half messages (one transaction each; ``AsyncTransaction.send`` is the way to
        use this): stored, invisible until committed. With a checker, the check stream
        covers ``topic`` before this returns."""
        self._check_open()
        request = await _build_off_loop(topic, messages)
        request.transactional = True
        request.producer_group = self._producer_group
        if self._check_delay_s is not None:
            request.transaction_check_delay.CopyFrom(
                duration_from_seconds(self._check_delay_s, name="transaction_check_delay_s")
            )
        self._begin()
        try:
            if self._checks is not None and topic not in self._checks.topics:
                await self._checks.cover([*self._transaction_topics, topic])
            # Retried like any send, with the same ids: the server's dedup window answers a
            # retry after a lost answer with the first half's transaction.
            return await self._send(request, retry=True)
        finally:
            self._end()

    async def end_transaction(self, receipt: SendReceipt, *, commit: bool) -> TransactionInfo:
        """Commit or roll back the half message of ``receipt`` (idempotent: repeated after
        an outage). Raises FailedPreconditionError when it was resolved the other way."""
        if not receipt.transaction_id:
            raise InvalidArgumentError(
                f"message {receipt.message_id} was not sent in a transaction: its receipt "
                "has no transaction_id"
            )
        return await end_transaction(
            self._conn,
            receipt.topic,
            receipt.transaction_id,
            receipt.message_id,
            commit=commit,
            server_check=False,
            timeout_s=self._timeout_s,
        )

    async def _answer_check(self, check: messaging_pb2.TransactionCheck, commit: bool) -> object:
        return await end_transaction(
            self._conn,
            check.topic,
            check.transaction_id,
            check.message_id,
            commit=commit,
            server_check=True,
            timeout_s=self._timeout_s,
        )

    async def send_request(
        self, request: messaging_pb2.SendMessagesRequest, *, retry: bool = True
    ) -> list[SendReceipt]:
        """Send a request from ``build_send_request``; retried unless ``retry`` is False.

        Works after ``close`` began, so sends accepted before it can finish.
        """
        self._begin()
        try:
            return await self._send(request, retry=retry)
        finally:
            self._end()

    async def _send_coalesced(
        self, request: messaging_pb2.SendMessagesRequest, retrying: Callable[[], None]
    ) -> list[SendReceipt]:
        """``send_request`` for the coalescer, which is told when the request is retried."""
        self._begin()
        try:
            return await self._send(request, retry=True, retrying=retrying)
        finally:
            self._end()

    async def _send(
        self,
        request: messaging_pb2.SendMessagesRequest,
        *,
        retry: bool,
        retrying: Callable[[], None] | None = None,
    ) -> list[SendReceipt]:
        """``send_request`` for callers that already count themselves in flight.

        Every attempt after the first is marked ``repeat``: the first may have been stored
        through a proxy that died before answering, and a cluster proxy looks a marked
        repeat up on the topic's brokers instead of routing it as a new send.
        """
        attempts = 0

        async def attempt() -> messaging_pb2.SendMessagesResponse:
            nonlocal attempts, request
            attempts += 1
            if attempts == 2:  # copied once, on the first retry only: a first send pays nothing
                repeat = messaging_pb2.SendMessagesRequest()
                repeat.CopyFrom(request)
                repeat.repeat = True
                request = repeat
                if retrying is not None:
                    retrying()
            if self._stream is not None:
                streamed = await self._stream.send(request, self._timeout_s)
                if streamed is not None:
                    return streamed
            # One attempt: the retry policy repeats it (on the endpoint the client moved to).
            response: messaging_pb2.SendMessagesResponse = await self._conn.unary(
                "SendMessages", request, self._timeout_s
            )
            return response

        response = await (self._retry.run(attempt) if retry else attempt())
        if len(response.results) != len(request.messages):
            raise ServerError(
                f"server returned {len(response.results)} results "
                f"for {len(request.messages)} messages"
            )
        return [SendReceipt.from_proto(result) for result in response.results]

    async def send_request_one(self, request: messaging_pb2.SendMessagesRequest) -> SendReceipt:
        """Send a one-message request (with retries, coalesced unless turned off) and
        return its receipt."""
        self._begin()
        try:
            return await self._send_one(request)
        finally:
            self._end()

    async def _send_one(self, request: messaging_pb2.SendMessagesRequest) -> SendReceipt:
        """``send_request_one`` for callers that already count themselves in flight."""
        if self._coalescer is not None:
            return await self._coalescer.send(request)
        (receipt,) = await self._send(request, retry=True)
        return receipt

    async def send_request_oneway(self, request: messaging_pb2.SendMessagesRequest) -> None:
        """Send once, without retry; a failure is logged, not raised."""
        try:
            await self.send_request(request, retry=False)
        except PopMQError as exc:
            logger.warning(
                "oneway send of %d message(s) to %s failed, the message is lost: %s %s",
                len(request.messages),
                request.messages[0].topic,
                exc.code,
                exc.message,
            )

    async def close(self) -> None:
        """Wait for the sends already accepted, then close the channel. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._in_flight > 0 and self._pid == os.getpid():
            idle = asyncio.get_running_loop().create_future()
            self._idle_waiters.append(idle)
            await idle
        if self._stream is not None:
            await self._stream.close()
        if self._checks is not None:
            await self._checks.close()
        if self._owns_conn:
            await self._conn.close()


class _InFlightWindow:
    """Bounds the unfinished sends of a sync producer by count and bytes; blocks when full.

    One send larger than the byte bound still goes when nothing else is in flight, so a
    large message never waits forever.
    """

    def __init__(self, max_count: int, max_bytes: int) -> None:
        self._max_count = max_count
        self._max_bytes = max_bytes
        # Guards _count and _bytes; notified when a send finishes.
        self._changed = threading.Condition()
        self._count = 0
        self._bytes = 0

    def acquire(self, nbytes: int) -> None:
        with self._changed:
            self._changed.wait_for(
                lambda: (
                    self._count == 0
                    or (self._count < self._max_count and self._bytes + nbytes <= self._max_bytes)
                )
            )
            self._count += 1
            self._bytes += nbytes

    def release(self, nbytes: int) -> None:
        with self._changed:
            self._count -= 1
            self._bytes -= nbytes
            self._changed.notify_all()


class Producer(SyncClient[AsyncProducer]):
    """Sends messages to topics (blocking), with futures for async sends.

    Args:
        endpoint: ``host:port`` of the popmq proxy, or several (``"h1:8081,h2:8081"`` or a
            list) to fail over between (docs/operations.md, "Endpoints and failover").
        timeout_s: Timeout of each attempt, in seconds.
        retry: How failed sends are retried; default: 3 attempts, 10 ms -> 1 s x2.
        max_in_flight: Unfinished ``send_async`` and ``send_oneway`` calls; one more
            blocks until a slot frees.
        max_in_flight_bytes: Their bodies as sent, in bytes; one more blocks likewise.
        coalesce: Sends made while one is on the wire share the next request (see
            ``AsyncProducer``).
        multiplex: Send over one ``SendStream`` call; False makes each request a unary
            call (see ``AsyncProducer``).
        tls: Connect with TLS: ``True`` (the system's roots) or a ``TLSConfig`` (a CA file,
            a client certificate); default plaintext.
        credentials: Access key and secret key that sign every call (servers with
            authentication on: docs/security.md).
        transaction_checker: Decides transactions left open when the server checks them
            back (see ``AsyncProducer``); it runs in a worker thread.
        transaction_topics: Topics whose checks this producer answers from its start.
        producer_group: Producer group recorded with each half message.
        transaction_check_delay_s: When the server first checks this producer's open
            transactions; None: the server's ``[transactions] check_first_s``.
    """

    def __init__(
        self,
        endpoint: Endpoints,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        max_in_flight_bytes: int = DEFAULT_MAX_IN_FLIGHT_BYTES,
        coalesce: bool = True,
        multiplex: bool = True,
        tls: TLS = False,
        credentials: Credentials | None = None,
        transaction_checker: TransactionChecker | None = None,
        transaction_topics: Sequence[str] = (),
        producer_group: str = "",
        transaction_check_delay_s: float | None = None,
    ) -> None:
        _check_max_in_flight(max_in_flight, max_in_flight_bytes)
        super().__init__(
            AsyncProducer(
                endpoint,
                timeout_s=timeout_s,
                retry=retry,
                max_in_flight=max_in_flight,
                coalesce=coalesce,
                multiplex=multiplex,
                tls=tls,
                credentials=credentials,
                transaction_checker=transaction_checker,
                transaction_topics=transaction_topics,
                producer_group=producer_group,
                transaction_check_delay_s=transaction_check_delay_s,
            )
        )
        if transaction_topics:
            self._run(self._core.start_transaction_checks())
        self._window = _InFlightWindow(max_in_flight, max_in_flight_bytes)

    def send(
        self,
        topic: str,
        body: bytes,
        *,
        tag: str = "",
        keys: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
        message_id: str = "",
        message_group: str = "",
        deliver_at: datetime | float | None = None,
        delay_s: float | None = None,
        delay_level: int | None = None,
        dedup_id: str = "",
    ) -> SendReceipt:
        """Send one message and return where it was stored (see ``AsyncProducer.send``)."""
        self._check_open()
        message = Message(
            body,
            tag=tag,
            keys=keys,
            properties=properties or {},
            message_id=message_id,
            message_group=message_group,
            deliver_at=deliver_at,
            delay_s=delay_s,
            delay_level=delay_level,
            dedup_id=dedup_id,
        )
        return self._run(self._core.send_request_one(build_send_request(topic, [message])))

    def send_async(
        self,
        topic: str,
        body: bytes,
        *,
        tag: str = "",
        keys: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
        message_id: str = "",
        message_group: str = "",
        deliver_at: datetime | float | None = None,
        delay_s: float | None = None,
        delay_level: int | None = None,
        dedup_id: str = "",
    ) -> concurrent.futures.Future[SendReceipt]:
        """Start sending one message; the future resolves to its receipt or its error.

        Arguments are checked here, before returning: a bad one raises at once. Retries
        as ``send`` does. Blocks only while the in-flight window is full.
        """
        self._check_open()
        message = Message(
            body,
            tag=tag,
            keys=keys,
            properties=properties or {},
            message_id=message_id,
            message_group=message_group,
            deliver_at=deliver_at,
            delay_s=delay_s,
            delay_level=delay_level,
            dedup_id=dedup_id,
        )
        request = build_send_request(topic, [message])
        return self._submit_windowed(self._core.send_request_one(request), _request_bytes(request))

    def send_oneway(
        self,
        topic: str,
        body: bytes,
        *,
        tag: str = "",
        keys: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
        message_id: str = "",
        message_group: str = "",
        deliver_at: datetime | float | None = None,
        delay_s: float | None = None,
        delay_level: int | None = None,
        dedup_id: str = "",
    ) -> None:
        """Send one message without a result or a retry: it can be lost.

        See ``AsyncProducer.send_oneway``. Blocks only while the in-flight window is full.
        """
        self._check_open()
        message = Message(
            body,
            tag=tag,
            keys=keys,
            properties=properties or {},
            message_id=message_id,
            message_group=message_group,
            deliver_at=deliver_at,
            delay_s=delay_s,
            delay_level=delay_level,
            dedup_id=dedup_id,
        )
        request = build_send_request(topic, [message])
        self._submit_windowed(self._core.send_request_oneway(request), _request_bytes(request))

    def send_batch(self, topic: str, messages: Sequence[Message]) -> list[SendReceipt]:
        """Send messages in one atomic write (see ``AsyncProducer.send_batch``)."""
        self._check_open()
        if not messages:
            return []
        return self._run(self._core.send_request(build_send_request(topic, messages)))

    def recall(self, topic: str, recall_handle: str) -> str:
        """Cancel a delayed message before it is due (see ``AsyncProducer.recall``)."""
        return self._run(self._core.recall(topic, recall_handle))

    def transaction(self) -> Transaction:
        """A new transaction: ``with producer.transaction() as tx: tx.send(...)`` commits
        when the block ends and rolls back when it raises (``popmq.sdk.transactions``)."""
        self._check_open()
        return Transaction(self._core.transaction(), self._run)

    def begin_transaction(self) -> Transaction:
        """A new transaction to send in, then ``commit()`` or ``rollback()`` explicitly."""
        return self.transaction()

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError(f"{type(self).__name__} is closed")

    def _submit_windowed(
        self, coro: Coroutine[Any, Any, T], nbytes: int
    ) -> concurrent.futures.Future[T]:
        if _loop.get_loop_thread().in_loop_thread():
            # Waiting for a window slot here would stop the loop that frees slots.
            coro.close()
            raise RuntimeError(
                "a sync popmq client was called from the SDK's event loop thread; "
                "use the Async* client inside coroutines"
            )
        self._window.acquire(nbytes)
        try:
            future = self._submit(coro)
        except BaseException:
            self._window.release(nbytes)
            raise
        future.add_done_callback(lambda _: self._window.release(nbytes))
        return future
