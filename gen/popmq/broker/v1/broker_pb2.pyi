from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorDetail(_message.Message):
    __slots__ = ("error_class", "code", "message", "field", "value", "allowed", "needed_bytes", "retriable")
    ERROR_CLASS_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_FIELD_NUMBER: _ClassVar[int]
    NEEDED_BYTES_FIELD_NUMBER: _ClassVar[int]
    RETRIABLE_FIELD_NUMBER: _ClassVar[int]
    error_class: str
    code: str
    message: str
    field: str
    value: str
    allowed: str
    needed_bytes: int
    retriable: bool
    def __init__(self, error_class: _Optional[str] = ..., code: _Optional[str] = ..., message: _Optional[str] = ..., field: _Optional[str] = ..., value: _Optional[str] = ..., allowed: _Optional[str] = ..., needed_bytes: _Optional[int] = ..., retriable: _Optional[bool] = ...) -> None: ...

class Topic(_message.Message):
    __slots__ = ("name", "topic_id", "queues", "message_type", "kind", "create_time_ms", "owner_group", "owner_topic")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    OWNER_GROUP_FIELD_NUMBER: _ClassVar[int]
    OWNER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    name: str
    topic_id: int
    queues: int
    message_type: int
    kind: int
    create_time_ms: int
    owner_group: str
    owner_topic: str
    def __init__(self, name: _Optional[str] = ..., topic_id: _Optional[int] = ..., queues: _Optional[int] = ..., message_type: _Optional[int] = ..., kind: _Optional[int] = ..., create_time_ms: _Optional[int] = ..., owner_group: _Optional[str] = ..., owner_topic: _Optional[str] = ...) -> None: ...

class Group(_message.Message):
    __slots__ = ("name", "group_id", "max_delivery_attempts", "retry_backoff_ms", "create_time_ms", "auto_created", "settings")
    NAME_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERY_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RETRY_BACKOFF_MS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    AUTO_CREATED_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    name: str
    group_id: int
    max_delivery_attempts: int
    retry_backoff_ms: _containers.RepeatedScalarFieldContainer[int]
    create_time_ms: int
    auto_created: bool
    settings: GroupSettings
    def __init__(self, name: _Optional[str] = ..., group_id: _Optional[int] = ..., max_delivery_attempts: _Optional[int] = ..., retry_backoff_ms: _Optional[_Iterable[int]] = ..., create_time_ms: _Optional[int] = ..., auto_created: _Optional[bool] = ..., settings: _Optional[_Union[GroupSettings, _Mapping]] = ...) -> None: ...

class Subscription(_message.Message):
    __slots__ = ("topic", "filter_type", "expression")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    FILTER_TYPE_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    filter_type: str
    expression: str
    def __init__(self, topic: _Optional[str] = ..., filter_type: _Optional[str] = ..., expression: _Optional[str] = ...) -> None: ...

class ExponentialBackoff(_message.Message):
    __slots__ = ("initial_s", "max_s", "multiplier")
    INITIAL_S_FIELD_NUMBER: _ClassVar[int]
    MAX_S_FIELD_NUMBER: _ClassVar[int]
    MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    initial_s: float
    max_s: float
    multiplier: float
    def __init__(self, initial_s: _Optional[float] = ..., max_s: _Optional[float] = ..., multiplier: _Optional[float] = ...) -> None: ...

class GroupSettings(_message.Message):
    __slots__ = ("fifo", "subscriptions", "consume_from", "consume_from_ms", "exponential_backoff")
    FIFO_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    CONSUME_FROM_FIELD_NUMBER: _ClassVar[int]
    CONSUME_FROM_MS_FIELD_NUMBER: _ClassVar[int]
    EXPONENTIAL_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    fifo: bool
    subscriptions: _containers.RepeatedCompositeFieldContainer[Subscription]
    consume_from: str
    consume_from_ms: int
    exponential_backoff: ExponentialBackoff
    def __init__(self, fifo: _Optional[bool] = ..., subscriptions: _Optional[_Iterable[_Union[Subscription, _Mapping]]] = ..., consume_from: _Optional[str] = ..., consume_from_ms: _Optional[int] = ..., exponential_backoff: _Optional[_Union[ExponentialBackoff, _Mapping]] = ...) -> None: ...

class QueueStats(_message.Message):
    __slots__ = ("queue_id", "min_offset", "max_offset")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    min_offset: int
    max_offset: int
    def __init__(self, queue_id: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ...) -> None: ...

class QueueDetails(_message.Message):
    __slots__ = ("queue_id", "min_offset", "max_offset", "last_store_ms")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_STORE_MS_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    min_offset: int
    max_offset: int
    last_store_ms: int
    def __init__(self, queue_id: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., last_store_ms: _Optional[int] = ...) -> None: ...

class NewMessage(_message.Message):
    __slots__ = ("topic", "body", "tag", "keys", "properties", "message_id", "born_time_ms", "message_group", "deliver_at_ms", "dedup_id", "body_encoding", "born_host", "queue_id")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    BORN_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_GROUP_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    DEDUP_ID_FIELD_NUMBER: _ClassVar[int]
    BODY_ENCODING_FIELD_NUMBER: _ClassVar[int]
    BORN_HOST_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    body: bytes
    tag: str
    keys: _containers.RepeatedScalarFieldContainer[str]
    properties: _containers.ScalarMap[str, str]
    message_id: str
    born_time_ms: int
    message_group: str
    deliver_at_ms: int
    dedup_id: str
    body_encoding: str
    born_host: str
    queue_id: int
    def __init__(self, topic: _Optional[str] = ..., body: _Optional[bytes] = ..., tag: _Optional[str] = ..., keys: _Optional[_Iterable[str]] = ..., properties: _Optional[_Mapping[str, str]] = ..., message_id: _Optional[str] = ..., born_time_ms: _Optional[int] = ..., message_group: _Optional[str] = ..., deliver_at_ms: _Optional[int] = ..., dedup_id: _Optional[str] = ..., body_encoding: _Optional[str] = ..., born_host: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...

class SendResult(_message.Message):
    __slots__ = ("message_id", "topic", "queue_id", "offset", "recall_handle", "duplicate", "transaction_id")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    RECALL_HANDLE_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    topic: str
    queue_id: int
    offset: int
    recall_handle: str
    duplicate: bool
    transaction_id: str
    def __init__(self, message_id: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., recall_handle: _Optional[str] = ..., duplicate: _Optional[bool] = ..., transaction_id: _Optional[str] = ...) -> None: ...

class PoppedMessage(_message.Message):
    __slots__ = ("topic", "queue_id", "offset", "record", "receipt_handle", "invisible_until_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    offset: int
    record: bytes
    receipt_handle: str
    invisible_until_ms: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., record: _Optional[bytes] = ..., receipt_handle: _Optional[str] = ..., invisible_until_ms: _Optional[int] = ...) -> None: ...

class PeekedMessage(_message.Message):
    __slots__ = ("topic", "queue_id", "offset", "record")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    offset: int
    record: bytes
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., record: _Optional[bytes] = ...) -> None: ...

