"""RocketMQ 5's request signature: the `authorization` header, parsed, verified and made.

What the official clients send on every call (reference: cluster-auth-transactions.md 3.1):

    x-mq-date-time: 20261127T101500Z
    authorization: MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time,
                   Signature=<hex of HMAC-SHA1(secret key, the x-mq-date-time value)>

Only the date-time string is signed (not the method, not the body), with the secret key as
the HMAC key, both UTF-8. The hex is lower-case from the Python client (`hexlify`) and
upper-case from Java and Node; both are accepted. The Python client always sends the header,
with `Credential=,` when it has no credentials; Java and Node then send none.

Parsing follows RocketMQ's `DefaultAuthenticationContextBuilder`: the scheme is the text
before the first space, the rest splits on "," into `Key=Value` items (split on the first
"="), items are trimmed, and the access key is the Credential's text before any "/". Unknown
items are ignored (as RocketMQ does); a repeated item, a missing Credential or Signature, a
SignedHeaders that names anything but x-mq-date-time, and a Signature that is not 40 hex
digits are malformed. Verification compares digests with `hmac.compare_digest`.

The SDK signs with its own copy of `sign` (popmq.sdk.credentials: the SDK imports nothing of
the server); tests/unit/security/test_signing.py pins that both give the same headers.
"""

from __future__ import annotations

import calendar
import hashlib
import hmac
import time
from dataclasses import dataclass

from popmq.broker_core import UnauthenticatedError

SCHEME = "MQv2-HMAC-SHA1"
"""The only signing scheme RocketMQ 5 clients use."""
AUTHORIZATION = "authorization"
"""Metadata key of the signature header (gRPC metadata keys are lower-case)."""
DATE_TIME = "x-mq-date-time"
"""Metadata key of the signed date-time."""
DATE_TIME_FORMAT = "%Y%m%dT%H%M%SZ"
"""yyyyMMdd'T'HHmmss'Z': UTC from Node and popmq, local time labelled Z from Python and Java."""
_DIGEST_HEX_DIGITS = 2 * hashlib.sha1().digest_size
_EXPECTED = (
    f"expected '{SCHEME} Credential=<access key>, SignedHeaders={DATE_TIME}, "
    "Signature=<hex HMAC-SHA1 of the x-mq-date-time header>'"
)


@dataclass(frozen=True, slots=True)
class SignedRequest:
    """What a call's `authorization` and `x-mq-date-time` headers say."""

    access_key: str
    """"" when the header names none (`Credential=,`: the Python client without credentials)."""
    signature: bytes
    """The digest the caller computed (decoded from hex)."""
    date_time: str
    """The signed text: the x-mq-date-time header's value."""


def malformed(why: str) -> UnauthenticatedError:
    """The error of an `authorization` header that does not parse, saying why."""
    return UnauthenticatedError(f"the authorization header is malformed: {why}; {_EXPECTED}")


def parse(authorization: str, date_time: str) -> SignedRequest:
    """Parse the two headers of a signed call.

    Raises:
        UnauthenticatedError: The header is malformed (the message says how), or the
            x-mq-date-time header it signs is missing.
    """
    scheme, _, rest = authorization.strip().partition(" ")
    if scheme != SCHEME:
        raise malformed(f"the scheme is {scheme[:32]!r}, not {SCHEME}")
    items: dict[str, str] = {}
    for item in rest.split(","):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not key and not sep:
            continue  # an empty item: a trailing comma, or doubled commas
        if not sep:
            raise malformed(f"item {key[:32]!r} is not Key=Value")
        if key in items:
            raise malformed(f"{key[:32]} is given twice")
        items[key] = value.strip()
    for required in ("Credential", "Signature"):
        if required not in items:
            raise malformed(f"{required} is missing")
    signed = items.get("SignedHeaders")
    if signed is not None and signed.lower() != DATE_TIME:
        raise malformed(f"SignedHeaders is {signed[:64]!r}; only {DATE_TIME} is signed")
    signature = items["Signature"]
    if len(signature) != _DIGEST_HEX_DIGITS:
        raise malformed(f"Signature has {len(signature)} characters, not {_DIGEST_HEX_DIGITS}")
    try:
        digest = bytes.fromhex(signature)
    except ValueError:
        raise malformed("Signature is not hexadecimal") from None
    if not date_time:
        raise UnauthenticatedError(
            f"the {DATE_TIME} header is missing: the authorization header signs it, so a "
            "signed call must carry both"
        )
    access_key = items["Credential"].split("/", 1)[0].strip()
    return SignedRequest(access_key=access_key, signature=digest, date_time=date_time)


def digest(secret_key: str, date_time: str) -> bytes:
    """HMAC-SHA1 of `date_time` keyed by `secret_key` (both UTF-8): what the clients sign."""
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).digest()


def matches(request: SignedRequest, secret_key: str) -> bool:
    """Whether `request`'s signature is the one `secret_key` gives (constant time)."""
    return hmac.compare_digest(digest(secret_key, request.date_time), request.signature)


def sign(secret_key: str, date_time: str) -> str:
    """The Signature value of `date_time`: upper-case hex, as the Java and Node clients send."""
    return digest(secret_key, date_time).hex().upper()


def format_date_time(epoch_s: float) -> str:
    """An x-mq-date-time value for a moment: in UTC, as Node and popmq send it."""
    return time.strftime(DATE_TIME_FORMAT, time.gmtime(epoch_s))


def parse_date_time(text: str) -> float:
    """Epoch seconds of an x-mq-date-time value, read as UTC (its "Z").

    Raises:
        UnauthenticatedError: The value is not yyyyMMdd'T'HHmmss'Z'.
    """
    try:
        parsed = time.strptime(text, DATE_TIME_FORMAT)
    except ValueError:
        raise UnauthenticatedError(
            f"the {DATE_TIME} header {text[:32]!r} is not yyyyMMdd'T'HHmmss'Z' "
            "(e.g. 20261127T101500Z)"
        ) from None
    return float(calendar.timegm(parsed))


def headers(access_key: str, secret_key: str, epoch_s: float | None = None) -> dict[str, str]:
    """The two headers that sign a call made at `epoch_s` (default: now)."""
    date_time = format_date_time(time.time() if epoch_s is None else epoch_s)
    return {
        AUTHORIZATION: (
            f"{SCHEME} Credential={access_key}, SignedHeaders={DATE_TIME}, "
            f"Signature={sign(secret_key, date_time)}"
        ),
        DATE_TIME: date_time,
    }


class Signer:
    """Signs outgoing calls as one user: a cluster proxy's BrokerService calls, with the
    root credential (authn.cluster_signer). Each call gets headers of its own moment, so a
    broker's `max_clock_skew_s` window applies to them as to any client's."""

    __slots__ = ("_secret_key", "access_key")

    def __init__(self, access_key: str, secret_key: str) -> None:
        self.access_key = access_key
        self._secret_key = secret_key

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The call metadata that signs a call made now."""
        return tuple(headers(self.access_key, self._secret_key).items())

    def __repr__(self) -> str:
        return f"Signer(access_key={self.access_key!r})"  # never the secret
