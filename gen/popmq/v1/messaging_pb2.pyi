import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FilterType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FILTER_TYPE_UNSPECIFIED: _ClassVar[FilterType]
    FILTER_TYPE_TAG: _ClassVar[FilterType]
    FILTER_TYPE_SQL: _ClassVar[FilterType]

class ConsumeMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONSUME_MODE_UNSPECIFIED: _ClassVar[ConsumeMode]
    CONSUME_MODE_POP: _ClassVar[ConsumeMode]
    CONSUME_MODE_QUEUE_EXCLUSIVE: _ClassVar[ConsumeMode]

class AssignmentStrategy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ASSIGNMENT_STRATEGY_UNSPECIFIED: _ClassVar[AssignmentStrategy]
    ASSIGNMENT_STRATEGY_AVERAGE: _ClassVar[AssignmentStrategy]
    ASSIGNMENT_STRATEGY_AVERAGE_BY_CIRCLE: _ClassVar[AssignmentStrategy]
    ASSIGNMENT_STRATEGY_CONSISTENT_HASH: _ClassVar[AssignmentStrategy]
    ASSIGNMENT_STRATEGY_BY_CONFIG: _ClassVar[AssignmentStrategy]
    ASSIGNMENT_STRATEGY_BY_MACHINE_ROOM: _ClassVar[AssignmentStrategy]