class QueueOffset(_message.Message):
    __slots__ = ("queue_id", "offset")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    offset: int
    def __init__(self, queue_id: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class PulledRecord(_message.Message):
    __slots__ = ("offset", "record")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    offset: int
    record: bytes
    def __init__(self, offset: _Optional[int] = ..., record: _Optional[bytes] = ...) -> None: ...

class ConsumerOffset(_message.Message):
    __slots__ = ("queue_id", "offset", "committed")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    offset: int
    committed: bool
    def __init__(self, queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., committed: _Optional[bool] = ...) -> None: ...

class QueueLag(_message.Message):
    __slots__ = ("topic", "queue_id", "retry", "consumer_offset", "max_offset", "inflight", "retention_skipped")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_FIELD_NUMBER: _ClassVar[int]
    RETENTION_SKIPPED_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    retry: bool
    consumer_offset: int
    max_offset: int
    inflight: int
    retention_skipped: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., retry: _Optional[bool] = ..., consumer_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., inflight: _Optional[int] = ..., retention_skipped: _Optional[int] = ...) -> None: ...

class QueueBacklog(_message.Message):
    __slots__ = ("lag", "oldest_unacked_ms")
    LAG_FIELD_NUMBER: _ClassVar[int]
    OLDEST_UNACKED_MS_FIELD_NUMBER: _ClassVar[int]
    lag: QueueLag
    oldest_unacked_ms: int
    def __init__(self, lag: _Optional[_Union[QueueLag, _Mapping]] = ..., oldest_unacked_ms: _Optional[int] = ...) -> None: ...

