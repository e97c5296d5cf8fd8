"""A broker's MetricsSnapshot copied out of live state (its counters, a histogram's counts,
the replication tap's view), so that the caller keeps nothing that changes under it. Plain
reads on the loop thread (the counts are small lists), and two of the data directory's
size on disk."""

from __future__ import annotations

from pathlib import Path

from popmq.broker_core.api import HistogramSnapshot, MetricsSnapshot, ReplicationSnapshot
from popmq.broker_core.data_dir import disk_free, disk_usage
from popmq.broker_core.group_commit import WriterStats
from popmq.broker_core.stats import BrokerStats, Histogram
from popmq.broker_core.store import Store

__all__ = ["broker_metrics", "histogram_snapshot", "replication_snapshot"]


def broker_metrics(
    stats: BrokerStats,
    writer: WriterStats,
    store: Store,
    data_dir: Path,
    *,
    long_polls_held: int,
    buffered_checkpoints: int,
    live_checkpoints: int,
    topics: int,
    groups: int,
    transactions_open: int,
) -> MetricsSnapshot:
    """A broker's MetricsSnapshot (`Broker.metrics_snapshot`): its counters and its
    writer's copied, the gauges as given."""
    return MetricsSnapshot(
        sent=dict(stats.sent),
        popped=dict(stats.popped),
        acked=dict(stats.acked),
        nacked=dict(stats.nacked),
        revived=dict(stats.revived),
        dead_lettered=dict(stats.dead_lettered),
        long_polls_held=long_polls_held,
        buffered_checkpoints=buffered_checkpoints,
        live_checkpoints=live_checkpoints,
        write_batches=writer.batches,
        write_batches_failed=writer.failed_batches,
        write_jobs=writer.jobs,
        batch_jobs=histogram_snapshot(writer.batch_jobs),
        write_seconds_synced=histogram_snapshot(writer.write_seconds[True]),
        write_seconds_unsynced=histogram_snapshot(writer.write_seconds[False]),
        store_bytes=disk_usage(data_dir),
        topics=topics,
        groups=groups,
        disk_free_bytes=disk_free(data_dir),
        replication=replication_snapshot(store),
        transactions_open=transactions_open,
        half_sent=dict(stats.half_sent),
        transaction_checks=dict(stats.transaction_checks),
        transaction_resolutions=dict(stats.transaction_resolutions),
        transactions_discarded=dict(stats.transactions_discarded),
    )


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
