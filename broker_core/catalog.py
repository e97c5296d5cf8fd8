"""Topics and groups: their metadata, numeric ids and meta-family records.

Ids are never reused, so keys and receipt handles of a deleted topic never resolve to a new
topic of the same name. Retry topics are found by (group id, topic id), never by parsing
their display name `%RETRY%<group>_<topic>`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker_core import keys
from popmq.broker_core.errors import NotFoundError
from popmq.broker_core.store import Batch, Store
from popmq.broker_core.validation import DLQ_PREFIX, RETRY_PREFIX

KIND_NORMAL: Final = 1
KIND_DLQ: Final = 2
KIND_RETRY: Final = 3
_KIND_NAMES: Final = {KIND_NORMAL: "normal", KIND_DLQ: "dlq", KIND_RETRY: "retry"}

MESSAGE_TYPE_NORMAL: Final = 1
MESSAGE_TYPE_FIFO: Final = 2
MESSAGE_TYPE_DELAY: Final = 3
MESSAGE_TYPE_TRANSACTION: Final = 4
MESSAGE_TYPE_MIXED: Final = 5
MESSAGE_TYPES: Final = {
    "normal": MESSAGE_TYPE_NORMAL,
    "fifo": MESSAGE_TYPE_FIFO,
    "delay": MESSAGE_TYPE_DELAY,
    "transaction": MESSAGE_TYPE_TRANSACTION,
    "mixed": MESSAGE_TYPE_MIXED,
}
"""Message types a topic may declare, by name (RocketMQ 5 TopicMessageType)."""
MESSAGE_TYPE_NAMES: Final = {code: name for name, code in MESSAGE_TYPES.items()}
_ACCEPTS: Final = {
    MESSAGE_TYPE_NORMAL: frozenset({"normal"}),
    MESSAGE_TYPE_FIFO: frozenset({"fifo"}),
    MESSAGE_TYPE_DELAY: frozenset({"delay"}),
    MESSAGE_TYPE_TRANSACTION: frozenset({"transaction"}),
    MESSAGE_TYPE_MIXED: frozenset({"normal", "fifo", "delay"}),
}

_SEQ_TOPIC: Final = b"seq:topic"
_SEQ_GROUP: Final = b"seq:group"


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic as the broker knows it."""

    name: str
    topic_id: int
    queues: int
    message_type: int
    kind: int
    create_time_ms: int
    owner_group: str = ""
    owner_topic: str = ""
    route_create_time_ms: int = 0
    """Cluster mode: the create time of the route this topic is the local part of (its
    incarnation); 0 when not known (standalone, or not yet taken from a route)."""

    @property
    def kind_name(self) -> str:
        return _KIND_NAMES[self.kind]

    @property
    def message_type_name(self) -> str:
        return MESSAGE_TYPE_NAMES.get(self.message_type, "normal")

    def accepts(self, message_type: str) -> bool:
        """Whether a message of this type ("normal", "fifo", "delay") may be sent here."""
        return message_type in _ACCEPTS.get(self.message_type, frozenset({"normal"}))

    def to_record(self) -> bytes:
        return records_pb2.TopicRecord(
            name=self.name,
            topic_id=self.topic_id,
            queues=self.queues,
            message_type=self.message_type,
            kind=self.kind,
            create_time_ms=self.create_time_ms,
            owner_group=self.owner_group,
            owner_topic=self.owner_topic,
            route_create_time_ms=self.route_create_time_ms,
        ).SerializeToString()

    @classmethod
    def from_record(cls, data: bytes) -> TopicInfo:
        r = records_pb2.TopicRecord.FromString(data)
        return cls(
            r.name, r.topic_id, r.queues, r.message_type, r.kind, r.create_time_ms,
            r.owner_group, r.owner_topic, r.route_create_time_ms,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """A consumer group and its delivery settings."""

    name: str
    group_id: int
    max_delivery_attempts: int
    retry_backoff_ms: tuple[int, ...]
    create_time_ms: int
    auto_created: bool

    def backoff_ms(self, delivery_attempt: int) -> int:
        """Nack delay for a message delivered `delivery_attempt` times (last entry repeats)."""
        index = min(max(delivery_attempt, 1), len(self.retry_backoff_ms)) - 1
        return self.retry_backoff_ms[index]

    def to_record(self) -> bytes:
        return records_pb2.GroupRecord(
            name=self.name,
            group_id=self.group_id,
            max_delivery_attempts=self.max_delivery_attempts,
            retry_backoff_ms=self.retry_backoff_ms,
            create_time_ms=self.create_time_ms,
            auto_created=self.auto_created,
        ).SerializeToString()

    @classmethod
    def from_record(cls, data: bytes) -> GroupInfo:
        r = records_pb2.GroupRecord.FromString(data)
        return cls(
            r.name, r.group_id, r.max_delivery_attempts, tuple(r.retry_backoff_ms),
            r.create_time_ms, r.auto_created,
        )  # fmt: skip


def retry_topic_name(group: str, topic: str) -> str:
    return f"{RETRY_PREFIX}{group}_{topic}"


def dlq_topic_name(group: str) -> str:
    return f"{DLQ_PREFIX}{group}"


class Catalog:
    """In-memory view of the meta family; changes are written by the caller's batch."""

    def __init__(self, store: Store) -> None:
        self.topics: dict[str, TopicInfo] = {}
        self.topics_by_id: dict[int, TopicInfo] = {}
        self.retry_topics: dict[tuple[int, int], TopicInfo] = {}
        self.groups: dict[str, GroupInfo] = {}
        self.groups_by_id: dict[int, GroupInfo] = {}
        self._next_topic_id = 1
        self._next_group_id = 1
        self._load(store)

    def _load(self, store: Store) -> None:
        for _, value in store.scan("meta", b"group:", b"group;"):
            self.register_group(GroupInfo.from_record(value))
        for _, value in store.scan("meta", b"topic:", b"topic;"):
            self.register_topic(TopicInfo.from_record(value))
        for key, value in store.scan("meta", b"retry:", b"retry;"):
            group_id, topic_id = keys.parse_retry_meta_key(key)
            retry = TopicInfo.from_record(value)
            self.topics_by_id[retry.topic_id] = retry
            self.retry_topics[(group_id, topic_id)] = retry
        ids = [self._next_topic_id, *(t.topic_id + 1 for t in self.topics_by_id.values())]
        seq = store.get("meta", _SEQ_TOPIC)
        self._next_topic_id = max(ids + ([keys.decode_u32(seq)] if seq else []))
        gids = [self._next_group_id, *(g.group_id + 1 for g in self.groups.values())]
        seq = store.get("meta", _SEQ_GROUP)
        self._next_group_id = max(gids + ([keys.decode_u32(seq)] if seq else []))

    # -- lookups --------------------------------------------------------------------------

    def topic(self, name: str) -> TopicInfo:
        """The topic named `name`; NOT_FOUND when there is none."""
        info = self.topics.get(name)
        if info is None:
            raise NotFoundError(f"topic {name!r} does not exist; create it first")
        return info

    def group(self, name: str) -> GroupInfo:
        """The group named `name`; NOT_FOUND when there is none."""
        info = self.groups.get(name)
        if info is None:
            raise NotFoundError(f"group {name!r} does not exist")
        return info

    def user_topic_name(self, topic_id: int) -> str:
        """The user topic a (possibly retry) topic id belongs to, for counters."""
        info = self.topics_by_id.get(topic_id)
        if info is None:
            return ""
        return info.owner_topic if info.kind == KIND_RETRY else info.name

    # -- topics ---------------------------------------------------------------------------

    def new_topic(
        self,
        name: str,
        queues: int,
        *,
        kind: int = KIND_NORMAL,
        message_type: int = MESSAGE_TYPE_NORMAL,
        now_ms: int,
        owner_group: str = "",
        owner_topic: str = "",
        route_create_time_ms: int = 0,
    ) -> TopicInfo:
        """A new topic with a fresh id (not registered until `register_topic`)."""
        info = TopicInfo(
            name,
            self._next_topic_id,
            queues,
            message_type,
            kind,
            now_ms,
            owner_group,
            owner_topic,
            route_create_time_ms,
        )
        self._next_topic_id += 1
        return info

    def write_topic(self, batch: Batch, info: TopicInfo, *, group_id: int = 0) -> None:
        if info.kind == KIND_RETRY:
            owner = self.topics[info.owner_topic]
            batch.put("meta", keys.retry_meta_key(group_id, owner.topic_id), info.to_record())
        else:
            batch.put("meta", keys.topic_meta_key(info.name), info.to_record())
        batch.put("meta", _SEQ_TOPIC, keys.encode_u32(self._next_topic_id))

    def register_topic(self, info: TopicInfo, *, group_id: int = 0) -> None:
        self.topics_by_id[info.topic_id] = info
        if info.kind == KIND_RETRY:
            owner = self.topics[info.owner_topic]
            self.retry_topics[(group_id, owner.topic_id)] = info
        else:
            self.topics[info.name] = info

    def remove_topic(self, batch: Batch, info: TopicInfo) -> list[TopicInfo]:
        """Forget a user topic and its retry topics; returns every topic removed."""
        removed = [info]
        batch.delete("meta", keys.topic_meta_key(info.name))
        for (group_id, topic_id), retry in list(self.retry_topics.items()):
            if topic_id == info.topic_id:
                batch.delete("meta", keys.retry_meta_key(group_id, topic_id))
                del self.retry_topics[(group_id, topic_id)]
                self.topics_by_id.pop(retry.topic_id, None)
                removed.append(retry)
        self.topics.pop(info.name, None)
        self.topics_by_id.pop(info.topic_id, None)
        return removed

    # -- groups ---------------------------------------------------------------------------

    def new_group(
        self,
        name: str,
        *,
        max_delivery_attempts: int,
        retry_backoff_ms: tuple[int, ...],
        now_ms: int,
        auto_created: bool,
        group_id: int | None = None,
    ) -> GroupInfo:
        if group_id is None:
            group_id = self._next_group_id
            self._next_group_id += 1
        return GroupInfo(
            name, group_id, max_delivery_attempts, retry_backoff_ms, now_ms, auto_created
        )

    def write_group(self, batch: Batch, info: GroupInfo) -> None:
        batch.put("meta", keys.group_meta_key(info.name), info.to_record())
        batch.put("meta", _SEQ_GROUP, keys.encode_u32(self._next_group_id))

    def register_group(self, info: GroupInfo) -> None:
        self.groups[info.name] = info
        self.groups_by_id[info.group_id] = info
