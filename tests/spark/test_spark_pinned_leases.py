"""Pop mode with leaseEndpoints: each lease token pinned to one proxy by a hash, so the
proxies serve and ack Spark's tokens through an etcd outage (proxy/lease_pinning.py).

The readers' driver and executor methods are called directly, as Spark would, against a
real cluster (etcd, two `popmq broker` and two `popmq proxy` processes) whose etcd is
stopped; then one streaming query on the shared SparkSession does the same end to end.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.datasource import ReadAllAvailable

from popmq import Admin, Message, Producer, SimpleConsumer, UnavailableError
from popmq.spark import OptionError
from popmq.spark._ack_retries import AckRetries
from popmq.spark.offsets import lease_token
from popmq.spark.options import ReadOptions
from popmq.spark.pop_reader import LeasePartition, PopMQPopStreamReader, lease_endpoint
from tests.spark.helpers import wait_for
from tests.support.cluster import Cluster
from tests.support.ports import free_port
from tests.support.server_thread import ServerThread
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(180)


def test_lease_endpoints_are_an_ordered_list_each_token_hashed_to_one() -> None:
    o = ReadOptions.parse(
        {"endpoint": "h1:1", "topic": "t", "mode": "pop", "group": "g",
         "leaseEndpoints": " h2:2, h1:1 "}
    )  # fmt: skip
    assert o.lease_endpoints == ("h2:2", "h1:1")
    assert ReadOptions.parse({"endpoint": "h", "topic": "t"}).lease_endpoints == ()
    for bad, message in [
        ("h1:1,,h2:2", "empty item"),
        ("h1:1,h1:1", "h1:1 more than once"),
        # Checked when options are parsed, naming the option; each item one proxy process.
        ("h1:1,h2", "leaseEndpoints=.* item 'h2'.*HOST:PORT"),
        ("h1:1,h2:99999", "leaseEndpoints=.* item 'h2:99999'.*port"),
        ("dns:///proxies.example.com:8081", "leaseEndpoints=.*may resolve to several"),
    ]:
        with pytest.raises(OptionError, match=message):
            ReadOptions.parse(
                {"endpoint": "h1:1", "topic": "t", "mode": "pop", "group": "g",
                 "leaseEndpoints": bad}
            )  # fmt: skip
    with pytest.raises(OptionError, match="leaseEndpoints applies to mode=pop only"):
        ReadOptions.parse({"endpoint": "h1:1", "topic": "t", "leaseEndpoints": "h1:1"})
    # The same proxy for a token in every process and run; tokens spread over the list;
    # one endpoint takes every token.
    tokens = [f"spark/run/{b}/{i}" for b in range(50) for i in range(4)]
    two = ("a:1", "b:2")
    assert [lease_endpoint(two, t) for t in tokens] == [lease_endpoint(two, t) for t in tokens]
    spread = Counter(lease_endpoint(two, t) for t in tokens)
    assert set(spread) == set(two) and min(spread.values()) > 50, spread
    assert {lease_endpoint(("a:1",), t) for t in tokens} == {"a:1"}


def test_failed_acks_are_retried_until_their_lease_must_have_expired_and_bounded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Times are the driver's monotonic seconds, given explicitly: no clock is read.
    retries = AckRetries(lease_s=60, max_tokens=3)
    retries.settle(["a", "b"], ["a", "b"], now=100)  # the proxy was down
    assert retries.due(now=120) == ["a", "b"]
    # Retried at the next trigger: "a" acked, "b" still failing keeps its first deadline;
    # "c" fails for the first time.
    retries.settle(["a", "b", "c"], ["b", "c"], now=130)
    assert retries.due(now=150) == ["b", "c"]
    with caplog.at_level("WARNING", logger="popmq.spark._ack_retries"):
        assert retries.due(now=160) == ["c"]  # b's lease expired at 160: its ack is dropped
    assert "1 lease acks not retried any more (b)" in caplog.text
    assert "delivered again after their invisible time" in caplog.text
    assert retries.due(now=190) == [] and len(retries) == 0

    # Bounded: past max_tokens the oldest go first, with a log line.
    caplog.clear()
    with caplog.at_level("WARNING", logger="popmq.spark._ack_retries"):
        retries.settle(["d", "e", "f", "g", "h"], ["d", "e", "f", "g", "h"], now=200)
    assert len(retries) == 3 and set(retries.due(now=201)) == {"f", "g", "h"}
    assert "2 lease acks not retried any more (d, e): more than 3" in caplog.text
    with pytest.raises(ValueError, match="must be positive"):
        AckRetries(lease_s=0)


def test_acks_pinned_to_a_proxy_gone_for_good_stop_being_retried_once_their_leases_expired(
    server: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    with Admin(server.endpoint) as admin:
        admin.create_topic("jobs", queues=2)
        admin.create_group("g")
    with Producer(server.endpoint) as producer:
        producer.send_batch("jobs", [Message(f"job-{i}".encode()) for i in range(4)])
    gone = f"127.0.0.1:{free_port()}"  # nothing listens there
    reader = PopMQPopStreamReader(
        ReadOptions.parse(
            {
                "endpoint": server.endpoint,
                "topic": "jobs",
                "mode": "pop",
                "group": "g",
                "waitSeconds": "0",
                "numPartitions": "2",
                "invisibleDuration": "1s",
                "timeout": "1s",
                "leaseEndpoints": gone,
            }
        )
    )
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        assert len(reader.partitions(start, end)) == 2
        # Spark committed the batch (its tasks failed over to nothing: no matter here).
        with caplog.at_level("INFO", logger="popmq.spark"):
            reader.latestOffset(end, ReadAllAvailable())
        # Token by token: the proxy refused the call retriably (UNAVAILABLE).
        assert caplog.text.count("acking 1 leases failed, retried next trigger") == 2

        # Retried at each later trigger until the leases must have expired; then dropped,
        # saying so, and later triggers try them no more.
        def dropped() -> bool:
            reader.latestOffset(end, ReadAllAvailable())
            return "2 lease acks not retried any more" in caplog.text

        with caplog.at_level("INFO", logger="popmq.spark"):
            wait_until(dropped, "the acks to the gone proxy dropped", 60, interval_s=0.2)
            caplog.clear()
            reader.latestOffset(end, ReadAllAvailable())
        assert "acking" not in caplog.text, caplog.text
    finally:
        reader.stop()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    running = Cluster(tmp_path / "cluster", brokers=2, proxies=2).start()
    try:
        yield running
    finally:
        running.stop()


def _reader(cluster: Cluster, **options: str) -> PopMQPopStreamReader:
    base = {"endpoint": cluster.endpoints[0], "topic": "jobs", "mode": "pop", "group": "g",
            "waitSeconds": "0", "numPartitions": "4", "maxMessagesPerPartition": "10",
            "invisibleDuration": "5s"}  # fmt: skip
    return PopMQPopStreamReader(ReadOptions.parse({**base, **options}))


def _bodies(reader: PopMQPopStreamReader, part: LeasePartition) -> list[bytes]:
    return [row["body"] for batch in reader.read(part) for row in batch.to_pylist()]


def _spanning_run(endpoints: tuple[str, str], parts: int) -> str:
    """A query run id whose first batch's `parts` tokens go to both proxies: a random one
    sends all four of them to one proxy about one time in eight."""
    for number in itertools.count():
        run = f"{number:016x}"
        tokens = [lease_token(run, 0, i) for i in range(parts)]
        if {lease_endpoint(endpoints, t) for t in tokens} == set(endpoints):
            return run
    raise AssertionError("unreachable")


def test_pinned_tokens_are_read_retried_and_acked_through_an_etcd_outage(
    cluster: Cluster,
) -> None:
    first, second = cluster.endpoints
    with Admin(first) as admin:
        admin.create_topic("jobs", queues=2)
        admin.create_group("g")
    with Producer(first) as producer:
        producer.send_batch("jobs", [Message(f"job-{i}".encode()) for i in range(100)])
    pinned = _reader(cluster, leaseEndpoints=f"{first},{second}")
    unpinned = _reader(cluster)
    try:
        start = {**pinned.initialOffset(), "run": _spanning_run((first, second), 4)}
        end = pinned.latestOffset(start, ReadAllAvailable())
        parts = pinned.partitions(start, end)
        assert {lease_endpoint((first, second), p.token) for p in parts} == {first, second}
        other_start = unpinned.initialOffset()
        other_end = unpinned.latestOffset(other_start, ReadAllAvailable())
        [other_part, *_] = unpinned.partitions(other_start, other_end)
        cluster.stop_etcd()

        # Unpinned, as before: the task fails retriably, naming etcd.
        with pytest.raises(UnavailableError, match="etcd"):
            _bodies(unpinned, other_part)
        # Pinned: every partition reads from its proxy's memory, and a retried task (the
        # same token, the same proxy) reads the same messages.
        read = {p.token: _bodies(pinned, p) for p in parts}
        assert all(len(bodies) == 10 for bodies in read.values()), read
        assert {p.token: _bodies(pinned, p) for p in parts} == read
        assert len({b for bodies in read.values() for b in bodies}) == 40
        # Spark committed the batch and asks for the next: the driver acks each token
        # through its proxy, by token, while etcd is still down; then the next batch.
        next_end = pinned.latestOffset(end, ReadAllAvailable())
        assert next_end["batch"] == 1
        # Three of its four tasks run; the fourth token was never popped, and its proxy
        # refuses its ack while etcd is down: the others are acked all the same, those
        # pinned to the same proxy too (four tokens on two proxies: one has two or more).
        batch1 = pinned.partitions(end, next_end)
        proxies = Counter(lease_endpoint((first, second), p.token) for p in batch1)
        busiest = proxies.most_common(1)[0][0]
        never = next(p for p in batch1 if lease_endpoint((first, second), p.token) == busiest)
        ran = [p for p in batch1 if p != never]
        rest = [b for p in ran for b in _bodies(pinned, p)]
        assert len(rest) == 30
        assert not set(rest) & {b for bodies in read.values() for b in bodies}
        pinned.commit(next_end)
        cluster.start_etcd()

        # The 30 messages no task read are there for the group; nothing else is: the
        # batches were acked while etcd was down (nothing in flight, no lag).
        seen = {b for bodies in read.values() for b in bodies} | set(rest)
        left: list[bytes] = []
        with SimpleConsumer(second, group="g", topic="jobs") as consumer:

            def drained() -> bool:
                for message in consumer.receive(max_messages=32, wait_s=1):
                    left.append(message.body)
                    consumer.ack(message)
                return len(left) >= 30

            wait_for(drained, f"the 30 messages no task read ({never.token}'s among them)", 60)
        assert len(left) == 30 and not set(left) & seen, sorted(set(left) & seen)[:5]
        with Admin(second) as admin:
            rows = admin.get_group_lag("g", "jobs")
        assert (sum(r.lag for r in rows), sum(r.inflight for r in rows)) == (0, 0), rows

        # A task whose proxy died fails retriably, naming it: it is never sent elsewhere.
        cluster.kill("p1")
        token = next(t for t in (f"spark/x/0/{i}" for i in range(64))
                     if lease_endpoint((first, second), t) == first)  # fmt: skip
        with pytest.raises(UnavailableError, match=f"pinned to proxy {first}"):
            _bodies(pinned, LeasePartition(token, 10, "jobs"))
    finally:
        pinned.stop()
        unpinned.stop()


def test_a_streaming_query_with_lease_endpoints_reads_and_acks_while_etcd_is_down(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    first, second = cluster.endpoints
    with Admin(first) as admin:
        admin.create_topic("jobs", queues=2)
        admin.create_group("workers")
    bodies = [f"job-{i}" for i in range(200)]
    with Producer(first) as producer:
        producer.send_batch("jobs", [Message(b.encode()) for b in bodies])
    seen: list[str] = []
    lock = threading.Lock()

    def sink(batch: DataFrame, batch_id: int) -> None:
        rows = batch.collect()
        with lock:
            seen.extend(r.body.decode() for r in rows)

    cluster.stop_etcd()
    try:
        query = (
            spark.readStream.format("popmq")
            .option("endpoint", first)
            .option("leaseEndpoints", f"{first},{second}")
            .option("topic", "jobs")
            .option("mode", "pop")
            .option("group", "workers")
            .option("numPartitions", "4")
            .option("maxMessagesPerPartition", "25")
            .option("invisibleDuration", "60s")
            .option("waitSeconds", "0")
            .load()
            .select("body")
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(240), "the AvailableNow query did not finish"
        assert query.exception() is None, query.exception()
        # Every message read once, and every batch acked, while etcd was still down.
        assert sorted(seen) == sorted(bodies), (len(seen), len(set(seen)))
        with Admin(second) as admin:
            rows = admin.get_group_lag("workers", "jobs")
        assert (sum(r.lag for r in rows), sum(r.inflight for r in rows)) == (0, 0), rows
    finally:
        cluster.start_etcd()
