"""A cluster proxy's Prometheus series per broker, labelled `broker="<name>"`.

`popmq proxy` exports, besides the families of its broker (the sum over the cluster's
brokers), one series per broker in each family here: whether it answered and is registered,
its epoch, how long it has been held past a vanished registration, its store and disk, its
message totals and held polls, this proxy's send fault table's view of it
(proxy/status.py `BrokerFaultState`: isolation, failures, the repeats waiting for its
quarantine to end), and each replicated shard's followers (in sync, lag). They are read
from the server's `StatusProvider.brokers()` (each broker asked with a short deadline) as
`LoopReadings` (runtime/metrics.py) says; PopMQServer adds the collector to its metrics
when it has a status provider (cluster mode).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from popmq.proxy.status import StatusProvider, message_totals
from popmq.runtime.metrics import LoopCollector, LoopReadings


class ClusterBrokersCollector(LoopCollector):
    """A cluster proxy's series per broker, labelled `broker="<name>"`: one series per broker
    in each family (topics and groups are summed), so the label's values are bounded by the
    cluster's brokers. Read from `StatusProvider.brokers()` (each broker asked with a short
    deadline), as `LoopReadings` says."""

    def __init__(self, provider: StatusProvider, loop: asyncio.AbstractEventLoop) -> None:
        self._readings = LoopReadings(provider.brokers, loop, "the cluster's brokers")

    async def refresh(self) -> None:
        await self._readings.refresh()

    def collect(self) -> Iterable[Metric]:
        brokers = self._readings.current()
        if brokers is None:
            return
        labels = ["broker"]
        up = GaugeMetricFamily(
            "popmq_broker_up", "1 when the broker answered this proxy just now", labels=labels
        )
        live = GaugeMetricFamily(
            "popmq_broker_live", "1 when the broker is registered in etcd", labels=labels
        )
        held_s = GaugeMetricFamily(
            "popmq_broker_held_seconds",
            "Seconds since the broker's registration vanished while this proxy still routes "
            "to it until it registers again (its live is 0 meanwhile); 0 when not held",
            labels=labels,
        )
        store = GaugeMetricFamily(
            "popmq_broker_store_bytes", "Bytes of the broker's store files", labels=labels
        )
        free = GaugeMetricFamily(
            "popmq_broker_disk_free_bytes",
            "Bytes still free for the broker's store on its filesystem",
            labels=labels,
        )
        sent = CounterMetricFamily(
            "popmq_broker_messages_sent", "Messages stored by sends on the broker", labels=labels
        )
        popped = CounterMetricFamily(
            "popmq_broker_messages_popped", "Deliveries by pops on the broker", labels=labels
        )
        acked = CounterMetricFamily(
            "popmq_broker_messages_acked", "Deliveries acked on the broker", labels=labels
        )
        held = GaugeMetricFamily(
            "popmq_broker_long_polls_held", "Pops held waiting on the broker", labels=labels
        )
        isolated = GaugeMetricFamily(
            "popmq_broker_isolated_seconds",
            "Seconds until this proxy's sends use the broker again (0: they do)",
            labels=labels,
        )
        failures = CounterMetricFamily(
            "popmq_broker_send_failures",
            "Failed sends this proxy recorded on the broker",
            labels=labels,
        )
        isolations = CounterMetricFamily(
            "popmq_broker_isolations", "Times this proxy isolated the broker", labels=labels
        )
        unknown = CounterMetricFamily(
            "popmq_broker_send_unknown_outcomes",
            "Tries of sends on the broker whose outcome this proxy did not learn (each tried"
            " again on the same broker)",
            labels=labels,
        )
        waiting = GaugeMetricFamily(
            "popmq_broker_quarantine_waiting",
            "Clients' repeats of sends that may be stored on the broker waiting now for this"
            " proxy's quarantine of it to end",
            labels=labels,
        )
        waits = CounterMetricFamily(
            "popmq_broker_quarantine_waits",
            "Repeats of sends that waited for this proxy's quarantine of the broker to end",
            labels=labels,
        )
        refusals = CounterMetricFamily(
            "popmq_broker_quarantine_wait_refusals",
            "Repeats of sends for the quarantined broker failed at once because"
            " fault_tolerance.quarantine_max_waiting repeats were waiting",
            labels=labels,
        )
        epoch = GaugeMetricFamily(
            "popmq_broker_epoch",
            "The broker's registration epoch: it changes when the broker registers again "
            "(a restart, or a replicated shard's failover: count them with changes())",
            labels=labels,
        )
        replica_labels = ["broker", "replica"]
        in_sync = GaugeMetricFamily(
            "popmq_replication_in_sync",
            "1 when the replicated shard's follower is in its in-sync set",
            labels=replica_labels,
        )
        lag_batches = GaugeMetricFamily(
            "popmq_replication_lag_batches",
            "Batches of the shard leader's log the follower lacks",
            labels=replica_labels,
        )
        lag_bytes = GaugeMetricFamily(
            "popmq_replication_lag_bytes",
            "Bytes of the batches of the shard leader's log the follower lacks",
            labels=replica_labels,
        )
        lag_seconds = GaugeMetricFamily(
            "popmq_replication_lag_seconds",
            "Age of the oldest batch the follower lacks (0 when only batches in flight)",
            labels=replica_labels,
        )
        terms = CounterMetricFamily(
            "popmq_replication_leader_terms",
            "Times the shard leader's process became its leader",
            labels=labels,
        )
        for broker in brokers:
            name = [broker.name]
            if broker.live:
                epoch.add_metric(name, broker.epoch)
            up.add_metric(name, 1 if broker.reachable else 0)
            live.add_metric(name, 1 if broker.live else 0)
            held_s.add_metric(name, broker.held_for_s or 0.0)
            snapshot = broker.metrics
            if snapshot is not None:  # an unreachable broker's values are absent, not 0
                store.add_metric(name, snapshot.store_bytes)
                if snapshot.disk_free_bytes is not None:
                    free.add_metric(name, snapshot.disk_free_bytes)
                totals = message_totals(snapshot)
                for family, total in zip((sent, popped, acked), totals, strict=True):
                    family.add_metric(name, total)
                held.add_metric(name, snapshot.long_polls_held)
                replication = snapshot.replication
                if replication is not None:
                    terms.add_metric(name, replication.terms)
                    for f in replication.followers:
                        key = [broker.name, f.replica]
                        in_sync.add_metric(key, 1 if f.in_sync else 0)
                        lag_batches.add_metric(key, f.lag_batches)
                        lag_bytes.add_metric(key, f.lag_bytes)
                        lag_seconds.add_metric(key, f.lag_s)
            faults = broker.faults
            isolated.add_metric(name, faults.isolated_for_s if faults is not None else 0.0)
            failures.add_metric(name, faults.failures if faults is not None else 0)
            isolations.add_metric(name, faults.isolations if faults is not None else 0)
            unknown.add_metric(name, faults.unknown_outcomes if faults is not None else 0)
            waiting.add_metric(name, faults.quarantine_waiting if faults is not None else 0)
            waits.add_metric(name, faults.quarantine_waits if faults is not None else 0)
            refusals.add_metric(name, faults.quarantine_wait_refusals if faults is not None else 0)
        yield from (up, live, held_s, epoch, store, free, sent, popped, acked, held)
        yield from (isolated, failures, isolations, unknown, waiting, waits, refusals)
        yield from (in_sync, lag_batches, lag_bytes, lag_seconds, terms)
