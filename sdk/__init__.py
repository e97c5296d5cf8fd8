"""popmq client SDK: producers, simple consumers and admin, sync and asyncio.

The ``Async*`` clients do the work on asyncio; ``Admin``, ``Producer`` and
``SimpleConsumer`` are blocking facades over them that run on one background event loop
thread per process.
"""

from popmq.sdk._retry import RetryBackoff, RetryPolicy
from popmq.sdk.admin import Admin, AsyncAdmin
from popmq.sdk.admin_types import (
    ExponentialBackoff,
    Group,
    LagReport,
    OffsetChange,
    OffsetReset,
    QueueLag,
    QueueStats,
    RedriveOutcome,
    RedriveResult,
    ServerInfo,
    StoredMessage,
    Subscription,
    Topic,
    TopicDescription,
    TopicLag,
)
from popmq.sdk.cluster_status import (
    BrokerStatus,
    ClusterStatus,
    EtcdEndpointStatus,
    ProxyStatus,
    ReplicaStatus,
    ShardReplication,
)
from popmq.sdk.consumer import AsyncSimpleConsumer, SimpleConsumer
from popmq.sdk.credentials import Credentials
from popmq.sdk.errors import (
    AlreadyExistsError,
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    PopMQError,
    ResourceExhaustedError,
    ServerError,
    UnauthenticatedError,
    UnavailableError,
)
from popmq.sdk.inspection import (
    BlockedHead,
    ConsumerInflight,
    DeliveryEvent,
    GroupInspection,
    HeldPolls,
    InflightMessage,
    ReviveLag,
)
from popmq.sdk.leases import LeasePage, LeaseResult
from popmq.sdk.producer import AsyncProducer, Producer
from popmq.sdk.pull import (
    AsyncPullConsumer,
    ConsumerOffset,
    PullConsumer,
    PulledMessage,
    PullResult,
)
from popmq.sdk.push_consumer import (
    AsyncPushConsumer,
    ConsumeResult,
    PushConsumer,
    PushConsumerOptions,
    PushConsumerStats,
)
from popmq.sdk.tls import TLSConfig
from popmq.sdk.transactions import (
    AsyncTransaction,
    HalfMessage,
    Transaction,
    TransactionInfo,
    TransactionResolution,
)
from popmq.sdk.types import Message, ReceivedMessage, SendReceipt, Sql
from popmq.sdk.users import Policy, User

__all__ = [
    "Admin",
    "AlreadyExistsError",
    "AsyncAdmin",
    "AsyncProducer",
    "AsyncPullConsumer",
    "AsyncPushConsumer",
    "AsyncSimpleConsumer",
    "AsyncTransaction",
    "BlockedHead",
    "BrokerStatus",
    "ClusterStatus",
    "ConsumeResult",
    "ConsumerInflight",
    "ConsumerOffset",
    "Credentials",
    "DeadlineExceededError",
    "DeliveryEvent",
    "EtcdEndpointStatus",
    "ExponentialBackoff",
    "FailedPreconditionError",
    "Group",
    "GroupInspection",
    "HalfMessage",
    "HeldPolls",
    "InflightMessage",
    "InvalidArgumentError",
    "LagReport",
    "LeasePage",
    "LeaseResult",
    "Message",
    "NotFoundError",
    "OffsetChange",
    "OffsetReset",
    "PermissionDeniedError",
    "Policy",
    "PopMQError",
    "Producer",
    "ProxyStatus",
    "PullConsumer",
    "PullResult",
    "PulledMessage",
    "PushConsumer",
    "PushConsumerOptions",
    "PushConsumerStats",
    "QueueLag",
    "QueueStats",
    "ReceivedMessage",
    "RedriveOutcome",
    "RedriveResult",
    "ReplicaStatus",
    "ResourceExhaustedError",
    "RetryBackoff",
    "RetryPolicy",
    "ReviveLag",
    "SendReceipt",
    "ServerError",
    "ServerInfo",
    "ShardReplication",
    "SimpleConsumer",
    "Sql",
    "StoredMessage",
    "Subscription",
    "TLSConfig",
    "Topic",
    "TopicDescription",
    "TopicLag",
    "Transaction",
    "TransactionInfo",
    "TransactionResolution",
    "UnauthenticatedError",
    "UnavailableError",
    "User",
]
