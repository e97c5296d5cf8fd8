"""Whether etcd answers at all, as one EtcdClient (etcd.py) sees it from every call, watch
and keepalive it makes, endpoint by endpoint.

An endpoint counts as **silent** once, since it last answered,
- calls and streams to it failed (refused connections, no answer in time, "no leader") and
  it has not answered for `UNREACHABLE_AFTER_S` since the first of those failures, or
- a request to it has waited `UNANSWERED_AFTER_S` without an answer (a hung member: paused
  by SIGSTOP, a frozen VM, a stalled disk; its connections stay open and nothing answers,
  so nothing fails before its timeout), or
- a probe's Status request to it has waited `PROBE_TIMEOUT_S` without an answer.

etcd is **unreachable** while every endpoint is silent: a call then tries each endpoint
once, for at most `PROBE_TIMEOUT_S`, and fails with a retriable
`CoordinationUnavailableError` naming etcd, rather than retrying until its timeout. It is
**hung** (`hung_for`) while a probe's Status request has waited `PROBE_TIMEOUT_S` unanswered
at every endpoint: a call then fails at once, without trying. An admin write made during an
outage is so refused at once instead of hanging for several calls' timeouts, while the data
path (which asks etcd nothing) goes on.

The probe (etcd.py) starts as soon as a request has waited `UNANSWERED_AFTER_S` (the
`on_silence` callback) or a call finds etcd unreachable. It is sent after the wait was
noticed, so a stall of the client's own event loop (an answer that came but was not read
yet) or a stall of etcd shorter than about `UNANSWERED_AFTER_S + PROBE_TIMEOUT_S` costs a
call a short wait, never a refusal. An endpoint's answer ends its silence (a Status without
a leader is no answer: such a member serves nothing); the probe ends at the first one.

A silent endpoint is skipped by the next call while another one is untried or answering
(`answering`), so a hung member of three costs one call `UNANSWERED_AFTER_S`, not its
timeout, and none after it. On the event loop only.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from popmq.coordination.errors import CoordinationUnavailableError

UNREACHABLE_AFTER_S = 2.0
"""An endpoint counts as silent once it has failed and not answered for this long: longer
than the election of a new etcd leader (about a second with etcd's default timings), so
calls ride through one."""
UNANSWERED_AFTER_S = 2.0
"""An endpoint counts as silent once a request to it has waited this long unanswered: etcd
answers a keepalive or a small read within milliseconds, and within about a second through
a leader election. With other endpoints answering, a try waits no longer than this."""
PROBE_TIMEOUT_S = 1.0
"""How long a probe's Status request may wait before its endpoint counts as hung (a live
member answers one within milliseconds, leader or not); and while etcd is unreachable, how
long a call waits for each endpoint (once) before it fails."""


class Reachability:
    """What one client knows of etcd's answering, per endpoint: when each last answered,
    the failures since, and the requests waiting for an answer now.

    Args:
        endpoints: The client's endpoints.
        on_silence: Called (on the loop) when a request has waited UNANSWERED_AFTER_S
            unanswered: the client starts its probe then.
    """

    def __init__(
        self, endpoints: Sequence[str], *, on_silence: Callable[[], None] | None = None
    ) -> None:
        self._endpoints = tuple(endpoints)
        self._on_silence = on_silence
        # Monotonic time of each endpoint's last answer (absent: none yet).
        self._answered_at: dict[str, float] = {}
        # Endpoints that failed since their last answer -> monotonic time of the first failure.
        self._failing_since: dict[str, float] = {}
        # Requests waiting for their answer now: id -> (endpoint, monotonic time sent, probe).
        self._waiting: dict[int, tuple[str, float, bool]] = {}
        self._ids = itertools.count()
        # Woken by the next answer (created on demand by next_answer, None meanwhile).
        self._next_answer: asyncio.Future[None] | None = None

    @contextmanager
    def asking(self, endpoint: str, *, probe: bool = False) -> Iterator[None]:
        """Count a request to `endpoint` as waiting for its answer while the block runs
        (`probe`: the probe's Status request)."""
        request = next(self._ids)
        self._waiting[request] = (endpoint, time.monotonic(), probe)
        check = None
        if self._on_silence is not None and not probe:
            check = asyncio.get_running_loop().call_later(
                UNANSWERED_AFTER_S, self._check_silence, endpoint
            )
        try:
            yield
        finally:
            del self._waiting[request]
            if check is not None:
                check.cancel()

    def _check_silence(self, endpoint: str) -> None:
        if self._on_silence is not None and not self.answering(endpoint):
            self._on_silence()

    def failed(self, endpoint: str) -> None:
        """A call or a stream found `endpoint` gone (unavailable, no answer in time, no
        leader). It counts from now: a timed-out request is evidence of silence only while
        it waits, so one slow answer leaves the UNREACHABLE_AFTER_S ride-through intact."""
        self._failing_since.setdefault(endpoint, time.monotonic())

    def answered(self, endpoint: str) -> None:
        """`endpoint` answered something (a refusal counts): it is reachable."""
        self._answered_at[endpoint] = time.monotonic()
        self._failing_since.pop(endpoint, None)
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

    def _unanswered_since(self, endpoint: str, *, probe: bool) -> float | None:
        """When the oldest request (`probe`: probe request) to `endpoint` still waiting was
        sent, counting only those sent after its last answer (an older one is merely slow)."""
        answered_at = self._answered_at.get(endpoint, -math.inf)
        return min(
            (
                sent
                for to, sent, is_probe in self._waiting.values()
                if to == endpoint and sent > answered_at and (is_probe or not probe)
            ),
            default=None,
        )

    def _silent_from(self, endpoint: str, now: float) -> float | None:
        """Since when `endpoint` counts as silent (module docstring); None: it does not."""
        failing = self._failing_since.get(endpoint)
        waiting = self._unanswered_since(endpoint, probe=False)
        probing = self._unanswered_since(endpoint, probe=True)
        if (
            (failing is not None and now - failing >= UNREACHABLE_AFTER_S)
            or (waiting is not None and now - waiting >= UNANSWERED_AFTER_S)
            or (probing is not None and now - probing >= PROBE_TIMEOUT_S)
        ):
            return min(t for t in (failing, waiting, probing) if t is not None)
        return None

    def answering(self, endpoint: str) -> bool:
        """Whether `endpoint` may be answering: untried, or nothing of it failed or waits
        overdue since it last answered."""
        return endpoint not in self._failing_since and (
            self._silent_from(endpoint, time.monotonic()) is None
        )

    @property
    def unreachable_for(self) -> float | None:
        """Seconds since etcd stopped answering, once every endpoint is silent (module
        docstring); else None."""
        now = time.monotonic()
        began = [self._silent_from(endpoint, now) for endpoint in self._endpoints]
        if None in began:
            return None
        return now - min(b for b in began if b is not None)

    @property
    def hung_for(self) -> float | None:
        """Seconds since etcd stopped answering, once a probe's Status request has waited
        PROBE_TIMEOUT_S unanswered at every endpoint (sending another would only wait
        behind it; the first answer ends this); else None."""
        now = time.monotonic()
        for endpoint in self._endpoints:
            probing = self._unanswered_since(endpoint, probe=True)
            if probing is None or now - probing < PROBE_TIMEOUT_S:
                return None
        return self.unreachable_for

    def refusal(
        self, what: str, silent: float, reason: str, *, tried: bool = False
    ) -> CoordinationUnavailableError:
        """The error of a call that failed because etcd is unreachable (`tried`: after one
        short try of each endpoint; else refused at once, untried)."""
        outcome = "failed after one short try of each endpoint" if tried else "was refused at once"
        return CoordinationUnavailableError(
            f"etcd is unreachable at {','.join(self._endpoints)}: no endpoint has answered "
            f"for {silent:.1f}s ({reason}), so {what} {outcome}; is etcd running? "
            "Retry once it is back"
        )
