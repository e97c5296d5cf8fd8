"""Monotonic event counters of one broker, read by the metrics exporter.

Counters are plain in-memory integers updated on the loop (no locks: one thread writes);
they restart at zero with the process, as Prometheus counters expect.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class BrokerStats:
    """Events per topic (sent) and per (group, topic) for the consuming side.

    Retry-topic traffic is counted under the user topic it belongs to.
    """

    sent: Counter[str] = field(default_factory=Counter)
    popped: Counter[tuple[str, str]] = field(default_factory=Counter)
    acked: Counter[tuple[str, str]] = field(default_factory=Counter)
    nacked: Counter[tuple[str, str]] = field(default_factory=Counter)
    revived: Counter[tuple[str, str]] = field(default_factory=Counter)
    dead_lettered: Counter[tuple[str, str]] = field(default_factory=Counter)
    half_sent: Counter[str] = field(default_factory=Counter)
    """Half messages stored, per topic."""
    transaction_checks: Counter[str] = field(default_factory=Counter)
    """Checks handed out, per topic."""
    transaction_resolutions: Counter[tuple[str, str]] = field(default_factory=Counter)
    """Transactions resolved, per (resolution "commit" / "rollback", source)."""
    transactions_discarded: Counter[str] = field(default_factory=Counter)
    """Transactions discarded after check_max checks, per topic."""


@dataclass
class Histogram:
    """Observations counted per bucket (upper bounds, +Inf implied), for pull-based export.

    The metrics exporter reads it at scrape time (BrokerAPI.metrics_snapshot), so the broker
    needs no callback into the proxy; one bisect per observation.
    """

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    """Per bucket, not cumulative; one more entry than `bounds` (the +Inf bucket)."""
    total: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value


WRITE_SECONDS_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
)  # fmt: skip
"""Seconds of one batch write (fsync included when synced)."""
BATCH_JOBS_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
"""Write jobs per group-commit batch."""
