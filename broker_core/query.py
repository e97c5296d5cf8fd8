"""Query stored messages by message id or by business key (RocketMQ QueryMessage), through
the message index (message_index.py).

Like every read, a query answers only what the queue has published (`QueueOffsets.max_offset`):
a message whose write is in doubt (its fsync or replication failed) is in the store and the
index, but no reader is shown it, or its offset, until it is settled (group_commit.py).
"""

from __future__ import annotations

from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker_core import keys, message_index, validation
from popmq.broker_core.budget import ResponseBudget
from popmq.broker_core.catalog import Catalog
from popmq.broker_core.errors import InvalidArgumentError, NotFoundError
from popmq.broker_core.offsets import QueueOffsets
from popmq.broker_core.record import MessageRecord
from popmq.broker_core.store import Store
from popmq.broker_core.timer import RecallCodec
from popmq.broker_core.types import PeekedMessage


class MessageQueries:
    """Lookups by id and key; they read, never write."""

    def __init__(
        self, *, store: Store, catalog: Catalog, offsets: QueueOffsets, recall_codec: RecallCodec
    ) -> None:
        self._store = store
        self._catalog = catalog
        self._offsets = offsets
        self._recall_codec = recall_codec

    def query_message(self, topic: str, message_id: str) -> PeekedMessage:
        """The stored message with this id (offset -1: a delayed message not yet due)."""
        validation.check_name("topic", topic, allow_dlq=True)
        if not message_id:
            raise InvalidArgumentError("message_id is empty")
        info = self._catalog.topic(topic)
        entry = message_index.lookup_id(self._store, info.topic_id, message_id)
        record = None
        if entry is not None and entry.offset >= self._offsets.max_offset(
            info.topic_id, entry.queue_id
        ):
            entry = None  # held back: not published yet
        if entry is not None and entry.offset >= 0:
            data = self._store.get(
                "messages", keys.message_key(info.topic_id, entry.queue_id, entry.offset)
            )
            record = records_pb2.StoredMessage.FromString(data) if data is not None else None
        elif entry is not None and entry.recall_handle:
            handle = self._recall_codec.decode(entry.recall_handle, any_issuer=True)
            data = self._store.get("timers", keys.timer_key(handle.due_ms, handle.seq))
            if data is not None:
                timer = records_pb2.TimerRecord.FromString(data)
                record = records_pb2.StoredMessage.FromString(timer.message)
        if entry is None or record is None or record.message_id != message_id:
            raise NotFoundError(
                f"no message {message_id!r} in topic {topic!r} (never sent, recalled, or "
                "deleted by retention)"
            )
        return PeekedMessage(info.name, entry.queue_id, entry.offset, MessageRecord(record))

    def query_messages_by_key(self, topic: str, key: str, limit: int = 64) -> list[PeekedMessage]:
        """Stored messages carrying business key `key`, oldest first, at most `limit`."""
        validation.check_name("topic", topic, allow_dlq=True)
        if not key:
            raise InvalidArgumentError("key is empty")
        validation.check_range("limit", limit, 1, 1024)
        info = self._catalog.topic(topic)
        places = [
            (q, o)
            for q, o in message_index.lookup_key(self._store, info.topic_id, key, limit)
            if o < self._offsets.max_offset(info.topic_id, q)  # held back: not published yet
        ]
        found: list[PeekedMessage] = []
        response = ResponseBudget()
        while places:
            count = response.reads(len(places))
            chunk, places = places[:count], places[count:]
            values = self._store.multi_get(
                "messages", [keys.message_key(info.topic_id, q, o) for q, o in chunk]
            )
            for (q, o), value in zip(chunk, values, strict=True):
                if value is None:
                    continue
                response.saw(len(value))
                if not response.take(len(value)):
                    return found  # the answer is full (budget.py): oldest first, rest left out
                record = MessageRecord.from_bytes(value)
                found.append(PeekedMessage(info.name, q, o, record))
        return found
