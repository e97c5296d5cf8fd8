"""Transactional messages: half messages, commit and rollback, and the producer's checker.

A transaction's messages are sent as half messages (``SendMessagesRequest.transactional``):
stored durably but invisible to consumers until the transaction commits them; a rollback
discards them. Each half message is a transaction of its own on the server; a
``Transaction`` here groups the ones it sent (one or several, of one topic or several) and
commits or rolls back each. The commit of several is not atomic: when a commit fails part
way, the rest stay open and ``commit`` can be called again (a resolution repeated is a
no-op on the server), or the producer's checker settles them.

A transaction left open (the producer died before its commit) is checked back by the
server: the producer's ``transaction_checker`` is asked, for each of its half messages,
whether to commit it (``TransactionResolution``). ``CheckStream`` keeps the producer's
``TransactionChecks`` stream open for that, and answers each check with EndTransaction
(source SERVER_CHECK); UNKNOWN answers nothing, and the server asks again an interval
later, at most ``[transactions] check_max`` times before it discards the transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import grpc

from popmq._gen.popmq.v1 import messaging_pb2
from popmq.sdk._channel import Connection
from popmq.sdk._compression import decode_body
from popmq.sdk._retry import RetryBackoff
from popmq.sdk.errors import FailedPreconditionError, PopMQError, error_from_rpc_error
from popmq.sdk.types import Message, SendReceipt, datetime_from_timestamp

if TYPE_CHECKING:
    from popmq.sdk.producer import AsyncProducer

__all__ = [
    "AsyncTransaction",
    "CheckStream",
    "HalfMessage",
    "Transaction",
    "TransactionChecker",
    "TransactionInfo",
    "TransactionResolution",
]

logger = logging.getLogger(__name__)


class TransactionResolution(enum.Enum):
    """A transaction checker's answer: commit, roll back, or not known yet (ask again)."""

    COMMIT = "commit"
    ROLLBACK = "rollback"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class HalfMessage:
    """A half message of an open transaction, as a check presents it to the checker.

    Attributes:
        transaction_id: The transaction the server asks about.
        topic: Its topic.
        message_id: Its message id.
        body: Payload, as the producer gave it (a compressed body is decoded).
        tag: Tag, or empty.
        keys: Business keys.
        properties: User properties.
        message_group: FIFO message group, or empty.
        born_timestamp: When the producer created it (UTC).
        producer_group: The producer group given at its send, or empty.
        check_attempt: 1 for the first check, up to the server's ``check_max``.
    """

    transaction_id: str
    topic: str
    message_id: str
    body: bytes
    tag: str
    keys: tuple[str, ...]
    properties: dict[str, str]
    message_group: str
    born_timestamp: datetime
    producer_group: str
    check_attempt: int

    @classmethod
    def from_proto(cls, check: messaging_pb2.TransactionCheck) -> HalfMessage:
        message = check.message
        return cls(
            transaction_id=check.transaction_id,
            topic=check.topic,
            message_id=check.message_id,
            body=decode_body(message.body, message.body_encoding),
            tag=message.tag,
            keys=tuple(message.keys),
            properties=dict(message.properties),
            message_group=message.message_group,
            born_timestamp=datetime_from_timestamp(message.born_time),
            producer_group=check.producer_group,
            check_attempt=check.attempt,
        )


TransactionChecker = Callable[
    [HalfMessage], "TransactionResolution | Awaitable[TransactionResolution]"
]
"""Decides an open transaction from its half message: a function, or a coroutine function
(``AsyncProducer``). A plain function runs in a worker thread, so it may block."""

_STATES = {
    messaging_pb2.TRANSACTION_STATE_OPEN: "open",
    messaging_pb2.TRANSACTION_STATE_COMMITTED: "committed",
    messaging_pb2.TRANSACTION_STATE_ROLLED_BACK: "rolled_back",
    messaging_pb2.TRANSACTION_STATE_DISCARDED: "discarded",
}
_SOURCES = {
    messaging_pb2.TRANSACTION_SOURCE_CLIENT: "client",
    messaging_pb2.TRANSACTION_SOURCE_SERVER_CHECK: "server_check",
    messaging_pb2.TRANSACTION_SOURCE_ADMIN: "admin",
    messaging_pb2.TRANSACTION_SOURCE_CHECK_MAX: "check_max",
}


