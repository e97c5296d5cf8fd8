"""Each `popmq proxy` serves the console too: its overview shows the cluster's brokers,
proxies and etcd, and a topic created there is a cluster topic (its route in etcd)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from popmq.console import ConsoleConfig
from tests.console.support import csrf_of
from tests.support.inprocess_cluster import InProcessCluster

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[InProcessCluster]:
    running = InProcessCluster(
        tmp_path, proxy_console=ConsoleConfig(listen="127.0.0.1:0", sample_interval_s=0.5)
    )
    try:
        running.start(brokers=2, proxies=2)
        yield running
    finally:
        running.stop()


def test_every_proxy_serves_a_console_over_the_cluster(cluster: InProcessCluster) -> None:
    first, second = cluster.console_urls
    assert first != second
    with httpx.Client(base_url=first, headers={"origin": first}) as client:
        overview = client.get("/").text
        assert re.search(r"Cluster <code>test</code>", overview)
        for broker in ("b1", "b2"):
            assert f"<td>{broker} <small>127.0.0.1:" in overview
        assert overview.count("(this one)") == 1 and "<h3>etcd</h3>" in overview
        token = csrf_of(client.get("/topics").text)
        created = client.post("/topics", data={"csrf": token, "name": "orders", "queues": "4"})
        assert created.status_code == 303
    with httpx.Client(base_url=second) as other:  # the other proxy sees the cluster's topic
        page = other.get("/topics", params={"q": "orders"}).text
        assert '<tr data-topic="orders">' in page
    topics = cluster.call(cluster.cluster_broker(1).list_topics)
    # CreateTopic's queues are per broker in cluster mode (docs/cluster.md): 4 on each of 2.
    assert [(t.name, t.queues) for t in topics] == [("orders", 8)]
