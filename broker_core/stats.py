"""Monotonic event counters of one broker, read by the metrics exporter.

Counters are plain in-memory integers updated on the loop (no locks: one thread writes);
they restart at zero with the process, as Prometheus counters expect.
"""

from __future__ import annotations

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
