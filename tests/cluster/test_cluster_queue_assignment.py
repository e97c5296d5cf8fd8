"""Queue-exclusive consumers across the proxies of a cluster (tests/support/inprocess_cluster.py: a
real etcd, one broker, two proxies): a group's members calling different proxies split its
queues and never consume one at the same time, and a member may move between proxies."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import grpc
import pytest
from google.protobuf import duration_pb2

from popmq import Admin, ConsumeResult, Message, Producer, PushConsumer, ReceivedMessage
from popmq._gen.popmq.v1 import messaging_pb2, messaging_pb2_grpc
from tests.support.inprocess_cluster import InProcessCluster
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(180)

INTERVAL = 0.5


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessCluster]:
    running = InProcessCluster(tmp_path_factory.mktemp("cluster")).start(brokers=1, proxies=2)
    yield running
    running.stop()


@dataclass(frozen=True)
class Run:
    member: str
    queue_id: int
    offset: int
    start: float
    end: float


class Journal:
    """Every listener call of every member, for the exclusivity check."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: list[Run] = []

    def listener(self, member: str) -> Callable[[ReceivedMessage], ConsumeResult]:
        def record(message: ReceivedMessage) -> ConsumeResult:
            start = time.monotonic()
            time.sleep(0.002)  # long enough for two consumers of one queue to overlap
            with self.lock:
                self.runs.append(
                    Run(member, message.queue_id, message.offset, start, time.monotonic())
                )
            return ConsumeResult.SUCCESS

        return record

    def done(self) -> set[tuple[int, int]]:
        with self.lock:
            return {(r.queue_id, r.offset) for r in self.runs}


def test_push_consumers_on_two_proxies_split_the_queues_and_never_share_one(
    cluster: InProcessCluster,
) -> None:
    a, b = cluster.proxies
    with Admin(a) as admin:
        admin.create_topic("split", queues=4)
    journal = Journal()

    def member(name: str, endpoint: str) -> PushConsumer:
        return PushConsumer(
            endpoint,
            "splitters",
            subscriptions={"split": "*"},
            listener=journal.listener(name),
            mode="queue_exclusive",
            heartbeat_interval_s=INTERVAL,
            consume_from="first",
            client_id=name,
        )

    with member("via-a", a) as first:
        wait_until(
            lambda: first.stats.assigned_queues == {"split": (0, 1, 2, 3)},
            "first to be assigned queues 0, 1, 2, 3 of split",
            30,
        )
        with member("via-b", b) as second, Producer(b) as producer:
            # The joiner through B waits for what A granted, then the two split the queues.
            wait_until(
                lambda: second.stats.assigned_queues == {"split": (2, 3)},
                "second to be assigned queues 2, 3 of split",
                30,
            )
            wait_until(
                lambda: first.stats.assigned_queues == {"split": (0, 1)},
                "first to be assigned queues 0, 1 of split",
                30,
            )
            sent = {
                (r.queue_id, r.offset)
                for r in producer.send_batch(
                    "split", [Message(f"{i}".encode()) for i in range(400)]
                )
            }
            wait_until(lambda: sent <= journal.done(), "every sent message consumed", 30)
            assert first.stats.assigned_queues == {"split": (0, 1)}
            assert second.stats.assigned_queues == {"split": (2, 3)}
    runs = sorted(journal.runs, key=lambda r: (r.queue_id, r.start))
    for queue_id, of_queue in itertools.groupby(runs, key=lambda r: r.queue_id):
        for earlier, later in itertools.pairwise(of_queue):
            assert earlier.end <= later.start, f"queue {queue_id}: {earlier} overlaps {later}"
    consumed_by = {(r.queue_id, r.member) for r in journal.runs if (r.queue_id, r.offset) in sent}
    assert consumed_by == {(0, "via-a"), (1, "via-a"), (2, "via-b"), (3, "via-b")}


def _seconds(value: float) -> duration_pb2.Duration:
    duration = duration_pb2.Duration()
    duration.FromNanoseconds(round(value * 1e9))
    return duration


class Member:
    """A queue-exclusive member speaking popmq.v1 by hand, through one proxy at a time."""

    def __init__(self, client_id: str, endpoint: str) -> None:
        self.client_id = client_id
        self._channel = grpc.insecure_channel(endpoint)
        self._stub = messaging_pb2_grpc.MessagingServiceStub(self._channel)

    def move_to(self, endpoint: str) -> None:
        self._channel.close()
        self._channel = grpc.insecure_channel(endpoint)
        self._stub = messaging_pb2_grpc.MessagingServiceStub(self._channel)

    def heartbeat(self) -> None:
        self._stub.Heartbeat(
            messaging_pb2.HeartbeatRequest(
                client_id=self.client_id,
                group="movers",
                topics=["moves"],
                mode=messaging_pb2.CONSUME_MODE_QUEUE_EXCLUSIVE,
                heartbeat_interval=_seconds(10.0),
            )
        )

    def query(self, held: tuple[int, ...] = ()) -> tuple[tuple[int, ...], tuple[int, ...]]:
        answer = self._stub.QueryAssignment(
            messaging_pb2.QueryAssignmentRequest(
                client_id=self.client_id, group="movers", topic="moves", held_queue_ids=held
            )
        )
        return tuple(answer.queue_ids), tuple(answer.pending_queue_ids)

    def close(self) -> None:
        self._channel.close()


def test_a_member_keeps_its_queues_when_it_moves_to_another_proxy(
    cluster: InProcessCluster,
) -> None:
    a, b = cluster.proxies
    with Admin(a) as admin:
        admin.create_topic("moves", queues=4)
    first, second = Member("m1", a), Member("m2", b)
    try:
        first.heartbeat()
        assert first.query() == ((0, 1, 2, 3), ())
        second.heartbeat()  # through B, which never saw m1
        assert second.query() == ((), (2, 3))
        # m1 fails over to B with what it holds: its claims hold there, it gives 2 and 3 up
        # when done, and m2 gets them through B.
        first.move_to(b)
        first.heartbeat()
        assert first.query(held=(0, 1, 2, 3)) == ((0, 1), ())
        assert second.query() == ((), (2, 3))
        assert first.query(held=(0, 1)) == ((0, 1), ())
        assert second.query() == ((2, 3), ())
        # m2 moves to A: nothing changes hands.
        second.move_to(a)
        second.heartbeat()
        assert second.query(held=(2, 3)) == ((2, 3), ())
        assert first.query(held=(0, 1)) == ((0, 1), ())
    finally:
        first.close()
        second.close()
