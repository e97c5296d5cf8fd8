"""The cluster scenario's report: the ratios, the hop's CPU split and the projection to N
brokers are computed from the samples as the doc says (no process started here)."""

from __future__ import annotations

import pytest

from bench import report
from bench.peers.cluster import launch_cluster
from bench.peers.servers import PeerMissingError
from bench.results import ScenarioResult
from bench.scenarios import cluster
from bench.scenarios.cluster import ONE_BROKER, SERVE, TWO_BROKERS, cpu_metric, projection

_CASE = cluster.produce_case(32, 8)
_PACED = cluster.paced_case(500, 8)


def _result() -> ScenarioResult:
    """Two runs; per-message CPU chosen so every derived figure is a round number."""
    result = ScenarioResult(cluster.NAME, "8. Cluster mode", settings={"runs": 2})
    for _ in range(2):
        result.add(_CASE, SERVE, "msg/s", 10_000.0)
        result.add(_CASE, SERVE, cpu_metric("serve"), 100.0)
        result.add(_CASE, SERVE, cluster.SERVER, 100.0)
        result.add(_CASE, ONE_BROKER, "msg/s", 5_000.0)
        result.add(_CASE, ONE_BROKER, cpu_metric("proxy"), 100.0)
        result.add(_CASE, ONE_BROKER, cpu_metric("b1"), 150.0)
        result.add(_CASE, ONE_BROKER, cluster.BROKERS, 150.0)
        result.add(_CASE, ONE_BROKER, cluster.SERVER, 250.0)
        result.add(_CASE, ONE_BROKER, cpu_metric("etcd"), 1.0)
        result.add(_CASE, TWO_BROKERS, "msg/s", 6_000.0)
        result.add(_CASE, TWO_BROKERS, cpu_metric("proxy"), 50.0)
        result.add(_CASE, TWO_BROKERS, cpu_metric("b1"), 50.0)
        result.add(_CASE, TWO_BROKERS, cpu_metric("b2"), 50.0)
        result.add(_CASE, TWO_BROKERS, cluster.BROKERS, 100.0)
        result.add(_CASE, TWO_BROKERS, cluster.SERVER, 150.0)
        result.add(_CASE, TWO_BROKERS, cpu_metric("etcd"), 2.0)
        for system in cluster.SYSTEMS:
            result.add(_CASE, system, cluster.CORES, 1.9)
        for system, p99 in ((SERVE, 4.0), (ONE_BROKER, 6.0)):
            result.add(_PACED, system, "p50 ms", 2.0)
            result.add(_PACED, system, "p99 ms", p99)
            result.add(_PACED, system, cluster.SERVER, 500.0)
            result.add(_PACED, system, cluster.CORES, 0.5)
    return result


def test_projection_scales_brokers_and_adds_the_proxies_they_need() -> None:
    p = projection(50.0, 100.0, 4)
    assert p.rate == 40_000  # 4 brokers x 1e6 / 100 µs
    assert p.proxies == 2  # each proxy takes 20,000 msg/s at 50 µs
    assert p.cores == 6
    assert p.one_proxy_rate == 20_000
    one = projection(50.0, 100.0, 1)
    assert (one.rate, one.proxies, one.one_proxy_rate) == (10_000, 1, 10_000)
    assert projection(100.0, 100.0, 2).proxies == 2  # an exact fit needs no extra proxy


def test_projection_refuses_figures_it_cannot_scale() -> None:
    with pytest.raises(ValueError, match="above 0 µs"):
        projection(0.0, 100.0, 2)
    with pytest.raises(ValueError, match="at least 1"):
        projection(50.0, 100.0, 0)


def test_render_gives_the_ratios_the_hop_and_the_projection() -> None:
    text = cluster.render(_result())
    # (b) ÷ (a) = 0.50x, (c) ÷ (b) = 1.20x
    assert f"| {_CASE} | 10,000 | 5,000 | 6,000 | 0.50x | 1.20x |" in text
    # (c)'s brokers: the sum and each
    assert "| 100 (50.0 + 50.0) |" in text
    # msg/s per server core = 1e6 / 250 µs for (b)
    assert "| 250 | 100 | 150 | - | 1.00 | - | 4,000 | 1.90 |" in text
    assert "the hop costs 150 µs a message" in text
    assert "the proxy takes 100 µs (40%), the broker 150 µs (60%" in text
    assert "p99 (b) ÷ (a) 1.50x" in text
    # etcd: 1 µs x 5,000 msg/s and 2 µs x 6,000 msg/s of a core's 1e6 µs a second
    assert "etcd used 0.5% to 1.2% of a core" in text
    assert "This 2-core machine cannot show scaling" in text
    # 4 brokers at (c)'s 50 / 100 µs: 40,000 msg/s on 4 + 2 cores; one proxy caps at 20,000
    assert f"| {_CASE} | 50.0 / 100 | 4 | 2 | 6 | 40,000 | 20,000 |" in text
    assert "Assumptions:" in text


def test_the_report_has_a_cluster_section_and_does_not_list_it_as_other() -> None:
    meta = {
        "date": "today",
        "quick": True,
        "command": "python -m bench.report --quick",
        "machine": {"cores": "2", "cpu": "cpu", "memory": "1 GiB", "os": "os", "python": "3"},
        "load_start": "0",
        "load_end": "0",
        "revision": "abc",
        "redis": "redis",
        "nats": "nats",
        "profiles": {},
        "others": {},
        "other_names": report._other_names(),
    }
    doc = report.render_doc([_result()], meta, chart_name="benchmarks.png")
    assert "## 8. Cluster mode" in doc
    assert "`.venv/bin/python -m bench --scenario cluster`" in doc
    assert "cluster" not in meta["other_names"]


def test_a_cluster_without_etcd_fails_saying_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POPMQ_ETCD", "/nonexistent/etcd")
    with pytest.raises(PeerMissingError, match="make setup"), launch_cluster(brokers=1):
        pass
    with pytest.raises(PeerMissingError, match="make setup"):
        cluster.run(cluster.settings(quick=True))


def test_a_cluster_needs_a_broker() -> None:
    with pytest.raises(ValueError, match="at least 1 broker"), launch_cluster(brokers=0):
        pass
