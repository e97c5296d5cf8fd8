"""Big-endian key encodings, so RocksDB's byte order is offset order and deadline order."""

from __future__ import annotations

import struct
from typing import Final

_QUEUE: Final = struct.Struct(">II")
_MESSAGE: Final = struct.Struct(">IIQ")
_OFFSET_KEY: Final = struct.Struct(">III")
_U64: Final = struct.Struct(">Q")
_REVIVE: Final = struct.Struct(">QQ")
_U32: Final = struct.Struct(">I")

MAX_OFFSET: Final = 2**64 - 1


def message_key(topic_id: int, queue_id: int, offset: int) -> bytes:
    """messages family: (topic, queue, offset)."""
    return _MESSAGE.pack(topic_id, queue_id, offset)


def message_offset(key: bytes) -> int:
    """The offset part of a messages-family key."""
    offset: int = _MESSAGE.unpack(key)[2]
    return offset


def queue_prefix(topic_id: int, queue_id: int) -> bytes:
    """Prefix of every message key of one queue."""
    return _QUEUE.pack(topic_id, queue_id)


def topic_range(topic_id: int) -> tuple[bytes, bytes]:
    """[start, end) of every message key of one topic."""
    return _U32.pack(topic_id), _U32.pack(topic_id + 1)


def offset_key(group_id: int, topic_id: int, queue_id: int) -> bytes:
    """offsets family: (group, topic, queue) -> committed consumer offset."""
    return _OFFSET_KEY.pack(group_id, topic_id, queue_id)


def parse_offset_key(key: bytes) -> tuple[int, int, int]:
    """(group_id, topic_id, queue_id) of an offsets-family key."""
    group_id, topic_id, queue_id = _OFFSET_KEY.unpack(key)
    return group_id, topic_id, queue_id


def encode_u64(value: int) -> bytes:
    return _U64.pack(value)


def decode_u64(data: bytes) -> int:
    value: int = _U64.unpack(data)[0]
    return value


def encode_u32(value: int) -> bytes:
    return _U32.pack(value)


def decode_u32(data: bytes) -> int:
    value: int = _U32.unpack(data)[0]
    return value


def checkpoint_key(ck_id: int) -> bytes:
    """checkpoints family: ck id -> CheckpointRecord."""
    return _U64.pack(ck_id)


def revive_key(deadline_ms: int, ck_id: int) -> bytes:
    """revive family: (deadline, ck id), so a range scan finds what is due."""
    return _REVIVE.pack(deadline_ms, ck_id)


def parse_revive_key(key: bytes) -> tuple[int, int]:
    deadline_ms, ck_id = _REVIVE.unpack(key)
    return deadline_ms, ck_id


def topic_meta_key(name: str) -> bytes:
    return b"topic:" + name.encode()


def group_meta_key(name: str) -> bytes:
    return b"group:" + name.encode()


def retry_meta_key(group_id: int, topic_id: int) -> bytes:
    """Retry topics are found by (group, topic) ids, never by parsing their display name."""
    return b"retry:" + _QUEUE.pack(group_id, topic_id)


def parse_retry_meta_key(key: bytes) -> tuple[int, int]:
    """(group_id, topic_id) of a retry topic's meta key."""
    group_id, topic_id = _QUEUE.unpack(key[len(b"retry:") :])
    return group_id, topic_id


SECURITY_PREFIX: Final = b"security:"
"""meta family: the proxy's users and policies (security/store.py), opaque here."""


def security_meta_key(name: str) -> bytes:
    return SECURITY_PREFIX + name.encode()


_SUPERSEDED: Final = struct.Struct(">QH")
SUPERSEDED_PREFIX: Final = b"superseded:"


def superseded_key(ck_id: int, index: int) -> bytes:
    """meta family: a handle replaced by ChangeInvisibleTime/Nack -> its old deadline."""
    return SUPERSEDED_PREFIX + _SUPERSEDED.pack(ck_id, index)


def parse_superseded_key(key: bytes) -> tuple[int, int]:
    ck_id, index = _SUPERSEDED.unpack(key[len(SUPERSEDED_PREFIX) :])
    return ck_id, index


def timer_key(due_ms: int, seq: int) -> bytes:
    """timers family: (due time, sequence), so a range scan finds what is due."""
    return _REVIVE.pack(due_ms, seq)


def parse_timer_key(key: bytes) -> tuple[int, int]:
    due_ms, seq = _REVIVE.unpack(key)
    return due_ms, seq


def _text(kind: bytes, topic_id: int, text: str) -> bytes:
    raw = text.encode()
    return b"".join((kind, _TEXT_HEAD.pack(topic_id, len(raw)), raw))


_TEXT_HEAD: Final = struct.Struct(">IH")
"""A text key's topic id and the text's length."""


def id_index_key(topic_id: int, message_id: str) -> bytes:
    """index family: (topic, message id) -> IndexRecord.

    Made for every message sent (looked up, then written): its head (kind, topic, id
    length) comes from `_ID_HEADS`, as message ids of a topic mostly share their length,
    so a key costs one concatenation instead of a struct pack and a join."""
    return id_index_key_of(topic_id, message_id.encode())