class TransactionResolution(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRANSACTION_RESOLUTION_UNSPECIFIED: _ClassVar[TransactionResolution]
    TRANSACTION_RESOLUTION_COMMIT: _ClassVar[TransactionResolution]
    TRANSACTION_RESOLUTION_ROLLBACK: _ClassVar[TransactionResolution]

class TransactionSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRANSACTION_SOURCE_UNSPECIFIED: _ClassVar[TransactionSource]
    TRANSACTION_SOURCE_CLIENT: _ClassVar[TransactionSource]
    TRANSACTION_SOURCE_SERVER_CHECK: _ClassVar[TransactionSource]
    TRANSACTION_SOURCE_ADMIN: _ClassVar[TransactionSource]
    TRANSACTION_SOURCE_CHECK_MAX: _ClassVar[TransactionSource]

class TransactionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRANSACTION_STATE_UNSPECIFIED: _ClassVar[TransactionState]
    TRANSACTION_STATE_OPEN: _ClassVar[TransactionState]
    TRANSACTION_STATE_COMMITTED: _ClassVar[TransactionState]
    TRANSACTION_STATE_ROLLED_BACK: _ClassVar[TransactionState]
    TRANSACTION_STATE_DISCARDED: _ClassVar[TransactionState]
FILTER_TYPE_UNSPECIFIED: FilterType
FILTER_TYPE_TAG: FilterType
FILTER_TYPE_SQL: FilterType
CONSUME_MODE_UNSPECIFIED: ConsumeMode
CONSUME_MODE_POP: ConsumeMode
CONSUME_MODE_QUEUE_EXCLUSIVE: ConsumeMode
ASSIGNMENT_STRATEGY_UNSPECIFIED: AssignmentStrategy
ASSIGNMENT_STRATEGY_AVERAGE: AssignmentStrategy
ASSIGNMENT_STRATEGY_AVERAGE_BY_CIRCLE: AssignmentStrategy
ASSIGNMENT_STRATEGY_CONSISTENT_HASH: AssignmentStrategy
ASSIGNMENT_STRATEGY_BY_CONFIG: AssignmentStrategy
ASSIGNMENT_STRATEGY_BY_MACHINE_ROOM: AssignmentStrategy
TRANSACTION_RESOLUTION_UNSPECIFIED: TransactionResolution
TRANSACTION_RESOLUTION_COMMIT: TransactionResolution
TRANSACTION_RESOLUTION_ROLLBACK: TransactionResolution
TRANSACTION_SOURCE_UNSPECIFIED: TransactionSource
TRANSACTION_SOURCE_CLIENT: TransactionSource
TRANSACTION_SOURCE_SERVER_CHECK: TransactionSource
TRANSACTION_SOURCE_ADMIN: TransactionSource
TRANSACTION_SOURCE_CHECK_MAX: TransactionSource
TRANSACTION_STATE_UNSPECIFIED: TransactionState
TRANSACTION_STATE_OPEN: TransactionState
TRANSACTION_STATE_COMMITTED: TransactionState
TRANSACTION_STATE_ROLLED_BACK: TransactionState
TRANSACTION_STATE_DISCARDED: TransactionState

class OutgoingMessage(_message.Message):
    __slots__ = ("topic", "body", "tag", "keys", "properties", "message_id", "message_group", "delivery_time", "delay", "delay_level", "dedup_id", "body_encoding", "born_host")
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
    MESSAGE_GROUP_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_TIME_FIELD_NUMBER: _ClassVar[int]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    DELAY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    DEDUP_ID_FIELD_NUMBER: _ClassVar[int]
    BODY_ENCODING_FIELD_NUMBER: _ClassVar[int]
    BORN_HOST_FIELD_NUMBER: _ClassVar[int]
    topic: str
    body: bytes
    tag: str
    keys: _containers.RepeatedScalarFieldContainer[str]
    properties: _containers.ScalarMap[str, str]
    message_id: str
    message_group: str
    delivery_time: _timestamp_pb2.Timestamp
    delay: _duration_pb2.Duration
    delay_level: int
    dedup_id: str
    body_encoding: str
    born_host: str
    def __init__(self, topic: _Optional[str] = ..., body: _Optional[bytes] = ..., tag: _Optional[str] = ..., keys: _Optional[_Iterable[str]] = ..., properties: _Optional[_Mapping[str, str]] = ..., message_id: _Optional[str] = ..., message_group: _Optional[str] = ..., delivery_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., delay_level: _Optional[int] = ..., dedup_id: _Optional[str] = ..., body_encoding: _Optional[str] = ..., born_host: _Optional[str] = ...) -> None: ...

class SendMessagesRequest(_message.Message):
    __slots__ = ("messages", "transactional", "producer_group", "transaction_check_delay", "repeat")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TRANSACTIONAL_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_CHECK_DELAY_FIELD_NUMBER: _ClassVar[int]
    REPEAT_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[OutgoingMessage]
    transactional: bool
    producer_group: str
    transaction_check_delay: _duration_pb2.Duration
    repeat: bool
    def __init__(self, messages: _Optional[_Iterable[_Union[OutgoingMessage, _Mapping]]] = ..., transactional: _Optional[bool] = ..., producer_group: _Optional[str] = ..., transaction_check_delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., repeat: _Optional[bool] = ...) -> None: ...

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

class SendMessagesResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SendResult]
    def __init__(self, results: _Optional[_Iterable[_Union[SendResult, _Mapping]]] = ...) -> None: ...

class FilterExpression(_message.Message):
    __slots__ = ("type", "expression")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    type: FilterType
    expression: str
    def __init__(self, type: _Optional[_Union[FilterType, str]] = ..., expression: _Optional[str] = ...) -> None: ...

class PopRequest(_message.Message):
    __slots__ = ("group", "topic", "max_messages", "invisible_duration", "long_polling_timeout", "filter", "ack_receipt_handles", "client_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_DURATION_FIELD_NUMBER: _ClassVar[int]
    LONG_POLLING_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    ACK_RECEIPT_HANDLES_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    max_messages: int
    invisible_duration: _duration_pb2.Duration
    long_polling_timeout: _duration_pb2.Duration
    filter: FilterExpression
    ack_receipt_handles: _containers.RepeatedScalarFieldContainer[str]
    client_id: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., max_messages: _Optional[int] = ..., invisible_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., long_polling_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., filter: _Optional[_Union[FilterExpression, _Mapping]] = ..., ack_receipt_handles: _Optional[_Iterable[str]] = ..., client_id: _Optional[str] = ...) -> None: ...

