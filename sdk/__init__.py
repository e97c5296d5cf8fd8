"""popmq client SDK: producers, simple consumers and admin, sync and asyncio.

The ``Async*`` clients do the work on asyncio; ``Admin``, ``Producer`` and
``SimpleConsumer`` are blocking facades over them that run on one background event loop
thread per process.
"""

from sdk._retry import RetryPolicy
from sdk.admin import Admin, AsyncAdmin
from sdk.consumer import AsyncSimpleConsumer, SimpleConsumer
from sdk.errors import (
    AlreadyExistsError,
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PopMQError,
    ResourceExhaustedError,
    ServerError,
    UnavailableError,
)
from sdk.leases import LeasePage, LeaseResult
from sdk.producer import AsyncProducer, Producer
from sdk.pull import AsyncPullConsumer, ConsumerOffset, PullConsumer, PulledMessage, PullResult
from sdk.push_consumer import AsyncPushConsumer, ConsumeResult, PushConsumer, PushConsumerStats
from sdk.types import (
    Group,
    Message,
    QueueLag,
    QueueStats,
    ReceivedMessage,
    SendReceipt,
    Sql,
    Topic,
    TopicDescription,
)

__all__ = [
    "Admin",
    "AlreadyExistsError",
    "AsyncAdmin",
    "AsyncProducer",
    "AsyncPullConsumer",
    "AsyncPushConsumer",
    "AsyncSimpleConsumer",
    "ConsumeResult",
    "ConsumerOffset",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "Group",
    "InvalidArgumentError",
    "LeasePage",
    "LeaseResult",
    "Message",
    "NotFoundError",
    "PopMQError",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PulledMessage",
    "PushConsumer",
    "PushConsumerStats",
    "QueueLag",
    "QueueStats",
    "ReceivedMessage",
    "ResourceExhaustedError",
    "RetryPolicy",
    "SendReceipt",
    "ServerError",
    "SimpleConsumer",
    "Sql",
    "Topic",
    "TopicDescription",
    "UnavailableError",
]