class TopicBacklog(_message.Message):
    __slots__ = ("topic", "lag", "inflight", "retry_backlog", "oldest_unacked_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_FIELD_NUMBER: _ClassVar[int]
    RETRY_BACKLOG_FIELD_NUMBER: _ClassVar[int]
    OLDEST_UNACKED_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    lag: int
    inflight: int
    retry_backlog: int
    oldest_unacked_ms: int
    def __init__(self, topic: _Optional[str] = ..., lag: _Optional[int] = ..., inflight: _Optional[int] = ..., retry_backlog: _Optional[int] = ..., oldest_unacked_ms: _Optional[int] = ...) -> None: ...

class OffsetChange(_message.Message):
    __slots__ = ("queue_id", "old_offset", "new_offset")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OLD_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEW_OFFSET_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    old_offset: int
    new_offset: int
    def __init__(self, queue_id: _Optional[int] = ..., old_offset: _Optional[int] = ..., new_offset: _Optional[int] = ...) -> None: ...

class Histogram(_message.Message):
    __slots__ = ("bounds", "counts", "total")
    BOUNDS_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    bounds: _containers.RepeatedScalarFieldContainer[float]
    counts: _containers.RepeatedScalarFieldContainer[int]
    total: float
    def __init__(self, bounds: _Optional[_Iterable[float]] = ..., counts: _Optional[_Iterable[int]] = ..., total: _Optional[float] = ...) -> None: ...

class TopicCount(_message.Message):
    __slots__ = ("topic", "count")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    topic: str
    count: int
    def __init__(self, topic: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class GroupTopicCount(_message.Message):
    __slots__ = ("group", "topic", "count")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    count: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class PopConfig(_message.Message):
    __slots__ = ("max_batch", "default_invisible_s", "min_invisible_s", "max_invisible_s", "retry_first_every", "max_scan_per_pop", "ck_buffer_time_s", "ck_persist_ahead_s", "ck_buffer_max")
    MAX_BATCH_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_INVISIBLE_S_FIELD_NUMBER: _ClassVar[int]
    MIN_INVISIBLE_S_FIELD_NUMBER: _ClassVar[int]
    MAX_INVISIBLE_S_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIRST_EVERY_FIELD_NUMBER: _ClassVar[int]
    MAX_SCAN_PER_POP_FIELD_NUMBER: _ClassVar[int]
    CK_BUFFER_TIME_S_FIELD_NUMBER: _ClassVar[int]
    CK_PERSIST_AHEAD_S_FIELD_NUMBER: _ClassVar[int]
    CK_BUFFER_MAX_FIELD_NUMBER: _ClassVar[int]
    max_batch: int
    default_invisible_s: float
    min_invisible_s: float
    max_invisible_s: float
    retry_first_every: int
    max_scan_per_pop: int
    ck_buffer_time_s: float
    ck_persist_ahead_s: float
    ck_buffer_max: int
    def __init__(self, max_batch: _Optional[int] = ..., default_invisible_s: _Optional[float] = ..., min_invisible_s: _Optional[float] = ..., max_invisible_s: _Optional[float] = ..., retry_first_every: _Optional[int] = ..., max_scan_per_pop: _Optional[int] = ..., ck_buffer_time_s: _Optional[float] = ..., ck_persist_ahead_s: _Optional[float] = ..., ck_buffer_max: _Optional[int] = ...) -> None: ...

class LongPollingConfig(_message.Message):
    __slots__ = ("default_timeout_s", "max_timeout_s", "max_per_key", "max_total", "max_watched_queues")
    DEFAULT_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    MAX_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    MAX_PER_KEY_FIELD_NUMBER: _ClassVar[int]
    MAX_TOTAL_FIELD_NUMBER: _ClassVar[int]
    MAX_WATCHED_QUEUES_FIELD_NUMBER: _ClassVar[int]
    default_timeout_s: float
    max_timeout_s: float
    max_per_key: int
    max_total: int
    max_watched_queues: int
    def __init__(self, default_timeout_s: _Optional[float] = ..., max_timeout_s: _Optional[float] = ..., max_per_key: _Optional[int] = ..., max_total: _Optional[int] = ..., max_watched_queues: _Optional[int] = ...) -> None: ...

class GroupDefaults(_message.Message):
    __slots__ = ("max_delivery_attempts", "retry_backoff_s")
    MAX_DELIVERY_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RETRY_BACKOFF_S_FIELD_NUMBER: _ClassVar[int]
    max_delivery_attempts: int
    retry_backoff_s: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, max_delivery_attempts: _Optional[int] = ..., retry_backoff_s: _Optional[_Iterable[float]] = ...) -> None: ...

class WaitFailureRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WaitFailureResponse(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class GetServerInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetServerInfoResponse(_message.Message):
    __slots__ = ("broker_name", "data_dir", "pop", "long_polling", "groups", "max_delay_s", "auto_create_topics")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    DATA_DIR_FIELD_NUMBER: _ClassVar[int]
    POP_FIELD_NUMBER: _ClassVar[int]
    LONG_POLLING_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    MAX_DELAY_S_FIELD_NUMBER: _ClassVar[int]
    AUTO_CREATE_TOPICS_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    data_dir: str
    pop: PopConfig
    long_polling: LongPollingConfig
    groups: GroupDefaults
    max_delay_s: float
    auto_create_topics: bool
    def __init__(self, broker_name: _Optional[str] = ..., data_dir: _Optional[str] = ..., pop: _Optional[_Union[PopConfig, _Mapping]] = ..., long_polling: _Optional[_Union[LongPollingConfig, _Mapping]] = ..., groups: _Optional[_Union[GroupDefaults, _Mapping]] = ..., max_delay_s: _Optional[float] = ..., auto_create_topics: _Optional[bool] = ...) -> None: ...

class GetMetricsSnapshotRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetMetricsSnapshotResponse(_message.Message):
    __slots__ = ("sent", "popped", "acked", "nacked", "revived", "dead_lettered", "long_polls_held", "buffered_checkpoints", "live_checkpoints", "write_batches", "write_batches_failed", "write_jobs", "batch_jobs", "write_seconds_synced", "write_seconds_unsynced", "store_bytes", "topics", "groups", "disk_free_bytes", "replication")
    SENT_FIELD_NUMBER: _ClassVar[int]
    POPPED_FIELD_NUMBER: _ClassVar[int]
    ACKED_FIELD_NUMBER: _ClassVar[int]
    NACKED_FIELD_NUMBER: _ClassVar[int]
    REVIVED_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    LONG_POLLS_HELD_FIELD_NUMBER: _ClassVar[int]
    BUFFERED_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    LIVE_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    WRITE_BATCHES_FIELD_NUMBER: _ClassVar[int]
    WRITE_BATCHES_FAILED_FIELD_NUMBER: _ClassVar[int]
    WRITE_JOBS_FIELD_NUMBER: _ClassVar[int]
    BATCH_JOBS_FIELD_NUMBER: _ClassVar[int]
    WRITE_SECONDS_SYNCED_FIELD_NUMBER: _ClassVar[int]
    WRITE_SECONDS_UNSYNCED_FIELD_NUMBER: _ClassVar[int]
    STORE_BYTES_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    DISK_FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FIELD_NUMBER: _ClassVar[int]
    sent: _containers.RepeatedCompositeFieldContainer[TopicCount]
    popped: _containers.RepeatedCompositeFieldContainer[GroupTopicCount]
    acked: _containers.RepeatedCompositeFieldContainer[GroupTopicCount]
    nacked: _containers.RepeatedCompositeFieldContainer[GroupTopicCount]
    revived: _containers.RepeatedCompositeFieldContainer[GroupTopicCount]
    dead_lettered: _containers.RepeatedCompositeFieldContainer[GroupTopicCount]
    long_polls_held: int
    buffered_checkpoints: int
    live_checkpoints: int
    write_batches: int
    write_batches_failed: int
    write_jobs: int
    batch_jobs: Histogram
    write_seconds_synced: Histogram
    write_seconds_unsynced: Histogram
    store_bytes: int
    topics: int
    groups: int
    disk_free_bytes: int
    replication: Replication
    def __init__(self, sent: _Optional[_Iterable[_Union[TopicCount, _Mapping]]] = ..., popped: _Optional[_Iterable[_Union[GroupTopicCount, _Mapping]]] = ..., acked: _Optional[_Iterable[_Union[GroupTopicCount, _Mapping]]] = ..., nacked: _Optional[_Iterable[_Union[GroupTopicCount, _Mapping]]] = ..., revived: _Optional[_Iterable[_Union[GroupTopicCount, _Mapping]]] = ..., dead_lettered: _Optional[_Iterable[_Union[GroupTopicCount, _Mapping]]] = ..., long_polls_held: _Optional[int] = ..., buffered_checkpoints: _Optional[int] = ..., live_checkpoints: _Optional[int] = ..., write_batches: _Optional[int] = ..., write_batches_failed: _Optional[int] = ..., write_jobs: _Optional[int] = ..., batch_jobs: _Optional[_Union[Histogram, _Mapping]] = ..., write_seconds_synced: _Optional[_Union[Histogram, _Mapping]] = ..., write_seconds_unsynced: _Optional[_Union[Histogram, _Mapping]] = ..., store_bytes: _Optional[int] = ..., topics: _Optional[int] = ..., groups: _Optional[int] = ..., disk_free_bytes: _Optional[int] = ..., replication: _Optional[_Union[Replication, _Mapping]] = ...) -> None: ...

class Replication(_message.Message):
    __slots__ = ("replica", "epoch", "lsn", "mode", "min_insync", "followers", "written_bytes", "terms")
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LSN_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    MIN_INSYNC_FIELD_NUMBER: _ClassVar[int]
    FOLLOWERS_FIELD_NUMBER: _ClassVar[int]
    WRITTEN_BYTES_FIELD_NUMBER: _ClassVar[int]
    TERMS_FIELD_NUMBER: _ClassVar[int]
    replica: str
    epoch: int
    lsn: int
    mode: str
    min_insync: int
    followers: _containers.RepeatedCompositeFieldContainer[FollowerReplication]
    written_bytes: int
    terms: int
    def __init__(self, replica: _Optional[str] = ..., epoch: _Optional[int] = ..., lsn: _Optional[int] = ..., mode: _Optional[str] = ..., min_insync: _Optional[int] = ..., followers: _Optional[_Iterable[_Union[FollowerReplication, _Mapping]]] = ..., written_bytes: _Optional[int] = ..., terms: _Optional[int] = ...) -> None: ...

class FollowerReplication(_message.Message):
    __slots__ = ("replica", "in_sync", "acked_lsn", "lag_batches", "lag_bytes", "lag_s")
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    ACKED_LSN_FIELD_NUMBER: _ClassVar[int]
    LAG_BATCHES_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    LAG_S_FIELD_NUMBER: _ClassVar[int]
    replica: str
    in_sync: bool
    acked_lsn: int
    lag_batches: int
    lag_bytes: int
    lag_s: float
    def __init__(self, replica: _Optional[str] = ..., in_sync: _Optional[bool] = ..., acked_lsn: _Optional[int] = ..., lag_batches: _Optional[int] = ..., lag_bytes: _Optional[int] = ..., lag_s: _Optional[float] = ...) -> None: ...

class CreateTopicRequest(_message.Message):
    __slots__ = ("name", "queues", "message_type", "route_create_time_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    ROUTE_CREATE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    queues: int
    message_type: str
    route_create_time_ms: int
    def __init__(self, name: _Optional[str] = ..., queues: _Optional[int] = ..., message_type: _Optional[str] = ..., route_create_time_ms: _Optional[int] = ...) -> None: ...

class CreateTopicResponse(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: Topic
    def __init__(self, topic: _Optional[_Union[Topic, _Mapping]] = ...) -> None: ...

class GetTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetTopicResponse(_message.Message):
    __slots__ = ("topic", "queues")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    topic: Topic
    queues: _containers.RepeatedCompositeFieldContainer[QueueStats]
    def __init__(self, topic: _Optional[_Union[Topic, _Mapping]] = ..., queues: _Optional[_Iterable[_Union[QueueStats, _Mapping]]] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[Topic]
    def __init__(self, topics: _Optional[_Iterable[_Union[Topic, _Mapping]]] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("name", "guarded", "force")
    NAME_FIELD_NUMBER: _ClassVar[int]
    GUARDED_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    guarded: bool
    force: bool
    def __init__(self, name: _Optional[str] = ..., guarded: _Optional[bool] = ..., force: _Optional[bool] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UpdateTopicRequest(_message.Message):
    __slots__ = ("name", "queues")
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    name: str
    queues: int
    def __init__(self, name: _Optional[str] = ..., queues: _Optional[int] = ...) -> None: ...

class UpdateTopicResponse(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: Topic
    def __init__(self, topic: _Optional[_Union[Topic, _Mapping]] = ...) -> None: ...

class DescribeTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DescribeTopicResponse(_message.Message):
    __slots__ = ("topic", "queues", "groups")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    topic: Topic
    queues: _containers.RepeatedCompositeFieldContainer[QueueDetails]
    groups: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topic: _Optional[_Union[Topic, _Mapping]] = ..., queues: _Optional[_Iterable[_Union[QueueDetails, _Mapping]]] = ..., groups: _Optional[_Iterable[str]] = ...) -> None: ...

class CreateGroupRequest(_message.Message):
    __slots__ = ("name", "max_delivery_attempts", "retry_backoff_s", "has_retry_backoff", "settings")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERY_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RETRY_BACKOFF_S_FIELD_NUMBER: _ClassVar[int]
    HAS_RETRY_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    name: str
    max_delivery_attempts: int
    retry_backoff_s: _containers.RepeatedScalarFieldContainer[float]
    has_retry_backoff: bool
    settings: GroupSettings
    def __init__(self, name: _Optional[str] = ..., max_delivery_attempts: _Optional[int] = ..., retry_backoff_s: _Optional[_Iterable[float]] = ..., has_retry_backoff: _Optional[bool] = ..., settings: _Optional[_Union[GroupSettings, _Mapping]] = ...) -> None: ...

class CreateGroupResponse(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: Group
    def __init__(self, group: _Optional[_Union[Group, _Mapping]] = ...) -> None: ...

class GetGroupRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetGroupResponse(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: Group
    def __init__(self, group: _Optional[_Union[Group, _Mapping]] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[Group]
    def __init__(self, groups: _Optional[_Iterable[_Union[Group, _Mapping]]] = ...) -> None: ...

class UpdateGroupRequest(_message.Message):
    __slots__ = ("name", "max_delivery_attempts", "retry_backoff_s", "has_retry_backoff", "exponential_backoff", "fifo", "set_subscriptions", "remove_subscriptions", "consume_from", "consume_from_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERY_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RETRY_BACKOFF_S_FIELD_NUMBER: _ClassVar[int]
    HAS_RETRY_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    EXPONENTIAL_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    FIFO_FIELD_NUMBER: _ClassVar[int]
    SET_SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    REMOVE_SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    CONSUME_FROM_FIELD_NUMBER: _ClassVar[int]
    CONSUME_FROM_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    max_delivery_attempts: int
    retry_backoff_s: _containers.RepeatedScalarFieldContainer[float]
    has_retry_backoff: bool
    exponential_backoff: ExponentialBackoff
    fifo: bool
    set_subscriptions: _containers.RepeatedCompositeFieldContainer[Subscription]
    remove_subscriptions: _containers.RepeatedScalarFieldContainer[str]
    consume_from: str
    consume_from_ms: int
    def __init__(self, name: _Optional[str] = ..., max_delivery_attempts: _Optional[int] = ..., retry_backoff_s: _Optional[_Iterable[float]] = ..., has_retry_backoff: _Optional[bool] = ..., exponential_backoff: _Optional[_Union[ExponentialBackoff, _Mapping]] = ..., fifo: _Optional[bool] = ..., set_subscriptions: _Optional[_Iterable[_Union[Subscription, _Mapping]]] = ..., remove_subscriptions: _Optional[_Iterable[str]] = ..., consume_from: _Optional[str] = ..., consume_from_ms: _Optional[int] = ...) -> None: ...

class UpdateGroupResponse(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: Group
    def __init__(self, group: _Optional[_Union[Group, _Mapping]] = ...) -> None: ...

class DeleteGroupRequest(_message.Message):
    __slots__ = ("name", "force", "revision")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    name: str
    force: bool
    revision: int
    def __init__(self, name: _Optional[str] = ..., force: _Optional[bool] = ..., revision: _Optional[int] = ...) -> None: ...

class DeleteGroupResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ApplyGroupRequest(_message.Message):
    __slots__ = ("name", "max_delivery_attempts", "retry_backoff_ms", "settings", "create_time_ms", "revision")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERY_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RETRY_BACKOFF_MS_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    name: str
    max_delivery_attempts: int
    retry_backoff_ms: _containers.RepeatedScalarFieldContainer[int]
    settings: GroupSettings
    create_time_ms: int
    revision: int
    def __init__(self, name: _Optional[str] = ..., max_delivery_attempts: _Optional[int] = ..., retry_backoff_ms: _Optional[_Iterable[int]] = ..., settings: _Optional[_Union[GroupSettings, _Mapping]] = ..., create_time_ms: _Optional[int] = ..., revision: _Optional[int] = ...) -> None: ...

class ApplyGroupResponse(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: Group
    def __init__(self, group: _Optional[_Union[Group, _Mapping]] = ...) -> None: ...

class SendRequest(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[NewMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[NewMessage, _Mapping]]] = ...) -> None: ...

class SendResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SendResult]
    def __init__(self, results: _Optional[_Iterable[_Union[SendResult, _Mapping]]] = ...) -> None: ...

class SendHalfRequest(_message.Message):
    __slots__ = ("messages", "producer_group", "check_first_s")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CHECK_FIRST_S_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[NewMessage]
    producer_group: str
    check_first_s: float
    def __init__(self, messages: _Optional[_Iterable[_Union[NewMessage, _Mapping]]] = ..., producer_group: _Optional[str] = ..., check_first_s: _Optional[float] = ...) -> None: ...

class EndTransactionRequest(_message.Message):
    __slots__ = ("transaction_id", "commit", "source", "topic", "message_id")
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    transaction_id: str
    commit: bool
    source: str
    topic: str
    message_id: str
    def __init__(self, transaction_id: _Optional[str] = ..., commit: _Optional[bool] = ..., source: _Optional[str] = ..., topic: _Optional[str] = ..., message_id: _Optional[str] = ...) -> None: ...

class Transaction(_message.Message):
    __slots__ = ("transaction_id", "topic", "message_id", "producer_group", "state", "created_ms", "checks", "next_check_ms", "resolved_ms", "resolved_by", "queue_id", "offset", "recall_handle", "discard_offset", "half_message")
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_CHECK_MS_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_MS_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_BY_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    RECALL_HANDLE_FIELD_NUMBER: _ClassVar[int]
    DISCARD_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HALF_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    transaction_id: str
    topic: str
    message_id: str
    producer_group: str
    state: str
    created_ms: int
    checks: int
    next_check_ms: int
    resolved_ms: int
    resolved_by: str
    queue_id: int
    offset: int
    recall_handle: str
    discard_offset: int
    half_message: bytes
    def __init__(self, transaction_id: _Optional[str] = ..., topic: _Optional[str] = ..., message_id: _Optional[str] = ..., producer_group: _Optional[str] = ..., state: _Optional[str] = ..., created_ms: _Optional[int] = ..., checks: _Optional[int] = ..., next_check_ms: _Optional[int] = ..., resolved_ms: _Optional[int] = ..., resolved_by: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., recall_handle: _Optional[str] = ..., discard_offset: _Optional[int] = ..., half_message: _Optional[bytes] = ...) -> None: ...

class SendHalfResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SendResult]
    def __init__(self, results: _Optional[_Iterable[_Union[SendResult, _Mapping]]] = ...) -> None: ...

class EndTransactionResponse(_message.Message):
    __slots__ = ("transaction",)
    TRANSACTION_FIELD_NUMBER: _ClassVar[int]
    transaction: Transaction
    def __init__(self, transaction: _Optional[_Union[Transaction, _Mapping]] = ...) -> None: ...

class GetTransactionResponse(_message.Message):
    __slots__ = ("transaction",)
    TRANSACTION_FIELD_NUMBER: _ClassVar[int]
    transaction: Transaction
    def __init__(self, transaction: _Optional[_Union[Transaction, _Mapping]] = ...) -> None: ...

class ResumeTransactionRequest(_message.Message):
    __slots__ = ("transaction_id",)
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    transaction_id: str
    def __init__(self, transaction_id: _Optional[str] = ...) -> None: ...

class ResumeTransactionResponse(_message.Message):
    __slots__ = ("transaction",)
    TRANSACTION_FIELD_NUMBER: _ClassVar[int]
    transaction: Transaction
    def __init__(self, transaction: _Optional[_Union[Transaction, _Mapping]] = ...) -> None: ...

class DueChecksRequest(_message.Message):
    __slots__ = ("max_checks", "wait_s", "topics", "only_topics")
    MAX_CHECKS_FIELD_NUMBER: _ClassVar[int]
    WAIT_S_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    ONLY_TOPICS_FIELD_NUMBER: _ClassVar[int]
    max_checks: int
    wait_s: float
    topics: _containers.RepeatedScalarFieldContainer[str]
    only_topics: bool
    def __init__(self, max_checks: _Optional[int] = ..., wait_s: _Optional[float] = ..., topics: _Optional[_Iterable[str]] = ..., only_topics: _Optional[bool] = ...) -> None: ...

class TransactionCheck(_message.Message):
    __slots__ = ("topic", "transaction_id", "message_id", "producer_group", "message", "attempt", "queue_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    transaction_id: str
    message_id: str
    producer_group: str
    message: bytes
    attempt: int
    queue_id: int
    def __init__(self, topic: _Optional[str] = ..., transaction_id: _Optional[str] = ..., message_id: _Optional[str] = ..., producer_group: _Optional[str] = ..., message: _Optional[bytes] = ..., attempt: _Optional[int] = ..., queue_id: _Optional[int] = ...) -> None: ...

class DueChecksResponse(_message.Message):
    __slots__ = ("checks",)
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    checks: _containers.RepeatedCompositeFieldContainer[TransactionCheck]
    def __init__(self, checks: _Optional[_Iterable[_Union[TransactionCheck, _Mapping]]] = ...) -> None: ...

class GetTransactionRequest(_message.Message):
    __slots__ = ("transaction_id", "half")
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    HALF_FIELD_NUMBER: _ClassVar[int]
    transaction_id: str
    half: bool
    def __init__(self, transaction_id: _Optional[str] = ..., half: _Optional[bool] = ...) -> None: ...

class ListTransactionsRequest(_message.Message):
    __slots__ = ("state", "topic", "limit")
    STATE_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    state: str
    topic: str
    limit: int
    def __init__(self, state: _Optional[str] = ..., topic: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListTransactionsResponse(_message.Message):
    __slots__ = ("transactions",)
    TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    transactions: _containers.RepeatedCompositeFieldContainer[Transaction]
    def __init__(self, transactions: _Optional[_Iterable[_Union[Transaction, _Mapping]]] = ...) -> None: ...

class LookupSendsRequest(_message.Message):
    __slots__ = ("topic", "message_ids", "dedup_ids", "stored_only")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    DEDUP_IDS_FIELD_NUMBER: _ClassVar[int]
    STORED_ONLY_FIELD_NUMBER: _ClassVar[int]
    topic: str
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    dedup_ids: _containers.RepeatedScalarFieldContainer[str]
    stored_only: bool
    def __init__(self, topic: _Optional[str] = ..., message_ids: _Optional[_Iterable[str]] = ..., dedup_ids: _Optional[_Iterable[str]] = ..., stored_only: _Optional[bool] = ...) -> None: ...

class LookupSendsResponse(_message.Message):
    __slots__ = ("held",)
    HELD_FIELD_NUMBER: _ClassVar[int]
    held: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, held: _Optional[_Iterable[bool]] = ...) -> None: ...

class RecallRequest(_message.Message):
    __slots__ = ("topic", "recall_handle")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RECALL_HANDLE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    recall_handle: str
    def __init__(self, topic: _Optional[str] = ..., recall_handle: _Optional[str] = ...) -> None: ...

class RecallResponse(_message.Message):
    __slots__ = ("message_id",)
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    def __init__(self, message_id: _Optional[str] = ...) -> None: ...

class QueryMessageRequest(_message.Message):
    __slots__ = ("topic", "message_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    message_id: str
    def __init__(self, topic: _Optional[str] = ..., message_id: _Optional[str] = ...) -> None: ...

class QueryMessageResponse(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: PeekedMessage
    def __init__(self, message: _Optional[_Union[PeekedMessage, _Mapping]] = ...) -> None: ...

class QueryMessagesByKeyRequest(_message.Message):
    __slots__ = ("topic", "key", "limit")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    topic: str
    key: str
    limit: int
    def __init__(self, topic: _Optional[str] = ..., key: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class QueryMessagesByKeyResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[PeekedMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[PeekedMessage, _Mapping]]] = ...) -> None: ...

class PopRequest(_message.Message):
    __slots__ = ("group", "topic", "max_messages", "invisible_s", "wait_s", "filter_expression", "filter_type", "queue_id", "max_bytes", "client_id", "received_form")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_S_FIELD_NUMBER: _ClassVar[int]
    WAIT_S_FIELD_NUMBER: _ClassVar[int]
    FILTER_EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    FILTER_TYPE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_FORM_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    max_messages: int
    invisible_s: float
    wait_s: float
    filter_expression: str
    filter_type: str
    queue_id: int
    max_bytes: int
    client_id: str
    received_form: ReceivedForm
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., max_messages: _Optional[int] = ..., invisible_s: _Optional[float] = ..., wait_s: _Optional[float] = ..., filter_expression: _Optional[str] = ..., filter_type: _Optional[str] = ..., queue_id: _Optional[int] = ..., max_bytes: _Optional[int] = ..., client_id: _Optional[str] = ..., received_form: _Optional[_Union[ReceivedForm, _Mapping]] = ...) -> None: ...

class ReceivedForm(_message.Message):
    __slots__ = ("queue_ids",)
    QUEUE_IDS_FIELD_NUMBER: _ClassVar[int]
    queue_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, queue_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class PopResponse(_message.Message):
    __slots__ = ("messages", "received_count", "received_stored_bytes", "received_handles", "received")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_COUNT_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_STORED_BYTES_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_HANDLES_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[PoppedMessage]
    received_count: int
    received_stored_bytes: int
    received_handles: ReceiptHandles
    received: bytes
    def __init__(self, messages: _Optional[_Iterable[_Union[PoppedMessage, _Mapping]]] = ..., received_count: _Optional[int] = ..., received_stored_bytes: _Optional[int] = ..., received_handles: _Optional[_Union[ReceiptHandles, _Mapping]] = ..., received: _Optional[bytes] = ...) -> None: ...

class ReceiptHandles(_message.Message):
    __slots__ = ("handles",)
    HANDLES_FIELD_NUMBER: _ClassVar[int]
    handles: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, handles: _Optional[_Iterable[str]] = ...) -> None: ...

class AckRequest(_message.Message):
    __slots__ = ("group", "handles")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    HANDLES_FIELD_NUMBER: _ClassVar[int]
    group: str
    handles: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group: _Optional[str] = ..., handles: _Optional[_Iterable[str]] = ...) -> None: ...

class AckResult(_message.Message):
    __slots__ = ("error",)
    ERROR_FIELD_NUMBER: _ClassVar[int]
    error: ErrorDetail
    def __init__(self, error: _Optional[_Union[ErrorDetail, _Mapping]] = ...) -> None: ...

class AckResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[AckResult]
    def __init__(self, results: _Optional[_Iterable[_Union[AckResult, _Mapping]]] = ...) -> None: ...

class HopStreamRequest(_message.Message):
    __slots__ = ("id", "pop", "ack", "frame")
    ID_FIELD_NUMBER: _ClassVar[int]
    POP_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    FRAME_FIELD_NUMBER: _ClassVar[int]
    id: int
    pop: PopRequest
    ack: AckRequest
    frame: _containers.RepeatedCompositeFieldContainer[HopStreamRequest]
    def __init__(self, id: _Optional[int] = ..., pop: _Optional[_Union[PopRequest, _Mapping]] = ..., ack: _Optional[_Union[AckRequest, _Mapping]] = ..., frame: _Optional[_Iterable[_Union[HopStreamRequest, _Mapping]]] = ...) -> None: ...

class HopStreamResponse(_message.Message):
    __slots__ = ("id", "pop", "ack", "error", "frame")
    ID_FIELD_NUMBER: _ClassVar[int]
    POP_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FRAME_FIELD_NUMBER: _ClassVar[int]
    id: int
    pop: PopResponse
    ack: AckResponse
    error: ErrorDetail
    frame: _containers.RepeatedCompositeFieldContainer[HopStreamResponse]
    def __init__(self, id: _Optional[int] = ..., pop: _Optional[_Union[PopResponse, _Mapping]] = ..., ack: _Optional[_Union[AckResponse, _Mapping]] = ..., error: _Optional[_Union[ErrorDetail, _Mapping]] = ..., frame: _Optional[_Iterable[_Union[HopStreamResponse, _Mapping]]] = ...) -> None: ...

class HopSendRequest(_message.Message):
    __slots__ = ("id", "send", "send_half", "frame")
    ID_FIELD_NUMBER: _ClassVar[int]
    SEND_FIELD_NUMBER: _ClassVar[int]
    SEND_HALF_FIELD_NUMBER: _ClassVar[int]
    FRAME_FIELD_NUMBER: _ClassVar[int]
    id: int
    send: SendRequest
    send_half: SendHalfRequest
    frame: _containers.RepeatedCompositeFieldContainer[HopSendRequest]
    def __init__(self, id: _Optional[int] = ..., send: _Optional[_Union[SendRequest, _Mapping]] = ..., send_half: _Optional[_Union[SendHalfRequest, _Mapping]] = ..., frame: _Optional[_Iterable[_Union[HopSendRequest, _Mapping]]] = ...) -> None: ...

class HopSendResponse(_message.Message):
    __slots__ = ("id", "send", "send_half", "error", "frame")
    ID_FIELD_NUMBER: _ClassVar[int]
    SEND_FIELD_NUMBER: _ClassVar[int]
    SEND_HALF_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FRAME_FIELD_NUMBER: _ClassVar[int]
    id: int
    send: SendResponse
    send_half: SendHalfResponse
    error: ErrorDetail
    frame: _containers.RepeatedCompositeFieldContainer[HopSendResponse]
    def __init__(self, id: _Optional[int] = ..., send: _Optional[_Union[SendResponse, _Mapping]] = ..., send_half: _Optional[_Union[SendHalfResponse, _Mapping]] = ..., error: _Optional[_Union[ErrorDetail, _Mapping]] = ..., frame: _Optional[_Iterable[_Union[HopSendResponse, _Mapping]]] = ...) -> None: ...

class GetDeliveriesRequest(_message.Message):
    __slots__ = ("group", "handles")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    HANDLES_FIELD_NUMBER: _ClassVar[int]
    group: str
    handles: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group: _Optional[str] = ..., handles: _Optional[_Iterable[str]] = ...) -> None: ...

class DeliveryResult(_message.Message):
    __slots__ = ("message", "error")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    message: PoppedMessage
    error: ErrorDetail
    def __init__(self, message: _Optional[_Union[PoppedMessage, _Mapping]] = ..., error: _Optional[_Union[ErrorDetail, _Mapping]] = ...) -> None: ...

class GetDeliveriesResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[DeliveryResult]
    def __init__(self, results: _Optional[_Iterable[_Union[DeliveryResult, _Mapping]]] = ...) -> None: ...

class FollowHandlesRequest(_message.Message):
    __slots__ = ("group", "handles")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    HANDLES_FIELD_NUMBER: _ClassVar[int]
    group: str
    handles: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group: _Optional[str] = ..., handles: _Optional[_Iterable[str]] = ...) -> None: ...

class FollowedHandle(_message.Message):
    __slots__ = ("handle", "invisible_until_ms")
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    handle: str
    invisible_until_ms: int
    def __init__(self, handle: _Optional[str] = ..., invisible_until_ms: _Optional[int] = ...) -> None: ...

class FollowResult(_message.Message):
    __slots__ = ("followed", "error")
    FOLLOWED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    followed: FollowedHandle
    error: ErrorDetail
    def __init__(self, followed: _Optional[_Union[FollowedHandle, _Mapping]] = ..., error: _Optional[_Union[ErrorDetail, _Mapping]] = ...) -> None: ...

class FollowHandlesResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[FollowResult]
    def __init__(self, results: _Optional[_Iterable[_Union[FollowResult, _Mapping]]] = ...) -> None: ...

class ChangeInvisibleTimeRequest(_message.Message):
    __slots__ = ("group", "handle", "invisible_s")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_S_FIELD_NUMBER: _ClassVar[int]
    group: str
    handle: str
    invisible_s: float
    def __init__(self, group: _Optional[str] = ..., handle: _Optional[str] = ..., invisible_s: _Optional[float] = ...) -> None: ...

class ChangeInvisibleTimeResponse(_message.Message):
    __slots__ = ("handle", "invisible_until_ms")
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    handle: str
    invisible_until_ms: int
    def __init__(self, handle: _Optional[str] = ..., invisible_until_ms: _Optional[int] = ...) -> None: ...

class NackRequest(_message.Message):
    __slots__ = ("group", "handle", "delay_s")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    DELAY_S_FIELD_NUMBER: _ClassVar[int]
    group: str
    handle: str
    delay_s: float
    def __init__(self, group: _Optional[str] = ..., handle: _Optional[str] = ..., delay_s: _Optional[float] = ...) -> None: ...

class NackResponse(_message.Message):
    __slots__ = ("redeliver_at_ms",)
    REDELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    redeliver_at_ms: int
    def __init__(self, redeliver_at_ms: _Optional[int] = ...) -> None: ...

class DeadLetterRequest(_message.Message):
    __slots__ = ("group", "handle")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    group: str
    handle: str
    def __init__(self, group: _Optional[str] = ..., handle: _Optional[str] = ...) -> None: ...

class DeadLetterResponse(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class PullRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "offset", "max_messages", "wait", "wait_s", "filter_expression", "filter_type")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    WAIT_S_FIELD_NUMBER: _ClassVar[int]
    FILTER_EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    FILTER_TYPE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    offset: int
    max_messages: int
    wait: bool
    wait_s: float
    filter_expression: str
    filter_type: str
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., max_messages: _Optional[int] = ..., wait: _Optional[bool] = ..., wait_s: _Optional[float] = ..., filter_expression: _Optional[str] = ..., filter_type: _Optional[str] = ...) -> None: ...

class PullResponse(_message.Message):
    __slots__ = ("topic", "queue_id", "messages", "min_offset", "max_offset", "next_offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    messages: _containers.RepeatedCompositeFieldContainer[PulledRecord]
    min_offset: int
    max_offset: int
    next_offset: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[PulledRecord, _Mapping]]] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., next_offset: _Optional[int] = ...) -> None: ...

class AwaitMessagesRequest(_message.Message):
    __slots__ = ("topic", "positions", "wait_s")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    WAIT_S_FIELD_NUMBER: _ClassVar[int]
    topic: str
    positions: _containers.RepeatedCompositeFieldContainer[QueueOffset]
    wait_s: float
    def __init__(self, topic: _Optional[str] = ..., positions: _Optional[_Iterable[_Union[QueueOffset, _Mapping]]] = ..., wait_s: _Optional[float] = ...) -> None: ...

class AwaitMessagesResponse(_message.Message):
    __slots__ = ("ready",)
    READY_FIELD_NUMBER: _ClassVar[int]
    ready: _containers.RepeatedCompositeFieldContainer[QueueOffset]
    def __init__(self, ready: _Optional[_Iterable[_Union[QueueOffset, _Mapping]]] = ...) -> None: ...

class CommitOffsetsRequest(_message.Message):
    __slots__ = ("group", "topic", "offsets")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    offsets: _containers.RepeatedCompositeFieldContainer[QueueOffset]
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., offsets: _Optional[_Iterable[_Union[QueueOffset, _Mapping]]] = ...) -> None: ...

class CommitOffsetsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetOffsetsRequest(_message.Message):
    __slots__ = ("group", "topic")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ...) -> None: ...

class GetOffsetsResponse(_message.Message):
    __slots__ = ("offsets",)
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedCompositeFieldContainer[ConsumerOffset]
    def __init__(self, offsets: _Optional[_Iterable[_Union[ConsumerOffset, _Mapping]]] = ...) -> None: ...

class OffsetsAtRequest(_message.Message):
    __slots__ = ("topic", "timestamp_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    timestamp_ms: int
    def __init__(self, topic: _Optional[str] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class OffsetsAtResponse(_message.Message):
    __slots__ = ("offsets",)
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedCompositeFieldContainer[QueueOffset]
    def __init__(self, offsets: _Optional[_Iterable[_Union[QueueOffset, _Mapping]]] = ...) -> None: ...

class InflightCountRequest(_message.Message):
    __slots__ = ("group", "topic")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ...) -> None: ...

class InflightCountResponse(_message.Message):
    __slots__ = ("count",)
    COUNT_FIELD_NUMBER: _ClassVar[int]
    count: int
    def __init__(self, count: _Optional[int] = ...) -> None: ...

class PurgeRequest(_message.Message):
    __slots__ = ("topic", "queue_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...

class PurgeResponse(_message.Message):
    __slots__ = ("purged",)
    PURGED_FIELD_NUMBER: _ClassVar[int]
    purged: int
    def __init__(self, purged: _Optional[int] = ...) -> None: ...

class ResetOffsetsRequest(_message.Message):
    __slots__ = ("group", "topic", "target", "timestamp_ms", "offsets", "has_offsets", "force")
    class OffsetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    HAS_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    target: str
    timestamp_ms: int
    offsets: _containers.ScalarMap[int, int]
    has_offsets: bool
    force: bool
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., target: _Optional[str] = ..., timestamp_ms: _Optional[int] = ..., offsets: _Optional[_Mapping[int, int]] = ..., has_offsets: _Optional[bool] = ..., force: _Optional[bool] = ...) -> None: ...

class ResetOffsetsResponse(_message.Message):
    __slots__ = ("queues", "dropped_inflight")
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    DROPPED_INFLIGHT_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[OffsetChange]
    dropped_inflight: int
    def __init__(self, queues: _Optional[_Iterable[_Union[OffsetChange, _Mapping]]] = ..., dropped_inflight: _Optional[int] = ...) -> None: ...

class PeekRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "offset", "group", "max_messages")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    offset: int
    group: str
    max_messages: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., group: _Optional[str] = ..., max_messages: _Optional[int] = ...) -> None: ...

class PeekResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[PeekedMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[PeekedMessage, _Mapping]]] = ...) -> None: ...

