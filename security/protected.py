"""Protected mode: a server without authentication listens on loopback addresses only.

Without `[security] authentication`, anyone who reaches a popmq port may read, steal and
delete any group's messages, reset offsets, purge and delete topics and groups. Listening
beyond this machine that way must be a decision, not a default: as Redis's protected mode,
a server whose listener is not a loopback address refuses to start unless authentication
is on or `[security] allow_anonymous = true` says so explicitly. Loopback listeners
(127.0.0.0/8, ::1, "localhost": `make run`, the test suite) need no configuration.

It applies to `popmq serve` and `popmq proxy` (the main listener and `plaintext_listen`) and
to `popmq broker`: its BrokerService reads and writes every topic and group for whoever
calls it, so an unauthenticated broker on a public address is as open as a proxy.

A host name other than "localhost" counts as non-loopback: it may resolve to any address,
and what it resolves to can change after the check.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from popmq.broker_core import InvalidArgumentError
from popmq.security.config import SecurityConfig


class ProtectedModeError(InvalidArgumentError):
    """A listener beyond loopback without authentication (and without allow_anonymous)."""


def is_loopback(host: str) -> bool:
    """Whether `host` (an IP, "[v6]", or a name) can only be reached from this machine."""
    name = host.strip().strip("[]").rstrip(".").lower()
    if name == "localhost":
        return True
    try:
        address = ipaddress.ip_address(name.split("%", 1)[0])  # drop an IPv6 zone id
    except ValueError:
        return False  # a host name: it may resolve to any address
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def listen_host(listen: str) -> str:
    """The HOST of a HOST:PORT listen address ("[::1]:8081" -> "[::1]")."""
    host, sep, _ = listen.rpartition(":")
    return host if sep else listen


def check_protected_mode(
    security: SecurityConfig, listens: Iterable[str], *, server: str = "popmq"
) -> None:
    """Refuse to serve anonymously on a non-loopback address (one line saying what to do).

    Args:
        security: The `[security]` settings (authentication, allow_anonymous).
        listens: The HOST:PORT addresses the server is about to listen on (empty ones are
            ignored: an unset `plaintext_listen`).
        server: What is starting, for the message ("popmq serve", "popmq broker").

    Raises:
        ProtectedModeError: a listener is not loopback, authentication is off and
            allow_anonymous is not set.
    """
    if security.authentication or security.allow_anonymous:
        return
    for listen in listens:
        if listen and not is_loopback(listen_host(listen)):
            raise ProtectedModeError(
                f"{server} refuses to listen on {listen} without authentication (protected "
                "mode): anyone who reaches it could read, take and delete every message and "
                "change or delete topics and groups. Set [security] authentication = true "
                "(with a root user), listen on a loopback address (127.0.0.1), or set "
                "[security] allow_anonymous = true (POPMQ_SECURITY_ALLOW_ANONYMOUS=true) to "
                "serve anyone who can reach it; see docs/security.md#protected-mode"
            )
