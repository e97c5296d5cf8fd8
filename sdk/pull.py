"""Pull consumers: read queues by offset, keep your own position, optionally commit it.

A pull changes nothing on the server: there is no receipt handle and nothing to ack. The
reader keeps its position (the Spark connector keeps it in its checkpoint) and may commit
it to a consumer group so lag tools show its progress.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.protobuf import timestamp_pb2

from popmq._gen.popmq.v1 import admin_pb2, messaging_pb2
from popmq.sdk._channel import DEFAULT_TIMEOUT_S, AsyncClient, Endpoints
from popmq.sdk._compression import decode_body
from popmq.sdk._sync import SyncClient
from popmq.sdk.admin_types import QueueStats
from popmq.sdk.credentials import Credentials
from popmq.sdk.errors import InvalidArgumentError
from popmq.sdk.tls import TLS
from popmq.sdk.types import datetime_from_timestamp

__all__ = [
    "AsyncPullConsumer",
    "ConsumerOffset",
    "PullConsumer",
    "PullResult",
    "PulledMessage",
]

DEFAULT_PULL_MESSAGES = 256


@dataclass(frozen=True, slots=True)
class PulledMessage:
    """A stored message read by offset.

    Attributes:
        message_id: Message id assigned at send.
        topic: Topic the message is stored in.
        queue_id: Queue of the topic.
        offset: Offset of the message in its queue.
        body: Payload (decoded when the producer compressed it).
        tag: Tag, or empty.
        keys: Business keys.
        properties: User properties.
        born_timestamp: When the producer created the message (UTC).
        store_timestamp: When the server stored the message (UTC).
        delivery_attempt: 1, or n+1 for a copy in a dead-letter topic.
        message_group: FIFO message group, or empty.
    """

    message_id: str
    topic: str
    queue_id: int
    offset: int
    body: bytes
    tag: str
    keys: tuple[str, ...]
    properties: dict[str, str]
    born_timestamp: datetime
    store_timestamp: datetime
    delivery_attempt: int
    message_group: str

    @classmethod
    def from_proto(cls, message: messaging_pb2.PulledMessage) -> PulledMessage:
        """Build a pulled message from its wire form, decoding the body."""
        return cls(
            message_id=message.message_id,
            topic=message.topic,
            queue_id=message.queue_id,
            offset=message.offset,
            body=decode_body(message.body, message.body_encoding),
            tag=message.tag,
            keys=tuple(message.keys),
            properties=dict(message.properties),
            born_timestamp=datetime_from_timestamp(message.born_time),
            store_timestamp=datetime_from_timestamp(message.store_time),
            delivery_attempt=message.delivery_attempt,
            message_group=message.message_group,
        )


@dataclass(frozen=True, slots=True)
class PullResult:
    """One pull: messages in offset order and the queue's bounds.

    Attributes:
        messages: The messages; empty at the end of the queue.
        min_offset: Smallest offset still stored. A pull below it started there instead:
            the offsets in between were deleted by retention.
        max_offset: Offset the next stored message will get.
        next_offset: Offset to pull next.
    """

    messages: list[PulledMessage]
    min_offset: int
    max_offset: int
    next_offset: int

    @classmethod
    def from_proto(cls, response: messaging_pb2.PullMessagesResponse) -> PullResult:
        """Build a result from a PullMessages response."""
        return cls(
            messages=[PulledMessage.from_proto(m) for m in response.messages],
            min_offset=response.min_offset,
            max_offset=response.max_offset,
            next_offset=response.next_offset,
        )


@dataclass(frozen=True, slots=True)
class ConsumerOffset:
    """A consumer group's position in one queue.

    Attributes:
        queue_id: Queue id.
        offset: Next offset the group has not finished with.
        committed: False when the group has no position in the queue yet; ``offset`` is
            then where it would start (the earliest retained message).
    """

    queue_id: int
    offset: int
    committed: bool


def _timestamp(at: datetime) -> timestamp_pb2.Timestamp:
    if at.tzinfo is None:
        raise InvalidArgumentError("the time must be timezone-aware (e.g. datetime.now(UTC))")
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(at)
    return stamp


class AsyncPullConsumer(AsyncClient):
    """Reads the queues of one topic by offset (asyncio).

    Args:
        endpoint: ``host:port`` of the popmq proxy, or several (``"h1:8081,h2:8081"`` or a
            list) to fail over between (docs/operations.md, "Endpoints and failover").
        topic: Topic to read.
        group: Consumer group to commit offsets to; needed only by ``commit_offsets`` and
            ``get_offsets``.
        timeout_s: Timeout of each call, in seconds.
        channel: Optional ``grpc.aio`` channel to use instead of opening one.
        tls: Connect with TLS: ``True`` (the system's roots) or a ``TLSConfig`` (a CA file,
            a client certificate); default plaintext.
        credentials: Access key and secret key that sign every call (servers with
            authentication on: docs/security.md).
    """

    def __init__(
        self,
        endpoint: Endpoints,
        *,
        topic: str,
        group: str = "",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        channel: Any = None,
        tls: TLS = False,
        credentials: Credentials | None = None,
    ) -> None:
        super().__init__(
            endpoint, timeout_s=timeout_s, channel=channel, tls=tls, credentials=credentials
        )
        self.topic = topic
        self.group = group

    async def queue_offsets(self) -> list[QueueStats]:
        """Min and max offset of every queue of the topic, by queue id.

        Raises:
            NotFoundError: The topic does not exist.
        """
        self._check_open()
        response: admin_pb2.GetTopicResponse = await self._conn.call(
            "GetTopic",
            admin_pb2.GetTopicRequest(name=self.topic),
            self._timeout_s,
            service="admin",
            retry=True,
        )
        return [QueueStats.from_proto(q) for q in response.queues]

    async def pull(
        self, queue_id: int, offset: int, max_messages: int = DEFAULT_PULL_MESSAGES
    ) -> PullResult:
        """Read up to ``max_messages`` (1..1024) of one queue from ``offset`` on.

        Fewer come back at the end of the queue or past 8 MiB of bodies; continue from
        ``next_offset``. Below the queue's min offset the read starts at the min offset.

        Raises:
            InvalidArgumentError: Bad queue id, offset beyond the max offset, bad size.
            NotFoundError: The topic does not exist.
        """
        self._check_open()
        request = messaging_pb2.PullMessagesRequest(
            topic=self.topic, queue_id=queue_id, offset=offset, max_messages=max_messages
        )
        response: messaging_pb2.PullMessagesResponse = await self._conn.call(
            "PullMessages", request, self._timeout_s, retry=True
        )
        return PullResult.from_proto(response)

    async def offsets_at(self, at: datetime) -> dict[int, int]:
        """Per queue id, the first offset stored at or after ``at`` (the max offset if none)."""
        self._check_open()
        request = messaging_pb2.GetOffsetsAtTimeRequest(topic=self.topic, time=_timestamp(at))
        response: messaging_pb2.GetOffsetsAtTimeResponse = await self._conn.call(
            "GetOffsetsAtTime", request, self._timeout_s, retry=True
        )
        return {o.queue_id: o.offset for o in response.offsets}

    def _group(self) -> str:
        if not self.group:
            raise InvalidArgumentError("this consumer has no group: pass group= to commit offsets")
        return self.group

    async def commit_offsets(self, offsets: Mapping[int, int]) -> None:
        """Set the group's offset in the given queues (queue id -> offset), all or none.

        Raises:
            FailedPreconditionError: The group has popped messages in flight in one of
                the queues (it consumes by Pop there, not by offset).
            InvalidArgumentError: An offset is beyond its queue's max offset.
        """
        self._check_open()
        request = messaging_pb2.CommitOffsetRequest(
            group=self._group(),
            topic=self.topic,
            offsets=[
                messaging_pb2.QueueOffset(queue_id=q, offset=o) for q, o in sorted(offsets.items())
            ],
        )
        await self._conn.call("CommitOffset", request, self._timeout_s, retry=True)

    async def get_offsets(self) -> list[ConsumerOffset]:
        """The group's offset in every queue of the topic, by queue id.

        Raises:
            NotFoundError: The group or the topic does not exist.
        """
        self._check_open()
        request = messaging_pb2.GetOffsetRequest(group=self._group(), topic=self.topic)
        response: messaging_pb2.GetOffsetResponse = await self._conn.call(
            "GetOffset", request, self._timeout_s, retry=True
        )
        return [ConsumerOffset(o.queue_id, o.offset, o.committed) for o in response.offsets]


class PullConsumer(SyncClient[AsyncPullConsumer]):
    """Reads the queues of one topic by offset (blocking); see ``AsyncPullConsumer``."""

    def __init__(
        self,
        endpoint: Endpoints,
        *,
        topic: str,
        group: str = "",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        tls: TLS = False,
        credentials: Credentials | None = None,
    ) -> None:
        super().__init__(
            AsyncPullConsumer(
                endpoint,
                topic=topic,
                group=group,
                timeout_s=timeout_s,
                tls=tls,
                credentials=credentials,
            )
        )

    @property
    def topic(self) -> str:
        """The topic read."""
        return self._core.topic

    @property
    def group(self) -> str:
        """The group offsets are committed to, or empty."""
        return self._core.group

    def queue_offsets(self) -> list[QueueStats]:
        """Min and max offset of every queue (see ``AsyncPullConsumer.queue_offsets``)."""
        return self._run(self._core.queue_offsets())

    def pull(
        self, queue_id: int, offset: int, max_messages: int = DEFAULT_PULL_MESSAGES
    ) -> PullResult:
        """Read one queue by offset (see ``AsyncPullConsumer.pull``)."""
        return self._run(self._core.pull(queue_id, offset, max_messages))

    def offsets_at(self, at: datetime) -> dict[int, int]:
        """Offsets at a time (see ``AsyncPullConsumer.offsets_at``)."""
        return self._run(self._core.offsets_at(at))

    def commit_offsets(self, offsets: Mapping[int, int]) -> None:
        """Commit the group's offsets (see ``AsyncPullConsumer.commit_offsets``)."""
        self._run(self._core.commit_offsets(offsets))

    def get_offsets(self) -> list[ConsumerOffset]:
        """The group's offsets (see ``AsyncPullConsumer.get_offsets``)."""
        return self._run(self._core.get_offsets())
