"""Credentials: an access key and secret key that sign every call (servers with
`[security] authentication = true`).

The signature is RocketMQ 5's (docs/security.md): each call carries ``x-mq-date-time`` (the
time, UTC, ``yyyyMMdd'T'HHmmss'Z'``) and ``authorization: MQv2-HMAC-SHA1
Credential=<access key>, SignedHeaders=x-mq-date-time, Signature=<hex of
HMAC-SHA1(secret key, that date-time)>``, made afresh for each call (a few microseconds). A
stream is signed when it opens.

This module repeats the few lines of the server's popmq.security.signing rather than
import the server; tests/unit/security/test_signing.py pins that both sign alike.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass, field

from popmq.sdk.errors import InvalidArgumentError

__all__ = ["Credentials", "Metadata"]

Metadata = tuple[tuple[str, str], ...]
"""gRPC call metadata: (key, value) pairs."""

_DATE_TIME_FORMAT = "%Y%m%dT%H%M%SZ"


@dataclass(frozen=True)
class Credentials:
    """An access key and its secret key, given to a client as ``credentials=``.

    Example:
        >>> Producer("proxy:8081", credentials=Credentials("app-1", os.environ["SECRET"]))

    The secret key is never shown (``repr`` leaves it out) and never sent: calls carry only
    a signature of the current time made with it. Without ``[security] max_clock_skew_s``
    on the server a signature never expires, so treat a captured header as the secret.

    Raises:
        InvalidArgumentError: An empty access key or secret key, or an access key the header
            cannot carry (not printable ASCII, or with a space, comma or slash).
    """

    access_key: str
    secret_key: str = field(repr=False)

    def __post_init__(self) -> None:
        for name in ("access_key", "secret_key"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise InvalidArgumentError(f"Credentials {name} must be a non-empty string")
        key = self.access_key
        if not (key.isascii() and key.isprintable()) or any(c in key for c in " ,/"):
            raise InvalidArgumentError(
                f"Credentials access_key {key!r} cannot be sent: use printable ASCII "
                "without spaces, commas or slashes"
            )

    def metadata(self, now_s: float | None = None) -> Metadata:
        """The headers that sign a call made at ``now_s`` (epoch seconds; default: now)."""
        date_time = time.strftime(
            _DATE_TIME_FORMAT, time.gmtime(time.time() if now_s is None else now_s)
        )
        signature = hmac.new(self.secret_key.encode(), date_time.encode(), hashlib.sha1)
        return (
            ("x-mq-date-time", date_time),
            (
                "authorization",
                f"MQv2-HMAC-SHA1 Credential={self.access_key}, "
                f"SignedHeaders=x-mq-date-time, Signature={signature.hexdigest().upper()}",
            ),
        )
