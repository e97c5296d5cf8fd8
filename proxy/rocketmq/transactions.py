"""v2 transactions: EndTransaction, and check-backs over producers' Telemetry streams.

A transactional producer sends its half message (sending.py), then EndTransaction with
COMMIT or ROLLBACK. One it never ends is checked back (proxy/transaction_checks.py): the
check is written on the Telemetry stream of an online producer of its topic as
RecoverOrphanedTransactionCommand{message, transaction_id}; the client runs its
TransactionChecker and answers with EndTransaction(source=SOURCE_SERVER_CHECK).

A producer is registered for the topics of its publishing settings (as RocketMQ's proxy
registers a producer per topic, the topic being the producer group), for as long as the
Telemetry stream that sent them is open; new settings replace the topics.

Resolutions are the broker's (TransactionAPI.end_transaction): final and idempotent, so the
same answer twice is OK and a contrary one PRECONDITION_FAILED with the broker's reason. An
UNSPECIFIED resolution is the checker's UNKNOWN (the official clients send it as is): the
transaction stays open and is checked again; answered OK, saying so, as RocketMQ does.
An UNSPECIFIED source is a client's (Java clients before rocketmq-clients#688 sent none).

Everything runs on the server's event loop. A stream has one writer, its Telemetry handler
(telemetry.py): a check is queued on the stream's `CommandOutbox`, which that handler
writes, and the check loop waits for the write.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable

from popmq._gen.apache.rocketmq.v2 import definition_pb2 as pb
from popmq._gen.apache.rocketmq.v2 import service_pb2 as sv
from popmq.broker_core import (
    InvalidArgumentError,
    NotFoundError,
    PopMQError,
    TransactionAPI,
    TransactionCheck,
    UnavailableError,
)
from popmq.proxy.rocketmq import codes, convert
from popmq.proxy.rocketmq.codes import Code, ProtocolError, UnsupportedError
from popmq.proxy.transaction_checks import TransactionCheckLoop

log = logging.getLogger(__name__)

WRITE_WAIT_S = 5.0
"""How long a check waits to be written on a producer's stream before the check loop is
told it was not (and tries another producer); it may still be written later, which is
harmless: resolutions are idempotent."""

END: dict[type[PopMQError], pb.Code] = {
    InvalidArgumentError: Code.INVALID_TRANSACTION_ID,
    NotFoundError: Code.INVALID_TRANSACTION_ID,
}
"""EndTransaction's overrides: a malformed, forged, unknown or expired transaction id, or
one that is not the named message's, is INVALID_TRANSACTION_ID (RocketMQ's answer when it
has no data for the id). Field errors (an illegal topic name) keep their own code."""

_SOURCES = {
    pb.SOURCE_UNSPECIFIED: "client",
    pb.SOURCE_CLIENT: "client",
    pb.SOURCE_SERVER_CHECK: "server_check",
}


class CommandOutbox:
    """Server commands waiting to be written on one Telemetry stream.

    `send` queues a command and waits until the stream's handler wrote it; `take` gives the
    handler what is queued; `close` (the stream ended) fails what was never written.
    """

    def __init__(self) -> None:
        # Commands not yet written, each with the future its sender waits on (its result:
        # None when written, else why not). Guarded by running on the loop.
        self._queue: collections.deque[tuple[sv.TelemetryCommand, asyncio.Future[str | None]]]
        self._queue = collections.deque()
        self.ready = asyncio.Event()
        """Set while commands are queued."""
        self._closed = ""

    async def send(self, command: sv.TelemetryCommand, wait_s: float = WRITE_WAIT_S) -> None:
        """Queue `command`; raises UnavailableError when it was not written within `wait_s`."""
        if self._closed:
            raise UnavailableError(self._closed)
        written: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._queue.append((command, written))
        self.ready.set()
        await asyncio.wait({written}, timeout=wait_s)
        if not written.done():
            raise UnavailableError(f"the Telemetry stream did not take the command in {wait_s}s")
        reason = written.result()
        if reason is not None:
            raise UnavailableError(reason)

    def take(self) -> list[tuple[sv.TelemetryCommand, asyncio.Future[str | None]]]:
        taken = list(self._queue)
        self._queue.clear()
        self.ready.clear()
        return taken

    def close(self, reason: str) -> None:
        self._closed = reason
        for _, written in self.take():
            if not written.done():
                written.set_result(reason)


def recover_command(check: TransactionCheck, store_host: str) -> sv.TelemetryCommand:
    """The check as RocketMQ's proxy writes it: the half message (its id, system and user
    properties, message type TRANSACTION) and the transaction id."""
    message = convert.v2_message(
        check.message,
        topic=check.topic,
        queue_id=check.queue_id,
        offset=-1,  # a half message is in no queue yet
        store_host=store_host,
    )
    message.system_properties.message_type = pb.TRANSACTION
    return sv.TelemetryCommand(
        recover_orphaned_transaction_command=sv.RecoverOrphanedTransactionCommand(
            message=message, transaction_id=check.transaction_id
        )
    )


class Transactions:
    """EndTransaction and the registration of producers for check-backs.

    Args:
        transactions: The broker's transactions; None when it has none (EndTransaction is
            then UNSUPPORTED and no producer is registered).
        checks: Hands due checks to registered producers; None: no check-backs here.
        address: This server's HOST:PORT, the store_host of checked messages.
    """

    def __init__(
        self,
        transactions: TransactionAPI | None,
        checks: TransactionCheckLoop | None,
        address: Callable[[], str],
    ) -> None:
        self._transactions = transactions
        self._checks = checks
        self._address = address

    async def end(self, request: sv.EndTransactionRequest) -> sv.EndTransactionResponse:
        """Commit or roll back the transaction (or, UNSPECIFIED, leave it open)."""
        topic = convert.topic_name(request.topic, allow_dlq=False)
        if self._transactions is None:
            raise UnsupportedError(
                "transactional messages are not supported by this server's broker: there is "
                f"no half message {request.message_id!r} to commit or roll back"
            )
        if not request.transaction_id:
            raise ProtocolError(
                Code.INVALID_TRANSACTION_ID,
                "transaction_id is empty: pass the one the send of the half message returned",
            )
        source = _SOURCES.get(request.source)
        if source is None:
            raise ProtocolError(
                Code.BAD_REQUEST,
                f"source {request.source} is unknown: use SOURCE_CLIENT or SOURCE_SERVER_CHECK",
            )
        resolution = request.resolution
        if resolution == pb.TRANSACTION_RESOLUTION_UNSPECIFIED:
            return await self._unknown(request, topic)
        if resolution not in (pb.COMMIT, pb.ROLLBACK):
            raise ProtocolError(
                Code.BAD_REQUEST,
                f"resolution {resolution} is unknown: use COMMIT or ROLLBACK (or, answering a "
                "check, TRANSACTION_RESOLUTION_UNSPECIFIED to have it checked again)",
            )
        info = await self._transactions.end_transaction(
            request.transaction_id,
            commit=resolution == pb.COMMIT,
            source=source,
            topic=topic,
            message_id=request.message_id,
        )
        return sv.EndTransactionResponse(
            status=codes.ok(f"transaction {info.transaction_id} is {info.state}")
        )

    async def _unknown(
        self, request: sv.EndTransactionRequest, topic: str
    ) -> sv.EndTransactionResponse:
        """A checker's UNKNOWN: nothing changes; the answer says what the state is."""
        assert self._transactions is not None
        info = await self._transactions.get_transaction(request.transaction_id)
        if info.topic != topic or (request.message_id and info.message_id != request.message_id):
            raise ProtocolError(
                Code.INVALID_TRANSACTION_ID,
                f"transaction {request.transaction_id} is message {info.message_id!r} of topic "
                f"{info.topic!r}, not {request.message_id!r} of {topic!r}",
            )
        if info.state == "open":
            return sv.EndTransactionResponse(
                status=codes.ok(
                    f"transaction {info.transaction_id} stays open (resolution UNSPECIFIED: "
                    f"unknown); it was checked {info.checks} times and is checked again"
                )
            )
        return sv.EndTransactionResponse(
            status=codes.ok(
                f"transaction {info.transaction_id} is {info.state} already; nothing changed"
            )
        )

    def register(
        self, settings: pb.Settings | None, outbox: CommandOutbox, name: str
    ) -> Callable[[], None] | None:
        """Register a producer's stream for checks of its publishing topics; returns what
        unregisters it (None when there is nothing to register)."""
        if (
            self._checks is None
            or settings is None
            or settings.client_type != pb.PRODUCER
            or not settings.publishing.topics
        ):
            return None
        topics = [t.name for t in settings.publishing.topics]
        address = self._address

        async def deliver(check: TransactionCheck) -> None:
            await outbox.send(recover_command(check, address()))

        return self._checks.add_producer(topics, deliver, name=name)
