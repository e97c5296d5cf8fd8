"""Receipt handles: opaque to clients, signed by the server, bound to one delivery.

A handle encodes the group, topic, queue, offset, checkpoint id, index in the checkpoint and
the deadline, plus a 16-byte keyed BLAKE2b MAC over them with a secret kept in the data dir,
so a client can neither forge one nor move one to another message or group. (Keyed BLAKE2b
is a MAC by design and costs a fifth of HMAC-SHA256 here: every pop and ack computes one per
message.)
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from typing import NamedTuple

from popmq.broker_core.errors import InvalidReceiptHandleError
from popmq.broker_core.handle_text import HandleText

_VERSION = 2
_BODY = struct.Struct(">BIIIQQHQ")
_MAC_BYTES = 16
_TEXT = HandleText(_BODY.size + _MAC_BYTES)
_TEXT_CHARS = _TEXT.chars
_NOT_BASE64URL = (
    "receipt handle is malformed (not the base64url text the server issued); pass the handle "
    "exactly as received"
)


def _keyed(secret: bytes) -> hashlib.blake2b:
    return hashlib.blake2b(key=secret, digest_size=_MAC_BYTES)


def _mac(keyed: hashlib.blake2b, body: bytes) -> bytes:
    """The MAC of `body`: a copy of the keyed state, so the key block is hashed once per
    codec, not once per handle (0.6 against 1.4 us a MAC here)."""
    state = keyed.copy()
    state.update(body)
    return state.digest()


class ReceiptHandle(NamedTuple):
    """The decoded fields of a receipt handle.

    A NamedTuple, not a frozen dataclass: one is built per message popped and per handle
    acked, and this costs a third as much (and packs with one star).
    """

    group_id: int
    topic_id: int
    queue_id: int
    offset: int
    ck_id: int
    ck_index: int
    deadline_ms: int


class ReceiptCodec:
    """Encodes and verifies handles with one server secret."""

    def __init__(self, secret: bytes) -> None:
        self._keyed = _keyed(secret)

    def encode(self, handle: ReceiptHandle) -> str:
        body = _BODY.pack(_VERSION, *handle)
        return _TEXT.encode(body + _mac(self._keyed, body)).decode()

    def decode(self, text: str) -> ReceiptHandle:
        """Verify and decode; raises InvalidReceiptHandleError when malformed or forged."""
        if not text:
            raise InvalidReceiptHandleError("receipt handle is empty")
        if len(text) != _TEXT_CHARS:
            raise InvalidReceiptHandleError(
                "receipt handle is malformed (wrong length); pass the handle exactly as received"
            )
        try:
            raw = _TEXT.decode(text.encode())  # bytes: their translate is 10x str's
        except UnicodeEncodeError as exc:
            raise InvalidReceiptHandleError(_NOT_BASE64URL) from exc
        if raw is None:  # not the one canonical spelling (handle_text.py)
            raise InvalidReceiptHandleError(_NOT_BASE64URL)
        body, mac = raw[: _BODY.size], raw[_BODY.size :]
        if not hmac.compare_digest(mac, _mac(self._keyed, body)):
            raise InvalidReceiptHandleError(
                "receipt handle signature does not match: forged, altered, or issued by "
                "another popmq server"
            )
        fields = _BODY.unpack(body)
        if fields[0] != _VERSION:
            raise InvalidReceiptHandleError(f"receipt handle version {fields[0]} is not supported")
        return ReceiptHandle._make(fields[1:])
