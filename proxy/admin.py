"""popmq.v1.AdminService on top of the broker.

Each RPC checks the request's shape here (enums, required fields, oneof-like pairs) and
leaves every rule about names, ranges and state to the broker, so the SDK, grpcurl and the
embedded API get the same answers. Errors become gRPC statuses once, in
`popmq.grpc_calls.errors.rpc`.

Transactions (ListTransactions, ResolveTransaction, ResumeTransaction) need a broker that
implements TransactionAPI; another answers FAILED_PRECONDITION.

Every mutation (topics, groups, offsets, purge, redrive, transactions) writes its audit
line, successful or not (`popmq.security.audit.audited`; the events are its AUDITED_METHODS).
GetServerInfo shows the configuration to SUPER users only.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from importlib import metadata

import grpc

from popmq._gen.popmq.v1 import admin_pb2, admin_pb2_grpc
from popmq.broker_core import (
    MAX_BACKOFF_ENTRIES,
    MAX_QUEUES,
    MAX_SUBSCRIPTIONS,
    BrokerAPI,
    ExponentialBackoff,
    FailedPreconditionError,
    GroupSettings,
    InvalidArgumentError,
    check_count,
)
from popmq.grpc_calls.errors import rpc
from popmq.proxy import convert
from popmq.proxy.messaging import transactions_of
from popmq.proxy.security_admin import UserAdmin
from popmq.proxy.status import LocalStatus, StatusProvider
from popmq.security.audit import audited
from popmq.security.model import current_principal
from popmq.security.store import SecurityStore

_SERVER_VERSION: str
try:
    _SERVER_VERSION = metadata.version("popmq")
except metadata.PackageNotFoundError:  # running from a source tree that is not installed
    _SERVER_VERSION = "0+unknown"

_REDRIVE_OUTCOMES: Mapping[str, admin_pb2.RedriveOutcome] = {
    "moved": admin_pb2.REDRIVE_OUTCOME_MOVED,
    "dropped": admin_pb2.REDRIVE_OUTCOME_DROPPED,
    "not_found": admin_pb2.REDRIVE_OUTCOME_NOT_FOUND,
}
"""The broker's outcome of one named dead letter, as the API's enum."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class AdminServicer(UserAdmin, admin_pb2_grpc.AdminServiceServicer):
    """Topics, groups, lag, offsets, stored messages, redrive, server info and status;
    users and policies (proxy/security_admin.py).

    Args:
        broker: The embedded broker.
        config_items: The effective configuration as "section.key" -> TOML value, reported
            by GetServerInfo to SUPER users (secrets redacted: popmq.runtime.settings.items).
        status: What GetClusterStatus reports; default: `broker` as the one local broker
            (with no address: the server passes one that knows its address).
        security_store: Where users and policies live; None: the user RPCs answer
            FAILED_PRECONDITION.
    """

    def __init__(
        self,
        broker: BrokerAPI,
        *,
        config_items: Mapping[str, str] | None = None,
        status: StatusProvider | None = None,
        security_store: SecurityStore | None = None,
    ) -> None:
        self._broker = broker
        self._security_store = security_store
        self._config_items = dict(config_items or {})
        self._start_ms = _now_ms()
        self._status = status or LocalStatus(broker, address=lambda: "")

    # -- topics ---------------------------------------------------------------------------

    @rpc
    @audited("topic.create")
    async def CreateTopic(
        self, request: admin_pb2.CreateTopicRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.CreateTopicResponse:
        queues = request.queues if request.HasField("queues") else None
        info = await self._broker.create_topic(
            request.name, queues, message_type=convert.message_type_name(request.message_type)
        )
        return admin_pb2.CreateTopicResponse(topic=convert.topic(info))

    @rpc
    @audited("topic.update")
    async def UpdateTopic(
        self, request: admin_pb2.UpdateTopicRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.UpdateTopicResponse:
        broker = request.broker if request.HasField("broker") else None
        info = await self._broker.update_topic(request.name, request.queues, broker=broker)
        return admin_pb2.UpdateTopicResponse(topic=convert.topic(info))

    @rpc
    async def GetTopic(
        self, request: admin_pb2.GetTopicRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.GetTopicResponse:
        info, queues, groups = await self._broker.describe_topic(request.name)
        return admin_pb2.GetTopicResponse(
            topic=convert.topic(info),
            queues=[convert.queue_details(q) for q in queues],
            consumer_groups=groups,
        )

    @rpc
    async def ListTopics(
        self, request: admin_pb2.ListTopicsRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.ListTopicsResponse:
        return admin_pb2.ListTopicsResponse(
            topics=[convert.topic(t) for t in await self._broker.list_topics()]
        )

    @rpc
    @audited("topic.delete")
    async def DeleteTopic(
        self, request: admin_pb2.DeleteTopicRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.DeleteTopicResponse:
        await self._broker.delete_topic_guarded(request.name, force=request.force)
        return admin_pb2.DeleteTopicResponse()

    @rpc
    @audited("topic.purge")
    async def PurgeTopic(
        self, request: admin_pb2.PurgeTopicRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.PurgeTopicResponse:
        queue_id = request.queue_id if request.HasField("queue_id") else None
        purged = await self._broker.purge(request.name, queue_id)
        return admin_pb2.PurgeTopicResponse(purged=purged)

    # -- groups ---------------------------------------------------------------------------

    @rpc
    @audited("group.create")
    async def CreateGroup(
        self, request: admin_pb2.CreateGroupRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.CreateGroupResponse:
        _check_group_lists(request)
        attempts = (
            request.max_delivery_attempts if request.HasField("max_delivery_attempts") else None
        )
        backoff = [
            convert.seconds(f"retry_backoff[{i}]", d) for i, d in enumerate(request.retry_backoff)
        ]
        consume_from, consume_from_ms = convert.consume_from(
            request.consume_from,
            request.consume_from_time,
            has_time=request.HasField("consume_from_time"),
        )
        settings = GroupSettings(
            fifo=request.fifo,
            subscriptions=tuple(
                convert.subscription(f"subscriptions[{i}]", s)
                for i, s in enumerate(request.subscriptions)
            ),
            consume_from=consume_from,
            consume_from_ms=consume_from_ms,
            exponential_backoff=self._exponential(request),
        )
        info = await self._broker.create_group_with_settings(
            request.name,
            max_delivery_attempts=attempts,
            retry_backoff_s=backoff or None,
            settings=settings,
        )
        return admin_pb2.CreateGroupResponse(group=self._group(info.name))

    @rpc
    @audited("group.update")
    async def UpdateGroup(
        self, request: admin_pb2.UpdateGroupRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.UpdateGroupResponse:
        _check_group_lists(request)
        consume_from: str | None = None
        consume_from_ms = 0
        if request.consume_from != admin_pb2.CONSUME_FROM_UNSPECIFIED or request.HasField(
            "consume_from_time"
        ):
            consume_from, consume_from_ms = convert.consume_from(
                request.consume_from,
                request.consume_from_time,
                has_time=request.HasField("consume_from_time"),
            )
        info = await self._broker.update_group(
            request.name,
            max_delivery_attempts=(
                request.max_delivery_attempts if request.HasField("max_delivery_attempts") else None
            ),
            retry_backoff_s=[
                convert.seconds(f"retry_backoff[{i}]", d)
                for i, d in enumerate(request.retry_backoff)
            ]
            or None,
            exponential_backoff=self._exponential(request),
            fifo=request.fifo if request.HasField("fifo") else None,
            set_subscriptions=[
                convert.subscription(f"set_subscriptions[{i}]", s)
                for i, s in enumerate(request.set_subscriptions)
            ],
            remove_subscriptions=list(request.remove_subscriptions),
            consume_from=consume_from,
            consume_from_ms=consume_from_ms,
        )
        return admin_pb2.UpdateGroupResponse(group=self._group(info.name))

    @staticmethod
    def _exponential(
        request: admin_pb2.CreateGroupRequest | admin_pb2.UpdateGroupRequest,
    ) -> ExponentialBackoff | None:
        if not request.HasField("exponential_backoff"):
            return None
        return convert.exponential_backoff("exponential_backoff", request.exponential_backoff)

    def _group(self, name: str) -> admin_pb2.Group:
        return convert.group_with_settings(
            self._broker.get_group(name), self._broker.group_settings(name)
        )

    @rpc
    async def GetGroup(
        self, request: admin_pb2.GetGroupRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.GetGroupResponse:
        return admin_pb2.GetGroupResponse(group=self._group(request.name))

    @rpc
    async def ListGroups(
        self, request: admin_pb2.ListGroupsRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.ListGroupsResponse:
        return admin_pb2.ListGroupsResponse(
            groups=[self._group(g.name) for g in await self._broker.list_groups()]
        )

    @rpc
    @audited("group.delete")
    async def DeleteGroup(
        self, request: admin_pb2.DeleteGroupRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.DeleteGroupResponse:
        await self._broker.delete_group(request.name, force=request.force)
        return admin_pb2.DeleteGroupResponse()

    @rpc
    async def GetGroupLag(
        self, request: admin_pb2.GetGroupLagRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.GetGroupLagResponse:
        report = await self._broker.lag_report(request.group, request.topic)
        return convert.lag_report(report, _now_ms())

    @rpc
    async def InspectGroup(
        self, request: admin_pb2.InspectGroupRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.InspectGroupResponse:
        view = await self._broker.inspect_group(
            request.group,
            request.topic,
            page_size=request.page_size,
            page_token=request.page_token,
        )
        return convert.inspection(view)

    @rpc
    async def GetMessageHistory(
        self, request: admin_pb2.GetMessageHistoryRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.GetMessageHistoryResponse:
        events = await self._broker.message_history(
            request.topic, request.message_id, group=request.group
        )
        return admin_pb2.GetMessageHistoryResponse(
            events=[convert.delivery_event(e) for e in events]
        )

    @rpc
    @audited("offsets.reset")
    async def ResetOffsets(
        self, request: admin_pb2.ResetOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.ResetOffsetsResponse:
        check_count("offsets", len(request.offsets), MAX_QUEUES)
        target = convert.reset_target(request.target)
        if target == "timestamp" and not request.HasField("timestamp"):
            raise InvalidArgumentError("RESET_TARGET_TIMESTAMP needs timestamp")
        if target != "timestamp" and request.HasField("timestamp"):
            raise InvalidArgumentError("timestamp is only allowed with RESET_TARGET_TIMESTAMP")
        if target != "offsets" and request.offsets:
            raise InvalidArgumentError("offsets are only allowed with RESET_TARGET_OFFSETS")
        result = await self._broker.reset_offsets(
            request.group,
            request.topic,
            target=target,
            timestamp_ms=(
                convert.timestamp_ms("timestamp", request.timestamp) if target == "timestamp" else 0
            ),
            offsets=dict(request.offsets),
            force=request.force,
        )
        return convert.reset_result(result)

    # -- messages -------------------------------------------------------------------------

    @rpc
    async def PeekMessages(
        self, request: admin_pb2.PeekMessagesRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.PeekMessagesResponse:
        found = await self._broker.peek(
            request.topic,
            queue_id=request.queue_id if request.HasField("queue_id") else None,
            offset=request.offset if request.HasField("offset") else None,
            group=request.group,
            max_messages=request.max_messages if request.HasField("max_messages") else 16,
        )
        return admin_pb2.PeekMessagesResponse(
            messages=[
                convert.stored_message(m.topic, m.queue_id, m.offset, m.record) for m in found
            ]
        )

    @rpc
    async def QueryMessage(
        self, request: admin_pb2.QueryMessageRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.QueryMessageResponse:
        if not request.message_id:
            raise InvalidArgumentError("message_id is empty: give the id a send returned")
        found = await self._broker.query_message(request.topic, request.message_id)
        return admin_pb2.QueryMessageResponse(
            message=convert.stored_message(found.topic, found.queue_id, found.offset, found.record)
        )

    @rpc
    async def QueryMessagesByKey(
        self, request: admin_pb2.QueryMessagesByKeyRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.QueryMessagesByKeyResponse:
        if not request.key:
            raise InvalidArgumentError("key is empty: give a business key set at send")
        found = await self._broker.query_messages_by_key(request.topic, request.key)
        return admin_pb2.QueryMessagesByKeyResponse(
            messages=[
                convert.stored_message(m.topic, m.queue_id, m.offset, m.record) for m in found
            ]
        )

    @rpc
    @audited("dlq.redrive")
    async def RedriveDeadLetters(
        self, request: admin_pb2.RedriveDeadLettersRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.RedriveDeadLettersResponse:
        result = await self._broker.redrive(
            request.group,
            max_messages=request.max_messages if request.HasField("max_messages") else None,
            only=[(m.queue_id, m.offset) for m in request.messages],
        )
        return admin_pb2.RedriveDeadLettersResponse(
            moved=result.moved,
            dropped=result.dropped,
            remaining=result.remaining,
            outcomes=[
                admin_pb2.DeadLetterOutcome(
                    queue_id=o.queue_id, offset=o.offset, outcome=_REDRIVE_OUTCOMES[o.outcome]
                )
                for o in result.outcomes
            ],
        )

    # -- server ---------------------------------------------------------------------------

    # -- transactions -----------------------------------------------------------------------

    @rpc
    async def ListTransactions(
        self, request: admin_pb2.ListTransactionsRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.ListTransactionsResponse:
        state = convert.list_state(request.state)
        limit = request.limit if request.HasField("limit") else 100
        found = await transactions_of(self._broker).list_transactions(
            state, topic=request.topic or None, limit=limit
        )
        return admin_pb2.ListTransactionsResponse(
            transactions=[convert.transaction(t) for t in found]
        )

    @rpc
    @audited("transaction.resolve")
    async def ResolveTransaction(
        self, request: admin_pb2.ResolveTransactionRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.ResolveTransactionResponse:
        _check_transaction_ref(request.transaction_id, request.topic)
        commit = convert.commit_flag(request.resolution)
        info = await transactions_of(self._broker).end_transaction(
            request.transaction_id, commit=commit, source="admin", topic=request.topic
        )
        return admin_pb2.ResolveTransactionResponse(transaction=convert.transaction(info))

    @rpc
    @audited("transaction.resume")
    async def ResumeTransaction(
        self, request: admin_pb2.ResumeTransactionRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.ResumeTransactionResponse:
        _check_transaction_ref(request.transaction_id, request.topic)
        transactions = transactions_of(self._broker)
        # A transaction's topic never changes, so this check holds for the resume below.
        current = await transactions.get_transaction(request.transaction_id)
        if current.topic != request.topic:
            raise InvalidArgumentError(
                f"transaction {request.transaction_id} belongs to topic {current.topic!r}, "
                f"not {request.topic!r}"
            )
        info = await transactions.resume_discarded(request.transaction_id)
        return admin_pb2.ResumeTransactionResponse(transaction=convert.transaction(info))

    @rpc
    async def GetHalfMessage(
        self, request: admin_pb2.GetHalfMessageRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.GetHalfMessageResponse:
        _check_transaction_ref(request.transaction_id, request.topic)
        info = await transactions_of(self._broker).get_transaction(
            request.transaction_id, half=True
        )
        if info.topic != request.topic:
            raise InvalidArgumentError(
                f"transaction {request.transaction_id} belongs to topic {info.topic!r}, "
                f"not {request.topic!r}"
            )
        if info.half_message is None:
            raise FailedPreconditionError(
                f"transaction {request.transaction_id} is {info.state.replace('_', ' ')}: its "
                "half message's body is dropped once resolved"
                + (
                    f"; the message is stored in queue {info.queue_id} offset {info.offset}"
                    if info.state == "committed" and info.offset >= 0
                    else ""
                )
            )
        return admin_pb2.GetHalfMessageResponse(
            transaction=convert.transaction(info),
            message=convert.stored_message(info.topic, info.queue_id, -1, info.half_message),
        )

    @rpc
    async def GetServerInfo(
        self, request: admin_pb2.GetServerInfoRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.GetServerInfoResponse:
        now = _now_ms()
        # Measured by the broker: the data dir need not be on this process's disk.
        snapshot = await self._broker.metrics_snapshot()
        return admin_pb2.GetServerInfoResponse(
            version=_SERVER_VERSION,
            start_time=convert.timestamp(self._start_ms),
            uptime=convert.duration((now - self._start_ms) / 1000),
            data_dir=self._broker.server_info().data_dir,
            store_bytes=snapshot.store_bytes,
            topics=snapshot.topics,
            groups=snapshot.groups,
            # The configuration names files, addresses and users: SUPER users only.
            config=self._config_items if current_principal().is_super else {},
        )

    @rpc
    async def GetClusterStatus(
        self, request: admin_pb2.GetClusterStatusRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.GetClusterStatusResponse:
        return convert.status_report(await self._status.report())


def _check_group_lists(
    request: admin_pb2.CreateGroupRequest | admin_pb2.UpdateGroupRequest,
) -> None:
    """List lengths of a group change, checked before any entry is converted."""
    check_count("retry_backoff", len(request.retry_backoff), MAX_BACKOFF_ENTRIES)
    if isinstance(request, admin_pb2.CreateGroupRequest):
        check_count("subscriptions", len(request.subscriptions), MAX_SUBSCRIPTIONS)
    else:
        check_count("set_subscriptions", len(request.set_subscriptions), MAX_SUBSCRIPTIONS)
        check_count("remove_subscriptions", len(request.remove_subscriptions), MAX_SUBSCRIPTIONS)


def _check_transaction_ref(transaction_id: str, topic: str) -> None:
    if not transaction_id:
        raise InvalidArgumentError("transaction_id is empty: pass one ListTransactions shows")
    if not topic:
        raise InvalidArgumentError(
            "topic is empty: name the transaction's topic (access control checks it; "
            "ListTransactions shows it)"
        )
