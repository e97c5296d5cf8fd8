"""Delayed messages: recall handles for the timers family (RocketMQ's timer wheel, on RocksDB).

A delayed message waits in the `timers` family under (due time, sequence) until the broker's
timer loop appends it to its queue in one batch with the timer's deletion (see
Broker._timer_loop). The send returns a recall handle naming that timer entry, signed like
a receipt handle so a client can neither forge one nor aim it at another topic, and named
after the broker like one (handle_text.py) so a proxy can route a recall by the handle.
"""

from __future__ import annotations

import hmac
import struct
from dataclasses import dataclass

from popmq.broker_core.errors import InvalidArgumentError
from popmq.broker_core.handle_text import (
    SEPARATOR,
    HandleText,
    broker_name_problem,
    name_field,
)

VERSION_UNNAMED = 1
"""Version byte of the recall handles issued before they named their broker (the bare
payload); the message index keeps such handles for as long as their message waits."""
VERSION = 2
"""Version byte of the recall handles issued now (`<broker name>.<payload>`)."""
_BODY = struct.Struct(">BIQQ")
_MAC_BYTES = 12
_DOMAIN = b"popmq-recall"
TEXT = HandleText(_BODY.size + _MAC_BYTES)
"""The payload's text (both versions have the same length)."""
_TEXT_CHARS = TEXT.chars
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
    """Encodes and verifies recall handles with the server secret, for the broker
    `broker_name`."""

    def __init__(self, secret: bytes, *, broker_name: str) -> None:
        problem = broker_name_problem(broker_name)
        if problem is not None:
            raise ValueError(problem)
        self.broker_name = broker_name
        self._prefix = broker_name + SEPARATOR
        self._secret = secret
        self._named_domain = _DOMAIN + name_field(broker_name)

    def _mac(self, domain: bytes, body: bytes) -> bytes:
        return hmac.digest(self._secret, domain + body, "sha256")[:_MAC_BYTES]

    def encode(self, handle: RecallHandle) -> str:
        body = _BODY.pack(VERSION, handle.topic_id, handle.due_ms, handle.seq)
        return self._prefix + TEXT.encode(body + self._mac(self._named_domain, body)).decode()

    def decode(self, text: str, *, any_issuer: bool = False) -> RecallHandle:
        """Verify and decode; raises InvalidArgumentError when malformed, forged or issued by
        another broker.

        Strict: the base64 module's decoder drops characters outside the alphabet, so junk
        inserted into a handle used to be accepted. Only the exact text encode() returns is.

        `any_issuer`: accept a handle signed with this secret under another broker name,
        for handles the broker stored itself (the message index) before a rename.
        """
        if not text:
            raise InvalidArgumentError("recall_handle is empty: pass the one the send returned")
        if text.startswith(self._prefix):
            payload, domain, version = text[len(self._prefix) :], self._named_domain, VERSION
        elif SEPARATOR in text:
            issuer, _, payload = text.partition(SEPARATOR)
            _payload_bytes(payload)  # a malformed handle is malformed, whatever it names
            problem = broker_name_problem(issuer)
            if problem is not None:
                raise InvalidArgumentError(
                    "recall_handle is malformed (its broker name is not one a broker can "
                    "have); pass it exactly as the send returned it"
                )
            if not any_issuer:
                raise InvalidArgumentError(
                    f"recall_handle was issued by broker {issuer!r}; this is broker "
                    f"{self.broker_name!r}: recall the message on the broker that issued it"
                )
            domain, version = _DOMAIN + name_field(issuer), VERSION
        else:
            payload, domain, version = text, _DOMAIN, VERSION_UNNAMED
        raw = _payload_bytes(payload)
        body, mac = raw[: _BODY.size], raw[_BODY.size :]
        if not hmac.compare_digest(mac, self._mac(domain, body)):
            raise InvalidArgumentError(
                "recall_handle signature does not match: altered, or issued by another server"
            )
        found, topic_id, due_ms, seq = _BODY.unpack(body)
        if found != version:
            raise InvalidArgumentError(f"recall_handle version {found} is not supported")
        return RecallHandle(topic_id, due_ms, seq)


def _payload_bytes(payload: str) -> bytes:
    """The bytes of a recall handle's payload text; raises unless it is the one spelling."""
    if len(payload) != _TEXT_CHARS:
        raise InvalidArgumentError(
            f"recall_handle is malformed (wrong length: a payload of {len(payload)} "
            f"characters, not {_TEXT_CHARS}); pass it exactly as the send returned it"
        )
    try:
        raw = TEXT.decode(payload.encode())
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(_NOT_BASE64URL) from exc
    if raw is None:
        raise InvalidArgumentError(_NOT_BASE64URL)
    return raw
