"""Delayed messages: recall handles for the timers family (RocketMQ's timer wheel, on RocksDB).

A delayed message waits in the `timers` family under (due time, sequence) until the broker's
timer loop appends it to its queue in one batch with the timer's deletion (see
Broker._timer_loop). The send returns a recall handle naming that timer entry, signed like
a receipt handle so a client can neither forge one nor aim it at another topic.
"""

from __future__ import annotations

import hmac
import struct
from dataclasses import dataclass

from popmq.broker_core.errors import InvalidArgumentError
from popmq.broker_core.handle_text import HandleText

_VERSION = 1
_BODY = struct.Struct(">BIQQ")
_MAC_BYTES = 12
_DOMAIN = b"popmq-recall"
_TEXT = HandleText(_BODY.size + _MAC_BYTES)
_TEXT_CHARS = _TEXT.chars
_NOT_BASE64URL = (
    "recall_handle is malformed (not the base64url text the send returned); pass it exactly "
    "as received"
)


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
        return _TEXT.encode(body + self._mac(body)).decode()

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
            raw = _TEXT.decode(text.encode())
        except UnicodeEncodeError as exc:
            raise InvalidArgumentError(_NOT_BASE64URL) from exc
        if raw is None:
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