class RedriveRequest(_message.Message):
    __slots__ = ("group", "max_messages", "selected")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SELECTED_FIELD_NUMBER: _ClassVar[int]
    group: str
    max_messages: int
    selected: _containers.RepeatedCompositeFieldContainer[DeadLetterRef]
    def __init__(self, group: _Optional[str] = ..., max_messages: _Optional[int] = ..., selected: _Optional[_Iterable[_Union[DeadLetterRef, _Mapping]]] = ...) -> None: ...

class DeadLetterRef(_message.Message):
    __slots__ = ("queue_id", "offset", "outcome")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    offset: int
    outcome: str
    def __init__(self, queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., outcome: _Optional[str] = ...) -> None: ...

class RedriveResponse(_message.Message):
    __slots__ = ("moved", "dropped", "remaining", "outcomes")
    MOVED_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    moved: int
    dropped: int
    remaining: int
    outcomes: _containers.RepeatedCompositeFieldContainer[DeadLetterRef]
    def __init__(self, moved: _Optional[int] = ..., dropped: _Optional[int] = ..., remaining: _Optional[int] = ..., outcomes: _Optional[_Iterable[_Union[DeadLetterRef, _Mapping]]] = ...) -> None: ...

class GetGroupLagRequest(_message.Message):
    __slots__ = ("group", "topic")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ...) -> None: ...