class ReceivedMessage(_message.Message):
    __slots__ = ("message_id", "topic", "queue_id", "offset", "body", "tag", "keys", "properties", "born_time", "store_time", "delivery_attempt", "receipt_handle", "invisible_until", "message_group", "deliver_time", "body_encoding", "born_host")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    BORN_TIME_FIELD_NUMBER: _ClassVar[int]
    STORE_TIME_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_UNTIL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_GROUP_FIELD_NUMBER: _ClassVar[int]
    DELIVER_TIME_FIELD_NUMBER: _ClassVar[int]
    BODY_ENCODING_FIELD_NUMBER: _ClassVar[int]
    BORN_HOST_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    topic: str
    queue_id: int
    offset: int
    body: bytes
    tag: str
    keys: _containers.RepeatedScalarFieldContainer[str]
    properties: _containers.ScalarMap[str, str]
    born_time: _timestamp_pb2.Timestamp
    store_time: _timestamp_pb2.Timestamp
    delivery_attempt: int
    receipt_handle: str
    invisible_until: _timestamp_pb2.Timestamp
    message_group: str
    deliver_time: _timestamp_pb2.Timestamp
    body_encoding: str
    born_host: str
    def __init__(self, message_id: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., body: _Optional[bytes] = ..., tag: _Optional[str] = ..., keys: _Optional[_Iterable[str]] = ..., properties: _Optional[_Mapping[str, str]] = ..., born_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., store_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delivery_attempt: _Optional[int] = ..., receipt_handle: _Optional[str] = ..., invisible_until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., message_group: _Optional[str] = ..., deliver_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., body_encoding: _Optional[str] = ..., born_host: _Optional[str] = ...) -> None: ...

class PopResponse(_message.Message):
    __slots__ = ("messages", "ack_results")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    ACK_RESULTS_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ReceivedMessage]
    ack_results: _containers.RepeatedCompositeFieldContainer[EntryResult]
    def __init__(self, messages: _Optional[_Iterable[_Union[ReceivedMessage, _Mapping]]] = ..., ack_results: _Optional[_Iterable[_Union[EntryResult, _Mapping]]] = ...) -> None: ...

class SendStreamRequest(_message.Message):
    __slots__ = ("request_id", "send")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SEND_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    send: SendMessagesRequest
    def __init__(self, request_id: _Optional[int] = ..., send: _Optional[_Union[SendMessagesRequest, _Mapping]] = ...) -> None: ...

class SendStreamResponse(_message.Message):
    __slots__ = ("request_id", "send", "error")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SEND_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    send: SendMessagesResponse
    error: PopStreamError
    def __init__(self, request_id: _Optional[int] = ..., send: _Optional[_Union[SendMessagesResponse, _Mapping]] = ..., error: _Optional[_Union[PopStreamError, _Mapping]] = ...) -> None: ...

class PopStreamRequest(_message.Message):
    __slots__ = ("request_id", "pop", "cancel", "ack")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    POP_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    pop: PopRequest
    cancel: PopStreamCancel
    ack: AckRequest
    def __init__(self, request_id: _Optional[int] = ..., pop: _Optional[_Union[PopRequest, _Mapping]] = ..., cancel: _Optional[_Union[PopStreamCancel, _Mapping]] = ..., ack: _Optional[_Union[AckRequest, _Mapping]] = ...) -> None: ...

