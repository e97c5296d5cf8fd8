"""The index family: message ids, dedup ids and business keys of stored messages.

Entries (see keys.py):
- `i` (topic, message id) -> IndexRecord: query by id, and the dedup check when the dedup id
  is the message id (the default, so a producer retry costs no extra entry);
- `d` (topic, dedup id) -> IndexRecord, only for dedup ids other than the message id;
- `h` (topic, dedup id) -> IndexRecord of a half message, for its dedup window
  (half_dedup.py);
- `k` (topic, key, queue, offset) -> b"": query by key;
- `x` (expiry time, entry key) -> more entry keys: what the sweep deletes, and when. One
  marker covers every entry of a write that expires at the same time (`Expiries`): the key
  names the first, the value lists the others (each with a 2-byte length). A marker with an
  empty value covers its key's entry alone (markers written before grouping, and lone ones).
  Grouping saves a put per message: a send of 32 wrote 96 index entries, now 66.

Id and key entries live as long as retention keeps their message, dedup entries as long as the
dedup window. All are written in the batch that stores the message, so an index entry never
points at a message that was not stored. Lookups skip entries whose message retention already
deleted (the sweep may not have run yet).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Final

from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker_core import keys
from popmq.broker_core.record_wire import length_delimited, varint
from popmq.broker_core.store import Batch, Store

_SWEEP_CHUNK: Final = 4096
"""Entries deleted per sweep write (a marker's entries are never split)."""
_LENGTH: Final = struct.Struct(">H")


class Expiries:
    """The expiry markers of one write, grouped by expiry time; `put` writes them."""

    __slots__ = ("_due",)

    def __init__(self) -> None:
        self._due: dict[int, list[bytes]] = {}

    def add(self, expire_ms: int, entry: bytes) -> None:
        due = self._due.get(expire_ms)
        if due is None:
            self._due[expire_ms] = [entry]
        else:
            due.append(entry)

    def put(self, batch: Batch) -> None:
        for expire_ms, entries in self._due.items():
            # Each entry's length, then the entry, joined once: the entries of a send are
            # mostly of a few lengths, each packed once.
            lengths: dict[int, bytes] = {}
            parts: list[bytes] = []
            for i in range(1, len(entries)):
                entry = entries[i]
                length = lengths.get(len(entry))
                if length is None:
                    length = lengths[len(entry)] = _LENGTH.pack(len(entry))
                parts.append(length)
                parts.append(entry)
            batch.put("index", keys.expiry_key(expire_ms, entries[0]), b"".join(parts))
        self._due.clear()


def marker_entries(marker: bytes, value: bytes) -> list[bytes]:
    """The index entries an expiry marker covers (see the module doc)."""
    entries = [keys.parse_expiry_key(marker)[1]]
    at, end = 0, len(value)
    while at < end:
        (length,) = _LENGTH.unpack_from(value, at)
        at += _LENGTH.size
        entries.append(value[at : at + length])
        at += length
    return entries


def write_entries(
    batch: Batch,
    expiries: Expiries,
    *,
    topic_id: int,
    queue_id: int,
    offset: int,
    message_id: str,
    dedup_id: str,
    message_keys: Sequence[str],
    stamp_ms: int,
    retention_ms: int,
    dedup_window_ms: int,
    recall_handle: str = "",
    lookup_key: bytes = b"",
    raw_id: bytes = b"",
    value: bytes = b"",
) -> None:
    """Index one message stored at (queue_id, offset); offset -1 = waiting as a timer.

    Its expiry markers join `expiries`, which the caller puts once for the whole write.
    `lookup_key` is `dedup_lookup_key`'s for this message when the caller has it already
    (a send looked it up), so it is not encoded twice; `raw_id` the message id encoded,
    when the caller has that (a send encodes it once); `value` its `index_record`, when the
    caller wrote it (`QueueRecords`)."""
    if not raw_id:
        raw_id = message_id.encode()
    if not value:
        value = index_record(queue_id, offset, stamp_ms, message_id, recall_handle, raw_id)
    plain = not dedup_id or dedup_id == message_id
    id_key = lookup_key if lookup_key and plain else keys.id_index_key_of(topic_id, raw_id)
    batch.put("index", id_key, value)
    expiries.add(stamp_ms + retention_ms, id_key)
    if not plain:
        dedup_key = lookup_key or keys.dedup_key(topic_id, dedup_id)
        batch.put("index", dedup_key, value)
        expiries.add(stamp_ms + dedup_window_ms, dedup_key)
    if offset >= 0 and message_keys:
        write_key_entries(
            batch,
            expiries,
            topic_id=topic_id,
            queue_id=queue_id,
            offset=offset,
            message_keys=message_keys,
            expire_ms=stamp_ms + retention_ms,
        )


def index_record(
    queue_id: int,
    offset: int,
    store_time_ms: int,
    message_id: str,
    recall_handle: str = "",
    raw_id: bytes = b"",
) -> bytes:
    """An IndexRecord's bytes, written field by field (a third of building the message to
    serialize it, and one is written per message sent): tags and values gathered in one
    list and joined once, the store time's encoded once for the messages of a write that
    share it (`_StoreTime`). `raw_id` is `message_id` encoded, when the caller has it."""
    parts: list[bytes] = []
    if queue_id:
        parts.append(b"\x08")
        parts.append(varint(queue_id))
    if offset:  # -1 for a delayed message: ten bytes, as an int64 is encoded
        parts.append(b"\x10")
        parts.append(varint(offset))
    if store_time_ms:
        parts.append(_STORE_TIME.encode(store_time_ms))
    if message_id:
        encoded = raw_id or message_id.encode()
        parts.append(b"\x22")
        parts.append(varint(len(encoded)))
        parts.append(encoded)
    if recall_handle:
        parts.append(length_delimited(b"\x2a", recall_handle.encode()))
    return b"".join(parts)


class QueueRecords:
    """`index_record` for the messages a write stores in one queue at one store time, with
    no recall handle: what they share (queue, store time, tags) is encoded once, so each
    record is one join of five parts instead of a list built field by field."""

    __slots__ = ("_head", "_queue_id", "_store_time_ms", "_tail")

    def __init__(self, queue_id: int, store_time_ms: int) -> None:
        self._queue_id = queue_id
        self._store_time_ms = store_time_ms
        self._head = (b"\x08" + varint(queue_id) if queue_id else b"") + b"\x10"
        self._tail = (_STORE_TIME.encode(store_time_ms) if store_time_ms else b"") + b"\x22"

    def record(self, offset: int, message_id: str, raw_id: bytes) -> bytes:
        """`index_record(queue_id, offset, store_time_ms, message_id)`; `raw_id` is
        `message_id` encoded."""
        if offset <= 0 or not raw_id:  # a zero field is left out: the general writer
            return index_record(self._queue_id, offset, self._store_time_ms, message_id)
        return b"".join((self._head, varint(offset), self._tail, varint(len(raw_id)), raw_id))


class _StoreTime:
    """IndexRecord.store_time_ms, tagged and encoded, for the last time asked for."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        # (ms, its encoding), replaced as one reference.
        self._last: tuple[int, bytes] = (0, b"")

    def encode(self, ms: int) -> bytes:
        last = self._last
        if last[0] == ms:
            return last[1]
        encoded = b"\x18" + varint(ms)
        self._last = (ms, encoded)
        return encoded


_STORE_TIME: Final = _StoreTime()


def write_key_entries(
    batch: Batch,
    expiries: Expiries,
    *,
    topic_id: int,
    queue_id: int,
    offset: int,
    message_keys: Iterable[str],
    expire_ms: int,
) -> None:
    for key in message_keys:
        entry = keys.key_index_key(topic_id, key, queue_id, offset)
        batch.put("index", entry, b"")
        expiries.add(expire_ms, entry)


def dedup_lookup_key(topic_id: int, dedup_id: str, message_id: str) -> bytes:
    """The index entry that finds an earlier send of this dedup id: the id entry when the
    dedup id is the message id (the default), else the dedup entry."""
    if dedup_id == message_id:
        return keys.id_index_key(topic_id, dedup_id)
    return keys.dedup_key(topic_id, dedup_id)


def dedup_lookup_key_of(topic_id: int, dedup_id: str, message_id: str, raw_id: bytes) -> bytes:
    """`dedup_lookup_key`, with the message id already encoded (`raw_id`)."""
    if dedup_id == message_id:
        return keys.id_index_key_of(topic_id, raw_id)
    return keys.dedup_key(topic_id, dedup_id)


def find_duplicates(
    store: Store, index_keys: list[bytes], now_ms: int, window_ms: int
) -> list[records_pb2.IndexRecord | None]:
    """The earlier send of each message within the window, if any, by its
    `dedup_lookup_key`: one multi-get for a whole send."""
    found: list[records_pb2.IndexRecord | None] = []
    for data in store.multi_get("index", index_keys):
        record = records_pb2.IndexRecord.FromString(data) if data is not None else None
        if record is not None and record.store_time_ms + window_ms <= now_ms:
            record = None
        found.append(record)
    return found


def lookup_id(store: Store, topic_id: int, message_id: str) -> records_pb2.IndexRecord | None:
    data = store.get("index", keys.id_index_key(topic_id, message_id))
    return records_pb2.IndexRecord.FromString(data) if data is not None else None


def lookup_key(store: Store, topic_id: int, key: str, limit: int) -> list[tuple[int, int]]:
    """(queue_id, offset) of messages carrying `key`, oldest first, at most `limit`."""
    prefix = keys.key_index_prefix(topic_id, key)
    found: list[tuple[int, int]] = []
    for entry, _ in store.scan("index", prefix, prefix + b"\xff" * 12):
        found.append(keys.parse_key_index_suffix(entry))
        if len(found) >= limit:
            break
    return found


EXPIRY_START: Final = b"x"
"""The first key an expiry marker can have."""


def expired_entries(
    store: Store, now_ms: int, start: bytes = EXPIRY_START
) -> list[tuple[bytes, list[bytes]]]:
    """Expiry markers due by now with their entries (about one chunk of entries), from the
    marker key `start` on; the caller deletes them."""
    end = keys.expiry_key(now_ms + 1, b"")
    found = []
    count = 0
    for key, value in store.scan("index", start, end):
        entries = marker_entries(key, value)
        found.append((key, entries))
        count += len(entries)
        if count >= _SWEEP_CHUNK:
            break
    return found


def sweep_batch(
    store: Store,
    batch: Batch,
    markers: list[tuple[bytes, list[bytes]]],
    now_ms: int,
    ttl: dict[bytes, int],
) -> None:
    """Delete expired markers and their entries, keeping entries a later send refreshed.

    `ttl` maps an entry kind (b"i", b"d", b"h", b"k") to its lifetime in ms.
    """
    for marker, entries in markers:
        batch.delete("index", marker)
        for entry in entries:
            kind = entry[:1]
            if kind in (b"i", b"d", b"h"):
                data = store.get("index", entry)
                if data is not None:
                    record = records_pb2.IndexRecord.FromString(data)
                    if record.store_time_ms + ttl[kind] > now_ms:
                        continue  # refreshed by a later send of the same id
            batch.delete("index", entry)
