"""`[console]`: the web console that `popmq serve` and `popmq proxy` serve beside gRPC.

Off by default (`listen` empty): `make run` and every existing deployment serve no HTTP
until an operator asks for it (`--set console.listen=127.0.0.1:8080`). The console obeys
the gRPC listener's protected-mode rule (a non-loopback console needs `[security]
authentication`) and serves TLS with the server's certificate when `[security]
tls_cert_file` is set (docs/console.md).

Imports nothing of popmq: `runtime.config` hangs this section on `ServerConfig`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class ConsoleConfig:
    """Where the console listens, how often it samples, how long a login lasts."""

    listen: str = ""
    """HOST:PORT of the console (HTTP, or HTTPS with `[security] tls_cert_file`); port 0
    picks a free port; empty (the default): no console."""
    sample_interval_s: float = 2.0
    """How often the overview samples the broker's counters and total lag into its
    15-minute history (the charts' resolution)."""
    session_idle_s: float = 1800.0
    """A login with no request for this long ends (30 min)."""
    session_max_s: float = 43200.0
    """A login ends this long after it began, used or not (12 h)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.sample_interval_s) and 0.1 <= self.sample_interval_s <= 60):
            raise ValueError(
                f"console.sample_interval_s {self.sample_interval_s} must be within 0.1..60 "
                "(seconds)"
            )
        for name in ("session_idle_s", "session_max_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"console.{name} {value} must be a positive number of seconds")

    @property
    def enabled(self) -> bool:
        return bool(self.listen)
