"""GetClusterStatus's values: the proxy's report on the wire, the SDK's dataclasses, the
CLI's tables and JSON, and the proxy's per-broker metric series. No server here; the
builder itself is tested against real brokers in tests/cluster/test_cluster_status.py."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest
from prometheus_client import CollectorRegistry

from popmq import ClusterStatus
from popmq.broker_core import HistogramSnapshot, MetricsSnapshot
from popmq.cli import render
from popmq.proxy import convert
from popmq.proxy.broker_metrics import ClusterBrokersCollector
from popmq.proxy.status import (
    BrokerFaultState,
    BrokerStatus,
    EtcdEndpointHealth,
    ProxyStatus,
    StatusReport,
)

_EMPTY = HistogramSnapshot((), (0,), 0.0)


def _snapshot(
    *, store: int, free: int | None, sent: int, popped: int, acked: int
) -> MetricsSnapshot:
    return MetricsSnapshot(
        sent={"orders": sent - 1, "audit": 1},
        popped={("g", "orders"): popped},
        acked={("g", "orders"): acked},
        nacked={},
        revived={},
        dead_lettered={},
        long_polls_held=3,
        buffered_checkpoints=0,
        live_checkpoints=0,
        write_batches=0,
        write_batches_failed=0,
        write_jobs=0,
        batch_jobs=_EMPTY,
        write_seconds_synced=_EMPTY,
        write_seconds_unsynced=_EMPTY,
        store_bytes=store,
        topics=2,
        groups=1,
        disk_free_bytes=free,
    )


UP = BrokerStatus(
    name="b1",
    address="10.0.0.1:9100",
    live=True,
    reachable=True,
    epoch=42,
    lease_ttl_s=7.0,
    topics=2,
    queues=16,
    metrics=_snapshot(store=2048, free=5 * 1024**3, sent=10, popped=6, acked=5),
)
UNREACHABLE = BrokerStatus(
    name="b2",
    address="10.0.0.2:9100",
    live=True,
    reachable=False,
    error="no answer within 2s",
    epoch=43,
    topics=2,
    queues=16,
    faults=BrokerFaultState(
        broker="b2",
        latency_s=30.0,
        isolated_for_s=12.5,
        isolations=1,
        failures=4,
        unknown_outcomes=2,
        quarantine_waiting=3,
        quarantine_waits=7,
        quarantine_wait_refusals=5,
    ),
)
DOWN = BrokerStatus(
    name="b3",
    address="10.0.0.3:9100",
    live=False,
    reachable=False,
    error="not registered in etcd now",
    topics=1,
    queues=8,
)
CLUSTER = StatusReport(
    mode="cluster",
    cluster="prod",
    proxy="p1",
    brokers=(UP, UNREACHABLE, DOWN),
    proxies=(
        ProxyStatus(name="p1", address="10.0.1.1:8081", epoch=50, this_proxy=True),
        ProxyStatus(name="p2", address="10.0.1.2:8081", epoch=51, this_proxy=False),
    ),
    proxies_stale=True,
    proxies_read_ms=1_790_000_000_000,
    etcd=(
        EtcdEndpointHealth(
            endpoint="10.0.2.1:2379",
            reachable=True,
            version="3.5.9",
            db_size_bytes=20480,
            leader=7,
            member_id=7,
            revision=99,
            raft_term=2,
        ),
        EtcdEndpointHealth(endpoint="10.0.2.2:2379", reachable=False, error="connection refused"),
    ),
)
LOCAL = StatusReport(
    mode="local",
    cluster="",
    proxy="127.0.0.1:8081",
    brokers=(
        BrokerStatus(
            name="broker-a",
            address="127.0.0.1:8081",
            live=True,
            reachable=True,
            data_dir="/var/lib/popmq",
            topics=1,
            queues=8,
            metrics=_snapshot(store=4096, free=None, sent=2, popped=0, acked=0),
        ),
    ),
)


def _sdk(report: StatusReport) -> ClusterStatus:
    return ClusterStatus.from_proto(convert.status_report(report))


def test_a_reachable_broker_carries_its_measures_and_an_unreachable_one_none() -> None:
    status = _sdk(CLUSTER)
    up, unreachable, down = status.brokers
    assert (up.name, up.address, up.live, up.reachable, up.epoch) == (
        "b1", "10.0.0.1:9100", True, True, 42,
    )  # fmt: skip
    assert (up.lease_ttl_s, up.store_bytes, up.disk_free_bytes) == (7.0, 2048, 5 * 1024**3)
    assert (up.messages_sent, up.messages_popped, up.messages_acked) == (10, 6, 5)
    assert (up.long_polls_held, up.topics, up.queues) == (3, 2, 16)
    assert (up.isolated_for_s, up.send_failures) == (0.0, 0)
    for broker in (unreachable, down):
        assert broker.store_bytes is None and broker.disk_free_bytes is None
        assert broker.messages_sent is None and broker.long_polls_held is None
        assert broker.lease_ttl_s is None
    assert unreachable.error == "no answer within 2s"
    assert (unreachable.isolated_for_s, unreachable.send_failures) == (12.5, 4)
    assert (unreachable.isolations, unreachable.send_latency_s) == (1, 30.0)
    assert (down.live, down.epoch, down.queues) == (False, 0, 8)


def test_cluster_report_keeps_proxies_staleness_and_every_etcd_endpoint() -> None:
    status = _sdk(CLUSTER)
    assert (status.mode, status.cluster, status.proxy) == ("cluster", "prod", "p1")
    assert [(p.name, p.this_proxy) for p in status.proxies] == [("p1", True), ("p2", False)]
    assert status.proxies_stale
    assert status.proxies_read_time is not None
    assert status.proxies_read_time.timestamp() == 1_790_000_000
    assert status.etcd is not None
    first, second = status.etcd
    assert (first.version, first.db_size_bytes, first.is_leader) == ("3.5.9", 20480, True)
    assert (second.reachable, second.error, second.is_leader) == (
        False,
        "connection refused",
        False,
    )
    assert status.etcd_reachable is True


def test_local_report_has_no_etcd_and_no_proxies() -> None:
    status = _sdk(LOCAL)
    assert (status.mode, status.etcd, status.etcd_reachable, status.proxies) == (
        "local", None, None, [],
    )  # fmt: skip
    (broker,) = status.brokers
    assert (broker.data_dir, broker.store_bytes, broker.disk_free_bytes) == (
        "/var/lib/popmq", 4096, None,
    )  # fmt: skip
    assert status.proxies_read_time is None


def test_cluster_tables_show_each_state_and_say_what_did_not_answer(
    capsys: pytest.CaptureFixture[str],
) -> None:
    render.cluster_tables(_sdk(CLUSTER))
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "cluster prod, as proxy p1 sees it"
    row = next(line for line in lines if " b1 " in line)
    for cell in ("10.0.0.1:9100", " up ", " 42 ", " 7s ", "2.0 KiB", "5.0 GiB", " 16 ", " ok "):
        assert cell in row, (cell, row)
    row = next(line for line in lines if " b2 " in line)
    assert "UNREACHABLE" in row and "isolated 12s, 4 failed" in row
    assert "DOWN" in next(line for line in lines if " b3 " in line)
    assert "broker b2: no answer within 2s" in out
    assert "broker b3: not registered in etcd now" in out
    assert "this proxy" in next(line for line in lines if "10.0.1.1:8081" in line)
    assert "etcd did not answer: proxies as last read at 2026-" in out
    assert "this member" in next(line for line in lines if "10.0.2.1:2379" in line)
    assert " DOWN " in next(line for line in lines if "10.0.2.2:2379" in line)
    assert "etcd 10.0.2.2:2379: connection refused" in out
    assert "etcd is unreachable" not in out  # one endpoint answered


QUARANTINED = BrokerStatus(
    name="b4",
    address="10.0.0.4:9100",
    live=True,
    reachable=True,  # it answered the status call: the cut is between it and sends, or over
    epoch=44,
    topics=2,
    queues=16,
    faults=BrokerFaultState(
        broker="b4",
        latency_s=10.0,
        isolated_for_s=1.0,
        isolations=1,
        failures=1,
        quarantined_for_s=42.4,
    ),
)


def test_a_quarantined_broker_is_shown_as_such_with_how_long_and_is_a_problem(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = StatusReport(mode="cluster", cluster="prod", proxy="p1", brokers=(UP, QUARANTINED))
    status = _sdk(report)
    up, quarantined = status.brokers
    assert (up.quarantined, up.quarantined_for_s) == (False, None)
    assert quarantined.quarantined and quarantined.quarantined_for_s == pytest.approx(42.4)
    (problem,) = status.problems  # the exit code is non-zero
    assert problem.startswith("broker b4 is quarantined by proxy p1 for 42s:"), problem
    render.cluster_tables(status)
    row = next(line for line in capsys.readouterr().out.splitlines() if " b4 " in line)
    assert "QUARANTINED 42s (connection down), 1 failed" in row and "isolated" not in row
    render.print_json(status)
    document = json.loads(capsys.readouterr().out)
    assert [b["quarantined_for_s"] for b in document["brokers"]] == [None, pytest.approx(42.4)]


def test_a_long_quarantine_reads_the_same_in_the_problem_and_the_table(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert QUARANTINED.faults is not None
    longer = dataclasses.replace(
        QUARANTINED, faults=dataclasses.replace(QUARANTINED.faults, quarantined_for_s=187.0)
    )
    status = _sdk(StatusReport(mode="cluster", cluster="prod", proxy="p1", brokers=(longer,)))
    (problem,) = status.problems
    assert problem.startswith("broker b4 is quarantined by proxy p1 for 3m07s:"), problem
    render.cluster_tables(status)
    assert "QUARANTINED 3m07s (connection down)" in capsys.readouterr().out


HELD = BrokerStatus(
    name="b5",
    address="10.0.0.5:9100",
    live=False,  # its registration vanished
    reachable=True,  # the proxy routes to it, and it answered the status call
    error="registration lost 3s ago (not in etcd now): proxy p1 holds it, routing to it for"
    " up to 7s more while its connection stays up, until it registers again",
    epoch=45,
    topics=1,
    queues=8,
    held_for_s=3.2,
    hold_left_s=6.8,
)


def test_a_held_broker_exports_how_long_it_is_held_not_live_and_no_epoch() -> None:
    registry = CollectorRegistry(auto_describe=False)
    held = dataclasses.replace(UP, live=False, epoch=45, held_for_s=3.2, hold_left_s=6.8)

    async def scenario() -> None:
        collector = ClusterBrokersCollector(_Fixed([held]), asyncio.get_running_loop())
        registry.register(collector)
        await collector.refresh()

    asyncio.run(scenario())
    labels = {"broker": held.name}
    assert registry.get_sample_value("popmq_broker_held_seconds", labels) == 3.2
    assert registry.get_sample_value("popmq_broker_live", labels) == 0
    assert registry.get_sample_value("popmq_broker_up", labels) == 1
    # As for any broker not live: its epoch series is absent until it registers again.
    assert registry.get_sample_value("popmq_broker_epoch", labels) is None


def test_a_held_broker_is_shown_held_with_how_long_it_may_stay_and_is_a_problem(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = StatusReport(mode="cluster", cluster="prod", proxy="p1", brokers=(UP, HELD))
    status = _sdk(report)
    up, held = status.brokers
    assert (up.held, up.held_for_s, up.hold_left_s) == (False, None, None)
    assert held.held and not held.live
    assert (held.held_for_s, held.hold_left_s) == (pytest.approx(3.2), pytest.approx(6.8))
    (problem,) = status.problems  # the exit code is non-zero; not reported as down
    assert problem == (
        "broker b5's registration was lost 3s ago: proxy p1 holds it for up to 7s more while"
        " its connection stays up, until it registers again"
    )
    unanswered = _sdk(
        dataclasses.replace(report, brokers=(dataclasses.replace(HELD, reachable=False),))
    )
    assert unanswered.problems[0].endswith("and it does not answer the proxy's status call")
    render.cluster_tables(status)
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if " b5 " in line)
    assert "HELD 7s left" in row and "DOWN" not in row
    assert "broker b5: registration lost 3s ago (not in etcd now): proxy p1 holds it" in out
    render.print_json(status)
    document = json.loads(capsys.readouterr().out)
    assert [b["held_for_s"] for b in document["brokers"]] == [None, pytest.approx(3.2)]
    assert [b["hold_left_s"] for b in document["brokers"]] == [None, pytest.approx(6.8)]


def test_cluster_tables_say_when_every_etcd_endpoint_is_down(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = StatusReport(
        mode="cluster",
        cluster="prod",
        proxy="p1",
        brokers=(UP,),
        proxies_stale=True,
        etcd=(EtcdEndpointHealth(endpoint="10.0.2.1:2379", reachable=False, error="refused"),),
    )
    render.cluster_tables(_sdk(report))
    out = capsys.readouterr().out
    assert "etcd did not answer: proxies as last read (never read)" in out
    assert "etcd is unreachable: brokers are shown as this proxy last saw them" in out


def test_local_table_leaves_out_cluster_columns_and_names_the_data_dir(
    capsys: pytest.CaptureFixture[str],
) -> None:
    render.cluster_tables(_sdk(LOCAL))
    out = capsys.readouterr().out
    assert out.startswith("local server at 127.0.0.1:8081 (popmq serve: one broker, no etcd)")
    header = next(line for line in out.splitlines() if "name" in line and "address" in line)
    assert "epoch" not in header and "lease" not in header and "sends" not in header
    assert "data dir of broker-a: /var/lib/popmq" in out
    assert "proxies" not in out and "etcd 1" not in out and "endpoint" not in out


def test_json_is_the_dataclasses_with_none_for_what_was_not_measured(
    capsys: pytest.CaptureFixture[str],
) -> None:
    render.print_json(_sdk(CLUSTER))
    document = json.loads(capsys.readouterr().out)
    assert document["mode"] == "cluster"
    assert [b["name"] for b in document["brokers"]] == ["b1", "b2", "b3"]
    assert document["brokers"][0]["disk_free_bytes"] == 5 * 1024**3
    assert document["brokers"][1]["store_bytes"] is None
    assert document["proxies"][0] == {
        "name": "p1", "address": "10.0.1.1:8081", "epoch": 50, "this_proxy": True,
    }  # fmt: skip
    assert document["etcd"][1]["reachable"] is False


class _Fixed:
    """A status provider whose brokers are fixed values (the exporter's input)."""

    def __init__(self, brokers: list[BrokerStatus]) -> None:
        self._brokers = brokers

    async def report(self) -> StatusReport:
        raise AssertionError("the exporter reads brokers() only")

    async def brokers(self) -> list[BrokerStatus]:
        return self._brokers


def test_per_broker_series_are_one_per_broker_and_absent_when_not_measured() -> None:
    registry = CollectorRegistry(auto_describe=False)

    async def scenario() -> None:
        collector = ClusterBrokersCollector(
            _Fixed([UP, UNREACHABLE, DOWN]), asyncio.get_running_loop()
        )
        registry.register(collector)
        assert registry.get_sample_value("popmq_broker_up", {"broker": "b1"}) is None
        await collector.refresh()

    asyncio.run(scenario())

    def value(name: str, broker: str) -> float | None:
        return registry.get_sample_value(name, {"broker": broker})

    assert [value("popmq_broker_up", b) for b in ("b1", "b2", "b3")] == [1, 0, 0]
    assert [value("popmq_broker_live", b) for b in ("b1", "b2", "b3")] == [1, 1, 0]
    assert value("popmq_broker_store_bytes", "b1") == 2048
    assert value("popmq_broker_disk_free_bytes", "b1") == 5 * 1024**3
    assert value("popmq_broker_messages_sent_total", "b1") == 10
    assert value("popmq_broker_messages_popped_total", "b1") == 6
    assert value("popmq_broker_messages_acked_total", "b1") == 5
    assert value("popmq_broker_long_polls_held", "b1") == 3
    for broker in ("b2", "b3"):  # not measured: absent rather than a false 0
        assert value("popmq_broker_store_bytes", broker) is None
        assert value("popmq_broker_messages_sent_total", broker) is None
    assert value("popmq_broker_isolated_seconds", "b2") == 12.5
    assert value("popmq_broker_send_failures_total", "b2") == 4
    assert value("popmq_broker_isolations_total", "b2") == 1
    assert value("popmq_broker_send_unknown_outcomes_total", "b2") == 2
    assert value("popmq_broker_send_unknown_outcomes_total", "b1") == 0
    assert value("popmq_broker_isolated_seconds", "b1") == 0
    assert value("popmq_broker_quarantine_waiting", "b2") == 3
    assert value("popmq_broker_quarantine_waits_total", "b2") == 7
    assert value("popmq_broker_quarantine_wait_refusals_total", "b2") == 5
    assert value("popmq_broker_quarantine_waiting", "b1") == 0
    assert [value("popmq_broker_held_seconds", b) for b in ("b1", "b2", "b3")] == [0, 0, 0]
    families = {
        metric.name: {tuple(s.labels.items()) for s in metric.samples}
        for metric in registry.collect()
    }
    for name, labels in families.items():
        assert all(label == (("broker", label[0][1]),) for label in labels), name
        assert len(labels) <= 3, name