def id_index_key_of(topic_id: int, raw: bytes) -> bytes:
    """`id_index_key` of a message id already encoded (UTF-8): a send encodes each id once
    for its record, its index record and this key."""
    if len(raw) > 0xFFFF:  # no id is this long (the pack refuses it, as it always did)
        return b"".join((b"i", _TEXT_HEAD.pack(topic_id, len(raw)), raw))
    slot = topic_id << 16 | len(raw)
    head = _ID_HEADS.get(slot)
    if head is None:
        if len(_ID_HEADS) >= _ID_HEADS_KEPT:
            _ID_HEADS.clear()
        head = b"i" + _TEXT_HEAD.pack(topic_id, len(raw))
        _ID_HEADS[slot] = head
    return head + raw


_ID_HEADS: Final[dict[int, bytes]] = {}
"""id_index_key's heads by topic id and id length (topic_id << 16 | length). Touched on the
loop thread only."""
_ID_HEADS_KEPT: Final = 4096
"""Heads kept at most; past it the table starts again (a few topics' worth each of a few
id lengths is the usual)."""


def dedup_key(topic_id: int, dedup_id: str) -> bytes:
    """index family: (topic, dedup id) -> IndexRecord, for dedup ids other than the id."""
    return _text(b"d", topic_id, dedup_id)


def half_dedup_key(topic_id: int, dedup_id: str) -> bytes:
    """index family: (topic, dedup id, the message id when it has none) -> IndexRecord of a
    half message (its transaction's sequence), for the dedup window (half_dedup.py)."""
    return _text(b"h", topic_id, dedup_id)


def key_index_prefix(topic_id: int, key: str) -> bytes:
    """index family: every (topic, business key, queue, offset) entry of one key."""
    return _text(b"k", topic_id, key)


def key_index_key(topic_id: int, key: str, queue_id: int, offset: int) -> bytes:
    return key_index_prefix(topic_id, key) + _QUEUE_OFFSET.pack(queue_id, offset)


def parse_key_index_suffix(key: bytes) -> tuple[int, int]:
    """(queue_id, offset) at the end of a key-index entry."""
    queue_id, offset = _QUEUE_OFFSET.unpack(key[-_QUEUE_OFFSET.size :])
    return queue_id, offset


def expiry_key(expire_ms: int, index_key: bytes) -> bytes:
    """index family: (expiry time, index key) -> b"", so a range scan finds what expired."""
    return b"x" + _U64.pack(expire_ms) + index_key


def parse_expiry_key(key: bytes) -> tuple[int, bytes]:
    return decode_u64(key[1:9]), key[9:]


_QUEUE_OFFSET: Final = struct.Struct(">IQ")

QUEUE_END_PREFIX: Final = b"qend:"
"""meta family: (topic, queue) -> the queue's end, where removing the crash tail
(crash_tail.py), a purge (admin.py) or retention (retention.py) took the queue's last stored
messages: QueueOffsets reads it, so their offsets are never given to other messages."""


def queue_end_key(topic_id: int, queue_id: int) -> bytes:
    return QUEUE_END_PREFIX + _QUEUE.pack(topic_id, queue_id)


def queue_end_range(topic_id: int) -> tuple[bytes, bytes]:
    """[start, end) of the queue-end keys of one topic (dropped with the topic)."""
    return QUEUE_END_PREFIX + _U32.pack(topic_id), QUEUE_END_PREFIX + _U32.pack(topic_id + 1)


TRANSACTION_PREFIX: Final = b"txn:"
"""meta family: transaction sequence -> TransactionRecord (transactions.py)."""
TRANSACTION_CHECK_PREFIX: Final = b"txc:"
"""meta family: (due time, sequence) of every open transaction's next check, or discard."""
TRANSACTION_EXPIRY_PREFIX: Final = b"txx:"
"""meta family: (expiry time, sequence) of resolved and discarded transactions."""
TRANSACTION_DISCARDED_PREFIX: Final = b"txd:"
"""meta family: sequence of every discarded transaction (their listing)."""


def prefix_end(prefix: bytes) -> bytes:
    """The first key after every key starting with `prefix` (which ends below 0xff)."""
    return prefix[:-1] + bytes([prefix[-1] + 1])


def transaction_key(seq: int) -> bytes:
    return TRANSACTION_PREFIX + _U64.pack(seq)


def transaction_discarded_key(seq: int) -> bytes:
    return TRANSACTION_DISCARDED_PREFIX + _U64.pack(seq)


def transaction_check_key(due_ms: int, seq: int) -> bytes:
    return TRANSACTION_CHECK_PREFIX + _REVIVE.pack(due_ms, seq)


def transaction_expiry_key(expire_ms: int, seq: int) -> bytes:
    return TRANSACTION_EXPIRY_PREFIX + _REVIVE.pack(expire_ms, seq)


def parse_transaction_timed_key(key: bytes) -> tuple[int, int]:
    """(time, sequence) of a transaction check or expiry key."""
    when, seq = _REVIVE.unpack(key[4:])
    return when, seq


def parse_transaction_seq(key: bytes) -> int:
    """The sequence of a transaction or discarded-transaction key."""
    return decode_u64(key[4:])
