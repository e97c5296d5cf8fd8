"""Storage and POP semantics on RocksDB; knows nothing of gRPC.

The proxy imports only the names exported here (tests/unit/test_proxy_imports.py): the
BrokerAPI Protocol it types against, its value types, errors, and the limits it checks.
"""

from popmq.broker_core.api import (
    BrokerAPI,
    HistogramSnapshot,
    MetricsSnapshot,
    ServerInfo,
)
from popmq.broker_core.broker import (
    Broker,
)
from popmq.broker_core.catalog import (
    KIND_DLQ,
    GroupInfo,
    TopicInfo,
)
from popmq.broker_core.clock import (
    now_ms,
)
from popmq.broker_core.config import (
    DELAY_LEVELS_S,
    BrokerConfig,
    GroupDefaults,
    LongPollingConfig,
    MessagesConfig,
    PopConfig,
    RetentionConfig,
    StoreConfig,
)
from popmq.broker_core.data_dir import (
    PRIVATE_UMASK,
)
from popmq.broker_core.errors import (
    AlreadyExistsError,
    AnswerBoundError,
    DataDirError,
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
from popmq.broker_core.filters import (
    parse_filter,
)
from popmq.broker_core.handles import (
    issuer_of,
)
from popmq.broker_core.offsets import (
    PULL_DEFAULT_MESSAGES,
    PULL_MAX_MESSAGES,
)
from popmq.broker_core.sql_filter import (
    MAX_EXPRESSION_LENGTH,
)
from popmq.broker_core.types import (
    ConsumerOffset,
    ExponentialBackoff,
    GroupSettings,
    LagReport,
    NewMessage,
    PoppedMessage,
    PulledMessages,
    QueueDetails,
    QueueLag,
    QueueStats,
    ResetResult,
    SendResult,
    Subscription,
)
from popmq.broker_core.validation import (
    DLQ_PREFIX,
    MAX_BACKOFF_ENTRIES,
    MAX_BODY_BYTES,
    MAX_HANDLES,
    MAX_KEY_LENGTH,
    MAX_KEYS,
    MAX_MESSAGE_ID_LENGTH,
    MAX_PROPERTIES,
    MAX_PROPERTIES_BYTES,
    MAX_QUEUES,
    MAX_REQUEST_BYTES,
    MAX_RESPONSE_BYTES,
    MAX_SEND_MESSAGES,
    MAX_SMALL_REQUEST_BYTES,
    MAX_SUBSCRIPTIONS,
    MAX_TAG_LENGTH,
    MESSAGE_OVERHEAD_BYTES,
    check_count,
    check_name,
    check_range,
)

__all__ = [  # noqa: RUF022 (plain sorted(), as tests/unit/test_public_names.py pins)
    "AlreadyExistsError",
    "AnswerBoundError",
    "Broker",
    "BrokerAPI",
    "BrokerConfig",
    "ConsumerOffset",
    "DELAY_LEVELS_S",
    "DLQ_PREFIX",
    "DataDirError",
    "ExponentialBackoff",
    "FailedPreconditionError",
    "GroupDefaults",
    "GroupInfo",
    "GroupSettings",
    "HistogramSnapshot",
    "InternalError",
    "InvalidArgumentError",
    "InvalidReceiptHandleError",
    "KIND_DLQ",
    "LagReport",
    "LongPollingConfig",
    "MAX_BACKOFF_ENTRIES",
    "MAX_BODY_BYTES",
    "MAX_EXPRESSION_LENGTH",
    "MAX_HANDLES",
    "MAX_KEYS",
    "MAX_KEY_LENGTH",
    "MAX_MESSAGE_ID_LENGTH",
    "MAX_PROPERTIES",
    "MAX_PROPERTIES_BYTES",
    "MAX_QUEUES",
    "MAX_REQUEST_BYTES",
    "MAX_RESPONSE_BYTES",
    "MAX_SEND_MESSAGES",
    "MAX_SMALL_REQUEST_BYTES",
    "MAX_SUBSCRIPTIONS",
    "MAX_TAG_LENGTH",
    "MESSAGE_OVERHEAD_BYTES",
    "MessagesConfig",
    "MetricsSnapshot",
    "NewMessage",
    "NotFoundError",
    "PRIVATE_UMASK",
    "PULL_DEFAULT_MESSAGES",
    "PULL_MAX_MESSAGES",
    "PopConfig",
    "PopMQError",
    "PoppedMessage",
    "PulledMessages",
    "QueueDetails",
    "QueueLag",
    "QueueStats",
    "ReceiptHandleExpiredError",
    "ReceiptHandleLostError",
    "ReceiptHandleSupersededError",
    "ResetResult",
    "ResourceExhaustedError",
    "RetentionConfig",
    "SendResult",
    "ServerInfo",
    "StoreConfig",
    "StoreFullError",
    "Subscription",
    "TopicInfo",
    "UnavailableError",
    "check_count",
    "check_name",
    "check_range",
    "issuer_of",
    "now_ms",
    "parse_filter",
]
