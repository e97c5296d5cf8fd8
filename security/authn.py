"""Who a call is: the signed `authorization` header checked against the users.

`Authenticator.authenticate(metadata, source)` returns the caller's `Principal`, or raises
`UnauthenticatedError` saying which credential failed: no header, a malformed one, no access
key, an unknown or disabled access key, a signature that does not match, or (when
`max_clock_skew_s` is set) a date-time too far from the server's clock. Messages name the
access key and never anything of a secret: not the secret, not the expected signature, not
the one given (without a clock-skew window a signature never expires, so a logged header
would be as good as the secret). Nothing here logs.

The root user (`[security] root_access_key` with `root_secret_key` or `root_secret_key_file`)
is looked up first, whatever the directory holds; `load_root_user` reads it once, at start,
and refuses a secret file that is missing or that group or others may read.

Runs on the event loop: a lookup in the directory's cache, one HMAC-SHA1 of ~16 bytes
(about a microsecond); no I/O after start.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from popmq.broker_core import InvalidArgumentError, UnauthenticatedError
from popmq.security import signing
from popmq.security.config import SecurityConfig
from popmq.security.model import Principal, User, UserType

if TYPE_CHECKING:
    from popmq.security.gate import UserDirectory

_SHOWN_KEY_CHARS = 64
"""An access key longer than this is cut in messages (it comes from the caller)."""


def load_root_user(config: SecurityConfig) -> User | None:
    """The root (SUPER) user of `config`, its secret read from the file if one is named;
    None when no root access key is set.

    Raises:
        InvalidArgumentError: An access key without a secret, or a secret file that is
            missing, not a regular file, empty, or readable or writable by group or others.
    """
    if not config.root_access_key:
        return None
    secret = config.root_secret_key
    if config.root_secret_key_file:
        secret = _read_secret_file(config.root_secret_key_file)
    if not secret:
        raise InvalidArgumentError(
            "security.root_access_key needs a secret: set security.root_secret_key (or "
            "POPMQ_SECURITY_ROOT_SECRET_KEY) or security.root_secret_key_file"
        )
    return User(config.root_access_key, secret, UserType.SUPER, enabled=True)


def cluster_signer(config: SecurityConfig) -> signing.Signer | None:
    """What a cluster proxy signs its BrokerService calls with: the root credential, when
    `[security]` names one (brokers with authentication on accept only it); None without.

    Raises:
        InvalidArgumentError: The root user's secret cannot be loaded (`load_root_user`).
    """
    root = load_root_user(config)
    return None if root is None else signing.Signer(root.access_key, root.secret_key)


def _read_secret_file(path: str) -> str:
    """The secret in `path` (one trailing line break dropped), if only its owner may read it."""
    name = "security.root_secret_key_file"
    try:
        # A symlink is followed (Kubernetes mounts secrets so): the mode that counts is
        # the file's whose bytes are read, checked on the open descriptor.
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise InvalidArgumentError(f"{name} {path} does not exist") from None
    except OSError as exc:
        raise InvalidArgumentError(f"{name} {path} cannot be read: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as file:
        status = os.fstat(file.fileno())
        if not stat.S_ISREG(status.st_mode):
            raise InvalidArgumentError(f"{name} {path} is not a regular file")
        mode = stat.S_IMODE(status.st_mode)
        if mode & 0o077:
            raise InvalidArgumentError(
                f"{name} {path} may be read or written by group or others (mode "
                f"{mode:04o}); make it its owner's alone: chmod 600 {path}"
            )
        raw = file.read()
    try:
        secret = raw.decode()
    except UnicodeDecodeError:
        raise InvalidArgumentError(f"{name} {path} is not UTF-8 text") from None
    secret = secret.removesuffix("\n").removesuffix("\r")
    if not secret:
        raise InvalidArgumentError(f"{name} {path} is empty")
    return secret


def shown_key(access_key: str) -> str:
    """An access key as messages show it (quoted; a very long one cut)."""
    if len(access_key) > _SHOWN_KEY_CHARS:
        return repr(access_key[:_SHOWN_KEY_CHARS]) + "..."
    return repr(access_key)


class Authenticator:
    """Checks a call's signature against the root user and a `UserDirectory`.

    Args:
        directory: The users besides root (acl's store; until it is wired, none).
        config: `[security]`: the root user and `max_clock_skew_s`.
        clock: Epoch seconds now (a seam for tests of the clock-skew window).

    Raises:
        InvalidArgumentError: The root user's secret cannot be loaded (see
            `load_root_user`).
    """

    def __init__(
        self,
        directory: UserDirectory,
        config: SecurityConfig,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.directory = directory
        """Where users other than root are found; replaceable before the server serves."""
        self.root = load_root_user(config)
        self._max_skew_s = config.max_clock_skew_s
        self._clock = clock

    def user(self, access_key: str) -> User | None:
        """The user of `access_key`: root first, then the directory's."""
        root = self.root
        if root is not None and access_key == root.access_key:
            return root
        return self.directory.user(access_key)

    def authenticate(
        self, metadata: Iterable[tuple[str, str | bytes]] | None, source: str
    ) -> Principal:
        """The caller of a call with `metadata`, from `source` (its address as grpc reports
        it, "ipv4:10.0.0.7:5555": audit lines show it, source CIDRs match its IP).

        Raises:
            UnauthenticatedError: Which credential failed (see the module docstring).
        """
        authorization = date_time = ""
        for key, value in metadata or ():
            if key == signing.AUTHORIZATION and not authorization:
                authorization = value if isinstance(value, str) else ""
            elif key == signing.DATE_TIME and not date_time:
                date_time = value if isinstance(value, str) else ""
        if not authorization:
            raise UnauthenticatedError(
                "authentication is required: the call carries no authorization header; "
                "sign it with an access key and secret key (MQv2-HMAC-SHA1, as RocketMQ 5 "
                "clients do; docs/security.md)"
            )
        signed = signing.parse(authorization, date_time)
        if not signed.access_key:
            raise UnauthenticatedError(
                "the authorization header names no access key (Credential is empty): give "
                "the client an access key and secret key"
            )
        user = self.user(signed.access_key)
        shown = shown_key(signed.access_key)
        if user is None:
            raise UnauthenticatedError(f"access key {shown} is unknown")
        if not user.enabled:
            raise UnauthenticatedError(f"access key {shown} is disabled")
        if not signing.matches(signed, user.secret_key):
            raise UnauthenticatedError(
                f"the signature of access key {shown} does not match: check the secret key "
                f"(the signature is HMAC-SHA1 of the {signing.DATE_TIME} header, keyed by it)"
            )
        if self._max_skew_s:
            self._check_skew(signed.date_time)
        return Principal(user.access_key, user.user_type, source)

    def _check_skew(self, date_time: str) -> None:
        skew = signing.parse_date_time(date_time) - self._clock()
        if abs(skew) > self._max_skew_s:
            direction = "ahead of" if skew > 0 else "behind"
            raise UnauthenticatedError(
                f"the {signing.DATE_TIME} header {date_time} is {abs(skew):.0f}s {direction} "
                f"the server's clock; security.max_clock_skew_s allows {self._max_skew_s:g}s "
                "(check the client's clock and that it sends UTC)"
            )
