"""Delayed messages: recall handles for the timers family (RocketMQ's timer wheel, on RocksDB).

A delayed message waits in the `timers` family under (due time, sequence) until the broker's
timer loop appends it to its queue in one batch with the timer's deletion (see
Broker._timer_loop). The send returns a recall handle naming that timer entry, signed like
a receipt handle so a client can neither forge one nor aim it at another topic.
"""

from __future__ import annotations

import binascii
import hmac
import struct
from dataclasses import dataclass

from popmq.broker_core.errors import InvalidArgumentError

_VERSION = 1
_BODY = struct.Struct(">BIQQ")
_MAC_BYTES = 12
_DOMAIN = b"popmq-recall"
_TEXT_CHARS = -(-(_BODY.size + _MAC_BYTES) * 4 // 3)
"""Length of an encoded recall handle: base64url without padding."""
_PADDING_BYTES = b"=" * (-_TEXT_CHARS % 4)
_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
_FROM_URLSAFE = bytes.maketrans(b"-_", b"+/")
_NOT_BASE64URL = (
    "recall_handle is malformed (not the base64url text the send returned); pass it exactly "
    "as received"
)


def _encode_raw(raw: bytes) -> bytes:
    """The canonical text of a recall handle's bytes: base64url without padding."""
    return binascii.b2a_base64(raw, newline=False).translate(_TO_URLSAFE)[:_TEXT_CHARS]


@dataclass(frozen=True, slots=True)
class RecallHandle:
    """Which timer entry a recall cancels."""

    topic_id: int
    due_ms: int
    seq: int


class RecallCodec:
    """Encodes and verifies recall handles with the server secret."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def _mac(self, body: bytes) -> bytes:
        return hmac.digest(self._secret, _DOMAIN + body, "sha256")[:_MAC_BYTES]

    def encode(self, handle: RecallHandle) -> str:
        body = _BODY.pack(_VERSION, handle.topic_id, handle.due_ms, handle.seq)
        return _encode_raw(body + self._mac(body)).decode()

    def decode(self, text: str) -> RecallHandle:
        """Verify and decode; raises InvalidArgumentError when malformed or forged.

        Strict: the base64 module's decoder drops characters outside the alphabet, so junk
        inserted into a handle used to be accepted. Only the exact text encode() returns is.
        """
        if not text:
            raise InvalidArgumentError("recall_handle is empty: pass the one the send returned")
        if len(text) != _TEXT_CHARS:
            raise InvalidArgumentError(
                f"recall_handle is malformed (wrong length: {len(text)} characters, not "
                f"{_TEXT_CHARS}); pass it exactly as the send returned it"
            )
        try:
            encoded = text.encode()
            raw = binascii.a2b_base64(
                (encoded + _PADDING_BYTES).translate(_FROM_URLSAFE), strict_mode=True
            )
        except (binascii.Error, ValueError) as exc:
            raise InvalidArgumentError(_NOT_BASE64URL) from exc
        if _encode_raw(raw) != encoded:  # "+" for "-", or non-zero unused trailing bits
            raise InvalidArgumentError(_NOT_BASE64URL)
        body, mac = raw[: _BODY.size], raw[_BODY.size :]
        if not hmac.compare_digest(mac, self._mac(body)):
            raise InvalidArgumentError(
                "recall_handle signature does not match: altered, or issued by another server"
            )
        version, topic_id, due_ms, seq = _BODY.unpack(body)
        if version != _VERSION:
            raise InvalidArgumentError(f"recall_handle version {version} is not supported")
        return RecallHandle(topic_id, due_ms, seq)
