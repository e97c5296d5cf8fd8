"""Topics: create, read, list and delete them (with their retry queues, offsets and
in-flight state)."""

from __future__ import annotations

import logging

from popmq.broker_core import keys, validation
from popmq.broker_core.autocreate import AutoCreate
from popmq.broker_core.catalog import KIND_NORMAL, MESSAGE_TYPES, Catalog, TopicInfo
from popmq.broker_core.config import BrokerConfig
from popmq.broker_core.consume_queues import ConsumeQueues
from popmq.broker_core.errors import AlreadyExistsError, InvalidArgumentError
from popmq.broker_core.group_commit import GroupCommitWriter
from popmq.broker_core.long_polling import LongPolling
from popmq.broker_core.offsets import QueueOffsets
from popmq.broker_core.pop.live_checkpoints import LiveCheckpoints
from popmq.broker_core.store import Batch
from popmq.broker_core.types import QueueStats

log = logging.getLogger(__name__)


class Topics:
    """Topic administration; every change is one synced batch, then memory."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        catalog: Catalog,
        writer: GroupCommitWriter,
        offsets: QueueOffsets,
        queues: ConsumeQueues,
        checkpoints: LiveCheckpoints,
        create: AutoCreate,
        polling: LongPolling,
    ) -> None:
        self._config = config
        self._catalog = catalog
        self._writer = writer
        self._offsets = offsets
        self._queues = queues
        self._checkpoints = checkpoints
        self._create = create
        self._polling = polling

    async def create_topic(
        self, name: str, queues: int | None = None, *, message_type: str = "normal"
    ) -> TopicInfo:
        """Create a topic accepting one message type: normal, fifo, delay, transaction, mixed."""
        validation.check_name("topic", name)
        count = self._config.default_topic_queues if queues is None else queues
        validation.check_range("queues", count, 1, validation.MAX_QUEUES)
        code = MESSAGE_TYPES.get(message_type)
        if code is None:
            raise InvalidArgumentError(
                f"message_type {message_type!r} is not one of {', '.join(MESSAGE_TYPES)}"
            )
        if name in self._catalog.topics:
            raise AlreadyExistsError(f"topic {name!r} already exists")
        return await self._create.topic(name, count, KIND_NORMAL, code)

    def topic_info(self, name: str) -> TopicInfo:
        """A topic's settings without its queues' stats (a lookup, for hot paths)."""
        validation.check_name("topic", name, allow_dlq=True)
        return self._catalog.topic(name)

    def get_topic(self, name: str) -> tuple[TopicInfo, list[QueueStats]]:
        validation.check_name("topic", name, allow_dlq=True)
        info = self._catalog.topic(name)
        return info, [
            QueueStats(
                q,
                self._offsets.min_offset(info.topic_id, q),
                self._offsets.max_offset(info.topic_id, q),
            )
            for q in range(info.queues)
        ]

    def list_topics(self) -> list[TopicInfo]:
        return sorted(self._catalog.topics.values(), key=lambda t: t.name)

    async def delete_topic(self, name: str) -> None:
        """Delete a topic with its messages, retry queues, offsets and in-flight state."""
        validation.check_name("topic", name, allow_dlq=True)
        info = self._catalog.topic(name)
        removed_ids: set[int] = set()

        def apply(batch: Batch, _: QueueOffsets) -> None:
            removed = self._catalog.remove_topic(batch, info)
            for topic in removed:
                removed_ids.add(topic.topic_id)
                start, end = keys.topic_range(topic.topic_id)
                batch.delete_range("messages", start, end)
            for key, cq in list(self._queues.items()):
                if cq.topic_id in removed_ids:
                    batch.delete("offsets", keys.offset_key(*key))
            for ck in self._checkpoints.select(lambda ck: ck.queue.topic_id in removed_ids):
                if ck.persisted:
                    batch.delete("checkpoints", keys.checkpoint_key(ck.ck_id))
                    batch.delete("revive", keys.revive_key(ck.deadline_ms, ck.ck_id))

        await self._writer.submit(apply, sync=True)
        for key in [k for k, cq in self._queues.items() if cq.topic_id in removed_ids]:
            self._queues.remove(key)
        self._checkpoints.drop(
            self._checkpoints.select(lambda ck: ck.queue.topic_id in removed_ids)
        )
        for topic_id in removed_ids:
            self._offsets.forget_topic(topic_id)
        self._polling.notify_all(name)
        log.info("deleted topic %s (ids %s)", name, sorted(removed_ids))
