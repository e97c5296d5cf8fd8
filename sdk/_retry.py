"""The producer's retry policy: RocketMQ proxy's, 3 attempts with 10 ms -> 1 s x2 backoff.

Only failures whose SDK error says ``retriable`` (UNAVAILABLE, RESOURCE_EXHAUSTED,
DEADLINE_EXCEEDED) are retried; a bad argument or a missing topic fails at once. A retried
send repeats the same request, message ids included, so a send whose first attempt was stored
after all (its response lost, or its deadline passed) is recognised by the server's dedup
window and not stored twice.

Backoff is a strategy object (`RetryBackoff`, or anything with `delay_s`) and the sleep is
injectable, so the policy is tested with a fake clock rather than real waits. `RetryBackoff`
also paces the SDK's other retries (the next endpoint, a reconnect); it is not a consumer
group's redelivery backoff (`popmq.ExponentialBackoff`, a setting the server applies).
"""

from __future__ import annotations

import asyncio
import logging
import math
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from popmq.sdk.errors import PopMQError

__all__ = ["Backoff", "RetryBackoff", "RetryPolicy"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Backoff(Protocol):
    """How long to wait before the next attempt."""

    def delay_s(self, failures: int) -> float:
        """The wait after ``failures`` failed attempts (1 after the first), in seconds."""
        ...


@dataclass(frozen=True, kw_only=True)
class RetryBackoff:
    """The client's wait between attempts: ``initial_s * multiplier ** (failures - 1)``, at
    most ``max_s`` (no jitter).

    Defaults are RocketMQ's producer policy (``ExponentialBackoffRetryPolicy``).
    """

    initial_s: float = 0.01
    """Wait after the first failure."""
    max_s: float = 1.0
    """Longest wait."""
    multiplier: float = 2.0
    """Growth per failure."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.initial_s) and self.initial_s >= 0):
            raise ValueError(f"initial_s must be 0 or more seconds, got {self.initial_s}")
        if not (math.isfinite(self.max_s) and self.max_s >= self.initial_s):
            raise ValueError(
                f"max_s must be at least initial_s ({self.initial_s}), got {self.max_s}"
            )
        if not (math.isfinite(self.multiplier) and self.multiplier >= 1):
            raise ValueError(f"multiplier must be 1 or more, got {self.multiplier}")

    def delay_s(self, failures: int) -> float:
        """The wait after ``failures`` failed attempts, in seconds."""
        if failures < 1:
            raise ValueError(f"failures must be 1 or more, got {failures}")
        # Past max_s the power only grows; stop before it overflows a float.
        delay = self.initial_s
        for _ in range(failures - 1):
            if delay >= self.max_s:
                break
            delay *= self.multiplier
        return min(delay, self.max_s)


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How a producer retries a failed send (never a oneway send).

    ``RetryPolicy(max_attempts=5, backoff=RetryBackoff(initial_s=0.1, max_s=2.0))``.

    Defaults are the RocketMQ proxy's producer policy: at most 3 attempts, waiting 10 ms
    and then 20 ms (doubling, at most 1 s) between them.
    """

    max_attempts: int = 3
    """Attempts in all, the first included; 1 means never retry."""
    backoff: Backoff = field(default_factory=RetryBackoff)
    """Wait between attempts."""

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise TypeError(f"max_attempts must be an int, got {self.max_attempts!r}")
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be 1 or more, got {self.max_attempts}")

    async def run(
        self,
        attempt: Callable[[], Awaitable[T]],
        *,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> T:
        """Call ``attempt`` until it succeeds, fails for good, or attempts run out.

        Raises:
            PopMQError: The last failure; a note says how many attempts were made.
        """
        failures = 0
        while True:
            try:
                return await attempt()
            except PopMQError as exc:
                failures += 1
                if not exc.retriable or failures >= self.max_attempts:
                    if failures > 1:
                        exc.add_note(f"gave up after {failures} attempts")
                    raise
                delay = self.backoff.delay_s(failures)
                logger.debug(
                    "attempt %d of %d failed (%s: %s); retrying in %.3fs",
                    failures,
                    self.max_attempts,
                    exc.code,
                    exc.message,
                    delay,
                )
            await sleep(delay)


def __getattr__(name: str) -> Any:
    if name == "ExponentialBackoff":  # its former name, for code that imported it from here
        warnings.warn(
            "popmq.sdk._retry.ExponentialBackoff is now popmq.RetryBackoff "
            "(popmq.ExponentialBackoff is a consumer group's redelivery backoff)",
            DeprecationWarning,
            stacklevel=2,
        )
        return RetryBackoff
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
