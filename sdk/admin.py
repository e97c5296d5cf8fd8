"""Admin clients: topics, consumer groups, lag, offsets, stored messages, redrive, server info,
users and access control policies."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf.message import Message

from popmq._gen.popmq.v1 import admin_pb2, messaging_pb2
from popmq.sdk._channel import DEFAULT_TIMEOUT_S, AsyncClient, Endpoints
from popmq.sdk._sync import SyncClient
from popmq.sdk.admin_requests import (
    Time,
    build_create_group_request,
    build_create_topic_request,
    build_reset_offsets_request,
    build_update_group_request,
    timestamp_of,
    user_type_of,
)
from popmq.sdk.admin_types import (
    ExponentialBackoff,
    Group,
    LagReport,
    OffsetReset,
    QueueLag,
    RedriveResult,
    ServerInfo,
    StoredMessage,
    Subscription,
    Topic,
    TopicDescription,
)
from popmq.sdk.cluster_status import ClusterStatus
from popmq.sdk.credentials import Credentials
from popmq.sdk.errors import InvalidArgumentError, NotFoundError
from popmq.sdk.inspection import DeliveryEvent, GroupInspection
from popmq.sdk.tls import TLS
from popmq.sdk.transactions import TransactionInfo, resolution_proto
from popmq.sdk.users import Policy, User

__all__ = [
    "Admin",
    "AsyncAdmin",
]

_LIST_MAX = 1000
"""The most transactions one ListTransactions returns (the server's ceiling)."""

_READS = frozenset(
    {
        "ListTransactions",
        "GetTopic",
        "ListTopics",
        "GetGroup",
        "ListGroups",
        "GetGroupLag",
        "InspectGroup",
        "GetMessageHistory",
        "PeekMessages",
        "QueryMessage",
        "QueryMessagesByKey",
        "GetServerInfo",
        "GetClusterStatus",
        "GetUser",
        "ListUsers",
        "ListPolicies",
    }
)
"""Admin RPCs that change nothing: repeated on the next endpoint after an UNAVAILABLE. The
others (creates, updates, deletes, purges, resets, redrives) are not: the first attempt may
have been applied, and only the caller knows whether doing it again is right."""


class AsyncAdmin(AsyncClient):
    """Manages topics, consumer groups, offsets and stored messages (asyncio).

    With several endpoints, a read that fails UNAVAILABLE is repeated on the next proxy. A
    write is not (create, update, delete, purge, reset, redrive): the failed attempt may
    have been applied, so its ``UnavailableError`` reaches the caller, and the client has
    moved on for the next call.

    Args:
        endpoint: ``host:port`` of the popmq proxy, or several (``"h1:8081,h2:8081"`` or a
            list) to fail over between (docs/operations.md, "Endpoints and failover").
        timeout_s: Timeout of each call, in seconds.
        channel: Optional ``grpc.aio`` channel to use instead of opening one.
        tls: Connect with TLS: ``True`` (the system's roots) or a ``TLSConfig`` (a CA file,
            a client certificate); default plaintext.
        credentials: Access key and secret key that sign every call (servers with
            authentication on: docs/security.md).
    """

    async def _call(self, method: str, request: Message) -> Any:
        self._check_open()
        return await self._conn.call(
            method, request, self._timeout_s, service="admin", retry=method in _READS
        )

    # -- topics ---------------------------------------------------------------------------

    async def create_topic(
        self, name: str, queues: int | None = None, message_type: str | None = None
    ) -> Topic:
        """Create a topic with ``queues`` queues (``None``: the server default, 8).

        Args:
            name: Topic name.
            queues: Number of queues, 1..1024.
            message_type: ``"normal"`` (default), ``"fifo"``, ``"delay"``,
                ``"transaction"`` or ``"mixed"``.

        Raises:
            AlreadyExistsError: A topic with that name exists.
            InvalidArgumentError: The name, queue count or message type is not allowed.
        """
        request = build_create_topic_request(name, queues, message_type)
        response: admin_pb2.CreateTopicResponse = await self._call("CreateTopic", request)
        return Topic.from_proto(response.topic)

    async def update_topic(self, name: str, queues: int, *, broker: str | None = None) -> Topic:
        """Grow a topic to ``queues`` queues (queues are never removed).

        In cluster mode the count is per broker: every broker holding the topic, or only
        ``broker`` (which starts holding the topic if it held none), gets ``queues`` queues.

        Raises:
            NotFoundError: The topic does not exist.
            InvalidArgumentError: ``queues`` is below the current count or above 1024, or
                ``broker`` is not a broker of this server.
        """
        request = admin_pb2.UpdateTopicRequest(name=name, queues=queues)
        if broker is not None:
            request.broker = broker
        response: admin_pb2.UpdateTopicResponse = await self._call("UpdateTopic", request)
        return Topic.from_proto(response.topic)

    async def get_topic(self, name: str) -> TopicDescription:
        """Describe a topic: its queues' offsets, message counts and newest store times.

        Raises:
            NotFoundError: The topic does not exist.
        """
        response: admin_pb2.GetTopicResponse = await self._call(
            "GetTopic", admin_pb2.GetTopicRequest(name=name)
        )
        return TopicDescription.from_proto(response)

    async def list_topics(self) -> list[Topic]:
        """List user and dead-letter topics, sorted by name."""
        response: admin_pb2.ListTopicsResponse = await self._call(
            "ListTopics", admin_pb2.ListTopicsRequest()
        )
        return [Topic.from_proto(t) for t in response.topics]

    async def delete_topic(self, name: str, *, force: bool = False) -> None:
        """Delete a topic with its messages, retry queues and offsets.

        Raises:
            NotFoundError: The topic does not exist.
            FailedPreconditionError: Groups have messages of it in flight (and not ``force``).
        """
        await self._call("DeleteTopic", admin_pb2.DeleteTopicRequest(name=name, force=force))

    async def purge_topic(self, name: str, queue_id: int | None = None) -> int:
        """Delete the stored messages of one queue (or all); returns how many.

        Raises:
            NotFoundError: The topic does not exist.
        """
        request = admin_pb2.PurgeTopicRequest(name=name)
        if queue_id is not None:
            request.queue_id = queue_id
        response: admin_pb2.PurgeTopicResponse = await self._call("PurgeTopic", request)
        return response.purged

    # -- groups ---------------------------------------------------------------------------

    async def create_group(
        self,
        name: str,
        max_delivery_attempts: int | None = None,
        retry_backoff_s: Sequence[float] | None = None,
        *,
        exponential_backoff: ExponentialBackoff | None = None,
        fifo: bool = False,
        subscriptions: Sequence[Subscription] = (),
        consume_from: str | Time | None = None,
    ) -> Group:
        """Create a consumer group.

        Args:
            name: Group name.
            max_delivery_attempts: Deliveries before dead-lettering; ``None``: 17.
            retry_backoff_s: Nack delay per delivery attempt in seconds; ``None``: the
                server's default list (1s 5s 10s 30s 1m ... 2h).
            exponential_backoff: An exponential nack backoff instead of the list.
            fifo: A FIFO group (messages of one message group in send order).
            subscriptions: Topics the group subscribes to, with their filters.
            consume_from: Where the group starts in its subscribed topics: ``"first"``
                (default), ``"last"`` or a time.

        Raises:
            AlreadyExistsError: A group with that name exists.
        """
        request = build_create_group_request(
            name,
            max_delivery_attempts,
            retry_backoff_s,
            exponential_backoff=exponential_backoff,
            fifo=fifo,
            subscriptions=subscriptions,
            consume_from=consume_from,
        )
        response: admin_pb2.CreateGroupResponse = await self._call("CreateGroup", request)
        return Group.from_proto(response.group)

    async def update_group(
        self,
        name: str,
        *,
        max_delivery_attempts: int | None = None,
        retry_backoff_s: Sequence[float] | None = None,
        exponential_backoff: ExponentialBackoff | None = None,
        fifo: bool | None = None,
        set_subscriptions: Sequence[Subscription] = (),
        remove_subscriptions: Sequence[str] = (),
        consume_from: str | Time | None = None,
    ) -> Group:
        """Change a group's settings; arguments left out keep their value.

        Raises:
            NotFoundError: The group (or a subscribed topic) does not exist.
        """
        request = build_update_group_request(
            name,
            max_delivery_attempts=max_delivery_attempts,
            retry_backoff_s=retry_backoff_s,
            exponential_backoff=exponential_backoff,
            fifo=fifo,
            set_subscriptions=set_subscriptions,
            remove_subscriptions=remove_subscriptions,
            consume_from=consume_from,
        )
        response: admin_pb2.UpdateGroupResponse = await self._call("UpdateGroup", request)
        return Group.from_proto(response.group)

    async def get_group(self, name: str) -> Group:
        """Describe a consumer group.

        Raises:
            NotFoundError: The group does not exist.
        """
        response: admin_pb2.GetGroupResponse = await self._call(
            "GetGroup", admin_pb2.GetGroupRequest(name=name)
        )
        return Group.from_proto(response.group)

    async def list_groups(self) -> list[Group]:
        """List consumer groups, sorted by name."""
        response: admin_pb2.ListGroupsResponse = await self._call(
            "ListGroups", admin_pb2.ListGroupsRequest()
        )
        return [Group.from_proto(g) for g in response.groups]

    async def delete_group(self, name: str, *, force: bool = False) -> None:
        """Delete a group, its offsets and retry queues (its dead-letter topic stays).

        Raises:
            NotFoundError: The group does not exist.
            FailedPreconditionError: It has messages in flight (and not ``force``).
        """
        await self._call("DeleteGroup", admin_pb2.DeleteGroupRequest(name=name, force=force))

    async def get_group_lag(self, group: str, topic: str = "") -> list[QueueLag]:
        """Report how far a group is behind, per queue (``topic=""``: every topic it read).

        Rows come normal queues first, then the retry queue.
        """
        return (await self.lag_report(group, topic)).queues

    async def lag_report(self, group: str, topic: str = "") -> LagReport:
        """Lag per queue and per topic, retry backlog, dead-letter depth, oldest unacked age.

        Raises:
            NotFoundError: The group (or topic) does not exist.
        """
        response: admin_pb2.GetGroupLagResponse = await self._call(
            "GetGroupLag", admin_pb2.GetGroupLagRequest(group=group, topic=topic)
        )
        return LagReport.from_proto(response)

    async def inspect_group(
        self, group: str, topic: str = "", *, page_size: int = 0, page_token: str = ""
    ) -> GroupInspection:
        """What the broker knows of a group now: held long polls, a page of messages in
        flight (queue and offset order), revive lag, blocked FIFO heads.

        Args:
            group: Group name.
            topic: Only this topic; "" for every topic the group consumed.
            page_size: In-flight rows, 1..1000 (0: 100).
            page_token: ``next_page_token`` of the previous answer ("" for the first page).

        Raises:
            NotFoundError: The group (or topic) does not exist.
            InvalidArgumentError: A name, the page size or the page token is not allowed.
        """
        request = admin_pb2.InspectGroupRequest(
            group=group, topic=topic, page_size=page_size, page_token=page_token
        )
        response: admin_pb2.InspectGroupResponse = await self._call("InspectGroup", request)
        return GroupInspection.from_proto(response)

    async def message_history(
        self, topic: str, message_id: str, *, group: str = ""
    ) -> list[DeliveryEvent]:
        """What happened to a stored message, oldest first: each pop, nack, invisible-time
        change, retry copy (and its pops) and dead-lettering its broker still remembers (a
        bounded in-memory history; the popping client is not recorded).

        Raises:
            NotFoundError: The topic, group or message does not exist.
        """
        request = admin_pb2.GetMessageHistoryRequest(
            topic=topic, message_id=message_id, group=group
        )
        response: admin_pb2.GetMessageHistoryResponse = await self._call(
            "GetMessageHistory", request
        )
        return [DeliveryEvent.from_proto(e) for e in response.events]

    async def reset_offsets(
        self, group: str, topic: str, to: str | Time | Mapping[int, int], *, force: bool = False
    ) -> OffsetReset:
        """Move a group's offsets in a topic (see ``build_reset_offsets_request``).

        Raises:
            NotFoundError: The group or topic does not exist.
            FailedPreconditionError: Messages are in flight (and not ``force``).
            InvalidArgumentError: An explicit offset is outside its queue's range.
        """
        response: admin_pb2.ResetOffsetsResponse = await self._call(
            "ResetOffsets", build_reset_offsets_request(group, topic, to, force=force)
        )
        return OffsetReset.from_proto(response)

    # -- messages -------------------------------------------------------------------------

    async def peek_messages(
        self,
        topic: str,
        *,
        queue_id: int | None = None,
        offset: int | None = None,
        group: str = "",
        max_messages: int = 16,
    ) -> list[StoredMessage]:
        """Read stored messages without consuming them.

        Args:
            topic: Topic (dead-letter topics ``%DLQ%<group>`` too).
            queue_id: Only this queue; ``None``: every queue in order.
            offset: First offset (needs ``queue_id``); ``None``: the group's position when
                ``group`` is given, else the oldest stored message.
            group: Peek at what this group gets next.
            max_messages: At most this many, 1..256.
        """
        request = admin_pb2.PeekMessagesRequest(topic=topic, group=group, max_messages=max_messages)
        if queue_id is not None:
            request.queue_id = queue_id
        if offset is not None:
            request.offset = offset
        response: admin_pb2.PeekMessagesResponse = await self._call("PeekMessages", request)
        return [StoredMessage.from_proto(m) for m in response.messages]

    async def query_message(self, topic: str, message_id: str) -> StoredMessage:
        """Find a message of a topic by its id.

        Raises:
            NotFoundError: No such message (never sent, or deleted since).
        """
        response: admin_pb2.QueryMessageResponse = await self._call(
            "QueryMessage", admin_pb2.QueryMessageRequest(topic=topic, message_id=message_id)
        )
        return StoredMessage.from_proto(response.message)

    async def query_messages_by_key(self, topic: str, key: str) -> list[StoredMessage]:
        """Find the messages of a topic that carry a business key, oldest first."""
        response: admin_pb2.QueryMessagesByKeyResponse = await self._call(
            "QueryMessagesByKey", admin_pb2.QueryMessagesByKeyRequest(topic=topic, key=key)
        )
        return [StoredMessage.from_proto(m) for m in response.messages]

    async def offsets_at(self, topic: str, timestamp: Time) -> dict[int, int]:
        """Per queue, the first offset stored at or after ``timestamp`` (max offset if none)."""
        self._check_open()
        response = await self._conn.call(
            "GetOffsetsAtTime",
            messaging_pb2.GetOffsetsAtTimeRequest(
                topic=topic, time=timestamp_of(timestamp, name="timestamp")
            ),
            self._timeout_s,
            retry=True,
        )
        return {o.queue_id: o.offset for o in response.offsets}

    async def redrive_dead_letters(
        self,
        group: str,
        *,
        max_messages: int | None = None,
        messages: Sequence[tuple[int, int]] = (),
    ) -> RedriveResult:
        """Move messages of ``%DLQ%<group>`` back to their topics, oldest first (SQS redrive).

        Args:
            group: The group whose dead letters to move.
            max_messages: At most this many; ``None``: all stored now.
            messages: Only these dead letters, as ``(queue_id, offset)`` of ``%DLQ%<group>``
                (1..1000, each once; not with ``max_messages``). The result's ``outcomes``
                says for each whether it moved, was dropped or was not found.
        """
        request = admin_pb2.RedriveDeadLettersRequest(
            group=group,
            messages=[admin_pb2.DeadLetterRef(queue_id=q, offset=o) for q, o in messages],
        )
        if max_messages is not None:
            request.max_messages = max_messages
        response: admin_pb2.RedriveDeadLettersResponse = await self._call(
            "RedriveDeadLetters", request
        )
        return RedriveResult.from_proto(response)

    # -- transactions -------------------------------------------------------------------

    async def list_transactions(
        self, *, discarded: bool = False, topic: str | None = None, limit: int = 100
    ) -> list[TransactionInfo]:
        """Open transactions (waiting for a commit, a rollback or a check) or, with
        ``discarded``, those discarded after the server's last check; of one topic or all,
        oldest first, at most ``limit`` (1..1000)."""
        request = admin_pb2.ListTransactionsRequest(
            state=(
                admin_pb2.TRANSACTION_LIST_STATE_DISCARDED
                if discarded
                else admin_pb2.TRANSACTION_LIST_STATE_OPEN
            ),
            topic=topic or "",
            limit=limit,
        )
        response: admin_pb2.ListTransactionsResponse = await self._call("ListTransactions", request)
        return [TransactionInfo.from_proto(t) for t in response.transactions]

    async def commit_transaction(
        self, transaction_id: str, *, topic: str | None = None
    ) -> TransactionInfo:
        """Commit an open transaction as an operator: its message is delivered.

        ``topic`` is the transaction's (access control checks UPDATE on it); None looks it
        up among the open transactions (which needs LIST on every topic).

        Raises:
            FailedPreconditionError: It was rolled back, or discarded (resume it first).
            NotFoundError: No open transaction has this id (``topic`` None), or it was
                resolved long ago and forgotten.
        """
        return await self._resolve(transaction_id, topic, commit=True)

    async def rollback_transaction(
        self, transaction_id: str, *, topic: str | None = None
    ) -> TransactionInfo:
        """Roll back an open transaction as an operator: its message is never delivered
        (see ``commit_transaction``)."""
        return await self._resolve(transaction_id, topic, commit=False)

    async def resume_transaction(
        self, transaction_id: str, *, topic: str | None = None
    ) -> TransactionInfo:
        """Reopen a discarded transaction: its producer is checked again, from a fresh
        count, and it can be committed or rolled back. ``topic`` as for
        ``commit_transaction`` (None: looked up among the discarded ones).

        Raises:
            FailedPreconditionError: It is not discarded.
        """
        topic = topic or await self._topic_of(transaction_id, discarded=True)
        request = admin_pb2.ResumeTransactionRequest(transaction_id=transaction_id, topic=topic)
        response: admin_pb2.ResumeTransactionResponse = await self._call(
            "ResumeTransaction", request
        )
        return TransactionInfo.from_proto(response.transaction)

    async def half_message(self, transaction_id: str, *, topic: str | None = None) -> StoredMessage:
        """The half message (body and properties) of an open or discarded transaction,
        read without changing it; ``offset`` is -1 (it is in no queue yet). ``topic`` as for
        ``commit_transaction`` (None: looked up among the open ones).

        Raises:
            FailedPreconditionError: It is committed or rolled back (its body is dropped).
        """
        topic = topic or await self._topic_of(transaction_id, discarded=False)
        request = admin_pb2.GetHalfMessageRequest(transaction_id=transaction_id, topic=topic)
        response: admin_pb2.GetHalfMessageResponse = await self._call("GetHalfMessage", request)
        return StoredMessage.from_proto(response.message)

    async def _resolve(
        self, transaction_id: str, topic: str | None, *, commit: bool
    ) -> TransactionInfo:
        topic = topic or await self._topic_of(transaction_id, discarded=False)
        request = admin_pb2.ResolveTransactionRequest(
            transaction_id=transaction_id, topic=topic, resolution=resolution_proto(commit)
        )
        response: admin_pb2.ResolveTransactionResponse = await self._call(
            "ResolveTransaction", request
        )
        return TransactionInfo.from_proto(response.transaction)

    async def _topic_of(self, transaction_id: str, *, discarded: bool) -> str:
        if not transaction_id:
            raise InvalidArgumentError("transaction_id is empty")
        for listed in await self.list_transactions(discarded=discarded, limit=_LIST_MAX):
            if listed.transaction_id == transaction_id:
                return listed.topic
        kind = "discarded" if discarded else "open"
        raise NotFoundError(
            f"no {kind} transaction {transaction_id} among the oldest {_LIST_MAX}; name its topic"
        )

    # -- server ---------------------------------------------------------------------------

    async def server_info(self) -> ServerInfo:
        """The server's version, uptime, store size and configuration in effect."""
        response: admin_pb2.GetServerInfoResponse = await self._call(
            "GetServerInfo", admin_pb2.GetServerInfoRequest()
        )
        return ServerInfo.from_proto(response)

    async def cluster_status(self) -> ClusterStatus:
        """The brokers, proxies and etcd of the cluster as the answering proxy sees them now
        (``popmq serve``: its one broker, mode ``"local"``). It answers while etcd or brokers
        are down, marking what did not answer."""
        response: admin_pb2.GetClusterStatusResponse = await self._call(
            "GetClusterStatus", admin_pb2.GetClusterStatusRequest()
        )
        return ClusterStatus.from_proto(response)

    # -- users and policies (SUPER users only) ------------------------------------------------

    async def create_user(
        self,
        access_key: str,
        secret_key: str,
        *,
        user_type: str = "normal",
        enabled: bool = True,
    ) -> User:
        """Create a user with no policies (only a SUPER user may manage users).

        Args:
            access_key: 1..64 of letters, digits, ``_``, ``.``, ``-``.
            secret_key: 8..256 printable characters; it signs the user's requests.
            user_type: ``"normal"`` (checked against its policies) or ``"super"``.
            enabled: A disabled user's requests are refused.

        Raises:
            AlreadyExistsError: The user exists.
            PermissionDeniedError: The caller is not a SUPER user.
        """
        request = admin_pb2.CreateUserRequest(
            access_key=access_key,
            secret_key=secret_key,
            user_type=user_type_of(user_type),
            enabled=enabled,
        )
        response: admin_pb2.CreateUserResponse = await self._call("CreateUser", request)
        return User.from_proto(response.user)

    async def update_user(
        self,
        access_key: str,
        *,
        secret_key: str | None = None,
        user_type: str | None = None,
        enabled: bool | None = None,
    ) -> User:
        """Change a user's secret, type or enabled state; arguments left out keep theirs.

        Raises:
            NotFoundError: The user does not exist.
        """
        request = admin_pb2.UpdateUserRequest(
            access_key=access_key, user_type=user_type_of(user_type)
        )
        if secret_key is not None:
            request.secret_key = secret_key
        if enabled is not None:
            request.enabled = enabled
        response: admin_pb2.UpdateUserResponse = await self._call("UpdateUser", request)
        return User.from_proto(response.user)

    async def delete_user(self, access_key: str) -> None:
        """Delete a user and its policies.

        Raises:
            NotFoundError: The user does not exist.
        """
        await self._call("DeleteUser", admin_pb2.DeleteUserRequest(access_key=access_key))

    async def get_user(self, access_key: str) -> User:
        """Describe a user (its policies: ``list_policies``).

        Raises:
            NotFoundError: The user does not exist.
        """
        response: admin_pb2.GetUserResponse = await self._call(
            "GetUser", admin_pb2.GetUserRequest(access_key=access_key)
        )
        return User.from_proto(response.user)

    async def list_users(self) -> list[User]:
        """The stored users, sorted by access key (the root user is not stored)."""
        response: admin_pb2.ListUsersResponse = await self._call(
            "ListUsers", admin_pb2.ListUsersRequest()
        )
        return [User.from_proto(u) for u in response.users]

    async def grant_policy(self, access_key: str, policy: Policy) -> list[Policy]:
        """Add a policy to a user; returns the user's policies after it.

        A policy with the same resource, pattern, name, decision and source CIDRs gets the
        new actions added instead of a second entry.

        Raises:
            NotFoundError: The user does not exist.
            InvalidArgumentError: The policy is not valid (the message says why).
        """
        response: admin_pb2.GrantPolicyResponse = await self._call(
            "GrantPolicy",
            admin_pb2.GrantPolicyRequest(access_key=access_key, policy=policy.to_proto()),
        )
        return [Policy.from_proto(p) for p in response.policies]

    async def revoke_policy(self, access_key: str, policy: Policy) -> list[Policy]:
        """Remove ``policy.actions`` (none: all) from the user's policy with the same
        resource, pattern, name, decision and source CIDRs; returns its policies after it.

        Raises:
            NotFoundError: The user, or such a policy of it, does not exist.
        """
        response: admin_pb2.RevokePolicyResponse = await self._call(
            "RevokePolicy",
            admin_pb2.RevokePolicyRequest(access_key=access_key, policy=policy.to_proto()),
        )
        return [Policy.from_proto(p) for p in response.policies]

    async def list_policies(self, access_key: str = "") -> dict[str, list[Policy]]:
        """Policies by access key: one user's, or (``""``) every user's.

        Raises:
            NotFoundError: The named user does not exist.
        """
        response: admin_pb2.ListPoliciesResponse = await self._call(
            "ListPolicies", admin_pb2.ListPoliciesRequest(access_key=access_key)
        )
        return {u.access_key: [Policy.from_proto(p) for p in u.policies] for u in response.users}


class Admin(SyncClient[AsyncAdmin]):
    """Manages topics, consumer groups, offsets and stored messages (blocking).

    Every method is the blocking form of the ``AsyncAdmin`` method of the same name.

    Args:
        endpoint: ``host:port`` of the popmq proxy, or several (``"h1:8081,h2:8081"`` or a
            list) to fail over between (docs/operations.md, "Endpoints and failover").
        timeout_s: Timeout of each call, in seconds.
        tls: Connect with TLS: ``True`` (the system's roots) or a ``TLSConfig`` (a CA file,
            a client certificate); default plaintext.
        credentials: Access key and secret key that sign every call (servers with
            authentication on: docs/security.md).
    """

    def __init__(
        self,
        endpoint: Endpoints,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        tls: TLS = False,
        credentials: Credentials | None = None,
    ) -> None:
        super().__init__(
            AsyncAdmin(endpoint, timeout_s=timeout_s, tls=tls, credentials=credentials)
        )

    def create_topic(
        self, name: str, queues: int | None = None, message_type: str | None = None
    ) -> Topic:
        """Create a topic (see ``AsyncAdmin.create_topic``)."""
        return self._run(self._core.create_topic(name, queues, message_type))

    def update_topic(self, name: str, queues: int, *, broker: str | None = None) -> Topic:
        """Grow a topic (see ``AsyncAdmin.update_topic``)."""
        return self._run(self._core.update_topic(name, queues, broker=broker))

    def get_topic(self, name: str) -> TopicDescription:
        """Describe a topic (see ``AsyncAdmin.get_topic``)."""
        return self._run(self._core.get_topic(name))

    def list_topics(self) -> list[Topic]:
        """List topics sorted by name."""
        return self._run(self._core.list_topics())

    def delete_topic(self, name: str, *, force: bool = False) -> None:
        """Delete a topic (see ``AsyncAdmin.delete_topic``)."""
        self._run(self._core.delete_topic(name, force=force))

    def purge_topic(self, name: str, queue_id: int | None = None) -> int:
        """Purge a topic's queue(s) (see ``AsyncAdmin.purge_topic``)."""
        return self._run(self._core.purge_topic(name, queue_id))

    def create_group(
        self,
        name: str,
        max_delivery_attempts: int | None = None,
        retry_backoff_s: Sequence[float] | None = None,
        *,
        exponential_backoff: ExponentialBackoff | None = None,
        fifo: bool = False,
        subscriptions: Sequence[Subscription] = (),
        consume_from: str | Time | None = None,
    ) -> Group:
        """Create a consumer group (see ``AsyncAdmin.create_group``)."""
        return self._run(
            self._core.create_group(
                name,
                max_delivery_attempts,
                retry_backoff_s,
                exponential_backoff=exponential_backoff,
                fifo=fifo,
                subscriptions=subscriptions,
                consume_from=consume_from,
            )
        )

    def update_group(
        self,
        name: str,
        *,
        max_delivery_attempts: int | None = None,
        retry_backoff_s: Sequence[float] | None = None,
        exponential_backoff: ExponentialBackoff | None = None,
        fifo: bool | None = None,
        set_subscriptions: Sequence[Subscription] = (),
        remove_subscriptions: Sequence[str] = (),
        consume_from: str | Time | None = None,
    ) -> Group:
        """Change a group's settings (see ``AsyncAdmin.update_group``)."""
        return self._run(
            self._core.update_group(
                name,
                max_delivery_attempts=max_delivery_attempts,
                retry_backoff_s=retry_backoff_s,
                exponential_backoff=exponential_backoff,
                fifo=fifo,
                set_subscriptions=set_subscriptions,
                remove_subscriptions=remove_subscriptions,
                consume_from=consume_from,
            )
        )

    def get_group(self, name: str) -> Group:
        """Describe a consumer group (see ``AsyncAdmin.get_group``)."""
        return self._run(self._core.get_group(name))

    def list_groups(self) -> list[Group]:
        """List consumer groups sorted by name."""
        return self._run(self._core.list_groups())

    def delete_group(self, name: str, *, force: bool = False) -> None:
        """Delete a group (see ``AsyncAdmin.delete_group``)."""
        self._run(self._core.delete_group(name, force=force))

    def get_group_lag(self, group: str, topic: str = "") -> list[QueueLag]:
        """Report a group's lag per queue (see ``AsyncAdmin.get_group_lag``)."""
        return self._run(self._core.get_group_lag(group, topic))

    def lag_report(self, group: str, topic: str = "") -> LagReport:
        """Lag per queue and topic with backlogs (see ``AsyncAdmin.lag_report``)."""
        return self._run(self._core.lag_report(group, topic))

    def inspect_group(
        self, group: str, topic: str = "", *, page_size: int = 0, page_token: str = ""
    ) -> GroupInspection:
        """A group's runtime view (see ``AsyncAdmin.inspect_group``)."""
        return self._run(
            self._core.inspect_group(group, topic, page_size=page_size, page_token=page_token)
        )

    def message_history(
        self, topic: str, message_id: str, *, group: str = ""
    ) -> list[DeliveryEvent]:
        """A message's delivery history (see ``AsyncAdmin.message_history``)."""
        return self._run(self._core.message_history(topic, message_id, group=group))

    def reset_offsets(
        self, group: str, topic: str, to: str | Time | Mapping[int, int], *, force: bool = False
    ) -> OffsetReset:
        """Move a group's offsets (see ``AsyncAdmin.reset_offsets``)."""
        return self._run(self._core.reset_offsets(group, topic, to, force=force))

    def peek_messages(
        self,
        topic: str,
        *,
        queue_id: int | None = None,
        offset: int | None = None,
        group: str = "",
        max_messages: int = 16,
    ) -> list[StoredMessage]:
        """Read stored messages without consuming them (see ``AsyncAdmin.peek_messages``)."""
        return self._run(
            self._core.peek_messages(
                topic, queue_id=queue_id, offset=offset, group=group, max_messages=max_messages
            )
        )

    def query_message(self, topic: str, message_id: str) -> StoredMessage:
        """Find a message by id (see ``AsyncAdmin.query_message``)."""
        return self._run(self._core.query_message(topic, message_id))

    def query_messages_by_key(self, topic: str, key: str) -> list[StoredMessage]:
        """Find messages by business key (see ``AsyncAdmin.query_messages_by_key``)."""
        return self._run(self._core.query_messages_by_key(topic, key))

    def offsets_at(self, topic: str, timestamp: Time) -> dict[int, int]:
        """Per queue, the first offset at or after a time (see ``AsyncAdmin.offsets_at``)."""
        return self._run(self._core.offsets_at(topic, timestamp))

    def redrive_dead_letters(
        self,
        group: str,
        *,
        max_messages: int | None = None,
        messages: Sequence[tuple[int, int]] = (),
    ) -> RedriveResult:
        """Move dead letters back (see ``AsyncAdmin.redrive_dead_letters``)."""
        return self._run(
            self._core.redrive_dead_letters(group, max_messages=max_messages, messages=messages)
        )

    def list_transactions(
        self, *, discarded: bool = False, topic: str | None = None, limit: int = 100
    ) -> list[TransactionInfo]:
        """Open or discarded transactions (see ``AsyncAdmin.list_transactions``)."""
        return self._run(
            self._core.list_transactions(discarded=discarded, topic=topic, limit=limit)
        )

    def commit_transaction(
        self, transaction_id: str, *, topic: str | None = None
    ) -> TransactionInfo:
        """Commit an open transaction (see ``AsyncAdmin.commit_transaction``)."""
        return self._run(self._core.commit_transaction(transaction_id, topic=topic))

    def rollback_transaction(
        self, transaction_id: str, *, topic: str | None = None
    ) -> TransactionInfo:
        """Roll back an open transaction (see ``AsyncAdmin.rollback_transaction``)."""
        return self._run(self._core.rollback_transaction(transaction_id, topic=topic))

    def resume_transaction(
        self, transaction_id: str, *, topic: str | None = None
    ) -> TransactionInfo:
        """Reopen a discarded transaction (see ``AsyncAdmin.resume_transaction``)."""
        return self._run(self._core.resume_transaction(transaction_id, topic=topic))

    def half_message(self, transaction_id: str, *, topic: str | None = None) -> StoredMessage:
        """A transaction's half message (see ``AsyncAdmin.half_message``)."""
        return self._run(self._core.half_message(transaction_id, topic=topic))

    def server_info(self) -> ServerInfo:
        """The server's version, uptime, store size and configuration."""
        return self._run(self._core.server_info())

    def cluster_status(self) -> ClusterStatus:
        """Brokers, proxies and etcd now (see ``AsyncAdmin.cluster_status``)."""
        return self._run(self._core.cluster_status())

    def create_user(
        self,
        access_key: str,
        secret_key: str,
        *,
        user_type: str = "normal",
        enabled: bool = True,
    ) -> User:
        """Create a user (see ``AsyncAdmin.create_user``)."""
        return self._run(
            self._core.create_user(access_key, secret_key, user_type=user_type, enabled=enabled)
        )

    def update_user(
        self,
        access_key: str,
        *,
        secret_key: str | None = None,
        user_type: str | None = None,
        enabled: bool | None = None,
    ) -> User:
        """Change a user (see ``AsyncAdmin.update_user``)."""
        return self._run(
            self._core.update_user(
                access_key, secret_key=secret_key, user_type=user_type, enabled=enabled
            )
        )

    def delete_user(self, access_key: str) -> None:
        """Delete a user and its policies."""
        self._run(self._core.delete_user(access_key))

    def get_user(self, access_key: str) -> User:
        """Describe a user (see ``AsyncAdmin.get_user``)."""
        return self._run(self._core.get_user(access_key))

    def list_users(self) -> list[User]:
        """The stored users, sorted by access key."""
        return self._run(self._core.list_users())

    def grant_policy(self, access_key: str, policy: Policy) -> list[Policy]:
        """Add a policy to a user (see ``AsyncAdmin.grant_policy``)."""
        return self._run(self._core.grant_policy(access_key, policy))

    def revoke_policy(self, access_key: str, policy: Policy) -> list[Policy]:
        """Remove actions of a user's policy (see ``AsyncAdmin.revoke_policy``)."""
        return self._run(self._core.revoke_policy(access_key, policy))

    def list_policies(self, access_key: str = "") -> dict[str, list[Policy]]:
        """Policies by access key (see ``AsyncAdmin.list_policies``)."""
        return self._run(self._core.list_policies(access_key))