class PopStreamCancel(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PopStreamResponse(_message.Message):
    __slots__ = ("request_id", "pop", "error", "ack")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    POP_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    pop: PopResponse
    error: PopStreamError
    ack: AckResponse
    def __init__(self, request_id: _Optional[int] = ..., pop: _Optional[_Union[PopResponse, _Mapping]] = ..., error: _Optional[_Union[PopStreamError, _Mapping]] = ..., ack: _Optional[_Union[AckResponse, _Mapping]] = ...) -> None: ...

class PopStreamError(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class AckRequest(_message.Message):
    __slots__ = ("group", "receipt_handles")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLES_FIELD_NUMBER: _ClassVar[int]
    group: str
    receipt_handles: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group: _Optional[str] = ..., receipt_handles: _Optional[_Iterable[str]] = ...) -> None: ...

class EntryResult(_message.Message):
    __slots__ = ("receipt_handle", "code", "message")
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    receipt_handle: str
    code: str
    message: str
    def __init__(self, receipt_handle: _Optional[str] = ..., code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class AckResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[EntryResult]
    def __init__(self, results: _Optional[_Iterable[_Union[EntryResult, _Mapping]]] = ...) -> None: ...

class ChangeInvisibleTimeRequest(_message.Message):
    __slots__ = ("group", "receipt_handle", "invisible_duration")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_DURATION_FIELD_NUMBER: _ClassVar[int]
    group: str
    receipt_handle: str
    invisible_duration: _duration_pb2.Duration
    def __init__(self, group: _Optional[str] = ..., receipt_handle: _Optional[str] = ..., invisible_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ChangeInvisibleTimeResponse(_message.Message):
    __slots__ = ("receipt_handle", "invisible_until")
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_UNTIL_FIELD_NUMBER: _ClassVar[int]
    receipt_handle: str
    invisible_until: _timestamp_pb2.Timestamp
    def __init__(self, receipt_handle: _Optional[str] = ..., invisible_until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class NackRequest(_message.Message):
    __slots__ = ("group", "receipt_handle", "delay")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    group: str
    receipt_handle: str
    delay: _duration_pb2.Duration
    def __init__(self, group: _Optional[str] = ..., receipt_handle: _Optional[str] = ..., delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class NackResponse(_message.Message):
    __slots__ = ("redeliver_time",)
    REDELIVER_TIME_FIELD_NUMBER: _ClassVar[int]
    redeliver_time: _timestamp_pb2.Timestamp
    def __init__(self, redeliver_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RecallMessageRequest(_message.Message):
    __slots__ = ("topic", "recall_handle")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RECALL_HANDLE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    recall_handle: str
    def __init__(self, topic: _Optional[str] = ..., recall_handle: _Optional[str] = ...) -> None: ...

class RecallMessageResponse(_message.Message):
    __slots__ = ("message_id",)
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    def __init__(self, message_id: _Optional[str] = ...) -> None: ...

class PullMessagesRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "offset", "max_messages")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    offset: int
    max_messages: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., max_messages: _Optional[int] = ...) -> None: ...

class PulledMessage(_message.Message):
    __slots__ = ("message_id", "topic", "queue_id", "offset", "body", "tag", "keys", "properties", "born_time", "store_time", "delivery_attempt", "message_group", "body_encoding", "born_host")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    BORN_TIME_FIELD_NUMBER: _ClassVar[int]
    STORE_TIME_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_GROUP_FIELD_NUMBER: _ClassVar[int]
    BODY_ENCODING_FIELD_NUMBER: _ClassVar[int]
    BORN_HOST_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    topic: str
    queue_id: int
    offset: int
    body: bytes
    tag: str
    keys: _containers.RepeatedScalarFieldContainer[str]
    properties: _containers.ScalarMap[str, str]
    born_time: _timestamp_pb2.Timestamp
    store_time: _timestamp_pb2.Timestamp
    delivery_attempt: int
    message_group: str
    body_encoding: str
    born_host: str
    def __init__(self, message_id: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., body: _Optional[bytes] = ..., tag: _Optional[str] = ..., keys: _Optional[_Iterable[str]] = ..., properties: _Optional[_Mapping[str, str]] = ..., born_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., store_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delivery_attempt: _Optional[int] = ..., message_group: _Optional[str] = ..., body_encoding: _Optional[str] = ..., born_host: _Optional[str] = ...) -> None: ...

class PullMessagesResponse(_message.Message):
    __slots__ = ("messages", "min_offset", "max_offset", "next_offset")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[PulledMessage]
    min_offset: int
    max_offset: int
    next_offset: int
    def __init__(self, messages: _Optional[_Iterable[_Union[PulledMessage, _Mapping]]] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., next_offset: _Optional[int] = ...) -> None: ...

class QueueOffset(_message.Message):
    __slots__ = ("queue_id", "offset")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    offset: int
    def __init__(self, queue_id: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class CommitOffsetRequest(_message.Message):
    __slots__ = ("group", "topic", "offsets")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    offsets: _containers.RepeatedCompositeFieldContainer[QueueOffset]
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., offsets: _Optional[_Iterable[_Union[QueueOffset, _Mapping]]] = ...) -> None: ...

class CommitOffsetResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetOffsetRequest(_message.Message):
    __slots__ = ("group", "topic")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ...) -> None: ...

class ConsumerOffset(_message.Message):
    __slots__ = ("queue_id", "offset", "committed")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    offset: int
    committed: bool
    def __init__(self, queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., committed: _Optional[bool] = ...) -> None: ...

class GetOffsetResponse(_message.Message):
    __slots__ = ("offsets",)
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedCompositeFieldContainer[ConsumerOffset]
    def __init__(self, offsets: _Optional[_Iterable[_Union[ConsumerOffset, _Mapping]]] = ...) -> None: ...

class GetOffsetsAtTimeRequest(_message.Message):
    __slots__ = ("topic", "time")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    topic: str
    time: _timestamp_pb2.Timestamp
    def __init__(self, topic: _Optional[str] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetOffsetsAtTimeResponse(_message.Message):
    __slots__ = ("offsets",)
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedCompositeFieldContainer[QueueOffset]
    def __init__(self, offsets: _Optional[_Iterable[_Union[QueueOffset, _Mapping]]] = ...) -> None: ...

class LeasePopRequest(_message.Message):
    __slots__ = ("group", "topic", "lease_token", "page", "max_messages", "invisible_duration", "long_polling_timeout", "filter", "acks_by_page", "pinned")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_DURATION_FIELD_NUMBER: _ClassVar[int]
    LONG_POLLING_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    ACKS_BY_PAGE_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    lease_token: str
    page: int
    max_messages: int
    invisible_duration: _duration_pb2.Duration
    long_polling_timeout: _duration_pb2.Duration
    filter: FilterExpression
    acks_by_page: bool
    pinned: bool
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., lease_token: _Optional[str] = ..., page: _Optional[int] = ..., max_messages: _Optional[int] = ..., invisible_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., long_polling_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., filter: _Optional[_Union[FilterExpression, _Mapping]] = ..., acks_by_page: _Optional[bool] = ..., pinned: _Optional[bool] = ...) -> None: ...

class LeasePopResponse(_message.Message):
    __slots__ = ("messages", "replayed", "lease_until", "page_id")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    LEASE_UNTIL_FIELD_NUMBER: _ClassVar[int]
    PAGE_ID_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ReceivedMessage]
    replayed: bool
    lease_until: _timestamp_pb2.Timestamp
    page_id: str
    def __init__(self, messages: _Optional[_Iterable[_Union[ReceivedMessage, _Mapping]]] = ..., replayed: _Optional[bool] = ..., lease_until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., page_id: _Optional[str] = ...) -> None: ...

class LeaseResult(_message.Message):
    __slots__ = ("lease_token", "code", "message", "messages", "lease_until")
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    LEASE_UNTIL_FIELD_NUMBER: _ClassVar[int]
    lease_token: str
    code: str
    message: str
    messages: int
    lease_until: _timestamp_pb2.Timestamp
    def __init__(self, lease_token: _Optional[str] = ..., code: _Optional[str] = ..., message: _Optional[str] = ..., messages: _Optional[int] = ..., lease_until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class AckLeaseRequest(_message.Message):
    __slots__ = ("group", "lease_tokens", "read_pages", "pinned")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    READ_PAGES_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    group: str
    lease_tokens: _containers.RepeatedScalarFieldContainer[str]
    read_pages: _containers.RepeatedCompositeFieldContainer[LeaseReadPages]
    pinned: bool
    def __init__(self, group: _Optional[str] = ..., lease_tokens: _Optional[_Iterable[str]] = ..., read_pages: _Optional[_Iterable[_Union[LeaseReadPages, _Mapping]]] = ..., pinned: _Optional[bool] = ...) -> None: ...

class LeaseReadPages(_message.Message):
    __slots__ = ("lease_token", "page_ids")
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    lease_token: str
    page_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, lease_token: _Optional[str] = ..., page_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class AckLeaseResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[LeaseResult]
    def __init__(self, results: _Optional[_Iterable[_Union[LeaseResult, _Mapping]]] = ...) -> None: ...

class RenewLeaseRequest(_message.Message):
    __slots__ = ("group", "lease_tokens", "invisible_duration")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_DURATION_FIELD_NUMBER: _ClassVar[int]
    group: str
    lease_tokens: _containers.RepeatedScalarFieldContainer[str]
    invisible_duration: _duration_pb2.Duration
    def __init__(self, group: _Optional[str] = ..., lease_tokens: _Optional[_Iterable[str]] = ..., invisible_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class RenewLeaseResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[LeaseResult]
    def __init__(self, results: _Optional[_Iterable[_Union[LeaseResult, _Mapping]]] = ...) -> None: ...

class QueueIds(_message.Message):
    __slots__ = ("queue_ids",)
    QUEUE_IDS_FIELD_NUMBER: _ClassVar[int]
    queue_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, queue_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("client_id", "group", "topics", "mode", "strategy", "heartbeat_interval", "machine_room", "configured_queues")
    class ConfiguredQueuesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: QueueIds
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[QueueIds, _Mapping]] = ...) -> None: ...
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    MACHINE_ROOM_FIELD_NUMBER: _ClassVar[int]
    CONFIGURED_QUEUES_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    group: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    mode: ConsumeMode
    strategy: AssignmentStrategy
    heartbeat_interval: _duration_pb2.Duration
    machine_room: str
    configured_queues: _containers.MessageMap[str, QueueIds]
    def __init__(self, client_id: _Optional[str] = ..., group: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ..., mode: _Optional[_Union[ConsumeMode, str]] = ..., strategy: _Optional[_Union[AssignmentStrategy, str]] = ..., heartbeat_interval: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., machine_room: _Optional[str] = ..., configured_queues: _Optional[_Mapping[str, QueueIds]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("heartbeat_interval", "lease_duration")
    HEARTBEAT_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    LEASE_DURATION_FIELD_NUMBER: _ClassVar[int]
    heartbeat_interval: _duration_pb2.Duration
    lease_duration: _duration_pb2.Duration
    def __init__(self, heartbeat_interval: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., lease_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class QueryAssignmentRequest(_message.Message):
    __slots__ = ("client_id", "group", "topic", "held_queue_ids")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    HELD_QUEUE_IDS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    group: str
    topic: str
    held_queue_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, client_id: _Optional[str] = ..., group: _Optional[str] = ..., topic: _Optional[str] = ..., held_queue_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class QueryAssignmentResponse(_message.Message):
    __slots__ = ("queue_ids", "pending_queue_ids", "epoch", "lease_duration")
    QUEUE_IDS_FIELD_NUMBER: _ClassVar[int]
    PENDING_QUEUE_IDS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEASE_DURATION_FIELD_NUMBER: _ClassVar[int]
    queue_ids: _containers.RepeatedScalarFieldContainer[int]
    pending_queue_ids: _containers.RepeatedScalarFieldContainer[int]
    epoch: int
    lease_duration: _duration_pb2.Duration
    def __init__(self, queue_ids: _Optional[_Iterable[int]] = ..., pending_queue_ids: _Optional[_Iterable[int]] = ..., epoch: _Optional[int] = ..., lease_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class NotifyClientTerminationRequest(_message.Message):
    __slots__ = ("client_id", "group")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    group: str
    def __init__(self, client_id: _Optional[str] = ..., group: _Optional[str] = ...) -> None: ...

class NotifyClientTerminationResponse(_message.Message):
    __slots__ = ("was_registered",)
    WAS_REGISTERED_FIELD_NUMBER: _ClassVar[int]
    was_registered: bool
    def __init__(self, was_registered: _Optional[bool] = ...) -> None: ...

class AwaitMessagesRequest(_message.Message):
    __slots__ = ("topic", "positions", "long_polling_timeout")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    LONG_POLLING_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    topic: str
    positions: _containers.RepeatedCompositeFieldContainer[QueueOffset]
    long_polling_timeout: _duration_pb2.Duration
    def __init__(self, topic: _Optional[str] = ..., positions: _Optional[_Iterable[_Union[QueueOffset, _Mapping]]] = ..., long_polling_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class AwaitMessagesResponse(_message.Message):
    __slots__ = ("ready",)
    READY_FIELD_NUMBER: _ClassVar[int]
    ready: _containers.RepeatedCompositeFieldContainer[QueueOffset]
    def __init__(self, ready: _Optional[_Iterable[_Union[QueueOffset, _Mapping]]] = ...) -> None: ...

class Transaction(_message.Message):
    __slots__ = ("transaction_id", "topic", "message_id", "producer_group", "state", "create_time", "checks", "next_check_time", "resolve_time", "resolved_by", "queue_id", "offset", "recall_handle", "discard_offset")
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_CHECK_TIME_FIELD_NUMBER: _ClassVar[int]
    RESOLVE_TIME_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_BY_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    RECALL_HANDLE_FIELD_NUMBER: _ClassVar[int]
    DISCARD_OFFSET_FIELD_NUMBER: _ClassVar[int]
    transaction_id: str
    topic: str
    message_id: str
    producer_group: str
    state: TransactionState
    create_time: _timestamp_pb2.Timestamp
    checks: int
    next_check_time: _timestamp_pb2.Timestamp
    resolve_time: _timestamp_pb2.Timestamp
    resolved_by: TransactionSource
    queue_id: int
    offset: int
    recall_handle: str
    discard_offset: int
    def __init__(self, transaction_id: _Optional[str] = ..., topic: _Optional[str] = ..., message_id: _Optional[str] = ..., producer_group: _Optional[str] = ..., state: _Optional[_Union[TransactionState, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., checks: _Optional[int] = ..., next_check_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., resolve_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., resolved_by: _Optional[_Union[TransactionSource, str]] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., recall_handle: _Optional[str] = ..., discard_offset: _Optional[int] = ...) -> None: ...

class EndTransactionRequest(_message.Message):
    __slots__ = ("transaction_id", "resolution", "topic", "message_id", "source")
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    RESOLUTION_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    transaction_id: str
    resolution: TransactionResolution
    topic: str
    message_id: str
    source: TransactionSource
    def __init__(self, transaction_id: _Optional[str] = ..., resolution: _Optional[_Union[TransactionResolution, str]] = ..., topic: _Optional[str] = ..., message_id: _Optional[str] = ..., source: _Optional[_Union[TransactionSource, str]] = ...) -> None: ...

class EndTransactionResponse(_message.Message):
    __slots__ = ("transaction",)
    TRANSACTION_FIELD_NUMBER: _ClassVar[int]
    transaction: Transaction
    def __init__(self, transaction: _Optional[_Union[Transaction, _Mapping]] = ...) -> None: ...

class TransactionChecksRequest(_message.Message):
    __slots__ = ("topics", "client_id")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    client_id: str
    def __init__(self, topics: _Optional[_Iterable[str]] = ..., client_id: _Optional[str] = ...) -> None: ...

class TransactionChecksResponse(_message.Message):
    __slots__ = ("check",)
    CHECK_FIELD_NUMBER: _ClassVar[int]
    check: TransactionCheck
    def __init__(self, check: _Optional[_Union[TransactionCheck, _Mapping]] = ...) -> None: ...

class TransactionCheck(_message.Message):
    __slots__ = ("transaction_id", "topic", "message_id", "producer_group", "attempt", "message")
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    transaction_id: str
    topic: str
    message_id: str
    producer_group: str
    attempt: int
    message: ReceivedMessage
    def __init__(self, transaction_id: _Optional[str] = ..., topic: _Optional[str] = ..., message_id: _Optional[str] = ..., producer_group: _Optional[str] = ..., attempt: _Optional[int] = ..., message: _Optional[_Union[ReceivedMessage, _Mapping]] = ...) -> None: ...
