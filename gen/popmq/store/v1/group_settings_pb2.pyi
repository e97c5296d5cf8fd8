from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GroupSettingsRecord(_message.Message):
    __slots__ = ("fifo", "subscriptions", "consume_from", "consume_from_time_ms", "exponential_backoff")
    FIFO_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    CONSUME_FROM_FIELD_NUMBER: _ClassVar[int]
    CONSUME_FROM_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    EXPONENTIAL_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    fifo: bool
    subscriptions: _containers.RepeatedCompositeFieldContainer[SubscriptionRecord]
    consume_from: int
    consume_from_time_ms: int
    exponential_backoff: ExponentialBackoffRecord
    def __init__(self, fifo: _Optional[bool] = ..., subscriptions: _Optional[_Iterable[_Union[SubscriptionRecord, _Mapping]]] = ..., consume_from: _Optional[int] = ..., consume_from_time_ms: _Optional[int] = ..., exponential_backoff: _Optional[_Union[ExponentialBackoffRecord, _Mapping]] = ...) -> None: ...

class SubscriptionRecord(_message.Message):
    __slots__ = ("topic", "filter_type", "expression")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    FILTER_TYPE_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    filter_type: str
    expression: str
    def __init__(self, topic: _Optional[str] = ..., filter_type: _Optional[str] = ..., expression: _Optional[str] = ...) -> None: ...

class ExponentialBackoffRecord(_message.Message):
    __slots__ = ("initial_ms", "max_ms", "multiplier")
    INITIAL_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_MS_FIELD_NUMBER: _ClassVar[int]
    MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    initial_ms: int
    max_ms: int
    multiplier: float
    def __init__(self, initial_ms: _Optional[int] = ..., max_ms: _Optional[int] = ..., multiplier: _Optional[float] = ...) -> None: ...
