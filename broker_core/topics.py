"""Topics: create, read, list and delete them (with their retry queues, offsets and
in-flight state), and, in cluster mode, keep each one the local part of its route's
incarnation (`apply_route`)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging

from popmq.broker_core import keys, validation
from popmq.broker_core.autocreate import AutoCreate
from popmq.broker_core.catalog import KIND_NORMAL, MESSAGE_TYPES, Catalog, TopicInfo
from popmq.broker_core.config import BrokerConfig
from popmq.broker_core.consume_queues import ConsumeQueues
from popmq.broker_core.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
)
from popmq.broker_core.group_commit import GroupCommitWriter
from popmq.broker_core.long_polling import LongPolling
from popmq.broker_core.offsets import QueueOffsets
from popmq.broker_core.pop.live_checkpoints import LiveCheckpoints
from popmq.broker_core.store import Batch
from popmq.broker_core.to_the_end import runs_to_the_end
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

    async def apply_route(
        self, name: str, queues: int, message_type: str, route_create_time_ms: int
    ) -> TopicInfo | None:
        """Make the local topic `name` the local part of cluster mode's route created at
        `route_create_time_ms` (its incarnation); returns it, or None when the route names
        no queue here (`queues` 0) and no local topic is left.

        A local topic of another route's birth belongs to an incarnation deleted while this
        broker was away (the name was used again since): it is deleted with its messages,
        retry queues, offsets and in-flight state, as a delete seen live would have, and
        the route's topic created anew. One without a birth (created before births were
        kept, or by a push that carried none) is taken as the route's: it is stamped with
        the birth. Absent and named by the route, the topic is created with the birth. The
        message type and queue count of an existing one are the caller's (catalog sync).
        """
        validation.check_name("topic", name)
        validation.check_range("queues", queues, 0, validation.MAX_QUEUES)
        validation.check_range("route_create_time_ms", route_create_time_ms, 1, 2**63 - 1)
        code = MESSAGE_TYPES.get(message_type)
        if code is None:
            raise InvalidArgumentError(
                f"message_type {message_type!r} is not one of {', '.join(MESSAGE_TYPES)}"
            )
        for _ in range(3):  # a push may create the topic between the steps
            local = self._catalog.topics.get(name)
            if local is not None and local.route_create_time_ms not in (0, route_create_time_ms):
                log.warning(
                    "topic %s here is the incarnation created at %d ms, its route's at %d ms: "
                    "the topic was deleted and created again while this broker was away; "
                    "deleting the old one with its messages",
                    name,
                    local.route_create_time_ms,
                    route_create_time_ms,
                )
                with contextlib.suppress(NotFoundError):  # a push or the sync, meanwhile
                    await self.delete_topic(name)
                local = None
            if local is not None:
                if local.route_create_time_ms == 0:
                    local = await self._stamp(name, route_create_time_ms)
                return local
            if queues == 0:
                return None
            try:
                return await self._create.topic(
                    name, queues, KIND_NORMAL, code, route_create_time_ms=route_create_time_ms
                )
            except AlreadyExistsError:
                continue
        raise FailedPreconditionError(f"topic {name!r} kept changing while its route applied")

    async def _stamp(self, name: str, route_create_time_ms: int) -> TopicInfo:
        """Record the route's birth on the local topic (built from the record as it is when
        the batch is written, so a concurrent change of its queues is kept)."""
        stamped: list[TopicInfo] = []

        def apply(batch: Batch, _: QueueOffsets) -> None:
            current = self._catalog.topics.get(name)
            if current is not None:
                info = dataclasses.replace(current, route_create_time_ms=route_create_time_ms)
                self._catalog.write_topic(batch, info)
                stamped.append(info)

        await self._writer.submit(apply, sync=True)
        if not stamped:
            raise FailedPreconditionError(f"topic {name!r} was deleted while it was stamped")
        current = self._catalog.topics.get(name)
        if current is None or current.topic_id != stamped[0].topic_id:
            raise FailedPreconditionError(f"topic {name!r} changed while it was stamped; retry")
        info = dataclasses.replace(current, route_create_time_ms=route_create_time_ms)
        self._catalog.register_topic(info)
        log.info(
            "topic %s is the incarnation of its route created at %d ms", name, route_create_time_ms
        )
        return info

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

    @runs_to_the_end
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
                batch.delete_range("meta", *keys.queue_end_range(topic.topic_id))
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
