"""Each `popmq proxy` serves the console too: its overview shows the cluster's brokers,
proxies and etcd, a topic created there is a cluster topic (its route in etcd), a group's
lag names the broker of each queue, and a browse reads every broker's queues."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from popmq.console import ConsoleConfig
from popmq.sdk import Producer, SimpleConsumer
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


def test_a_groups_lag_names_each_queues_broker_and_browsing_reads_every_broker(
    cluster: InProcessCluster,
) -> None:
    url = cluster.console_urls[0]
    cluster.call(lambda: cluster.cluster_broker(0).create_topic("orders", 2))  # 2 per broker
    with Producer(cluster.proxies[0]) as producer:
        sent = [producer.send("orders", b"m%d" % i) for i in range(8)]
    with SimpleConsumer(cluster.proxies[1], group="billing", topic="orders") as consumer:
        held: list[object] = []
        while len(held) < 8:  # all in flight: both brokers' queues are consumed
            batch = consumer.receive(max_messages=8, invisible_duration_s=60, wait_s=5)
            assert batch
            held += batch
        with httpx.Client(base_url=url, headers={"origin": url}) as client:
            listing = client.get("/groups").text
            assert '<tr data-group="billing">' in listing
            page = client.get("/groups/view", params={"name": "billing"}).text
            rows = re.findall(r'<tr data-queue="orders/([^"]+)">', page)
            brokers = {row.split("@")[1] for row in rows}
            assert brokers == {"b1", "b2"}, rows
            assert {"retry@b1", "retry@b2"} <= set(rows)  # each broker's own retry queue
            assert "<th>Broker</th>" in page
            assert re.search(r'<tr data-topic="orders">.*?<td>8</td><td>8</td>', page, re.S)
            everything = client.get("/topics/browse", params={"name": "orders", "size": "50"})
            found = set(re.findall(r'<tr data-message="([^"]+)">', everything.text))
            assert found == {r.message_id for r in sent}
            assert "<th>Broker</th>" in everything.text
            row_brokers = re.findall(
                r'<tr data-message="[^"]+">\s*<td>\d+</td><td>(b\d)</td>', everything.text
            )
            assert len(row_brokers) == 8 and set(row_brokers) == {"b1", "b2"}
            first = sent[0]
            message = client.get(
                "/messages/view",
                params={"topic": "orders", "queue": first.queue_id, "offset": first.offset},
            )
            assert message.status_code == 200 and "m0" in message.text
            assert "(broker b" in message.text
