"""How a write batch travels to followers, and where a store keeps its log position.

A batch is the list of changes the leader's store wrote (Batch.ops): each change is a
header (kind, family, key length, value length) followed by the key and the value. Every
replicated batch also puts the store's log position (`POSITION_KEY`: epoch and lsn) in the
same write, so a store always knows, atomically with its contents, which batch it ends
with; and a new leader puts its epoch history (`EPOCHS_KEY`) in its first batch, so a
returning replica can be told where its log diverged from the leader's.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from popmq.broker_core.store import FAMILIES, Op, Store

POSITION_KEY = b"replication:position"
"""meta family: (epoch, lsn) of the last batch the store holds, 16 bytes big-endian."""
EPOCHS_KEY = b"replication:epochs"
"""meta family: every leader epoch of the store's history with the lsn of its first batch,
oldest first, 16 bytes each: what tells a returning replica where it diverged."""

_HEADER = struct.Struct(">BBII")
_FAMILY_INDEX = {name: index for index, name in enumerate(FAMILIES)}
_PAIR = struct.Struct(">QQ")


def encode(ops: Sequence[Op]) -> bytes:
    """One batch's changes as bytes."""
    parts: list[bytes] = []
    for kind, family, key, value in ops:
        parts.append(_HEADER.pack(kind, _FAMILY_INDEX[family], len(key), len(value)))
        parts.append(key)
        parts.append(value)
    return b"".join(parts)


def decode(data: bytes) -> list[Op]:
    """The changes of `encode`; ValueError for bytes it did not make."""
    ops: list[Op] = []
    view = memoryview(data)
    at = 0
    end = len(data)
    while at < end:
        if end - at < _HEADER.size:
            raise ValueError(f"truncated change header at byte {at}")
        kind, family, key_len, value_len = _HEADER.unpack_from(view, at)
        at += _HEADER.size
        if kind > 2 or family >= len(FAMILIES) or at + key_len + value_len > end:
            raise ValueError(f"corrupt change at byte {at - _HEADER.size}")
        key = bytes(view[at : at + key_len])
        at += key_len
        value = bytes(view[at : at + value_len])
        at += value_len
        ops.append((kind, FAMILIES[family], key, value))
    return ops


def encode_position(epoch: int, lsn: int) -> bytes:
    return _PAIR.pack(epoch, lsn)


def read_position(store: Store) -> tuple[int, int]:
    """(epoch, lsn) of the store's last replicated batch; (0, 0) for none."""
    raw = store.get("meta", POSITION_KEY)
    if raw is None or len(raw) != _PAIR.size:
        return 0, 0
    epoch, lsn = _PAIR.unpack(raw)
    return epoch, lsn


def encode_epochs(epochs: Sequence[tuple[int, int]]) -> bytes:
    return b"".join(_PAIR.pack(epoch, start) for epoch, start in epochs)


def read_epochs(store: Store) -> list[tuple[int, int]]:
    """[(epoch, first lsn)] of the store's history, oldest first."""
    raw = store.get("meta", EPOCHS_KEY) or b""
    return [_PAIR.unpack_from(raw, at) for at in range(0, len(raw) - len(raw) % 16, 16)]


def end_of_epoch(epochs: Sequence[tuple[int, int]], epoch: int, last_lsn: int) -> int | None:
    """The last lsn of `epoch` in a history ending at `last_lsn`; None if it never led."""
    for index, (known, _start) in enumerate(epochs):
        if known == epoch:
            if index + 1 < len(epochs):
                return epochs[index + 1][1] - 1
            return last_lsn
        if known > epoch:
            return None
    return None
