from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StoredMessage(_message.Message):
    __slots__ = ("message_id", "body", "tag", "keys", "properties", "born_time_ms", "store_time_ms", "delivery_attempt", "origin_topic", "origin_queue_id", "origin_offset", "message_group", "deliver_at_ms", "body_encoding", "dedup_id", "born_host")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    BORN_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    STORE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_TOPIC_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_GROUP_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    BODY_ENCODING_FIELD_NUMBER: _ClassVar[int]
    DEDUP_ID_FIELD_NUMBER: _ClassVar[int]
    BORN_HOST_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    body: bytes
    tag: str
    keys: _containers.RepeatedScalarFieldContainer[str]
    properties: _containers.ScalarMap[str, str]
    born_time_ms: int
    store_time_ms: int
    delivery_attempt: int
    origin_topic: str
    origin_queue_id: int
    origin_offset: int
    message_group: str
    deliver_at_ms: int
    body_encoding: str
    dedup_id: str
    born_host: str
    def __init__(self, message_id: _Optional[str] = ..., body: _Optional[bytes] = ..., tag: _Optional[str] = ..., keys: _Optional[_Iterable[str]] = ..., properties: _Optional[_Mapping[str, str]] = ..., born_time_ms: _Optional[int] = ..., store_time_ms: _Optional[int] = ..., delivery_attempt: _Optional[int] = ..., origin_topic: _Optional[str] = ..., origin_queue_id: _Optional[int] = ..., origin_offset: _Optional[int] = ..., message_group: _Optional[str] = ..., deliver_at_ms: _Optional[int] = ..., body_encoding: _Optional[str] = ..., dedup_id: _Optional[str] = ..., born_host: _Optional[str] = ...) -> None: ...

