"""Admin clients: manage topics and consumer groups and read consumer lag."""

from __future__ import annotations

from collections.abc import Sequence

from popmq.v1 import admin_pb2
from sdk._channel import DEFAULT_TIMEOUT_S, AsyncClient, unary
from sdk._sync import SyncClient
from sdk.types import Group, QueueLag, Topic, TopicDescription, duration_from_seconds

__all__ = ["Admin", "AsyncAdmin", "build_create_group_request", "build_create_topic_request"]


def build_create_topic_request(name: str, queues: int | None) -> admin_pb2.CreateTopicRequest:
    """Build a CreateTopic request; ``queues=None`` leaves it to the server default (8)."""
    request = admin_pb2.CreateTopicRequest(name=name)
    if queues is not None:
        request.queues = queues
    return request


def build_create_group_request(
    name: str, max_delivery_attempts: int | None, retry_backoff_s: Sequence[float] | None
) -> admin_pb2.CreateGroupRequest:
    """Build a CreateGroup request; ``None`` arguments leave the server defaults."""
    request = admin_pb2.CreateGroupRequest(name=name)
    if max_delivery_attempts is not None:
        request.max_delivery_attempts = max_delivery_attempts
    if retry_backoff_s is not None:
        request.retry_backoff.extend(
            duration_from_seconds(s, name="retry_backoff_s") for s in retry_backoff_s
        )
    return request


class AsyncAdmin(AsyncClient):
    """Manages topics and consumer groups (asyncio).

    Args:
        endpoint: ``host:port`` of the popmq proxy.
        timeout_s: Timeout of each call, in seconds.
        channel: Optional ``grpc.aio`` channel to use instead of opening one.
    """

    async def create_topic(self, name: str, queues: int | None = None) -> Topic:
        """Create a topic with ``queues`` queues (``None``: the server default, 8).

        Raises:
            AlreadyExistsError: A topic with that name exists.
            InvalidArgumentError: The name or queue count is not allowed.
        """
        self._check_open()
        response: admin_pb2.CreateTopicResponse = await unary(
            self._conn.admin().CreateTopic,
            build_create_topic_request(name, queues),
            self._timeout_s,
        )
        return Topic.from_proto(response.topic)

    async def get_topic(self, name: str) -> TopicDescription:
        """Describe a topic and the offsets of its queues.

        Raises:
            NotFoundError: The topic does not exist.
        """
        self._check_open()
        response: admin_pb2.GetTopicResponse = await unary(
            self._conn.admin().GetTopic, admin_pb2.GetTopicRequest(name=name), self._timeout_s
        )
        return TopicDescription.from_proto(response)

    async def list_topics(self) -> list[Topic]:
        """List user and dead-letter topics, sorted by name."""
        self._check_open()
        response: admin_pb2.ListTopicsResponse = await unary(
            self._conn.admin().ListTopics, admin_pb2.ListTopicsRequest(), self._timeout_s
        )
        return [Topic.from_proto(t) for t in response.topics]

    async def delete_topic(self, name: str) -> None:
        """Delete a topic with its messages, retry queues and offsets.

        Raises:
            NotFoundError: The topic does not exist.
        """
        self._check_open()
        await unary(
            self._conn.admin().DeleteTopic, admin_pb2.DeleteTopicRequest(name=name), self._timeout_s
        )

    async def create_group(
        self,
        name: str,
        max_delivery_attempts: int | None = None,
        retry_backoff_s: Sequence[float] | None = None,
    ) -> Group:
        """Create a consumer group.

        Args:
            name: Group name.
            max_delivery_attempts: Deliveries before dead-lettering; ``None``: 17.
            retry_backoff_s: Nack delay per delivery attempt in seconds; ``None``: the
                server's default list (1s 5s 10s 30s 1m ... 2h).

        Raises:
            AlreadyExistsError: A group with that name exists.
        """
        self._check_open()
        response: admin_pb2.CreateGroupResponse = await unary(
            self._conn.admin().CreateGroup,
            build_create_group_request(name, max_delivery_attempts, retry_backoff_s),
            self._timeout_s,
        )
        return Group.from_proto(response.group)

    async def get_group(self, name: str) -> Group:
        """Describe a consumer group.

        Raises:
            NotFoundError: The group does not exist.
        """
        self._check_open()
        response: admin_pb2.GetGroupResponse = await unary(
            self._conn.admin().GetGroup, admin_pb2.GetGroupRequest(name=name), self._timeout_s
        )
        return Group.from_proto(response.group)

    async def list_groups(self) -> list[Group]:
        """List consumer groups, sorted by name."""
        self._check_open()
        response: admin_pb2.ListGroupsResponse = await unary(
            self._conn.admin().ListGroups, admin_pb2.ListGroupsRequest(), self._timeout_s
        )
        return [Group.from_proto(g) for g in response.groups]

    async def get_group_lag(self, group: str, topic: str = "") -> list[QueueLag]:
        """Report how far a group is behind, per queue (``topic=""``: every topic it read).

        Rows come normal queues first, then the retry queue.
        """
        self._check_open()
        response: admin_pb2.GetGroupLagResponse = await unary(
            self._conn.admin().GetGroupLag,
            admin_pb2.GetGroupLagRequest(group=group, topic=topic),
            self._timeout_s,
        )
        return [QueueLag.from_proto(q) for q in response.queues]


class Admin(SyncClient[AsyncAdmin]):
    """Manages topics and consumer groups (blocking).

    Args:
        endpoint: ``host:port`` of the popmq proxy.
        timeout_s: Timeout of each call, in seconds.
    """

    def __init__(self, endpoint: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        super().__init__(AsyncAdmin(endpoint, timeout_s=timeout_s))

    def create_topic(self, name: str, queues: int | None = None) -> Topic:
        """Create a topic (see ``AsyncAdmin.create_topic``)."""
        return self._run(self._core.create_topic(name, queues))

    def get_topic(self, name: str) -> TopicDescription:
        """Describe a topic (see ``AsyncAdmin.get_topic``)."""
        return self._run(self._core.get_topic(name))

    def list_topics(self) -> list[Topic]:
        """List topics sorted by name."""
        return self._run(self._core.list_topics())

    def delete_topic(self, name: str) -> None:
        """Delete a topic (see ``AsyncAdmin.delete_topic``)."""
        self._run(self._core.delete_topic(name))

    def create_group(
        self,
        name: str,
        max_delivery_attempts: int | None = None,
        retry_backoff_s: Sequence[float] | None = None,
    ) -> Group:
        """Create a consumer group (see ``AsyncAdmin.create_group``)."""
        return self._run(self._core.create_group(name, max_delivery_attempts, retry_backoff_s))

    def get_group(self, name: str) -> Group:
        """Describe a consumer group (see ``AsyncAdmin.get_group``)."""
        return self._run(self._core.get_group(name))

    def list_groups(self) -> list[Group]:
        """List consumer groups sorted by name."""
        return self._run(self._core.list_groups())

    def get_group_lag(self, group: str, topic: str = "") -> list[QueueLag]:
        """Report a group's lag per queue (see ``AsyncAdmin.get_group_lag``)."""
        return self._run(self._core.get_group_lag(group, topic))