@dataclass(frozen=True, slots=True)
class TransactionInfo:
    """A transaction as the server holds it (a resolution's answer, listings).

    Attributes:
        transaction_id: The id its half send returned.
        topic: Topic of the half message.
        message_id: Id of the half message.
        producer_group: Producer group given at the half send, or empty.
        state: ``"open"``, ``"committed"``, ``"rolled_back"`` or ``"discarded"``.
        create_time: When the half message was stored (UTC).
        checks: Checks sent so far.
        next_check_time: Open: when the next check (or the discard) is due; else None.
        resolve_time: Resolved or discarded: when; else None.
        resolved_by: ``"client"``, ``"server_check"``, ``"admin"``, ``"check_max"`` (a
            discard), or empty while open.
        queue_id: The queue the message is (or will be) stored in.
        offset: Committed: its offset (-1 while a delayed message waits for its time).
        recall_handle: Committed with a future delivery time: its recall handle.
        discard_offset: Discarded: the offset of its copy in ``rmq_sys_TRANS_DISCARDED``.
    """

    transaction_id: str
    topic: str
    message_id: str
    producer_group: str
    state: str
    create_time: datetime
    checks: int
    next_check_time: datetime | None
    resolve_time: datetime | None
    resolved_by: str
    queue_id: int
    offset: int
    recall_handle: str
    discard_offset: int

    @classmethod
    def from_proto(cls, t: messaging_pb2.Transaction) -> TransactionInfo:
        return cls(
            transaction_id=t.transaction_id,
            topic=t.topic,
            message_id=t.message_id,
            producer_group=t.producer_group,
            state=_STATES.get(t.state, str(t.state)),
            create_time=datetime_from_timestamp(t.create_time),
            checks=t.checks,
            next_check_time=(
                datetime_from_timestamp(t.next_check_time)
                if t.HasField("next_check_time")
                else None
            ),
            resolve_time=(
                datetime_from_timestamp(t.resolve_time) if t.HasField("resolve_time") else None
            ),
            resolved_by=_SOURCES.get(t.resolved_by, ""),
            queue_id=t.queue_id,
            offset=t.offset,
            recall_handle=t.recall_handle,
            discard_offset=t.discard_offset,
        )


def resolution_proto(commit: bool) -> messaging_pb2.TransactionResolution:
    return (
        messaging_pb2.TRANSACTION_RESOLUTION_COMMIT
        if commit
        else messaging_pb2.TRANSACTION_RESOLUTION_ROLLBACK
    )


async def end_transaction(
    conn: Connection,
    receipt_topic: str,
    transaction_id: str,
    message_id: str,
    *,
    commit: bool,
    server_check: bool,
    timeout_s: float,
) -> TransactionInfo:
    """One EndTransaction; repeated on the next proxy after an outage (it is idempotent)."""
    request = messaging_pb2.EndTransactionRequest(
        transaction_id=transaction_id,
        topic=receipt_topic,
        message_id=message_id,
        resolution=resolution_proto(commit),
        source=(
            messaging_pb2.TRANSACTION_SOURCE_SERVER_CHECK
            if server_check
            else messaging_pb2.TRANSACTION_SOURCE_CLIENT
        ),
    )
    response: messaging_pb2.EndTransactionResponse = await conn.call(
        "EndTransaction", request, timeout_s, retry=True
    )
    return TransactionInfo.from_proto(response.transaction)


