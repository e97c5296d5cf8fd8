"""Each package's public surface is pinned: a change to it is a deliberate one."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import popmq
import popmq.sdk

EXPECTED = {
    "popmq.broker_core": [
        "AlreadyExistsError", "AnswerBoundError", "BlockedHead", "Broker", "BrokerAPI",
        "BrokerConfig",
        "ConsumerInflight", "ConsumerOffset", "DELAY_LEVELS_S", "DLQ_PREFIX", "DataDirError",
        "DeliveryEvent",
        "ExponentialBackoff",
        "FailedPreconditionError", "FollowerReplication", "GroupDefaults", "GroupInfo",
        "GroupInspection",
        "GroupSettings", "GroupState",
        "HeldPolls", "HistogramSnapshot", "InflightMessage", "InternalError",
        "InvalidArgumentError",
        "InvalidReceiptHandleError", "KIND_DLQ", "LagReport", "LongPollingConfig",
        "MAX_BACKOFF_ENTRIES", "MAX_BLOCKED_HEADS", "MAX_BODY_BYTES", "MAX_EXPRESSION_LENGTH",
        "MAX_HANDLES", "MAX_INFLIGHT_PAGE",
        "MAX_KEYS", "MAX_KEY_LENGTH", "MAX_MESSAGE_ID_LENGTH", "MAX_NAME_LENGTH", "MAX_POP_BATCH",
        "MAX_PROPERTIES",
        "MAX_PROPERTIES_BYTES", "MAX_QUEUES", "MAX_REQUEST_BYTES", "MAX_RESPONSE_BYTES",
        "MAX_SEND_MESSAGES", "MAX_SMALL_REQUEST_BYTES", "MAX_SUBSCRIPTIONS", "MAX_TAG_LENGTH",
        "MESSAGE_OVERHEAD_BYTES", "MessageRecord", "MessagesConfig", "MetricsSnapshot",
        "NAME_PATTERN", "NewMessage", "NotEnoughReplicasError", "NotFoundError", "NotLeaderError",
        "OutcomeUnknownError", "PRIVATE_UMASK", "PULL_DEFAULT_MESSAGES",
        "PULL_MAX_MESSAGES", "PermissionDeniedError", "PopArguments", "PopConfig", "PopMQError",
        "PoppedMessage", "PulledMessages", "QueueDetails", "QueueLag", "QueueStats",
        "ReceiptHandleExpiredError", "ReceiptHandleLostError", "ReceiptHandleSupersededError",
        "ReceivedBatch", "ReceivedPopAPI", "RecordFilter", "RepeatedSendAPI",
        "ReplicationSnapshot", "ResetResult",
        "ResourceExhaustedError", "RetentionConfig", "ReviveLag",
        "SendResult", "SendTicket", "ServerInfo", "StoreConfig", "StoreFullError", "Subscription",
        "TRANSACTION_DISCARD_TOPIC", "TRANSACTION_SOURCES", "TopicInfo", "TransactionAPI",
        "TransactionCheck", "TransactionInfo", "TransactionsConfig",
        "UnauthenticatedError", "UnavailableError", "append_received_message", "check_batch_size",
        "check_client_id",
        "check_count", "check_delivery_time", "check_invisible", "check_message", "check_name",
        "check_offset", "check_queue_id", "check_range", "check_tag", "invisible_until",
        "issuer_of",
        "length_delimited", "new_group_state", "now_ms", "parse_filter",
        "received_message_wire", "received_messages_wire", "topic_and_queue",
        "updated_group_state", "varint",
    ],
    "popmq.broker": [
        "BrokerServer", "BrokerServicer", "CatalogSync", "add_broker_service", "run_broker",
    ],
    "popmq.cluster": ["ClusterBroker", "RemoteBroker"],
    "popmq.console": ["ConsoleConfig", "ConsoleServer"],
    "popmq.coordination": [
        "CompactedError", "ConflictError", "CoordinationArgumentError", "CoordinationError",
        "CoordinationUnavailableError", "Coordinator", "CorruptValueError",
        "DEFAULT_SESSION_TTL_S", "Entry", "EtcdCoordinator", "EtcdError", "GroupAdmin",
        "GroupCache", "GroupRecord", "GroupRules", "LeaseNotFoundError", "LocalCoordinator",
        "Member", "MemberExistsError", "MemberKind", "QueueRef", "RouteAdmin", "RouteCache",
        "RoutesConfig", "Segment", "Session", "SessionClosedError", "Snapshot", "TopicRoute",
    ],
    "popmq.proxy": ["PopMQServer", "ServerConfig", "run_server"],
    "popmq.proxy.rocketmq": ["RocketMQConfig", "RocketMQService"],
    "popmq.runtime": ["ServerConfig"],
    "popmq.sdk": [
        "Admin", "AlreadyExistsError", "AsyncAdmin", "AsyncProducer", "AsyncPullConsumer",
        "AsyncPushConsumer", "AsyncSimpleConsumer", "AsyncTransaction", "BlockedHead",
        "BrokerStatus",
        "ClusterStatus",
        "ConsumeResult", "ConsumerInflight", "ConsumerOffset", "Credentials",
        "DeadlineExceededError", "DeliveryEvent",
        "EtcdEndpointStatus", "ExponentialBackoff", "FailedPreconditionError", "Group",
        "GroupInspection", "HalfMessage", "HeldPolls", "InflightMessage", "InvalidArgumentError",
        "LagReport", "LeasePage", "LeaseResult", "Message", "NotFoundError", "OffsetChange",
        "OffsetReset", "PermissionDeniedError", "Policy", "PopMQError", "Producer",
        "ProxyStatus", "PullConsumer", "PullResult", "PulledMessage", "PushConsumer",
        "PushConsumerOptions", "PushConsumerStats", "QueueLag", "QueueStats",
        "ReceivedMessage", "RedriveOutcome", "RedriveResult", "ReplicaStatus",
        "ResourceExhaustedError",
        "RetryBackoff", "RetryPolicy", "ReviveLag", "SendReceipt", "ServerError", "ServerInfo",
        "ShardReplication",
        "SimpleConsumer", "Sql", "StoredMessage",
        "Subscription", "TLSConfig", "Topic", "TopicDescription", "TopicLag", "Transaction",
        "TransactionInfo", "TransactionResolution",
        "UnauthenticatedError", "UnavailableError", "User",
    ],
    "popmq.security": [
        "ANONYMOUS_SUPER", "Action", "Check", "Decision", "Pattern", "Policy", "Principal",
        "Resource", "ResourceType", "SecurityConfig", "User", "UserType", "current_principal",
        "set_principal",
    ],
    "popmq.spark": [
        "DataLossError", "OffsetFormatError", "OptionError", "PopMQConnectorError",
        "PopMQDataSource", "register",
    ],
}  # fmt: skip


@pytest.mark.parametrize("package", sorted(EXPECTED))
def test_public_names_are_pinned_sorted_and_importable(package: str) -> None:
    module = importlib.import_module(package)
    assert module.__all__ == EXPECTED[package]
    assert module.__all__ == sorted(module.__all__)
    for name in module.__all__:
        assert hasattr(module, name), name


def test_popmq_lists_no_name_of_its_own_it_takes_the_sdks_list() -> None:
    """popmq.sdk's `__all__` is the one list of the SDK's public names; `popmq` derives from it
    (a type checker's star import, lazy lookups), so a name is added in one place."""
    assert popmq.__all__ is popmq.sdk.__all__
    tree = ast.parse(Path(popmq.__file__).read_text())
    assigned = {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }
    assert "__all__" not in assigned
    from_sdk = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "popmq.sdk"
        for alias in node.names
    }
    assert from_sdk == {"*"}
