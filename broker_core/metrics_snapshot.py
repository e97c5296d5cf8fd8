"""Pieces of a broker's MetricsSnapshot copied out of live state: a histogram's counts and
the replication tap's view, so that the caller keeps nothing that changes under it. Plain
reads on the loop thread (the counts are small lists)."""

from __future__ import annotations

from popmq.broker_core.api import HistogramSnapshot, ReplicationSnapshot
from popmq.broker_core.stats import Histogram
from popmq.broker_core.store import Store

__all__ = ["histogram_snapshot", "replication_snapshot"]


def histogram_snapshot(histogram: Histogram) -> HistogramSnapshot:
    """`histogram`'s bounds, counts and total now."""
    return HistogramSnapshot(
        bounds=histogram.bounds, counts=tuple(histogram.counts), total=histogram.total
    )


def replication_snapshot(store: Store) -> ReplicationSnapshot | None:
    """The replication state of `store`'s write tap, when it replicates (None otherwise)."""
    snapshot = getattr(store.tap, "replication_snapshot", None)
    result: ReplicationSnapshot | None = snapshot() if snapshot is not None else None
    return result
