"""Simple consumers: pop messages for a group, then ack, nack or extend each delivery.

Delivery is at-least-once: a popped message stays invisible to other pops of the group for
its invisible duration; unless it is acked by then, it is delivered again with
``delivery_attempt + 1``.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from popmq._gen.popmq.v1 import messaging_pb2
from popmq.sdk._channel import DEFAULT_TIMEOUT_S, AsyncClient, Endpoints, check_pinnable
from popmq.sdk._pop_stream import PopStream
from popmq.sdk._sync import SyncClient
from popmq.sdk.credentials import Credentials
from popmq.sdk.errors import InvalidArgumentError, PopMQError, error_from_code_name
from popmq.sdk.leases import LeasePage, LeaseResult
from popmq.sdk.tls import TLS
from popmq.sdk.types import ReceivedMessage, Sql, datetime_from_timestamp, duration_from_seconds

__all__ = [
    "DEFAULT_INVISIBLE_DURATION_S",
    "DEFAULT_MAX_MESSAGES",
    "DEFAULT_WAIT_S",
    "AckFailure",
    "AsyncSimpleConsumer",
    "SimpleConsumer",
    "build_pop_request",
    "new_client_id",
]

logger = logging.getLogger(__name__)

AckFailure = Callable[[ReceivedMessage, PopMQError], None]
"""Told of an ack that rode on a receive and failed: the message, and why."""

# The server's defaults for an unset field, sent explicitly so behaviour is visible here.
DEFAULT_MAX_MESSAGES = 32
DEFAULT_INVISIBLE_DURATION_S = 30.0
DEFAULT_WAIT_S = 20.0


def new_client_id() -> str:
    """``host@pid@random``, like RocketMQ's ``ip@pid`` client ids but unique per consumer."""
    return f"{socket.gethostname()}@{os.getpid()}@{uuid.uuid4().hex[:12]}"


def build_pop_request(
    group: str,
    topic: str,
    *,
    filter: str | Sql = "*",
    max_messages: int | None = DEFAULT_MAX_MESSAGES,
    invisible_duration_s: float | None = DEFAULT_INVISIBLE_DURATION_S,
    wait_s: float | None = DEFAULT_WAIT_S,
    ack_receipt_handles: Sequence[str] = (),
    client_id: str = "",
) -> messaging_pb2.PopRequest:
    """Build a Pop request; a ``None`` argument leaves its field unset (server default)."""
    request = messaging_pb2.PopRequest(
        group=group,
        topic=topic,
        filter=build_filter_expression(filter),
        ack_receipt_handles=ack_receipt_handles,
        client_id=client_id,
    )
    if max_messages is not None:
        request.max_messages = max_messages
    if invisible_duration_s is not None:
        request.invisible_duration.CopyFrom(
            duration_from_seconds(invisible_duration_s, name="invisible_duration_s")
        )
    if wait_s is not None:
        request.long_polling_timeout.CopyFrom(duration_from_seconds(wait_s, name="wait_s"))
    return request


def build_filter_expression(filter: str | Sql) -> messaging_pb2.FilterExpression:
    """A str is a tag expression ("TagA || TagB"); ``Sql(...)`` a SQL92 property filter."""
    if isinstance(filter, Sql):
        return messaging_pb2.FilterExpression(
            type=messaging_pb2.FILTER_TYPE_SQL, expression=filter.expression
        )
    if not isinstance(filter, str):
        raise TypeError(
            f"filter must be a tag expression (str) or Sql(...), got {type(filter).__name__}"
        )
    return messaging_pb2.FilterExpression(type=messaging_pb2.FILTER_TYPE_TAG, expression=filter)


def build_nack_request(
    group: str, receipt_handle: str, delay_s: float | None
) -> messaging_pb2.NackRequest:
    """Build a Nack request; ``delay_s=None`` leaves the delay unset (group backoff)."""
    request = messaging_pb2.NackRequest(group=group, receipt_handle=receipt_handle)
    if delay_s is not None:
        request.delay.CopyFrom(duration_from_seconds(delay_s, name="delay_s"))
    return request


