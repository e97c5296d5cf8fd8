"""Whether etcd answers at all, as one EtcdClient (etcd.py) sees it from every call, watch
and keepalive it makes.

Once every endpoint has failed and nothing has answered for `UNREACHABLE_AFTER_S`, etcd
counts as **unreachable**: a call then tries each endpoint once, for at most
`PROBE_TIMEOUT_S`, and fails at once with a retriable `CoordinationUnavailableError` naming
etcd, rather than retrying until its timeout. An admin write made during an outage is so
refused in about a second instead of hanging for several calls' timeouts, while the data
path (which asks etcd nothing) goes on. The first answer of any kind ends it. On the event
loop only.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from popmq.coordination.errors import CoordinationUnavailableError

UNREACHABLE_AFTER_S = 2.0
"""etcd counts as unreachable once every endpoint has failed and none has answered for this
long: longer than the election of a new etcd leader (about a second with etcd's default
timings), so calls ride through one."""
PROBE_TIMEOUT_S = 1.0
"""While etcd is unreachable, how long a call waits for each endpoint (once) before it
fails."""


class Reachability:
    """What one client knows of etcd's answering: the endpoints that failed since etcd last
    answered anything, and since when."""

    def __init__(self, endpoints: Sequence[str]) -> None:
        self._endpoints = tuple(endpoints)
        # Endpoints that failed since the last answer, and the monotonic time of the first
        # of those failures (None while the last thing etcd did was answer).
        self._failing: set[str] = set()
        self._silent_since: float | None = None

    def failed(self, endpoint: str) -> None:
        """A call or a stream found `endpoint` gone (unavailable, no answer in time)."""
        if self._silent_since is None:
            self._silent_since = time.monotonic()
        self._failing.add(endpoint)

    def answered(self) -> None:
        """etcd answered something (a refusal counts): it is reachable."""
        if self._silent_since is not None:
            self._silent_since = None
            self._failing.clear()

    @property
    def unreachable_for(self) -> float | None:
        """Seconds since etcd stopped answering, once it counts as unreachable (every
        endpoint failed and nothing answered for UNREACHABLE_AFTER_S or more); else None."""
        since = self._silent_since
        if since is None or len(self._failing) < len(self._endpoints):
            return None
        silent = time.monotonic() - since
        return silent if silent >= UNREACHABLE_AFTER_S else None

    def refusal(self, what: str, silent: float, reason: str) -> CoordinationUnavailableError:
        """The error of a call refused because etcd is unreachable."""
        return CoordinationUnavailableError(
            f"etcd is unreachable at {','.join(self._endpoints)}: no endpoint has answered "
            f"for {silent:.1f}s ({reason}), so {what} was refused at once; is etcd running? "
            "Retry once it is back"
        )
