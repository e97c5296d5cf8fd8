"""Whether etcd answers at all, as one EtcdClient (etcd.py) sees it from every call, watch
and keepalive it makes.

etcd counts as **unreachable** once, at every endpoint, either
- calls and streams failed (refused connections, no answer in time) and nothing has
  answered for `UNREACHABLE_AFTER_S` (etcd down or cut off: connections fail fast), or
- a request has waited `UNANSWERED_AFTER_S` without an answer while nothing at all answered
  since it was sent (etcd **hung**: paused by SIGSTOP, a frozen VM, a stalled disk; its
  connections stay open and nothing answers, so nothing fails before its timeout).

While etcd is unreachable a call tries each endpoint once, for at most `PROBE_TIMEOUT_S`,
and fails with a retriable `CoordinationUnavailableError` naming etcd, rather than retrying
until its timeout; while it is hung (`hung_for`: every endpoint has a request waiting
unanswered, which its first answer ends) a call fails at once, without trying. An admin
write made during an outage is so refused at once instead of hanging for several calls'
timeouts, while the data path (which asks etcd nothing) goes on. The first answer of any
kind ends it; the client keeps a probe waiting at each endpoint meanwhile (etcd.py), so a
hung etcd's first answer comes as soon as it resumes. On the event loop only.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from popmq.coordination.errors import CoordinationUnavailableError

UNREACHABLE_AFTER_S = 2.0
"""etcd counts as unreachable once every endpoint has failed and none has answered for this
long: longer than the election of a new etcd leader (about a second with etcd's default
timings), so calls ride through one."""
UNANSWERED_AFTER_S = 2.0
"""etcd counts as hung once a request has waited this long while etcd answered nothing at
all since it was sent: etcd answers a keepalive or a small read within milliseconds, and
within about a second through a leader election."""
PROBE_TIMEOUT_S = 1.0
"""While etcd is unreachable, how long a call waits for each endpoint (once) before it
fails."""


class Reachability:
    """What one client knows of etcd's answering: the endpoints that failed since etcd last
    answered anything, and since when; the requests waiting for an answer now."""

    def __init__(self, endpoints: Sequence[str]) -> None:
        self._endpoints = tuple(endpoints)
        # Endpoints that failed since the last answer, and the monotonic time of the first
        # of those failures (None while the last thing etcd did was answer).
        self._failing: set[str] = set()
        self._silent_since: float | None = None
        # Monotonic time of etcd's last answer of any kind (-inf: none yet).
        self._answered_at = -math.inf
        # Requests waiting for their answer now: id -> (endpoint, monotonic time sent).
        self._waiting: dict[int, tuple[str, float]] = {}
        self._ids = itertools.count()
        # Woken by the next answer (created on demand by next_answer, None meanwhile).
        self._next_answer: asyncio.Future[None] | None = None

    @contextmanager
    def asking(self, endpoint: str) -> Iterator[None]:
        """Count a request to `endpoint` as waiting for its answer while the block runs."""
        request = next(self._ids)
        self._waiting[request] = (endpoint, time.monotonic())
        try:
            yield
        finally:
            del self._waiting[request]

    def failed(self, endpoint: str, *, since: float | None = None) -> None:
        """A call or a stream found `endpoint` gone (unavailable, no answer in time). `since`:
        when the request that went unanswered was sent (monotonic), if it timed out."""
        now = time.monotonic()
        began = now if since is None or since < self._answered_at else min(since, now)
        if self._silent_since is None or began < self._silent_since:
            self._silent_since = began
        self._failing.add(endpoint)

    def answered(self) -> None:
        """etcd answered something (a refusal counts): it is reachable."""
        self._answered_at = time.monotonic()
        if self._silent_since is not None:
            self._silent_since = None
            self._failing.clear()
        waiter, self._next_answer = self._next_answer, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def next_answer(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for etcd's next answer to anyone; whether it came."""
        if self._next_answer is None or self._next_answer.done():
            self._next_answer = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.shield(self._next_answer)
        except TimeoutError:
            return False
        return True

    def _unanswered_since(self, endpoint: str) -> float | None:
        """When the oldest request to `endpoint` still waiting was sent, counting only those
        sent after etcd's last answer (an older one is merely slow)."""
        return min(
            (
                sent
                for to, sent in self._waiting.values()
                if to == endpoint and sent > self._answered_at
            ),
            default=None,
        )

    def _silent_from(self, endpoint: str, now: float) -> float | None:
        """Since when `endpoint` counts as silent (module docstring); None: it does not."""
        since = self._silent_since if endpoint in self._failing else None
        waiting = self._unanswered_since(endpoint)
        if waiting is not None and now - waiting >= UNANSWERED_AFTER_S:
            return waiting if since is None else min(since, waiting)
        if since is not None and now - since >= UNREACHABLE_AFTER_S:
            return since
        return None

    @property
    def unreachable_for(self) -> float | None:
        """Seconds since etcd stopped answering, once it counts as unreachable (module
        docstring); else None."""
        now = time.monotonic()
        began = [self._silent_from(endpoint, now) for endpoint in self._endpoints]
        if None in began:
            return None
        return now - min(b for b in began if b is not None)

    @property
    def hung_for(self) -> float | None:
        """Seconds since etcd stopped answering, once it is unreachable and a request is
        still waiting unanswered at every endpoint (sending another would only wait behind
        it; the first answer ends this); else None."""
        silent = self.unreachable_for
        if silent is None:
            return None
        if any(self._unanswered_since(endpoint) is None for endpoint in self._endpoints):
            return None
        return silent

    def refusal(self, what: str, silent: float, reason: str) -> CoordinationUnavailableError:
        """The error of a call refused because etcd is unreachable."""
        return CoordinationUnavailableError(
            f"etcd is unreachable at {','.join(self._endpoints)}: no endpoint has answered "
            f"for {silent:.1f}s ({reason}), so {what} was refused at once; is etcd running? "
            "Retry once it is back"
        )
