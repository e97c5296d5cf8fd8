"""Each `popmq proxy` serves the console too: its overview shows the cluster's brokers,
proxies and etcd, a topic created there is a cluster topic (its route in etcd), a group's
lag names the broker of each queue, and a browse reads every broker's queues; a group's
runtime section and a message's history name the broker of each row; dead letters ticked
on the page are redriven by the broker of each one's queue."""

from __future__ import annotations

import re
import threading
import time
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


def test_a_groups_runtime_and_a_messages_history_name_their_brokers(
    cluster: InProcessCluster,
) -> None:
    url = cluster.console_urls[1]
    cluster.call(lambda: cluster.cluster_broker(0).create_topic("orders", 1))  # 1 per broker
    with Producer(cluster.proxies[0]) as producer:
        sent = [producer.send("orders", b"m%d" % i) for i in range(6)]
    with (
        SimpleConsumer(cluster.proxies[1], group="billing", topic="orders") as consumer,
        httpx.Client(base_url=url, headers={"origin": url}) as client,
    ):
        held: list[object] = []
        while len(held) < 6:
            batch = consumer.receive(max_messages=8, invisible_duration_s=60, wait_s=5)
            assert batch
            held += batch
        waiting = threading.Thread(target=lambda: consumer.receive(max_messages=1, wait_s=4))
        waiting.start()
        try:
            section = ""
            deadline = time.monotonic() + 4
            while "data-held=" not in section and time.monotonic() < deadline:
                section = client.get(
                    "/groups/view",
                    params={"name": "billing", "part": "runtime"},
                    headers={"hx-request": "true"},
                ).text
            held_rows = re.findall(r'<tr data-held="orders/([^"]+)">', section)
            assert held_rows and all(re.fullmatch(r"(all|\d+)@b[12]", r) for r in held_rows)
        finally:
            waiting.join()
        page = client.get("/groups/view", params={"name": "billing", "size": "4"}).text
        assert "<th>Broker</th>" in page
        assert sorted(re.findall(r'<tr data-revive="([^"]+)">', page)) == ["b1", "b2"]
        rows = re.findall(
            r'<tr data-inflight="([^"]+)"><td>orders</td><td>(\d+)</td><td>(b\d)</td>', page
        )
        assert len(rows) == 4 and 'id="inflight-next"' in page
        following = re.search(r'<a href="([^"]+)#runtime" id="inflight-next"', page)
        assert following is not None
        rest = client.get(following[1].replace("&amp;", "&")).text
        rows += re.findall(
            r'<tr data-inflight="([^"]+)"><td>orders</td><td>(\d+)</td><td>(b\d)</td>', rest
        )
        assert sorted(m for m, _, _ in rows) == sorted(s.message_id for s in sent)
        assert {b for _, _, b in rows} == {"b1", "b2"}
        first = sent[0]
        message = client.get(
            "/messages/view",
            params={"topic": "orders", "queue": first.queue_id, "offset": first.offset},
        ).text
        steps = re.findall(
            r'<tr id="step-\d+" data-step="([a-z_]+)">.*?<td>(b\d)</td>', message, re.S
        )
        assert [s for s, _ in steps] == ["stored", "pop"], steps
        assert len({b for _, b in steps}) == 1  # the broker that stored it saw every step


def test_ticked_dead_letters_are_redriven_through_a_proxy_from_each_broker(
    cluster: InProcessCluster,
) -> None:
    url = cluster.console_urls[0]
    proxy = cluster.proxies[1]

    async def prepare() -> None:
        broker = cluster.cluster_broker(0)
        await broker.create_topic("orders", 1)  # 1 per broker
        await broker.create_group("billing", max_delivery_attempts=1)

    cluster.call(prepare)
    with Producer(proxy) as producer:
        for i in range(8):
            producer.send("orders", b"d%d" % i)
    with SimpleConsumer(proxy, group="billing", topic="orders") as consumer:
        seen = 0
        while seen < 8:
            batch = consumer.receive(max_messages=8, wait_s=5)
            assert batch
            for message in batch:
                consumer.nack(message)  # its only attempt: a dead letter on its broker
            seen += len(batch)
    with httpx.Client(base_url=url, headers={"origin": url}) as client:
        deadline = time.monotonic() + 30
        while True:
            page = client.get("/groups/dlq", params={"name": "billing"}).text
            picks = re.findall(r'name="pick" value="(\d+):(\d+)"', page)
            if len(picks) == 8:
                break
            assert time.monotonic() < deadline, picks
            time.sleep(0.1)
        by_queue: dict[str, str] = {}
        for queue, offset in picks:
            by_queue.setdefault(queue, f"{queue}:{offset}")
        assert set(by_queue) == {"0", "1"}  # one DLQ queue per broker, global ids
        ticked = sorted(by_queue.values())
        redrive = client.post(
            "/groups/redrive",
            data={"csrf": csrf_of(page), "name": "billing", "selected": "1", "pick": ticked},
        )
        assert redrive.status_code == 303
        done = client.get(redrive.headers["location"]).text
        assert "redrove 2 of 2 selected dead letters of group billing" in done
        after = client.get("/groups/dlq", params={"name": "billing"}).text
        left = {f"{q}:{o}" for q, o in re.findall(r'name="pick" value="(\d+):(\d+)"', after)}
        assert len(left) == 6 and not left & set(ticked)