class AsyncSimpleConsumer(AsyncClient):
    """Pops messages of one topic for one consumer group (asyncio).

    Args:
        endpoint: ``host:port`` of the popmq proxy, or several (``"h1:8081,h2:8081"`` or a
            list) to fail over between (docs/operations.md, "Endpoints and failover").
        group: Consumer group; the server creates it with default settings on first use.
        topic: Topic to receive from.
        filter: Tag expression (``"*"``, ``"TagA"`` or ``"TagA || TagB"``), or a SQL92
            filter over properties: ``Sql("region = 'eu' AND amount > 100")``.
        timeout_s: Timeout of each call, in seconds; a receive waits ``wait_s`` longer.
        channel: Optional ``grpc.aio`` channel to use instead of opening one.
        multiplex: Send the receives and acks over one ``PopStream`` call (opened on the
            first one, again after it broke) rather than one ``Pop`` or ``Ack`` call each: a
            held receive then costs the server about 2 KB instead of about 20 KB, and an ack
            no unary call. ``False`` uses ``Pop`` and ``Ack``. Both behave the same either
            way (docs/pop-stream.md).
        on_ack_failure: Called with each message whose ack rode on a ``receive`` (its
            ``ack`` argument) and failed, and the error, before that receive returns. By
            default such a failure is logged as a warning. It is not raised: that would drop
            the messages the receive popped.
        tls: Connect with TLS: ``True`` (the system's roots) or a ``TLSConfig`` (a CA file,
            a client certificate); default plaintext.
        credentials: Access key and secret key that sign every call (servers with
            authentication on: docs/security.md).
        client_id: Names this consumer in every pop, so the server records it with the
            deliveries (``popmq group inspect``, ``popmq message history``, the console);
            at most 255 characters. Default: ``host@pid@random``, unique per consumer.
    """

    def __init__(
        self,
        endpoint: Endpoints,
        *,
        group: str,
        topic: str,
        filter: str | Sql = "*",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        channel: Any = None,
        multiplex: bool = True,
        on_ack_failure: AckFailure | None = None,
        tls: TLS = False,
        credentials: Credentials | None = None,
        client_id: str | None = None,
    ) -> None:
        super().__init__(
            endpoint, timeout_s=timeout_s, channel=channel, tls=tls, credentials=credentials
        )
        self.group = group
        self.topic = topic
        self.filter = filter
        self.client_id = new_client_id() if client_id is None else client_id
        self._stream = PopStream(self._conn) if multiplex else None
        self._on_ack_failure = on_ack_failure or _log_ack_failure

    @property
    def multiplex(self) -> bool:
        """Whether receives and acks go over one PopStream call (see the constructor)."""
        return self._stream is not None

    async def close(self) -> None:
        """Close the PopStream, if open, and the channel. Idempotent.

        Receives still waiting are cancelled (as a closed channel cancels a unary Pop).
        """
        if not self.closed and self._stream is not None:
            await self._stream.close()
        await super().close()

    async def receive(
        self,
        max_messages: int | None = DEFAULT_MAX_MESSAGES,
        invisible_duration_s: float | None = DEFAULT_INVISIBLE_DURATION_S,
        wait_s: float | None = DEFAULT_WAIT_S,
        *,
        ack: ReceivedMessage | Sequence[ReceivedMessage] = (),
    ) -> list[ReceivedMessage]:
        """Pop up to ``max_messages``, waiting up to ``wait_s`` for the first one.

        Returns as soon as any message is available, and an empty list when none arrived
        within ``wait_s``. ``None`` for an argument leaves it to the server's default.

        ``ack``: messages to acknowledge first, in the same request, so a consume cycle
        (``messages = receive(ack=messages)``) is one round trip instead of two. The server
        acks them before it pops, and only once this receive's other arguments passed its
        checks. An ack that fails goes to ``on_ack_failure`` (see the constructor); that
        message is delivered again after its invisible time, as any unacked one is. If the
        receive raises, its acks may or may not have been applied. Acking an acked message
        again succeeds, so pass them to the retried receive (or to ``ack``).

        With several endpoints, a receive that failed UNAVAILABLE (its proxy went away) is
        repeated on the next one, acks included; messages the failed attempt may have
        popped are delivered again after their invisible duration.

        Raises:
            NotFoundError: The topic does not exist.
            InvalidArgumentError: An argument is out of the server's range.
            UnavailableError: No proxy could serve it (each endpoint tried).
        """
        self._check_open()
        acked = [ack] if isinstance(ack, ReceivedMessage) else list(ack)
        request = build_pop_request(
            self.group,
            self.topic,
            filter=self.filter,
            max_messages=max_messages,
            invisible_duration_s=invisible_duration_s,
            wait_s=wait_s,
            ack_receipt_handles=[m.receipt_handle for m in acked],
            client_id=self.client_id,
        )
        # The server may hold the pop for the whole long poll before answering.
        timeout_s = (DEFAULT_WAIT_S if wait_s is None else max(wait_s, 0.0)) + self._timeout_s

        async def attempt() -> messaging_pb2.PopResponse:
            response: messaging_pb2.PopResponse | None = None
            if self._stream is not None:
                response = await self._stream.pop(request, timeout_s)
            if response is None:  # unary by choice, or the stream has its most pops in flight
                response = await self._conn.unary("Pop", request, timeout_s)
            return response

        # Safe to repeat: a pop the lost attempt made is redelivered after its invisible
        # time, and acking the riders again succeeds.
        response = await self._conn.retrying(attempt)
        received = [ReceivedMessage.from_proto(m) for m in response.messages]
        if acked:
            results = response.ack_results
            if len(results) != len(acked):
                # A server older than PopRequest.ack_receipt_handles ignored them: ack now.
                results = (await self._ack_handles(list(request.ack_receipt_handles))).results
            for message, result in zip(acked, results, strict=True):
                if result.code != "OK":
                    error = error_from_code_name(result.code, result.message)
                    self._on_ack_failure(message, error)
        return received

    async def ack(self, messages: ReceivedMessage | Sequence[ReceivedMessage]) -> None:
        """Acknowledge one message or many (in one RPC) so they are not delivered again.

        Every message is attempted; then the first failed entry, if any, is raised. After an
        UNAVAILABLE the ack is repeated on the next endpoint: acking again succeeds.

        Raises:
            FailedPreconditionError: A receipt handle is no longer valid (e.g. expired).
        """
        self._check_open()
        batch = [messages] if isinstance(messages, ReceivedMessage) else list(messages)
        if not batch:
            return
        response = await self._ack_handles([m.receipt_handle for m in batch])
        first_error: PopMQError | None = next(
            (
                error_from_code_name(result.code, result.message)
                for result in response.results
                if result.code != "OK"
            ),
            None,
        )
        if first_error is not None:
            raise first_error

    async def _ack_handles(self, handles: list[str]) -> messaging_pb2.AckResponse:
        """Ack receipt handles (at least one) over the PopStream, or the unary Ack RPC.

        Repeated on the next endpoint after an UNAVAILABLE: acking an acked message again
        succeeds.
        """
        request = messaging_pb2.AckRequest(group=self.group, receipt_handles=handles)

        async def attempt() -> messaging_pb2.AckResponse:
            response: messaging_pb2.AckResponse | None = None
            if self._stream is not None:
                response = await self._stream.ack(request, self._timeout_s)
            if response is None:  # unary by choice, or the stream has its most in flight
                response = await self._conn.unary("Ack", request, self._timeout_s)
            return response

        return await self._conn.retrying(attempt)

    async def change_invisible_duration(
        self, message: ReceivedMessage, invisible_duration_s: float
    ) -> None:
        """Make a popped message invisible for ``invisible_duration_s`` from now.

        The server replaces the receipt handle; ``message.receipt_handle`` and
        ``message.invisible_until`` are updated in place, the old handle is invalid.

        After an UNAVAILABLE the change is repeated on the next endpoint. If the failed
        attempt was applied after all, the repeat is refused (``FailedPreconditionError``:
        the handle was replaced) and the new handle is lost: the message is delivered
        again once the new invisible time passes.
        """
        self._check_open()
        request = messaging_pb2.ChangeInvisibleTimeRequest(
            group=self.group,
            receipt_handle=message.receipt_handle,
            invisible_duration=duration_from_seconds(
                invisible_duration_s, name="invisible_duration_s"
            ),
        )
        response: messaging_pb2.ChangeInvisibleTimeResponse = await self._conn.call(
            "ChangeInvisibleTime", request, self._timeout_s, retry=True
        )
        message.receipt_handle = response.receipt_handle
        message.invisible_until = datetime_from_timestamp(response.invisible_until)

    async def nack(self, message: ReceivedMessage, delay_s: float | None = None) -> datetime:
        """Give a popped message back for redelivery and return when it will be redelivered.

        Args:
            message: The message to give back.
            delay_s: Redeliver after this many seconds; ``None`` uses the group's retry
                backoff for the message's delivery attempt.

        After an UNAVAILABLE the nack is repeated on the next endpoint. If the failed attempt
        was applied after all, the repeat is refused (``FailedPreconditionError``: the handle
        is spent); the message was given back all the same.
        """
        self._check_open()
        request = build_nack_request(self.group, message.receipt_handle, delay_s)
        response: messaging_pb2.NackResponse = await self._conn.call(
            "Nack", request, self._timeout_s, retry=True
        )
        return datetime_from_timestamp(response.redeliver_time)

    async def receive_lease(
        self,
        lease_token: str,
        page: int = 0,
        max_messages: int | None = DEFAULT_MAX_MESSAGES,
        invisible_duration_s: float | None = DEFAULT_INVISIBLE_DURATION_S,
        wait_s: float | None = DEFAULT_WAIT_S,
        *,
        acks_by_page: bool = False,
        pinned: bool = False,
    ) -> LeasePage:
        """Pop page ``page`` of a lease, or get it again if it was popped before.

        Pages are popped in order from 0. While the lease lives (until the earliest
        invisible deadline of its messages) the same (token, page) returns the same
        messages; an expired or unknown lease starts again at page 0.

        ``acks_by_page=True`` promises that the lease is acked with ``ack_leases(...,
        read_pages=...)`` naming every page read (``LeasePage.page_id``): then a proxy may
        answer from its memory while etcd is down instead of failing with UNAVAILABLE.

        ``pinned=True`` promises that every ``receive_lease``, ``renew_leases`` and the
        ``ack_leases(..., pinned=True)`` of this token go to this client's one proxy, and no
        other: then while etcd is down the proxy may answer from its memory and ack the
        lease by token. It needs a client of a single endpoint (one of several fails over).

        Raises:
            FailedPreconditionError: The lease expired or was acked and ``page`` > 0, or
                the lease was acknowledged.
            InvalidArgumentError: A page beyond the next one, a bad token or argument.
        """
        self._check_open()
        pop = build_pop_request(
            self.group,
            self.topic,
            filter=self.filter,
            max_messages=max_messages,
            invisible_duration_s=invisible_duration_s,
            wait_s=wait_s,
        )
        request = messaging_pb2.LeasePopRequest(
            group=pop.group,
            topic=pop.topic,
            lease_token=lease_token,
            page=page,
            filter=pop.filter,
            acks_by_page=acks_by_page,
            pinned=self._pinned_to(pinned),
        )
        if pop.HasField("max_messages"):
            request.max_messages = pop.max_messages
        if pop.HasField("invisible_duration"):
            request.invisible_duration.CopyFrom(pop.invisible_duration)
        if pop.HasField("long_polling_timeout"):
            request.long_polling_timeout.CopyFrom(pop.long_polling_timeout)
        timeout_s = (DEFAULT_WAIT_S if wait_s is None else max(wait_s, 0.0)) + self._timeout_s
        # Safe to repeat: the same (token, page) returns the same messages.
        response: messaging_pb2.LeasePopResponse = await self._conn.call(
            "LeasePop", request, timeout_s, retry=True
        )
        return LeasePage.from_proto(response)

    async def ack_leases(
        self,
        lease_tokens: Sequence[str],
        read_pages: Mapping[str, Sequence[str]] | None = None,
        *,
        pinned: bool = False,
    ) -> list[LeaseResult]:
        """Acknowledge every message of each lease; one result per token, in order.

        ``read_pages`` maps some of the tokens to the ``page_id`` of each page read: those
        leases are acked exactly on those pages, never another page of theirs. A page id of
        ``""`` (a server of an earlier release answered it) cannot be named: that token is
        acked whole, as before. Per-token failures (an unknown or expired lease, a page
        that is not the lease's) are results, not exceptions. ``pinned=True``: these tokens
        were read with ``receive_lease(..., pinned=True)`` through this client's one proxy.
        """
        self._check_open()
        request = messaging_pb2.AckLeaseRequest(
            group=self.group, lease_tokens=list(lease_tokens), pinned=self._pinned_to(pinned)
        )
        for token, page_ids in (read_pages or {}).items():
            if page_ids and all(page_ids):
                request.read_pages.add(lease_token=token, page_ids=list(page_ids))
        response: messaging_pb2.AckLeaseResponse = await self._conn.call(
            "AckLease", request, self._timeout_s, retry=True
        )
        return [LeaseResult.from_proto(r) for r in response.results]

    def _pinned_to(self, pinned: bool) -> bool:
        """`pinned`, refused on a client that may fail over to another proxy."""
        if pinned and len(self._conn.endpoints) > 1:
            raise InvalidArgumentError(
                f"pinned=True needs a client of one endpoint, not {len(self._conn.endpoints)} "
                "(a client fails over between them, which would break the promise)"
            )
        if pinned and not self._conn.given_channel:
            check_pinnable(self._conn.endpoints[0])
        return pinned

    async def renew_leases(
        self, lease_tokens: Sequence[str], invisible_duration_s: float
    ) -> list[LeaseResult]:
        """Make every message of each lease invisible for ``invisible_duration_s`` from now.

        Per-token failures (an unknown, expired or acked lease) are results, not exceptions.
        """
        self._check_open()
        request = messaging_pb2.RenewLeaseRequest(
            group=self.group,
            lease_tokens=list(lease_tokens),
            invisible_duration=duration_from_seconds(
                invisible_duration_s, name="invisible_duration_s"
            ),
        )
        response: messaging_pb2.RenewLeaseResponse = await self._conn.call(
            "RenewLease", request, self._timeout_s, retry=True
        )
        return [LeaseResult.from_proto(r) for r in response.results]