class TopicRecord(_message.Message):
    __slots__ = ("name", "topic_id", "queues", "message_type", "kind", "create_time_ms", "owner_group", "owner_topic", "route_create_time_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    OWNER_GROUP_FIELD_NUMBER: _ClassVar[int]
    OWNER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    ROUTE_CREATE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    topic_id: int
    queues: int
    message_type: int
    kind: int
    create_time_ms: int
    owner_group: str
    owner_topic: str
    route_create_time_ms: int
    def __init__(self, name: _Optional[str] = ..., topic_id: _Optional[int] = ..., queues: _Optional[int] = ..., message_type: _Optional[int] = ..., kind: _Optional[int] = ..., create_time_ms: _Optional[int] = ..., owner_group: _Optional[str] = ..., owner_topic: _Optional[str] = ..., route_create_time_ms: _Optional[int] = ...) -> None: ...

class GroupRecord(_message.Message):
    __slots__ = ("name", "group_id", "max_delivery_attempts", "retry_backoff_ms", "create_time_ms", "auto_created")
    NAME_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERY_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RETRY_BACKOFF_MS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    AUTO_CREATED_FIELD_NUMBER: _ClassVar[int]
    name: str
    group_id: int
    max_delivery_attempts: int
    retry_backoff_ms: _containers.RepeatedScalarFieldContainer[int]
    create_time_ms: int
    auto_created: bool
    def __init__(self, name: _Optional[str] = ..., group_id: _Optional[int] = ..., max_delivery_attempts: _Optional[int] = ..., retry_backoff_ms: _Optional[_Iterable[int]] = ..., create_time_ms: _Optional[int] = ..., auto_created: _Optional[bool] = ...) -> None: ...

class CheckpointRecord(_message.Message):
    __slots__ = ("ck_id", "group_id", "topic_id", "queue_id", "range_start", "range_end", "offsets", "pop_time_ms", "deadline_ms", "resolved_bits", "chained", "acked_bits", "fifo_group", "attempt", "held", "not_before_ms", "client_id")
    CK_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    RANGE_START_FIELD_NUMBER: _ClassVar[int]
    RANGE_END_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    POP_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_BITS_FIELD_NUMBER: _ClassVar[int]
    CHAINED_FIELD_NUMBER: _ClassVar[int]
    ACKED_BITS_FIELD_NUMBER: _ClassVar[int]
    FIFO_GROUP_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    NOT_BEFORE_MS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    ck_id: int
    group_id: int
    topic_id: int
    queue_id: int
    range_start: int
    range_end: int
    offsets: _containers.RepeatedScalarFieldContainer[int]
    pop_time_ms: int
    deadline_ms: int
    resolved_bits: bytes
    chained: bool
    acked_bits: bytes
    fifo_group: str
    attempt: int
    held: bool
    not_before_ms: int
    client_id: str
    def __init__(self, ck_id: _Optional[int] = ..., group_id: _Optional[int] = ..., topic_id: _Optional[int] = ..., queue_id: _Optional[int] = ..., range_start: _Optional[int] = ..., range_end: _Optional[int] = ..., offsets: _Optional[_Iterable[int]] = ..., pop_time_ms: _Optional[int] = ..., deadline_ms: _Optional[int] = ..., resolved_bits: _Optional[bytes] = ..., chained: _Optional[bool] = ..., acked_bits: _Optional[bytes] = ..., fifo_group: _Optional[str] = ..., attempt: _Optional[int] = ..., held: _Optional[bool] = ..., not_before_ms: _Optional[int] = ..., client_id: _Optional[str] = ...) -> None: ...

class TimerRecord(_message.Message):
    __slots__ = ("topic_id", "queue_id", "message")
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    topic_id: int
    queue_id: int
    message: bytes
    def __init__(self, topic_id: _Optional[int] = ..., queue_id: _Optional[int] = ..., message: _Optional[bytes] = ...) -> None: ...

class IndexRecord(_message.Message):
    __slots__ = ("queue_id", "offset", "store_time_ms", "message_id", "recall_handle", "transaction_seq")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    STORE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    RECALL_HANDLE_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_SEQ_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    offset: int
    store_time_ms: int
    message_id: str
    recall_handle: str
    transaction_seq: int
    def __init__(self, queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., store_time_ms: _Optional[int] = ..., message_id: _Optional[str] = ..., recall_handle: _Optional[str] = ..., transaction_seq: _Optional[int] = ...) -> None: ...

class TransactionRecord(_message.Message):
    __slots__ = ("state", "topic_id", "topic", "queue_id", "message", "message_id", "producer_group", "created_ms", "checks", "next_check_ms", "resolved_ms", "resolved_by", "offset", "recall_handle", "discard_offset", "expire_ms")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATE_UNSPECIFIED: _ClassVar[TransactionRecord.State]
        STATE_OPEN: _ClassVar[TransactionRecord.State]
        STATE_COMMITTED: _ClassVar[TransactionRecord.State]
        STATE_ROLLED_BACK: _ClassVar[TransactionRecord.State]
        STATE_DISCARDED: _ClassVar[TransactionRecord.State]
    STATE_UNSPECIFIED: TransactionRecord.State
    STATE_OPEN: TransactionRecord.State
    STATE_COMMITTED: TransactionRecord.State
    STATE_ROLLED_BACK: TransactionRecord.State
    STATE_DISCARDED: TransactionRecord.State
    STATE_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_CHECK_MS_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_MS_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_BY_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    RECALL_HANDLE_FIELD_NUMBER: _ClassVar[int]
    DISCARD_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_MS_FIELD_NUMBER: _ClassVar[int]
    state: TransactionRecord.State
    topic_id: int
    topic: str
    queue_id: int
    message: bytes
    message_id: str
    producer_group: str
    created_ms: int
    checks: int
    next_check_ms: int
    resolved_ms: int
    resolved_by: str
    offset: int
    recall_handle: str
    discard_offset: int
    expire_ms: int
    def __init__(self, state: _Optional[_Union[TransactionRecord.State, str]] = ..., topic_id: _Optional[int] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., message: _Optional[bytes] = ..., message_id: _Optional[str] = ..., producer_group: _Optional[str] = ..., created_ms: _Optional[int] = ..., checks: _Optional[int] = ..., next_check_ms: _Optional[int] = ..., resolved_ms: _Optional[int] = ..., resolved_by: _Optional[str] = ..., offset: _Optional[int] = ..., recall_handle: _Optional[str] = ..., discard_offset: _Optional[int] = ..., expire_ms: _Optional[int] = ...) -> None: ...
