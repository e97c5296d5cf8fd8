"""Big-endian key encodings, so RocksDB's byte order is offset order and deadline order."""

from __future__ import annotations

import struct

_QUEUE = struct.Struct(">II")
_MESSAGE = struct.Struct(">IIQ")
_OFFSET_KEY = struct.Struct(">III")
_U64 = struct.Struct(">Q")
_REVIVE = struct.Struct(">QQ")
_U32 = struct.Struct(">I")

MAX_OFFSET = 2**64 - 1


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


_SUPERSEDED = struct.Struct(">QH")
SUPERSEDED_PREFIX = b"superseded:"


def superseded_key(ck_id: int, index: int) -> bytes:
    """meta family: a handle replaced by ChangeInvisibleTime/Nack -> its old deadline."""
    return SUPERSEDED_PREFIX + _SUPERSEDED.pack(ck_id, index)


def parse_superseded_key(key: bytes) -> tuple[int, int]:
    ck_id, index = _SUPERSEDED.unpack(key[len(SUPERSEDED_PREFIX) :])
    return ck_id, index
