"""The lease acks the driver retries at later triggers (pop_reader.py), bounded.

An ack fails while the token's proxy is down (leaseEndpoints: it goes to no other) or, while
etcd is down, when that proxy cannot ack it from memory. It is retried at each later trigger,
but only while the lease may still live: the keeper stops renewing a token once it is taken
for acking, so its lease ends at most `invisibleDuration` after that (plus one renewal call
already under way then). After that the proxy could only answer that the lease expired,
and its messages are delivered again after their invisible time anyway: the ack is dropped,
with a log line, so a proxy gone for good does not cost every later trigger a call for ever.
At most MAX_RETRIED_ACKS tokens wait; past it the oldest are dropped the same way.

Driver side only, on Spark's runner thread (latestOffset and commit).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

__all__ = ["MAX_RETRIED_ACKS", "AckRetries"]

log = logging.getLogger(__name__)

MAX_RETRIED_ACKS = 100_000
"""Lease tokens whose ack waits for a later trigger, at most (a few MB of the driver's
memory; far more than the tokens of the batches planned within one invisible duration)."""


class AckRetries:
    """Tokens whose ack failed, each with the time its lease must have expired by.

    Args:
        lease_s: How long after a token is taken for acking its lease may still live: the
            invisible duration plus the longest a renewal call under way then may take.
        max_tokens: Most tokens kept (MAX_RETRIED_ACKS).
    """

    def __init__(self, *, lease_s: float, max_tokens: int = MAX_RETRIED_ACKS) -> None:
        if lease_s <= 0 or max_tokens < 1:
            raise ValueError(f"lease_s {lease_s} and max_tokens {max_tokens} must be positive")
        self._lease_s = lease_s
        self.max_tokens = max_tokens
        # token -> monotonic time past which its lease has expired; oldest first.
        self._until: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._until)

    def due(self, now: float) -> list[str]:
        """The tokens to ack again at `now` (monotonic seconds); those whose lease must have
        expired are dropped."""
        expired = [token for token, until in self._until.items() if until <= now]
        if expired:
            for token in expired:
                del self._until[token]
            log.warning(
                "%d lease acks not retried any more (%s): their leases expired while the "
                "acks failed, so their messages are delivered again after their invisible "
                "time",
                len(expired),
                _some(expired),
            )
        return list(self._until)

    def settle(self, tried: Iterable[str], again: Iterable[str], now: float) -> None:
        """After acking `tried` at `now`: the tokens of `again` are acked at later triggers
        (a token already waiting keeps its first deadline), the others are done."""
        retry = dict.fromkeys(again)  # in order: the first listed count as the oldest
        for token in tried:
            if token not in retry:
                self._until.pop(token, None)
        for token in retry:
            self._until.setdefault(token, now + self._lease_s)
        over = len(self._until) - self.max_tokens
        if over > 0:
            dropped = list(self._until)[:over]
            for token in dropped:
                del self._until[token]
            log.warning(
                "%d lease acks not retried any more (%s): more than %d acks wait for their "
                "proxies, the oldest go first; their messages are delivered again after their "
                "invisible time",
                over,
                _some(dropped),
                self.max_tokens,
            )


def _some(tokens: list[str]) -> str:
    shown = ", ".join(tokens[:3])
    return shown if len(tokens) <= 3 else f"{shown} and {len(tokens) - 3} more"
