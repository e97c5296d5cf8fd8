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

class MessageType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MESSAGE_TYPE_UNSPECIFIED: _ClassVar[MessageType]
    MESSAGE_TYPE_NORMAL: _ClassVar[MessageType]

class TopicKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOPIC_KIND_UNSPECIFIED: _ClassVar[TopicKind]
    TOPIC_KIND_NORMAL: _ClassVar[TopicKind]
    TOPIC_KIND_DLQ: _ClassVar[TopicKind]
MESSAGE_TYPE_UNSPECIFIED: MessageType
MESSAGE_TYPE_NORMAL: MessageType
TOPIC_KIND_UNSPECIFIED: TopicKind
TOPIC_KIND_NORMAL: TopicKind
TOPIC_KIND_DLQ: TopicKind

class Topic(_message.Message):
    __slots__ = ("name", "queues", "message_type", "kind", "create_time")
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    queues: int
    message_type: MessageType
    kind: TopicKind
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., queues: _Optional[int] = ..., message_type: _Optional[_Union[MessageType, str]] = ..., kind: _Optional[_Union[TopicKind, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class QueueStats(_message.Message):
    __slots__ = ("queue_id", "min_offset", "max_offset")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    min_offset: int
    max_offset: int
    def __init__(self, queue_id: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ...) -> None: ...

class CreateTopicRequest(_message.Message):
    __slots__ = ("name", "queues", "message_type")
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    queues: int
    message_type: MessageType
    def __init__(self, name: _Optional[str] = ..., queues: _Optional[int] = ..., message_type: _Optional[_Union[MessageType, str]] = ...) -> None: ...

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
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Group(_message.Message):
    __slots__ = ("name", "max_delivery_attempts", "retry_backoff", "create_time", "auto_created")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERY_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RETRY_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    AUTO_CREATED_FIELD_NUMBER: _ClassVar[int]
    name: str
    max_delivery_attempts: int
    retry_backoff: _containers.RepeatedCompositeFieldContainer[_duration_pb2.Duration]
    create_time: _timestamp_pb2.Timestamp
    auto_created: bool
    def __init__(self, name: _Optional[str] = ..., max_delivery_attempts: _Optional[int] = ..., retry_backoff: _Optional[_Iterable[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., auto_created: _Optional[bool] = ...) -> None: ...

class CreateGroupRequest(_message.Message):
    __slots__ = ("name", "max_delivery_attempts", "retry_backoff")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERY_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RETRY_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    name: str
    max_delivery_attempts: int
    retry_backoff: _containers.RepeatedCompositeFieldContainer[_duration_pb2.Duration]
    def __init__(self, name: _Optional[str] = ..., max_delivery_attempts: _Optional[int] = ..., retry_backoff: _Optional[_Iterable[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]]] = ...) -> None: ...

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

class GetGroupLagRequest(_message.Message):
    __slots__ = ("group", "topic")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ...) -> None: ...

class QueueLag(_message.Message):
    __slots__ = ("topic", "queue_id", "retry", "consumer_offset", "max_offset", "lag", "inflight", "retention_skipped")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_FIELD_NUMBER: _ClassVar[int]
    RETENTION_SKIPPED_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    retry: bool
    consumer_offset: int
    max_offset: int
    lag: int
    inflight: int
    retention_skipped: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., retry: _Optional[bool] = ..., consumer_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., lag: _Optional[int] = ..., inflight: _Optional[int] = ..., retention_skipped: _Optional[int] = ...) -> None: ...

class GetGroupLagResponse(_message.Message):
    __slots__ = ("queues",)
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[QueueLag]
    def __init__(self, queues: _Optional[_Iterable[_Union[QueueLag, _Mapping]]] = ...) -> None: ...
