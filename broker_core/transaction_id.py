"""Transaction ids: which broker holds a half message, and which one, unforgeably.

A transaction id reads `<broker name>.<payload>` like a receipt or recall handle
(handle_text.py), so a proxy in front of several brokers routes an EndTransaction by the id
alone (handles.issuer_of), whichever proxy the half message was sent through (RocketMQ
#9431 is the bug this avoids). The payload is a version byte and the transaction's sequence
(transactions.py keys its record by it) plus an HMAC-SHA256 over the broker name and them
with the data dir's receipt key, so a client can neither forge an id nor point one at
another transaction or broker.
"""

from __future__ import annotations

import hmac
import struct

from popmq.broker_core.errors import InvalidArgumentError
from popmq.broker_core.handle_text import SEPARATOR, HandleText, broker_name_problem, name_field

VERSION = 1
_BODY = struct.Struct(">BQ")
_MAC_BYTES = 12
_DOMAIN = b"popmq-transaction"
TEXT: HandleText = HandleText(_BODY.size + _MAC_BYTES)
"""The payload's text (28 characters: no receipt or recall handle has this length)."""
_MALFORMED = (
    "transaction_id is malformed (not the text the half send returned); pass it exactly as received"
)


class TransactionIdCodec:
    """Encodes and verifies transaction ids with the server secret, for `broker_name`."""

    def __init__(self, secret: bytes, *, broker_name: str) -> None:
        problem = broker_name_problem(broker_name)
        if problem is not None:
            raise ValueError(problem)
        self.broker_name = broker_name
        self._prefix = broker_name + SEPARATOR
        self._secret = secret
        self._domain = _DOMAIN + name_field(broker_name)

    def _mac(self, body: bytes) -> bytes:
        return hmac.digest(self._secret, self._domain + body, "sha256")[:_MAC_BYTES]

    def encode(self, seq: int) -> str:
        body = _BODY.pack(VERSION, seq)
        return self._prefix + TEXT.encode(body + self._mac(body)).decode()

    def decode(self, text: str) -> int:
        """The transaction's sequence; raises InvalidArgumentError when the id is malformed,
        forged, or names another broker."""
        if not text:
            raise InvalidArgumentError("transaction_id is empty: pass the one the send returned")
        issuer, separator, payload = text.rpartition(SEPARATOR)
        if not separator or broker_name_problem(issuer) is not None:
            raise InvalidArgumentError(_MALFORMED)
        if len(payload) != TEXT.chars:
            raise InvalidArgumentError(_MALFORMED)
        try:
            raw = TEXT.decode(payload.encode())
        except UnicodeEncodeError as exc:
            raise InvalidArgumentError(_MALFORMED) from exc
        if raw is None:
            raise InvalidArgumentError(_MALFORMED)
        if issuer != self.broker_name:
            raise InvalidArgumentError(
                f"transaction_id was issued by broker {issuer!r}; this is broker "
                f"{self.broker_name!r}: end the transaction on the broker that holds it"
            )
        body, mac = raw[: _BODY.size], raw[_BODY.size :]
        if not hmac.compare_digest(mac, self._mac(body)):
            raise InvalidArgumentError(
                "transaction_id signature does not match: altered, or issued by another server"
            )
        version, seq = _BODY.unpack(body)
        if version != VERSION:
            raise InvalidArgumentError(f"transaction_id version {version} is not supported")
        seq_value: int = seq
        return seq_value
