import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from popmq._gen.popmq.v1 import messaging_pb2 as _messaging_pb2
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
    MESSAGE_TYPE_FIFO: _ClassVar[MessageType]
    MESSAGE_TYPE_DELAY: _ClassVar[MessageType]
    MESSAGE_TYPE_TRANSACTION: _ClassVar[MessageType]
    MESSAGE_TYPE_MIXED: _ClassVar[MessageType]

class TopicKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOPIC_KIND_UNSPECIFIED: _ClassVar[TopicKind]
    TOPIC_KIND_NORMAL: _ClassVar[TopicKind]
    TOPIC_KIND_DLQ: _ClassVar[TopicKind]

class ConsumeFrom(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONSUME_FROM_UNSPECIFIED: _ClassVar[ConsumeFrom]
    CONSUME_FROM_FIRST_OFFSET: _ClassVar[ConsumeFrom]
    CONSUME_FROM_LAST_OFFSET: _ClassVar[ConsumeFrom]
    CONSUME_FROM_TIMESTAMP: _ClassVar[ConsumeFrom]

class ResetTarget(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESET_TARGET_UNSPECIFIED: _ClassVar[ResetTarget]
    RESET_TARGET_EARLIEST: _ClassVar[ResetTarget]
    RESET_TARGET_LATEST: _ClassVar[ResetTarget]
    RESET_TARGET_TIMESTAMP: _ClassVar[ResetTarget]
    RESET_TARGET_OFFSETS: _ClassVar[ResetTarget]

class RedriveOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REDRIVE_OUTCOME_UNSPECIFIED: _ClassVar[RedriveOutcome]
    REDRIVE_OUTCOME_MOVED: _ClassVar[RedriveOutcome]
    REDRIVE_OUTCOME_DROPPED: _ClassVar[RedriveOutcome]
    REDRIVE_OUTCOME_NOT_FOUND: _ClassVar[RedriveOutcome]

class ClusterMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CLUSTER_MODE_UNSPECIFIED: _ClassVar[ClusterMode]
    CLUSTER_MODE_LOCAL: _ClassVar[ClusterMode]
    CLUSTER_MODE_CLUSTER: _ClassVar[ClusterMode]

class UserType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    USER_TYPE_UNSPECIFIED: _ClassVar[UserType]
    USER_TYPE_NORMAL: _ClassVar[UserType]
    USER_TYPE_SUPER: _ClassVar[UserType]

class ResourceType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESOURCE_TYPE_UNSPECIFIED: _ClassVar[ResourceType]
    RESOURCE_TYPE_ANY: _ClassVar[ResourceType]
    RESOURCE_TYPE_CLUSTER: _ClassVar[ResourceType]
    RESOURCE_TYPE_TOPIC: _ClassVar[ResourceType]
    RESOURCE_TYPE_GROUP: _ClassVar[ResourceType]

class ResourcePattern(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESOURCE_PATTERN_UNSPECIFIED: _ClassVar[ResourcePattern]
    RESOURCE_PATTERN_LITERAL: _ClassVar[ResourcePattern]
    RESOURCE_PATTERN_PREFIXED: _ClassVar[ResourcePattern]
    RESOURCE_PATTERN_ANY: _ClassVar[ResourcePattern]

class Action(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACTION_UNSPECIFIED: _ClassVar[Action]
    ACTION_PUB: _ClassVar[Action]
    ACTION_SUB: _ClassVar[Action]
    ACTION_CREATE: _ClassVar[Action]
    ACTION_UPDATE: _ClassVar[Action]
    ACTION_DELETE: _ClassVar[Action]
    ACTION_GET: _ClassVar[Action]
    ACTION_LIST: _ClassVar[Action]
    ACTION_ALL: _ClassVar[Action]

class Decision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DECISION_UNSPECIFIED: _ClassVar[Decision]
    DECISION_ALLOW: _ClassVar[Decision]
    DECISION_DENY: _ClassVar[Decision]

class TransactionListState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRANSACTION_LIST_STATE_UNSPECIFIED: _ClassVar[TransactionListState]
    TRANSACTION_LIST_STATE_OPEN: _ClassVar[TransactionListState]
    TRANSACTION_LIST_STATE_DISCARDED: _ClassVar[TransactionListState]
MESSAGE_TYPE_UNSPECIFIED: MessageType
MESSAGE_TYPE_NORMAL: MessageType
MESSAGE_TYPE_FIFO: MessageType
MESSAGE_TYPE_DELAY: MessageType
MESSAGE_TYPE_TRANSACTION: MessageType
MESSAGE_TYPE_MIXED: MessageType
TOPIC_KIND_UNSPECIFIED: TopicKind
TOPIC_KIND_NORMAL: TopicKind
TOPIC_KIND_DLQ: TopicKind
CONSUME_FROM_UNSPECIFIED: ConsumeFrom
CONSUME_FROM_FIRST_OFFSET: ConsumeFrom
CONSUME_FROM_LAST_OFFSET: ConsumeFrom
CONSUME_FROM_TIMESTAMP: ConsumeFrom
RESET_TARGET_UNSPECIFIED: ResetTarget
RESET_TARGET_EARLIEST: ResetTarget
RESET_TARGET_LATEST: ResetTarget
RESET_TARGET_TIMESTAMP: ResetTarget
RESET_TARGET_OFFSETS: ResetTarget
REDRIVE_OUTCOME_UNSPECIFIED: RedriveOutcome
REDRIVE_OUTCOME_MOVED: RedriveOutcome
REDRIVE_OUTCOME_DROPPED: RedriveOutcome
REDRIVE_OUTCOME_NOT_FOUND: RedriveOutcome
CLUSTER_MODE_UNSPECIFIED: ClusterMode
CLUSTER_MODE_LOCAL: ClusterMode
CLUSTER_MODE_CLUSTER: ClusterMode
USER_TYPE_UNSPECIFIED: UserType
USER_TYPE_NORMAL: UserType
USER_TYPE_SUPER: UserType
RESOURCE_TYPE_UNSPECIFIED: ResourceType
RESOURCE_TYPE_ANY: ResourceType
RESOURCE_TYPE_CLUSTER: ResourceType
RESOURCE_TYPE_TOPIC: ResourceType
RESOURCE_TYPE_GROUP: ResourceType
RESOURCE_PATTERN_UNSPECIFIED: ResourcePattern
RESOURCE_PATTERN_LITERAL: ResourcePattern
RESOURCE_PATTERN_PREFIXED: ResourcePattern
RESOURCE_PATTERN_ANY: ResourcePattern
ACTION_UNSPECIFIED: Action
ACTION_PUB: Action
ACTION_SUB: Action
ACTION_CREATE: Action
ACTION_UPDATE: Action
ACTION_DELETE: Action
ACTION_GET: Action
ACTION_LIST: Action
ACTION_ALL: Action
DECISION_UNSPECIFIED: Decision
DECISION_ALLOW: Decision
DECISION_DENY: Decision
TRANSACTION_LIST_STATE_UNSPECIFIED: TransactionListState
TRANSACTION_LIST_STATE_OPEN: TransactionListState
TRANSACTION_LIST_STATE_DISCARDED: TransactionListState

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
    __slots__ = ("queue_id", "min_offset", "max_offset", "message_count", "last_store_time", "broker")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    LAST_STORE_TIME_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    min_offset: int
    max_offset: int
    message_count: int
    last_store_time: _timestamp_pb2.Timestamp
    broker: str
    def __init__(self, queue_id: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., message_count: _Optional[int] = ..., last_store_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., broker: _Optional[str] = ...) -> None: ...

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

class UpdateTopicRequest(_message.Message):
    __slots__ = ("name", "queues", "broker")
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    name: str
    queues: int
    broker: str
    def __init__(self, name: _Optional[str] = ..., queues: _Optional[int] = ..., broker: _Optional[str] = ...) -> None: ...

class UpdateTopicResponse(_message.Message):
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
    __slots__ = ("topic", "queues", "consumer_groups")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUPS_FIELD_NUMBER: _ClassVar[int]
    topic: Topic
    queues: _containers.RepeatedCompositeFieldContainer[QueueStats]
    consumer_groups: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topic: _Optional[_Union[Topic, _Mapping]] = ..., queues: _Optional[_Iterable[_Union[QueueStats, _Mapping]]] = ..., consumer_groups: _Optional[_Iterable[str]] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[Topic]
    def __init__(self, topics: _Optional[_Iterable[_Union[Topic, _Mapping]]] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("name", "force")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    force: bool
    def __init__(self, name: _Optional[str] = ..., force: _Optional[bool] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PurgeTopicRequest(_message.Message):
    __slots__ = ("name", "queue_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    queue_id: int
    def __init__(self, name: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...

class PurgeTopicResponse(_message.Message):
    __slots__ = ("purged",)
    PURGED_FIELD_NUMBER: _ClassVar[int]
    purged: int
    def __init__(self, purged: _Optional[int] = ...) -> None: ...

class ExponentialBackoff(_message.Message):
    __slots__ = ("initial", "max", "multiplier")
    INITIAL_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    initial: _duration_pb2.Duration
    max: _duration_pb2.Duration
    multiplier: float
    def __init__(self, initial: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., multiplier: _Optional[float] = ...) -> None: ...

class Subscription(_message.Message):
    __slots__ = ("topic", "filter")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    filter: _messaging_pb2.FilterExpression
    def __init__(self, topic: _Optional[str] = ..., filter: _Optional[_Union[_messaging_pb2.FilterExpression, _Mapping]] = ...) -> None: ...

class Group(_message.Message):
    __slots__ = ("name", "max_delivery_attempts", "retry_backoff", "create_time", "auto_created", "exponential_backoff", "fifo", "subscriptions", "consume_from", "consume_from_time")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERY_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RETRY_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    AUTO_CREATED_FIELD_NUMBER: _ClassVar[int]
    EXPONENTIAL_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    FIFO_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    CONSUME_FROM_FIELD_NUMBER: _ClassVar[int]
    CONSUME_FROM_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    max_delivery_attempts: int
    retry_backoff: _containers.RepeatedCompositeFieldContainer[_duration_pb2.Duration]
    create_time: _timestamp_pb2.Timestamp
    auto_created: bool
    exponential_backoff: ExponentialBackoff
    fifo: bool
    subscriptions: _containers.RepeatedCompositeFieldContainer[Subscription]
    consume_from: ConsumeFrom
    consume_from_time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., max_delivery_attempts: _Optional[int] = ..., retry_backoff: _Optional[_Iterable[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., auto_created: _Optional[bool] = ..., exponential_backoff: _Optional[_Union[ExponentialBackoff, _Mapping]] = ..., fifo: _Optional[bool] = ..., subscriptions: _Optional[_Iterable[_Union[Subscription, _Mapping]]] = ..., consume_from: _Optional[_Union[ConsumeFrom, str]] = ..., consume_from_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CreateGroupRequest(_message.Message):
    __slots__ = ("name", "max_delivery_attempts", "retry_backoff", "exponential_backoff", "fifo", "subscriptions", "consume_from", "consume_from_time")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERY_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RETRY_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    EXPONENTIAL_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    FIFO_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    CONSUME_FROM_FIELD_NUMBER: _ClassVar[int]
    CONSUME_FROM_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    max_delivery_attempts: int
    retry_backoff: _containers.RepeatedCompositeFieldContainer[_duration_pb2.Duration]
    exponential_backoff: ExponentialBackoff
    fifo: bool
    subscriptions: _containers.RepeatedCompositeFieldContainer[Subscription]
    consume_from: ConsumeFrom
    consume_from_time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., max_delivery_attempts: _Optional[int] = ..., retry_backoff: _Optional[_Iterable[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]]] = ..., exponential_backoff: _Optional[_Union[ExponentialBackoff, _Mapping]] = ..., fifo: _Optional[bool] = ..., subscriptions: _Optional[_Iterable[_Union[Subscription, _Mapping]]] = ..., consume_from: _Optional[_Union[ConsumeFrom, str]] = ..., consume_from_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CreateGroupResponse(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: Group
    def __init__(self, group: _Optional[_Union[Group, _Mapping]] = ...) -> None: ...

class UpdateGroupRequest(_message.Message):
    __slots__ = ("name", "max_delivery_attempts", "retry_backoff", "exponential_backoff", "fifo", "set_subscriptions", "remove_subscriptions", "consume_from", "consume_from_time")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERY_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RETRY_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    EXPONENTIAL_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    FIFO_FIELD_NUMBER: _ClassVar[int]
    SET_SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    REMOVE_SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    CONSUME_FROM_FIELD_NUMBER: _ClassVar[int]
    CONSUME_FROM_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    max_delivery_attempts: int
    retry_backoff: _containers.RepeatedCompositeFieldContainer[_duration_pb2.Duration]
    exponential_backoff: ExponentialBackoff
    fifo: bool
    set_subscriptions: _containers.RepeatedCompositeFieldContainer[Subscription]
    remove_subscriptions: _containers.RepeatedScalarFieldContainer[str]
    consume_from: ConsumeFrom
    consume_from_time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., max_delivery_attempts: _Optional[int] = ..., retry_backoff: _Optional[_Iterable[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]]] = ..., exponential_backoff: _Optional[_Union[ExponentialBackoff, _Mapping]] = ..., fifo: _Optional[bool] = ..., set_subscriptions: _Optional[_Iterable[_Union[Subscription, _Mapping]]] = ..., remove_subscriptions: _Optional[_Iterable[str]] = ..., consume_from: _Optional[_Union[ConsumeFrom, str]] = ..., consume_from_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class UpdateGroupResponse(_message.Message):
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

class DeleteGroupRequest(_message.Message):
    __slots__ = ("name", "force")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    force: bool
    def __init__(self, name: _Optional[str] = ..., force: _Optional[bool] = ...) -> None: ...

class DeleteGroupResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetGroupLagRequest(_message.Message):
    __slots__ = ("group", "topic")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ...) -> None: ...

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
    __slots__ = ("topic", "queue_id", "count", "broker")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    count: int
    broker: str
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., count: _Optional[int] = ..., broker: _Optional[str] = ...) -> None: ...

class InflightMessage(_message.Message):
    __slots__ = ("topic", "queue_id", "retry", "offset", "message_id", "delivery_attempt", "pop_time", "invisible_until", "waiting", "broker", "client_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    POP_TIME_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_UNTIL_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    retry: bool
    offset: int
    message_id: str
    delivery_attempt: int
    pop_time: _timestamp_pb2.Timestamp
    invisible_until: _timestamp_pb2.Timestamp
    waiting: bool
    broker: str
    client_id: str
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., retry: _Optional[bool] = ..., offset: _Optional[int] = ..., message_id: _Optional[str] = ..., delivery_attempt: _Optional[int] = ..., pop_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., invisible_until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., waiting: _Optional[bool] = ..., broker: _Optional[str] = ..., client_id: _Optional[str] = ...) -> None: ...

class ConsumerInflight(_message.Message):
    __slots__ = ("client_id", "count", "earliest_invisible_until")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    EARLIEST_INVISIBLE_UNTIL_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    count: int
    earliest_invisible_until: _timestamp_pb2.Timestamp
    def __init__(self, client_id: _Optional[str] = ..., count: _Optional[int] = ..., earliest_invisible_until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ReviveLag(_message.Message):
    __slots__ = ("lag", "oldest_due", "next_deadline", "live_checkpoints", "broker")
    LAG_FIELD_NUMBER: _ClassVar[int]
    OLDEST_DUE_FIELD_NUMBER: _ClassVar[int]
    NEXT_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    LIVE_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    lag: _duration_pb2.Duration
    oldest_due: _timestamp_pb2.Timestamp
    next_deadline: _timestamp_pb2.Timestamp
    live_checkpoints: int
    broker: str
    def __init__(self, lag: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., oldest_due: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., next_deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., live_checkpoints: _Optional[int] = ..., broker: _Optional[str] = ...) -> None: ...

class BlockedHead(_message.Message):
    __slots__ = ("topic", "queue_id", "message_group", "offset", "message_id", "delivery_attempt", "invisible_until", "delivered", "waiting", "broker")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_GROUP_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_UNTIL_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    message_group: str
    offset: int
    message_id: str
    delivery_attempt: int
    invisible_until: _timestamp_pb2.Timestamp
    delivered: bool
    waiting: int
    broker: str
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., message_group: _Optional[str] = ..., offset: _Optional[int] = ..., message_id: _Optional[str] = ..., delivery_attempt: _Optional[int] = ..., invisible_until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delivered: _Optional[bool] = ..., waiting: _Optional[int] = ..., broker: _Optional[str] = ...) -> None: ...

class InspectGroupResponse(_message.Message):
    __slots__ = ("held_polls", "inflight", "next_page_token", "revive", "blocked_heads", "blocked_groups", "now", "consumers", "consumer_count")
    HELD_POLLS_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REVIVE_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_HEADS_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_GROUPS_FIELD_NUMBER: _ClassVar[int]
    NOW_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_COUNT_FIELD_NUMBER: _ClassVar[int]
    held_polls: _containers.RepeatedCompositeFieldContainer[HeldPolls]
    inflight: _containers.RepeatedCompositeFieldContainer[InflightMessage]
    next_page_token: str
    revive: _containers.RepeatedCompositeFieldContainer[ReviveLag]
    blocked_heads: _containers.RepeatedCompositeFieldContainer[BlockedHead]
    blocked_groups: int
    now: _timestamp_pb2.Timestamp
    consumers: _containers.RepeatedCompositeFieldContainer[ConsumerInflight]
    consumer_count: int
    def __init__(self, held_polls: _Optional[_Iterable[_Union[HeldPolls, _Mapping]]] = ..., inflight: _Optional[_Iterable[_Union[InflightMessage, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., revive: _Optional[_Iterable[_Union[ReviveLag, _Mapping]]] = ..., blocked_heads: _Optional[_Iterable[_Union[BlockedHead, _Mapping]]] = ..., blocked_groups: _Optional[int] = ..., now: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., consumers: _Optional[_Iterable[_Union[ConsumerInflight, _Mapping]]] = ..., consumer_count: _Optional[int] = ...) -> None: ...

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
    __slots__ = ("time", "event", "group", "topic", "queue_id", "retry", "offset", "delivery_attempt", "invisible_until", "to_topic", "to_offset", "broker", "client_id")
    TIME_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_UNTIL_FIELD_NUMBER: _ClassVar[int]
    TO_TOPIC_FIELD_NUMBER: _ClassVar[int]
    TO_OFFSET_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    time: _timestamp_pb2.Timestamp
    event: str
    group: str
    topic: str
    queue_id: int
    retry: bool
    offset: int
    delivery_attempt: int
    invisible_until: _timestamp_pb2.Timestamp
    to_topic: str
    to_offset: int
    broker: str
    client_id: str
    def __init__(self, time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., event: _Optional[str] = ..., group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., retry: _Optional[bool] = ..., offset: _Optional[int] = ..., delivery_attempt: _Optional[int] = ..., invisible_until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., to_topic: _Optional[str] = ..., to_offset: _Optional[int] = ..., broker: _Optional[str] = ..., client_id: _Optional[str] = ...) -> None: ...

class GetMessageHistoryResponse(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[DeliveryEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[DeliveryEvent, _Mapping]]] = ...) -> None: ...

class QueueLag(_message.Message):
    __slots__ = ("topic", "queue_id", "retry", "consumer_offset", "max_offset", "lag", "inflight", "retention_skipped", "oldest_unacked_age", "broker")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_FIELD_NUMBER: _ClassVar[int]
    RETENTION_SKIPPED_FIELD_NUMBER: _ClassVar[int]
    OLDEST_UNACKED_AGE_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    retry: bool
    consumer_offset: int
    max_offset: int
    lag: int
    inflight: int
    retention_skipped: int
    oldest_unacked_age: _duration_pb2.Duration
    broker: str
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., retry: _Optional[bool] = ..., consumer_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., lag: _Optional[int] = ..., inflight: _Optional[int] = ..., retention_skipped: _Optional[int] = ..., oldest_unacked_age: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., broker: _Optional[str] = ...) -> None: ...

class TopicLag(_message.Message):
    __slots__ = ("topic", "lag", "inflight", "retry_backlog", "oldest_unacked_age")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_FIELD_NUMBER: _ClassVar[int]
    RETRY_BACKLOG_FIELD_NUMBER: _ClassVar[int]
    OLDEST_UNACKED_AGE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    lag: int
    inflight: int
    retry_backlog: int
    oldest_unacked_age: _duration_pb2.Duration
    def __init__(self, topic: _Optional[str] = ..., lag: _Optional[int] = ..., inflight: _Optional[int] = ..., retry_backlog: _Optional[int] = ..., oldest_unacked_age: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class GetGroupLagResponse(_message.Message):
    __slots__ = ("queues", "topics", "dlq_depth")
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    DLQ_DEPTH_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[QueueLag]
    topics: _containers.RepeatedCompositeFieldContainer[TopicLag]
    dlq_depth: int
    def __init__(self, queues: _Optional[_Iterable[_Union[QueueLag, _Mapping]]] = ..., topics: _Optional[_Iterable[_Union[TopicLag, _Mapping]]] = ..., dlq_depth: _Optional[int] = ...) -> None: ...

class ResetOffsetsRequest(_message.Message):
    __slots__ = ("group", "topic", "target", "timestamp", "offsets", "force")
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
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    target: ResetTarget
    timestamp: _timestamp_pb2.Timestamp
    offsets: _containers.ScalarMap[int, int]
    force: bool
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., target: _Optional[_Union[ResetTarget, str]] = ..., timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., offsets: _Optional[_Mapping[int, int]] = ..., force: _Optional[bool] = ...) -> None: ...

class OffsetChange(_message.Message):
    __slots__ = ("queue_id", "old_offset", "new_offset")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OLD_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEW_OFFSET_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    old_offset: int
    new_offset: int
    def __init__(self, queue_id: _Optional[int] = ..., old_offset: _Optional[int] = ..., new_offset: _Optional[int] = ...) -> None: ...

class ResetOffsetsResponse(_message.Message):
    __slots__ = ("queues", "dropped_inflight")
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    DROPPED_INFLIGHT_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[OffsetChange]
    dropped_inflight: int
    def __init__(self, queues: _Optional[_Iterable[_Union[OffsetChange, _Mapping]]] = ..., dropped_inflight: _Optional[int] = ...) -> None: ...

class StoredMessage(_message.Message):
    __slots__ = ("message_id", "topic", "queue_id", "offset", "body", "tag", "keys", "properties", "born_time", "store_time", "delivery_attempt", "origin_topic", "origin_queue_id", "origin_offset", "message_group", "deliver_time", "body_encoding")
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
    ORIGIN_TOPIC_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_GROUP_FIELD_NUMBER: _ClassVar[int]
    DELIVER_TIME_FIELD_NUMBER: _ClassVar[int]
    BODY_ENCODING_FIELD_NUMBER: _ClassVar[int]
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
    origin_topic: str
    origin_queue_id: int
    origin_offset: int
    message_group: str
    deliver_time: _timestamp_pb2.Timestamp
    body_encoding: str
    def __init__(self, message_id: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., body: _Optional[bytes] = ..., tag: _Optional[str] = ..., keys: _Optional[_Iterable[str]] = ..., properties: _Optional[_Mapping[str, str]] = ..., born_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., store_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delivery_attempt: _Optional[int] = ..., origin_topic: _Optional[str] = ..., origin_queue_id: _Optional[int] = ..., origin_offset: _Optional[int] = ..., message_group: _Optional[str] = ..., deliver_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., body_encoding: _Optional[str] = ...) -> None: ...

class PeekMessagesRequest(_message.Message):
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

class PeekMessagesResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[StoredMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[StoredMessage, _Mapping]]] = ...) -> None: ...

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
    message: StoredMessage
    def __init__(self, message: _Optional[_Union[StoredMessage, _Mapping]] = ...) -> None: ...

class QueryMessagesByKeyRequest(_message.Message):
    __slots__ = ("topic", "key")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    topic: str
    key: str
    def __init__(self, topic: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class QueryMessagesByKeyResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[StoredMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[StoredMessage, _Mapping]]] = ...) -> None: ...

class RedriveDeadLettersRequest(_message.Message):
    __slots__ = ("group", "max_messages", "messages")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    group: str
    max_messages: int
    messages: _containers.RepeatedCompositeFieldContainer[DeadLetterRef]
    def __init__(self, group: _Optional[str] = ..., max_messages: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[DeadLetterRef, _Mapping]]] = ...) -> None: ...

class DeadLetterRef(_message.Message):
    __slots__ = ("queue_id", "offset")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    offset: int
    def __init__(self, queue_id: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class DeadLetterOutcome(_message.Message):
    __slots__ = ("queue_id", "offset", "outcome")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    offset: int
    outcome: RedriveOutcome
    def __init__(self, queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., outcome: _Optional[_Union[RedriveOutcome, str]] = ...) -> None: ...

class RedriveDeadLettersResponse(_message.Message):
    __slots__ = ("moved", "dropped", "remaining", "outcomes")
    MOVED_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    moved: int
    dropped: int
    remaining: int
    outcomes: _containers.RepeatedCompositeFieldContainer[DeadLetterOutcome]
    def __init__(self, moved: _Optional[int] = ..., dropped: _Optional[int] = ..., remaining: _Optional[int] = ..., outcomes: _Optional[_Iterable[_Union[DeadLetterOutcome, _Mapping]]] = ...) -> None: ...

class GetServerInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetServerInfoResponse(_message.Message):
    __slots__ = ("version", "start_time", "uptime", "data_dir", "store_bytes", "topics", "groups", "config")
    class ConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    VERSION_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    UPTIME_FIELD_NUMBER: _ClassVar[int]
    DATA_DIR_FIELD_NUMBER: _ClassVar[int]
    STORE_BYTES_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    version: str
    start_time: _timestamp_pb2.Timestamp
    uptime: _duration_pb2.Duration
    data_dir: str
    store_bytes: int
    topics: int
    groups: int
    config: _containers.ScalarMap[str, str]
    def __init__(self, version: _Optional[str] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., uptime: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., data_dir: _Optional[str] = ..., store_bytes: _Optional[int] = ..., topics: _Optional[int] = ..., groups: _Optional[int] = ..., config: _Optional[_Mapping[str, str]] = ...) -> None: ...

class GetClusterStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BrokerStatus(_message.Message):
    __slots__ = ("name", "address", "live", "reachable", "error", "epoch", "lease_ttl", "data_dir", "store_bytes", "disk_free_bytes", "topics", "queues", "messages_sent", "messages_popped", "messages_acked", "long_polls_held", "isolated_for", "send_failures", "isolations", "send_latency", "replication", "quarantined_for", "held_for", "hold_left")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LIVE_FIELD_NUMBER: _ClassVar[int]
    REACHABLE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_FIELD_NUMBER: _ClassVar[int]
    DATA_DIR_FIELD_NUMBER: _ClassVar[int]
    STORE_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_SENT_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_POPPED_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_ACKED_FIELD_NUMBER: _ClassVar[int]
    LONG_POLLS_HELD_FIELD_NUMBER: _ClassVar[int]
    ISOLATED_FOR_FIELD_NUMBER: _ClassVar[int]
    SEND_FAILURES_FIELD_NUMBER: _ClassVar[int]
    ISOLATIONS_FIELD_NUMBER: _ClassVar[int]
    SEND_LATENCY_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_FOR_FIELD_NUMBER: _ClassVar[int]
    HELD_FOR_FIELD_NUMBER: _ClassVar[int]
    HOLD_LEFT_FIELD_NUMBER: _ClassVar[int]
    name: str
    address: str
    live: bool
    reachable: bool
    error: str
    epoch: int
    lease_ttl: _duration_pb2.Duration
    data_dir: str
    store_bytes: int
    disk_free_bytes: int
    topics: int
    queues: int
    messages_sent: int
    messages_popped: int
    messages_acked: int
    long_polls_held: int
    isolated_for: _duration_pb2.Duration
    send_failures: int
    isolations: int
    send_latency: _duration_pb2.Duration
    replication: ShardReplication
    quarantined_for: _duration_pb2.Duration
    held_for: _duration_pb2.Duration
    hold_left: _duration_pb2.Duration
    def __init__(self, name: _Optional[str] = ..., address: _Optional[str] = ..., live: _Optional[bool] = ..., reachable: _Optional[bool] = ..., error: _Optional[str] = ..., epoch: _Optional[int] = ..., lease_ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., data_dir: _Optional[str] = ..., store_bytes: _Optional[int] = ..., disk_free_bytes: _Optional[int] = ..., topics: _Optional[int] = ..., queues: _Optional[int] = ..., messages_sent: _Optional[int] = ..., messages_popped: _Optional[int] = ..., messages_acked: _Optional[int] = ..., long_polls_held: _Optional[int] = ..., isolated_for: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., send_failures: _Optional[int] = ..., isolations: _Optional[int] = ..., send_latency: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., replication: _Optional[_Union[ShardReplication, _Mapping]] = ..., quarantined_for: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., held_for: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., hold_left: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ShardReplication(_message.Message):
    __slots__ = ("leader", "epoch", "lsn", "mode", "min_insync", "followers", "terms")
    LEADER_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LSN_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    MIN_INSYNC_FIELD_NUMBER: _ClassVar[int]
    FOLLOWERS_FIELD_NUMBER: _ClassVar[int]
    TERMS_FIELD_NUMBER: _ClassVar[int]
    leader: str
    epoch: int
    lsn: int
    mode: str
    min_insync: int
    followers: _containers.RepeatedCompositeFieldContainer[ReplicaStatus]
    terms: int
    def __init__(self, leader: _Optional[str] = ..., epoch: _Optional[int] = ..., lsn: _Optional[int] = ..., mode: _Optional[str] = ..., min_insync: _Optional[int] = ..., followers: _Optional[_Iterable[_Union[ReplicaStatus, _Mapping]]] = ..., terms: _Optional[int] = ...) -> None: ...

class ReplicaStatus(_message.Message):
    __slots__ = ("name", "in_sync", "lag_batches", "lag_bytes", "lag")
    NAME_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    LAG_BATCHES_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    name: str
    in_sync: bool
    lag_batches: int
    lag_bytes: int
    lag: _duration_pb2.Duration
    def __init__(self, name: _Optional[str] = ..., in_sync: _Optional[bool] = ..., lag_batches: _Optional[int] = ..., lag_bytes: _Optional[int] = ..., lag: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ProxyStatus(_message.Message):
    __slots__ = ("name", "address", "epoch", "this_proxy")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    THIS_PROXY_FIELD_NUMBER: _ClassVar[int]
    name: str
    address: str
    epoch: int
    this_proxy: bool
    def __init__(self, name: _Optional[str] = ..., address: _Optional[str] = ..., epoch: _Optional[int] = ..., this_proxy: _Optional[bool] = ...) -> None: ...

class EtcdEndpointStatus(_message.Message):
    __slots__ = ("endpoint", "reachable", "error", "version", "db_size_bytes", "leader", "member_id", "revision", "raft_term", "errors")
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    REACHABLE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DB_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    RAFT_TERM_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    endpoint: str
    reachable: bool
    error: str
    version: str
    db_size_bytes: int
    leader: int
    member_id: int
    revision: int
    raft_term: int
    errors: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, endpoint: _Optional[str] = ..., reachable: _Optional[bool] = ..., error: _Optional[str] = ..., version: _Optional[str] = ..., db_size_bytes: _Optional[int] = ..., leader: _Optional[int] = ..., member_id: _Optional[int] = ..., revision: _Optional[int] = ..., raft_term: _Optional[int] = ..., errors: _Optional[_Iterable[str]] = ...) -> None: ...

class EtcdClusterStatus(_message.Message):
    __slots__ = ("endpoints", "reachable")
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    REACHABLE_FIELD_NUMBER: _ClassVar[int]
    endpoints: _containers.RepeatedCompositeFieldContainer[EtcdEndpointStatus]
    reachable: bool
    def __init__(self, endpoints: _Optional[_Iterable[_Union[EtcdEndpointStatus, _Mapping]]] = ..., reachable: _Optional[bool] = ...) -> None: ...

class GetClusterStatusResponse(_message.Message):
    __slots__ = ("mode", "cluster", "proxy", "brokers", "proxies", "proxies_stale", "proxies_read_time", "etcd")
    MODE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    PROXY_FIELD_NUMBER: _ClassVar[int]
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    PROXIES_FIELD_NUMBER: _ClassVar[int]
    PROXIES_STALE_FIELD_NUMBER: _ClassVar[int]
    PROXIES_READ_TIME_FIELD_NUMBER: _ClassVar[int]
    ETCD_FIELD_NUMBER: _ClassVar[int]
    mode: ClusterMode
    cluster: str
    proxy: str
    brokers: _containers.RepeatedCompositeFieldContainer[BrokerStatus]
    proxies: _containers.RepeatedCompositeFieldContainer[ProxyStatus]
    proxies_stale: bool
    proxies_read_time: _timestamp_pb2.Timestamp
    etcd: EtcdClusterStatus
    def __init__(self, mode: _Optional[_Union[ClusterMode, str]] = ..., cluster: _Optional[str] = ..., proxy: _Optional[str] = ..., brokers: _Optional[_Iterable[_Union[BrokerStatus, _Mapping]]] = ..., proxies: _Optional[_Iterable[_Union[ProxyStatus, _Mapping]]] = ..., proxies_stale: _Optional[bool] = ..., proxies_read_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., etcd: _Optional[_Union[EtcdClusterStatus, _Mapping]] = ...) -> None: ...

class User(_message.Message):
    __slots__ = ("access_key", "user_type", "enabled", "secret_fingerprint", "policy_count", "create_time", "update_time")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    USER_TYPE_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    SECRET_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    POLICY_COUNT_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    user_type: UserType
    enabled: bool
    secret_fingerprint: str
    policy_count: int
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, access_key: _Optional[str] = ..., user_type: _Optional[_Union[UserType, str]] = ..., enabled: _Optional[bool] = ..., secret_fingerprint: _Optional[str] = ..., policy_count: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CreateUserRequest(_message.Message):
    __slots__ = ("access_key", "secret_key", "user_type", "enabled")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    SECRET_KEY_FIELD_NUMBER: _ClassVar[int]
    USER_TYPE_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    secret_key: str
    user_type: UserType
    enabled: bool
    def __init__(self, access_key: _Optional[str] = ..., secret_key: _Optional[str] = ..., user_type: _Optional[_Union[UserType, str]] = ..., enabled: _Optional[bool] = ...) -> None: ...

class CreateUserResponse(_message.Message):
    __slots__ = ("user",)
    USER_FIELD_NUMBER: _ClassVar[int]
    user: User
    def __init__(self, user: _Optional[_Union[User, _Mapping]] = ...) -> None: ...

class UpdateUserRequest(_message.Message):
    __slots__ = ("access_key", "secret_key", "user_type", "enabled")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    SECRET_KEY_FIELD_NUMBER: _ClassVar[int]
    USER_TYPE_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    secret_key: str
    user_type: UserType
    enabled: bool
    def __init__(self, access_key: _Optional[str] = ..., secret_key: _Optional[str] = ..., user_type: _Optional[_Union[UserType, str]] = ..., enabled: _Optional[bool] = ...) -> None: ...

class UpdateUserResponse(_message.Message):
    __slots__ = ("user",)
    USER_FIELD_NUMBER: _ClassVar[int]
    user: User
    def __init__(self, user: _Optional[_Union[User, _Mapping]] = ...) -> None: ...

class DeleteUserRequest(_message.Message):
    __slots__ = ("access_key",)
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    def __init__(self, access_key: _Optional[str] = ...) -> None: ...

class DeleteUserResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetUserRequest(_message.Message):
    __slots__ = ("access_key",)
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    def __init__(self, access_key: _Optional[str] = ...) -> None: ...

class GetUserResponse(_message.Message):
    __slots__ = ("user", "policies")
    USER_FIELD_NUMBER: _ClassVar[int]
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    user: User
    policies: _containers.RepeatedCompositeFieldContainer[Policy]
    def __init__(self, user: _Optional[_Union[User, _Mapping]] = ..., policies: _Optional[_Iterable[_Union[Policy, _Mapping]]] = ...) -> None: ...

class ListUsersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListUsersResponse(_message.Message):
    __slots__ = ("users",)
    USERS_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedCompositeFieldContainer[User]
    def __init__(self, users: _Optional[_Iterable[_Union[User, _Mapping]]] = ...) -> None: ...

class Policy(_message.Message):
    __slots__ = ("resource_type", "pattern", "name", "actions", "decision", "source_cidrs")
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_CIDRS_FIELD_NUMBER: _ClassVar[int]
    resource_type: ResourceType
    pattern: ResourcePattern
    name: str
    actions: _containers.RepeatedScalarFieldContainer[Action]
    decision: Decision
    source_cidrs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, resource_type: _Optional[_Union[ResourceType, str]] = ..., pattern: _Optional[_Union[ResourcePattern, str]] = ..., name: _Optional[str] = ..., actions: _Optional[_Iterable[_Union[Action, str]]] = ..., decision: _Optional[_Union[Decision, str]] = ..., source_cidrs: _Optional[_Iterable[str]] = ...) -> None: ...

class GrantPolicyRequest(_message.Message):
    __slots__ = ("access_key", "policy")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    policy: Policy
    def __init__(self, access_key: _Optional[str] = ..., policy: _Optional[_Union[Policy, _Mapping]] = ...) -> None: ...

class GrantPolicyResponse(_message.Message):
    __slots__ = ("policies",)
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    policies: _containers.RepeatedCompositeFieldContainer[Policy]
    def __init__(self, policies: _Optional[_Iterable[_Union[Policy, _Mapping]]] = ...) -> None: ...

class RevokePolicyRequest(_message.Message):
    __slots__ = ("access_key", "policy")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    policy: Policy
    def __init__(self, access_key: _Optional[str] = ..., policy: _Optional[_Union[Policy, _Mapping]] = ...) -> None: ...

class RevokePolicyResponse(_message.Message):
    __slots__ = ("policies",)
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    policies: _containers.RepeatedCompositeFieldContainer[Policy]
    def __init__(self, policies: _Optional[_Iterable[_Union[Policy, _Mapping]]] = ...) -> None: ...

class ListPoliciesRequest(_message.Message):
    __slots__ = ("access_key",)
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    def __init__(self, access_key: _Optional[str] = ...) -> None: ...

class UserPolicies(_message.Message):
    __slots__ = ("access_key", "policies")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    policies: _containers.RepeatedCompositeFieldContainer[Policy]
    def __init__(self, access_key: _Optional[str] = ..., policies: _Optional[_Iterable[_Union[Policy, _Mapping]]] = ...) -> None: ...

class ListPoliciesResponse(_message.Message):
    __slots__ = ("users",)
    USERS_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedCompositeFieldContainer[UserPolicies]
    def __init__(self, users: _Optional[_Iterable[_Union[UserPolicies, _Mapping]]] = ...) -> None: ...

class ListTransactionsRequest(_message.Message):
    __slots__ = ("state", "topic", "limit")
    STATE_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    state: TransactionListState
    topic: str
    limit: int
    def __init__(self, state: _Optional[_Union[TransactionListState, str]] = ..., topic: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListTransactionsResponse(_message.Message):
    __slots__ = ("transactions",)
    TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    transactions: _containers.RepeatedCompositeFieldContainer[_messaging_pb2.Transaction]
    def __init__(self, transactions: _Optional[_Iterable[_Union[_messaging_pb2.Transaction, _Mapping]]] = ...) -> None: ...

class ResolveTransactionRequest(_message.Message):
    __slots__ = ("transaction_id", "topic", "resolution")
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RESOLUTION_FIELD_NUMBER: _ClassVar[int]
    transaction_id: str
    topic: str
    resolution: _messaging_pb2.TransactionResolution
    def __init__(self, transaction_id: _Optional[str] = ..., topic: _Optional[str] = ..., resolution: _Optional[_Union[_messaging_pb2.TransactionResolution, str]] = ...) -> None: ...

class ResolveTransactionResponse(_message.Message):
    __slots__ = ("transaction",)
    TRANSACTION_FIELD_NUMBER: _ClassVar[int]
    transaction: _messaging_pb2.Transaction
    def __init__(self, transaction: _Optional[_Union[_messaging_pb2.Transaction, _Mapping]] = ...) -> None: ...

class ResumeTransactionRequest(_message.Message):
    __slots__ = ("transaction_id", "topic")
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    transaction_id: str
    topic: str
    def __init__(self, transaction_id: _Optional[str] = ..., topic: _Optional[str] = ...) -> None: ...

class ResumeTransactionResponse(_message.Message):
    __slots__ = ("transaction",)
    TRANSACTION_FIELD_NUMBER: _ClassVar[int]
    transaction: _messaging_pb2.Transaction
    def __init__(self, transaction: _Optional[_Union[_messaging_pb2.Transaction, _Mapping]] = ...) -> None: ...

class GetHalfMessageRequest(_message.Message):
    __slots__ = ("transaction_id", "topic")
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    transaction_id: str
    topic: str
    def __init__(self, transaction_id: _Optional[str] = ..., topic: _Optional[str] = ...) -> None: ...

class GetHalfMessageResponse(_message.Message):
    __slots__ = ("transaction", "message")
    TRANSACTION_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    transaction: _messaging_pb2.Transaction
    message: StoredMessage
    def __init__(self, transaction: _Optional[_Union[_messaging_pb2.Transaction, _Mapping]] = ..., message: _Optional[_Union[StoredMessage, _Mapping]] = ...) -> None: ...