class AsyncTransaction:
    """The half messages one transaction sent, committed or rolled back together (asyncio).

    Made by ``AsyncProducer.transaction()`` or ``begin_transaction()``. As an async context
    manager it commits when the block ends normally and rolls back when it raises.
    """

    def __init__(self, producer: AsyncProducer) -> None:
        self._producer = producer
        self._receipts: list[SendReceipt] = []
        # Receipts resolved already: a commit retried after a partial failure skips them.
        self._resolved: set[str] = set()
        self._state = "open"

    @property
    def state(self) -> str:
        """``"open"``, ``"committed"`` or ``"rolled_back"``."""
        return self._state

    @property
    def receipts(self) -> tuple[SendReceipt, ...]:
        """The half messages sent so far, each with its ``transaction_id``."""
        return tuple(self._receipts)

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
    ) -> SendReceipt:
        """Send one half message in this transaction: stored, invisible until the commit.

        The topic must take transactional messages (a transaction or mixed topic; a fifo
        topic with ``message_group``, a delay topic with a delivery time). The receipt's
        offset is -1 and its ``transaction_id`` is set.
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
        )
        (receipt,) = await self._producer.send_half(topic, [message])
        self._receipts.append(receipt)
        return receipt

    async def commit(self) -> list[TransactionInfo]:
        """Commit every half message sent: each becomes visible to consumers.

        Raises:
            FailedPreconditionError: One was rolled back or discarded meanwhile (by an
                operator, or the checker); those before it are committed.
            PopMQError: A commit failed; those not committed stay open: call ``commit``
                again, or let the checker settle them.
        """
        return await self._end(commit=True)

    async def rollback(self) -> list[TransactionInfo]:
        """Roll back every half message sent: none is ever delivered."""
        return await self._end(commit=False)

    async def _end(self, *, commit: bool) -> list[TransactionInfo]:
        wanted = "committed" if commit else "rolled_back"
        if self._state not in ("open", wanted):
            raise FailedPreconditionError(
                f"the transaction is {self._state.replace('_', ' ')}; it cannot be "
                f"{wanted.replace('_', ' ')}"
            )
        infos: list[TransactionInfo] = []
        for receipt in self._receipts:
            if receipt.transaction_id in self._resolved:
                continue
            infos.append(await self._producer.end_transaction(receipt, commit=commit))
            self._resolved.add(receipt.transaction_id)
            self._state = wanted  # from the first resolution on, the other one is refused
        self._state = wanted
        return infos

    def _check_open(self) -> None:
        if self._state != "open":
            raise FailedPreconditionError(
                f"the transaction is {self._state.replace('_', ' ')}: begin a new one to send"
            )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            if self._state == "open":
                await self.commit()
            return
        if self._state == "open" and self._receipts:
            try:
                await self.rollback()
            except PopMQError as rollback_error:
                # The block's error is the one to see; the open halves are checked back.
                logger.warning(
                    "rolling back a transaction of %d half message(s) after %s failed: %s; "
                    "the server checks the open ones back",
                    len(self._receipts),
                    exc_type.__name__,
                    rollback_error,
                )


class Transaction:
    """The half messages one transaction sent, committed or rolled back together (blocking).

    Made by ``Producer.transaction()`` or ``begin_transaction()``; see ``AsyncTransaction``.
    As a context manager it commits when the block ends normally and rolls back when it
    raises.
    """

    def __init__(self, core: AsyncTransaction, run: Callable[[Any], Any]) -> None:
        self._core = core
        self._run = run

    @property
    def state(self) -> str:
        """``"open"``, ``"committed"`` or ``"rolled_back"``."""
        return self._core.state

    @property
    def receipts(self) -> tuple[SendReceipt, ...]:
        """The half messages sent so far, each with its ``transaction_id``."""
        return self._core.receipts

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
    ) -> SendReceipt:
        """Send one half message in this transaction (see ``AsyncTransaction.send``)."""
        receipt: SendReceipt = self._run(
            self._core.send(
                topic,
                body,
                tag=tag,
                keys=keys,
                properties=properties,
                message_id=message_id,
                message_group=message_group,
                deliver_at=deliver_at,
                delay_s=delay_s,
                delay_level=delay_level,
            )
        )
        return receipt

    def commit(self) -> list[TransactionInfo]:
        """Commit every half message sent (see ``AsyncTransaction.commit``)."""
        infos: list[TransactionInfo] = self._run(self._core.commit())
        return infos

    def rollback(self) -> list[TransactionInfo]:
        """Roll back every half message sent (see ``AsyncTransaction.rollback``)."""
        infos: list[TransactionInfo] = self._run(self._core.rollback())
        return infos

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._run(self._core.__aexit__(exc_type, exc, tb))


_RECONNECT = RetryBackoff(initial_s=0.2, max_s=5.0)
"""Delay before the check stream is opened again after it failed."""


class CheckStream:
    """Keeps a producer's TransactionChecks stream open and answers its checks.

    Args:
        conn: The producer's connection (its endpoints and credentials).
        checker: Decides each checked transaction.
        answer: Sends a check's resolution (EndTransaction, source SERVER_CHECK).
        timeout_s: How long ``cover`` waits for the stream to be registered.
        client_id: Names the producer in the server's logs.
    """

    def __init__(
        self,
        conn: Connection,
        checker: TransactionChecker,
        answer: Callable[[messaging_pb2.TransactionCheck, bool], Awaitable[object]],
        *,
        timeout_s: float,
        client_id: str,
    ) -> None:
        self._conn = conn
        self._checker = checker
        self._answer = answer
        self._timeout_s = timeout_s
        self._client_id = client_id
        # The topics the stream covers; a new one reopens it. Touched on the loop only.
        self._topics: frozenset[str] = frozenset()
        self._task: asyncio.Task[None] | None = None
        # Set once the open stream covers `_topics` (the server sent its headers).
        self._ready = asyncio.Event()
        # Checks being decided: strong references (the loop keeps weak ones).
        self._deciding: set[asyncio.Task[None]] = set()

    @property
    def topics(self) -> frozenset[str]:
        """The topics whose checks this producer answers."""
        return self._topics

    async def cover(self, topics: Iterable[str]) -> None:
        """Make the stream cover `topics` too, and wait (up to the timeout) until the server
        registered it: from then on, checks of those topics reach this producer. A stream
        that cannot open is logged and retried in the background, not raised."""
        wanted = self._topics | frozenset(topics)
        if wanted != self._topics or self._task is None:
            self._topics = wanted
            self._ready.clear()
            if self._task is not None:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
            self._task = asyncio.get_running_loop().create_task(
                self._run(wanted), name="popmq-transaction-checks"
            )
        try:
            await asyncio.wait_for(self._ready.wait(), self._timeout_s)
        except TimeoutError:
            logger.warning(
                "the transaction check stream for %s is not open after %.1fs; checks of "
                "these topics cannot reach this producer until it is",
                ", ".join(sorted(self._topics)),
                self._timeout_s,
            )

    async def _run(self, topics: frozenset[str]) -> None:
        failures = 0
        request = messaging_pb2.TransactionChecksRequest(
            topics=sorted(topics), client_id=self._client_id
        )
        while True:
            endpoint = None
            try:
                endpoint = await self._conn.connected(self._timeout_s)
                call = endpoint.stub("messaging").TransactionChecks(
                    request, metadata=self._conn.call_metadata()
                )
                try:
                    await call.initial_metadata()
                    self._ready.set()
                    failures = 0
                    self._conn.answered(endpoint)
                    async for response in call:
                        self._decide(response.check)
                    # Ended with OK: not expected (the server ends it with UNAVAILABLE).
                finally:
                    call.cancel()
            except grpc.aio.AioRpcError as exc:
                self._ready.clear()
                details = exc.details() if isinstance(exc.details(), str) else ""
                if endpoint is not None:
                    self._conn.failed(endpoint, exc.code(), details or "")
                error = error_from_rpc_error(exc)
                log = logger.warning if failures == 0 else logger.debug
                log("transaction check stream ended: %s %s; opening it again", error.code, error)
            except PopMQError as exc:  # no endpoint reachable
                self._ready.clear()
                logger.debug("transaction check stream cannot open: %s", exc)
            failures += 1
            await asyncio.sleep(_RECONNECT.delay_s(failures))

    def _decide(self, check: messaging_pb2.TransactionCheck) -> None:
        task = asyncio.get_running_loop().create_task(self._check_one(check))
        self._deciding.add(task)
        task.add_done_callback(self._deciding.discard)

    async def _check_one(self, check: messaging_pb2.TransactionCheck) -> None:
        half = HalfMessage.from_proto(check)
        try:
            if inspect.iscoroutinefunction(self._checker):
                answer = await self._checker(half)
            else:
                answer = await asyncio.to_thread(self._checker, half)
                if inspect.isawaitable(answer):
                    answer = await answer
        except Exception:
            logger.exception(
                "the transaction checker failed on %s (topic %s): it is left open and "
                "checked again later",
                half.transaction_id,
                half.topic,
            )
            return
        if not isinstance(answer, TransactionResolution):
            logger.error(
                "the transaction checker returned %r for %s, not a TransactionResolution: "
                "it is left open and checked again later",
                answer,
                half.transaction_id,
            )
            return
        if answer is TransactionResolution.UNKNOWN:
            return
        try:
            await self._answer(check, answer is TransactionResolution.COMMIT)
        except PopMQError as exc:
            logger.warning(
                "answering the check of %s with %s failed: %s %s",
                half.transaction_id,
                answer.value,
                exc.code,
                exc,
            )

    async def close(self) -> None:
        """Close the stream and wait for the checks being decided."""
        if self._task is not None:
            task, self._task = self._task, None
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._deciding:
            await asyncio.gather(*self._deciding, return_exceptions=True)