class GetGroupLagResponse(_message.Message):
    __slots__ = ("queues",)
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[QueueLag]
    def __init__(self, queues: _Optional[_Iterable[_Union[QueueLag, _Mapping]]] = ...) -> None: ...

class GetLagReportRequest(_message.Message):
    __slots__ = ("group", "topic")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ...) -> None: ...

class GetLagReportResponse(_message.Message):
    __slots__ = ("group", "queues", "topics", "dlq_depth")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    DLQ_DEPTH_FIELD_NUMBER: _ClassVar[int]
    group: str
    queues: _containers.RepeatedCompositeFieldContainer[QueueBacklog]
    topics: _containers.RepeatedCompositeFieldContainer[TopicBacklog]
    dlq_depth: int
    def __init__(self, group: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[QueueBacklog, _Mapping]]] = ..., topics: _Optional[_Iterable[_Union[TopicBacklog, _Mapping]]] = ..., dlq_depth: _Optional[int] = ...) -> None: ...

class InspectGroupRequest(_message.Message):
    __slots__ = ("group", "topic", "page_size", "page_token")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    page_size: int
    page_token: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class HeldPolls(_message.Message):
    __slots__ = ("topic", "queue_id", "count")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    count: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., count: _Optional[int] = ...) -> None: ...

class InflightMessage(_message.Message):
    __slots__ = ("topic", "queue_id", "retry", "offset", "message_id", "attempt", "popped_ms", "invisible_until_ms", "waiting", "client_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    POPPED_MS_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    retry: bool
    offset: int
    message_id: str
    attempt: int
    popped_ms: int
    invisible_until_ms: int
    waiting: bool
    client_id: str
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., retry: _Optional[bool] = ..., offset: _Optional[int] = ..., message_id: _Optional[str] = ..., attempt: _Optional[int] = ..., popped_ms: _Optional[int] = ..., invisible_until_ms: _Optional[int] = ..., waiting: _Optional[bool] = ..., client_id: _Optional[str] = ...) -> None: ...

