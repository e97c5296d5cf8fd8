"""Who may scrape the metrics endpoint: HTTP basic auth and/or a bearer token.

`[security] metrics_username` + `metrics_password` (basic auth) and `metrics_bearer_token`
(`Authorization: Bearer <token>`) are each optional; with either set, a request must carry
one that matches, or it is answered 401 with a `WWW-Authenticate` challenge per scheme.
Both set: either one is accepted (Prometheus sends one or the other: docs/operations.md).

Comparisons are constant-time (`hmac.compare_digest` over UTF-8 bytes, both halves of a
basic-auth pair always compared), so the time of a refusal says nothing about how much of
a guess was right.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from dataclasses import dataclass, field

from popmq.security.config import SecurityConfig

REALM = "popmq metrics"


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


@dataclass(frozen=True, kw_only=True)
class HttpAuth:
    """The credentials the metrics endpoint accepts (none: it is open, the default)."""

    username: str = ""
    """Basic auth user; with `password`."""
    password: str = field(default="", repr=False)
    """Basic auth password."""
    bearer_token: str = field(default="", repr=False)
    """A token accepted as `Authorization: Bearer <token>`."""

    def __post_init__(self) -> None:
        if bool(self.username) != bool(self.password):
            raise ValueError("metrics basic auth needs both a username and a password")

    @classmethod
    def from_security(cls, security: SecurityConfig) -> HttpAuth:
        return cls(
            username=security.metrics_username,
            password=security.metrics_password,
            bearer_token=security.metrics_bearer_token,
        )

    @property
    def required(self) -> bool:
        """Whether a request must authenticate at all."""
        return bool(self.username or self.bearer_token)

    def challenges(self) -> list[str]:
        """The `WWW-Authenticate` values of a 401 answer, one per accepted scheme."""
        found = []
        if self.username:
            found.append(f'Basic realm="{REALM}", charset="UTF-8"')
        if self.bearer_token:
            found.append(f'Bearer realm="{REALM}"')
        return found

    def allows(self, authorization: str | None) -> bool:
        """Whether a request with this `Authorization` header value (None: no header) may
        read the endpoint."""
        if not self.required:
            return True
        if authorization is None:
            return False
        scheme, _, credentials = authorization.strip().partition(" ")
        credentials = credentials.strip()
        scheme = scheme.lower()
        if scheme == "bearer" and self.bearer_token:
            return _same(credentials, self.bearer_token)
        if scheme == "basic" and self.username:
            try:
                decoded = base64.b64decode(credentials, validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                return False
            user, sep, password = decoded.partition(":")
            if not sep:
                return False
            # Both compared, always: `and` would skip the password when the user differs.
            return _same(user, self.username) & _same(password, self.password)
        return False
