"""What every part of the push consumer shares: its logger, its counters, retry pacing."""

from __future__ import annotations

from dataclasses import dataclass

LOGGER_NAME = "popmq.sdk.push_consumer"
"""Every part logs under the public module's name, as before the split: users filter on it."""

RETRY_MIN_S = 0.1
"""First pause after a failed call that is retried; doubled after each failure ..."""
RETRY_MAX_S = 5.0
"""... up to this."""


@dataclass
class Counters:
    """The running totals behind ``PushConsumerStats`` (see its attributes).

    Only the event loop thread updates them: consume threads return their counts.
    """

    receive_calls: int = 0
    received: int = 0
    succeeded: int = 0
    failed: int = 0
    acked: int = 0
    acked_on_receive: int = 0
    nacked: int = 0
    renewed: int = 0
    released: int = 0