class ConsumerInflight(_message.Message):
    __slots__ = ("client_id", "count", "earliest_until_ms")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    EARLIEST_UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    count: int
    earliest_until_ms: int
    def __init__(self, client_id: _Optional[str] = ..., count: _Optional[int] = ..., earliest_until_ms: _Optional[int] = ...) -> None: ...

class ReviveLag(_message.Message):
    __slots__ = ("lag_ms", "oldest_due_ms", "next_deadline_ms", "live_checkpoints")
    LAG_MS_FIELD_NUMBER: _ClassVar[int]
    OLDEST_DUE_MS_FIELD_NUMBER: _ClassVar[int]
    NEXT_DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    LIVE_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    lag_ms: int
    oldest_due_ms: int
    next_deadline_ms: int
    live_checkpoints: int
    def __init__(self, lag_ms: _Optional[int] = ..., oldest_due_ms: _Optional[int] = ..., next_deadline_ms: _Optional[int] = ..., live_checkpoints: _Optional[int] = ...) -> None: ...

class BlockedHead(_message.Message):
    __slots__ = ("topic", "queue_id", "message_group", "offset", "message_id", "attempt", "invisible_until_ms", "delivered", "waiting")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_GROUP_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    message_group: str
    offset: int
    message_id: str
    attempt: int
    invisible_until_ms: int
    delivered: bool
    waiting: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., message_group: _Optional[str] = ..., offset: _Optional[int] = ..., message_id: _Optional[str] = ..., attempt: _Optional[int] = ..., invisible_until_ms: _Optional[int] = ..., delivered: _Optional[bool] = ..., waiting: _Optional[int] = ...) -> None: ...

