"""Receipt handles: opaque to clients, signed by the server, bound to one delivery.

A handle encodes the group, topic, queue, offset, checkpoint id, index in the checkpoint and
the deadline, plus a 16-byte keyed BLAKE2b MAC over them with a secret kept in the data dir,
so a client can neither forge one nor move one to another message or group. (Keyed BLAKE2b
is a MAC by design and costs a fifth of HMAC-SHA256 here: every pop and ack computes one per
message.)
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import struct
from typing import NamedTuple

from popmq.broker_core.errors import InvalidReceiptHandleError

_VERSION = 2
_BODY = struct.Struct(">BIIIQQHQ")
_MAC_BYTES = 16
_TEXT_CHARS = -(-(_BODY.size + _MAC_BYTES) * 4 // 3)
"""Length of an encoded handle: base64url without padding."""
_PADDING_BYTES = b"=" * (-_TEXT_CHARS % 4)
_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
_FROM_URLSAFE = bytes.maketrans(b"-_", b"+/")
_NOT_BASE64URL = (
    "receipt handle is malformed (not the base64url text the server issued); pass the handle "
    "exactly as received"
)


def _encode_raw(raw: bytes) -> bytes:
    """The canonical text of a handle's bytes: base64url without padding."""
    # binascii directly: the base64 module's url-safe wrappers cost twice as much.
    return binascii.b2a_base64(raw, newline=False).translate(_TO_URLSAFE)[:_TEXT_CHARS]


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
        return _encode_raw(body + _mac(self._keyed, body)).decode()

    def decode(self, text: str) -> ReceiptHandle:
        """Verify and decode; raises InvalidReceiptHandleError when malformed or forged."""
        if not text:
            raise InvalidReceiptHandleError("receipt handle is empty")
        if len(text) != _TEXT_CHARS:
            raise InvalidReceiptHandleError(
                "receipt handle is malformed (wrong length); pass the handle exactly as received"
            )
        try:
            encoded = text.encode()
            standard = (encoded + _PADDING_BYTES).translate(_FROM_URLSAFE)  # bytes: 10x str's
            raw = binascii.a2b_base64(standard, strict_mode=True)
        except (binascii.Error, ValueError) as exc:
            raise InvalidReceiptHandleError(_NOT_BASE64URL) from exc
        # One spelling per handle: strict mode still accepts "+" and "/" (translated along
        # with "-" and "_") and ignores the 4 unused bits of the last character, so 16+
        # strings would decode to the same bytes. Only the canonical encoding is a handle.
        if _encode_raw(raw) != encoded:
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