def _log_ack_failure(message: ReceivedMessage, error: PopMQError) -> None:
    logger.warning(
        "the ack of message %s (topic %s, attempt %d) that rode on a receive failed: %s %s; "
        "it will be delivered again",
        message.message_id, message.topic, message.delivery_attempt, error.code, error,
    )  # fmt: skip


class SimpleConsumer(SyncClient[AsyncSimpleConsumer]):
    """Pops messages of one topic for one consumer group (blocking).

    Args:
        endpoint: ``host:port`` of the popmq proxy, or several (``"h1:8081,h2:8081"`` or a
            list) to fail over between (docs/operations.md, "Endpoints and failover").
        group: Consumer group; the server creates it with default settings on first use.
        topic: Topic to receive from.
        filter: Tag expression (``"*"``, ``"TagA"`` or ``"TagA || TagB"``), or a SQL92
            filter over properties: ``Sql("region = 'eu' AND amount > 100")``.
        timeout_s: Timeout of each call, in seconds; a receive waits ``wait_s`` longer.
        multiplex: Receive and ack over one ``PopStream`` call rather than one ``Pop`` or
            ``Ack`` call each (see ``AsyncSimpleConsumer``); ``False`` uses ``Pop`` and
            ``Ack``.
        on_ack_failure: Told of each failed ack that rode on a ``receive`` (see
            ``AsyncSimpleConsumer``); it runs on the SDK's event-loop thread.
        tls: Connect with TLS: ``True`` (the system's roots) or a ``TLSConfig`` (a CA file,
            a client certificate); default plaintext.
        credentials: Access key and secret key that sign every call (servers with
            authentication on: docs/security.md).
        client_id: Names this consumer in every pop (see ``AsyncSimpleConsumer``).
    """

    def __init__(
        self,
        endpoint: Endpoints,
        *,
        group: str,
        topic: str,
        filter: str | Sql = "*",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        multiplex: bool = True,
        on_ack_failure: AckFailure | None = None,
        tls: TLS = False,
        credentials: Credentials | None = None,
        client_id: str | None = None,
    ) -> None:
        super().__init__(
            AsyncSimpleConsumer(
                endpoint,
                group=group,
                topic=topic,
                filter=filter,
                timeout_s=timeout_s,
                multiplex=multiplex,
                on_ack_failure=on_ack_failure,
                tls=tls,
                credentials=credentials,
                client_id=client_id,
            )
        )

    @property
    def group(self) -> str:
        """The consumer group."""
        return self._core.group

    @property
    def client_id(self) -> str:
        """The id this consumer's pops name."""
        return self._core.client_id

    @property
    def topic(self) -> str:
        """The topic received from."""
        return self._core.topic

    def receive(
        self,
        max_messages: int | None = DEFAULT_MAX_MESSAGES,
        invisible_duration_s: float | None = DEFAULT_INVISIBLE_DURATION_S,
        wait_s: float | None = DEFAULT_WAIT_S,
        *,
        ack: ReceivedMessage | Sequence[ReceivedMessage] = (),
    ) -> list[ReceivedMessage]:
        """Pop up to ``max_messages``, acking ``ack`` first in the same request (see
        ``AsyncSimpleConsumer.receive``)."""
        return self._run(self._core.receive(max_messages, invisible_duration_s, wait_s, ack=ack))

    def ack(self, messages: ReceivedMessage | Sequence[ReceivedMessage]) -> None:
        """Acknowledge one message or many (see ``AsyncSimpleConsumer.ack``)."""
        self._run(self._core.ack(messages))

    def change_invisible_duration(
        self, message: ReceivedMessage, invisible_duration_s: float
    ) -> None:
        """Extend or shorten a delivery (see ``AsyncSimpleConsumer.change_invisible_duration``)."""
        self._run(self._core.change_invisible_duration(message, invisible_duration_s))

    def nack(self, message: ReceivedMessage, delay_s: float | None = None) -> datetime:
        """Give a message back for redelivery (see ``AsyncSimpleConsumer.nack``)."""
        return self._run(self._core.nack(message, delay_s))

    def receive_lease(
        self,
        lease_token: str,
        page: int = 0,
        max_messages: int | None = DEFAULT_MAX_MESSAGES,
        invisible_duration_s: float | None = DEFAULT_INVISIBLE_DURATION_S,
        wait_s: float | None = DEFAULT_WAIT_S,
        *,
        acks_by_page: bool = False,
        pinned: bool = False,
    ) -> LeasePage:
        """Pop or replay a page of a lease (see ``AsyncSimpleConsumer.receive_lease``)."""
        return self._run(
            self._core.receive_lease(
                lease_token,
                page,
                max_messages,
                invisible_duration_s,
                wait_s,
                acks_by_page=acks_by_page,
                pinned=pinned,
            )
        )

    def ack_leases(
        self,
        lease_tokens: Sequence[str],
        read_pages: Mapping[str, Sequence[str]] | None = None,
        *,
        pinned: bool = False,
    ) -> list[LeaseResult]:
        """Acknowledge whole leases, or the pages read (see ``AsyncSimpleConsumer.ack_leases``)."""
        return self._run(self._core.ack_leases(lease_tokens, read_pages, pinned=pinned))

    def renew_leases(
        self, lease_tokens: Sequence[str], invisible_duration_s: float
    ) -> list[LeaseResult]:
        """Extend whole leases (see ``AsyncSimpleConsumer.renew_leases``)."""
        return self._run(self._core.renew_leases(lease_tokens, invisible_duration_s))
