"""popmq: a RocketMQ-5-style messaging system.

`from popmq import Producer, SimpleConsumer, Message, ...` is the client SDK (popmq.sdk).
The server is popmq.proxy (gRPC) over popmq.broker_core (storage and POP semantics), the
Spark data source is popmq.spark, the command line is popmq.cli (`popmq`).

The SDK's names are imported on first use, so `import popmq.broker_core` loads neither the
SDK nor gRPC. Generated protobuf code lives in the private popmq._gen.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from popmq.sdk import Admin as Admin
    from popmq.sdk import AlreadyExistsError as AlreadyExistsError
    from popmq.sdk import AsyncAdmin as AsyncAdmin
    from popmq.sdk import AsyncProducer as AsyncProducer
    from popmq.sdk import AsyncPullConsumer as AsyncPullConsumer
    from popmq.sdk import AsyncPushConsumer as AsyncPushConsumer
    from popmq.sdk import AsyncSimpleConsumer as AsyncSimpleConsumer
    from popmq.sdk import AsyncTransaction as AsyncTransaction
    from popmq.sdk import BrokerStatus as BrokerStatus
    from popmq.sdk import ClusterStatus as ClusterStatus
    from popmq.sdk import ConsumeResult as ConsumeResult
    from popmq.sdk import ConsumerOffset as ConsumerOffset
    from popmq.sdk import Credentials as Credentials
    from popmq.sdk import DeadlineExceededError as DeadlineExceededError
    from popmq.sdk import EtcdEndpointStatus as EtcdEndpointStatus
    from popmq.sdk import ExponentialBackoff as ExponentialBackoff
    from popmq.sdk import FailedPreconditionError as FailedPreconditionError
    from popmq.sdk import Group as Group
    from popmq.sdk import HalfMessage as HalfMessage
    from popmq.sdk import InvalidArgumentError as InvalidArgumentError
    from popmq.sdk import LagReport as LagReport
    from popmq.sdk import LeasePage as LeasePage
    from popmq.sdk import LeaseResult as LeaseResult
    from popmq.sdk import Message as Message
    from popmq.sdk import NotFoundError as NotFoundError
    from popmq.sdk import OffsetChange as OffsetChange
    from popmq.sdk import OffsetReset as OffsetReset
    from popmq.sdk import PermissionDeniedError as PermissionDeniedError
    from popmq.sdk import Policy as Policy
    from popmq.sdk import PopMQError as PopMQError
    from popmq.sdk import Producer as Producer
    from popmq.sdk import ProxyStatus as ProxyStatus
    from popmq.sdk import PullConsumer as PullConsumer
    from popmq.sdk import PulledMessage as PulledMessage
    from popmq.sdk import PullResult as PullResult
    from popmq.sdk import PushConsumer as PushConsumer
    from popmq.sdk import PushConsumerOptions as PushConsumerOptions
    from popmq.sdk import PushConsumerStats as PushConsumerStats
    from popmq.sdk import QueueLag as QueueLag
    from popmq.sdk import QueueStats as QueueStats
    from popmq.sdk import ReceivedMessage as ReceivedMessage
    from popmq.sdk import RedriveResult as RedriveResult
    from popmq.sdk import ReplicaStatus as ReplicaStatus
    from popmq.sdk import ResourceExhaustedError as ResourceExhaustedError
    from popmq.sdk import RetryPolicy as RetryPolicy
    from popmq.sdk import SendReceipt as SendReceipt
    from popmq.sdk import ServerError as ServerError
    from popmq.sdk import ServerInfo as ServerInfo
    from popmq.sdk import ShardReplication as ShardReplication
    from popmq.sdk import SimpleConsumer as SimpleConsumer
    from popmq.sdk import Sql as Sql
    from popmq.sdk import StoredMessage as StoredMessage
    from popmq.sdk import Subscription as Subscription
    from popmq.sdk import TLSConfig as TLSConfig
    from popmq.sdk import Topic as Topic
    from popmq.sdk import TopicDescription as TopicDescription
    from popmq.sdk import TopicLag as TopicLag
    from popmq.sdk import Transaction as Transaction
    from popmq.sdk import TransactionInfo as TransactionInfo
    from popmq.sdk import TransactionResolution as TransactionResolution
    from popmq.sdk import UnauthenticatedError as UnauthenticatedError
    from popmq.sdk import UnavailableError as UnavailableError
    from popmq.sdk import User as User

__all__ = [
    "Admin",
    "AlreadyExistsError",
    "AsyncAdmin",
    "AsyncProducer",
    "AsyncPullConsumer",
    "AsyncPushConsumer",
    "AsyncSimpleConsumer",
    "AsyncTransaction",
    "BrokerStatus",
    "ClusterStatus",
    "ConsumeResult",
    "ConsumerOffset",
    "Credentials",
    "DeadlineExceededError",
    "EtcdEndpointStatus",
    "ExponentialBackoff",
    "FailedPreconditionError",
    "Group",
    "HalfMessage",
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
    "RedriveResult",
    "ReplicaStatus",
    "ResourceExhaustedError",
    "RetryPolicy",
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


def __getattr__(name: str) -> Any:
    if name in __all__:
        value = getattr(importlib.import_module("popmq.sdk"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'popmq' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
