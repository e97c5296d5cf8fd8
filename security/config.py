"""`[security]`: TLS, authentication, access control, protected mode, audit (docs/security.md).

Every switch is off by default, so `make run` (a loopback listener) keeps working with no
configuration; a listener on another address without authentication refuses to start
unless `allow_anonymous` is set (protected mode, as Redis has).

Secrets (the root user's secret key, the metrics password or token) are never required on
the command line: they come from the config file, a `POPMQ_SECURITY_*` variable, or a file
readable by its owner alone (`*_file` settings). They are never printed (`--print-config`,
`GetServerInfo` and logs show them redacted).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

SECRET_SETTINGS = frozenset({"root_secret_key", "metrics_password", "metrics_bearer_token"})
"""Settings of this section whose values are secrets: shown redacted everywhere (and left
out of the dataclass's repr, so a logged config never carries one)."""


@dataclass(frozen=True, kw_only=True)
class SecurityConfig:
    """How the server proves itself, checks who calls, and what it lets them do."""

    tls_cert_file: str = ""
    """PEM certificate chain of the server. With `tls_key_file`, the listener accepts TLS
    only (plaintext on `plaintext_listen`, if set). Empty: no TLS."""
    tls_key_file: str = ""
    """PEM private key of `tls_cert_file`."""
    tls_client_ca_file: str = ""
    """PEM CA bundle: when set, clients must present a certificate it signed (mutual TLS)."""
    tls_reload_check_s: float = 10.0
    """How often the certificate files are checked for a change (also reloaded on SIGHUP);
    0 checks only on SIGHUP."""
    plaintext_listen: str = ""
    """A second, plaintext listener HOST:PORT beside the TLS one; empty (the default): none.
    Protected mode applies to it as to the main listener."""

    broker_tls: bool = False
    """`popmq proxy`: connect to the brokers with TLS (brokers that serve `tls_cert_file`),
    verifying their certificates with `broker_tls_ca_file`, else the system's roots."""
    broker_tls_ca_file: str = ""
    """`popmq proxy`: PEM CA bundle that signed the brokers' certificates."""
    broker_tls_cert_file: str = ""
    """`popmq proxy`: PEM certificate the proxy presents to brokers that require client
    certificates (their `tls_client_ca_file`), with `broker_tls_key_file`."""
    broker_tls_key_file: str = ""
    """`popmq proxy`: PEM private key of `broker_tls_cert_file`."""
    broker_tls_server_name: str = ""
    """`popmq proxy`: the name the brokers' certificates must carry, when it is not the host
    of their registered address (e.g. one certificate `broker.internal` for all)."""

    authentication: bool = False
    """Require every request (but health and reflection) to be signed by a known, enabled
    user: RocketMQ 5's `authorization: MQv2-HMAC-SHA1 ...` header, the same for popmq.v1.
    With it, access control (users and policies) applies to every request."""
    max_clock_skew_s: float = 0.0
    """Refuse a request whose signed `x-mq-date-time` is further than this from the
    server's clock; 0 (the default) does not check it: the official Python and Java clients
    send local time labelled "Z", which a check would refuse on any host not on UTC."""
    root_access_key: str = ""
    """Access key of the root (SUPER) user, which exists whatever the user store holds;
    empty: no root user."""
    root_secret_key: str = field(default="", repr=False)
    """Secret key of the root user (from the config file or POPMQ_SECURITY_ROOT_SECRET_KEY;
    or `root_secret_key_file`)."""
    root_secret_key_file: str = ""
    """A file holding the root user's secret key; it must be readable by its owner only
    (mode 0600 or stricter), or the server refuses to start."""

    allow_anonymous: bool = False
    """Let the server listen on a non-loopback address without authentication. Off (the
    default): such a start is refused with a one-line explanation (protected mode)."""

    metrics_username: str = ""
    """Basic auth user of the metrics endpoint (with `metrics_password`); empty: none."""
    metrics_password: str = field(default="", repr=False)
    """Basic auth password of the metrics endpoint."""
    metrics_bearer_token: str = field(default="", repr=False)
    """A bearer token the metrics endpoint accepts (`Authorization: Bearer <token>`)."""

    audit_log_file: str = ""
    """Also write the audit lines (one JSON object a line) to this file; they always go to
    the log (logger `popmq.audit`)."""

    def __post_init__(self) -> None:
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError(
                "security.tls_cert_file and security.tls_key_file go together: give both "
                "(or neither, for no TLS)"
            )
        if self.tls_client_ca_file and not self.tls_cert_file:
            raise ValueError(
                "security.tls_client_ca_file (mutual TLS) needs the server's own "
                "tls_cert_file and tls_key_file"
            )
        if self.plaintext_listen and not self.tls_cert_file:
            raise ValueError(
                "security.plaintext_listen is a plaintext listener beside a TLS one: it "
                "needs tls_cert_file and tls_key_file"
            )
        broker_files = ("broker_tls_ca_file", "broker_tls_cert_file", "broker_tls_key_file")
        for name in (*broker_files, "broker_tls_server_name"):
            if getattr(self, name) and not self.broker_tls:
                raise ValueError(f"security.{name} is for TLS to brokers: set broker_tls = true")
        if bool(self.broker_tls_cert_file) != bool(self.broker_tls_key_file):
            raise ValueError(
                "security.broker_tls_cert_file and security.broker_tls_key_file go together: "
                "give both (or neither, when brokers require no client certificate)"
            )
        for name in ("tls_reload_check_s", "max_clock_skew_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"security.{name} {value} must be a finite number >= 0")
        if self.root_secret_key and self.root_secret_key_file:
            raise ValueError(
                "give security.root_secret_key or security.root_secret_key_file, not both"
            )
        if (self.root_secret_key or self.root_secret_key_file) and not self.root_access_key:
            raise ValueError("a root secret key needs security.root_access_key")
        if bool(self.metrics_username) != bool(self.metrics_password):
            raise ValueError("security.metrics_username and security.metrics_password go together")

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert_file)