class InspectGroupResponse(_message.Message):
    __slots__ = ("group", "now_ms", "held_polls", "inflight", "next_page_token", "revive", "blocked_heads", "blocked_groups", "consumers", "consumer_count")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    NOW_MS_FIELD_NUMBER: _ClassVar[int]
    HELD_POLLS_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REVIVE_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_HEADS_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_GROUPS_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_COUNT_FIELD_NUMBER: _ClassVar[int]
    group: str
    now_ms: int
    held_polls: _containers.RepeatedCompositeFieldContainer[HeldPolls]
    inflight: _containers.RepeatedCompositeFieldContainer[InflightMessage]
    next_page_token: str
    revive: ReviveLag
    blocked_heads: _containers.RepeatedCompositeFieldContainer[BlockedHead]
    blocked_groups: int
    consumers: _containers.RepeatedCompositeFieldContainer[ConsumerInflight]
    consumer_count: int
    def __init__(self, group: _Optional[str] = ..., now_ms: _Optional[int] = ..., held_polls: _Optional[_Iterable[_Union[HeldPolls, _Mapping]]] = ..., inflight: _Optional[_Iterable[_Union[InflightMessage, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., revive: _Optional[_Union[ReviveLag, _Mapping]] = ..., blocked_heads: _Optional[_Iterable[_Union[BlockedHead, _Mapping]]] = ..., blocked_groups: _Optional[int] = ..., consumers: _Optional[_Iterable[_Union[ConsumerInflight, _Mapping]]] = ..., consumer_count: _Optional[int] = ...) -> None: ...

class GetMessageHistoryRequest(_message.Message):
    __slots__ = ("topic", "message_id", "group")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    topic: str
    message_id: str
    group: str
    def __init__(self, topic: _Optional[str] = ..., message_id: _Optional[str] = ..., group: _Optional[str] = ...) -> None: ...

class DeliveryEvent(_message.Message):
    __slots__ = ("time_ms", "event", "group", "topic", "queue_id", "retry", "offset", "attempt", "invisible_until_ms", "to_topic", "to_offset", "client_id")
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    TO_TOPIC_FIELD_NUMBER: _ClassVar[int]
    TO_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    time_ms: int
    event: str
    group: str
    topic: str
    queue_id: int
    retry: bool
    offset: int
    attempt: int
    invisible_until_ms: int
    to_topic: str
    to_offset: int
    client_id: str
    def __init__(self, time_ms: _Optional[int] = ..., event: _Optional[str] = ..., group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., retry: _Optional[bool] = ..., offset: _Optional[int] = ..., attempt: _Optional[int] = ..., invisible_until_ms: _Optional[int] = ..., to_topic: _Optional[str] = ..., to_offset: _Optional[int] = ..., client_id: _Optional[str] = ...) -> None: ...

class GetMessageHistoryResponse(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[DeliveryEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[DeliveryEvent, _Mapping]]] = ...) -> None: ...
