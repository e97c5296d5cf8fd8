"""Storage and POP semantics on RocksDB; knows nothing of gRPC."""

from popmq.broker_core.broker import Broker
from popmq.broker_core.config import (
    BrokerConfig,
    GroupDefaults,
    LongPollingConfig,
    PopConfig,
    StoreConfig,
)
from popmq.broker_core.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    InvalidReceiptHandleError,
    NotFoundError,
    PopMQError,
    ReceiptHandleExpiredError,
    ReceiptHandleLostError,
    ReceiptHandleSupersededError,
    ResourceExhaustedError,
    StoreFullError,
    UnavailableError,
)
from popmq.broker_core.handles import issuer_of
from popmq.broker_core.types import NewMessage, PoppedMessage, QueueLag, QueueStats, SendResult

__all__ = [
    "AlreadyExistsError",
    "Broker",
    "BrokerConfig",
    "FailedPreconditionError",
    "GroupDefaults",
    "InternalError",
    "InvalidArgumentError",
    "InvalidReceiptHandleError",
    "LongPollingConfig",
    "NewMessage",
    "NotFoundError",
    "PopConfig",
    "PopMQError",
    "PoppedMessage",
    "QueueLag",
    "QueueStats",
    "ReceiptHandleExpiredError",
    "ReceiptHandleLostError",
    "ReceiptHandleSupersededError",
    "ResourceExhaustedError",
    "SendResult",
    "StoreConfig",
    "StoreFullError",
    "UnavailableError",
    "issuer_of",
]
