"""Queue-exclusive consumption against the real server: Heartbeat / QueryAssignment /
NotifyClientTermination, and the PushConsumer's queue-exclusive mode under churn."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import grpc
import pytest
from google.protobuf import duration_pb2

from popmq import (
    Admin,
    ConsumeResult,
    FailedPreconditionError,
    Message,
    NotFoundError,
    Producer,
    PullConsumer,
    PushConsumer,
    ReceivedMessage,
    SendReceipt,
)
from popmq._gen.popmq.v1 import messaging_pb2, messaging_pb2_grpc
from popmq.proxy.allocation import MessageQueue, allocate_consistent_hash
from tests.support.server_thread import ServerThread
from tests.support.waiting import wait_until

WAIT = 30.0
INTERVAL = 0.5
"""Heartbeat interval of the consumers in these tests (the default is 10 s)."""


@pytest.fixture
def stub(endpoint: str) -> Iterator[messaging_pb2_grpc.MessagingServiceStub]:
    with grpc.insecure_channel(endpoint) as channel:
        yield messaging_pb2_grpc.MessagingServiceStub(channel)


def seconds(value: float) -> duration_pb2.Duration:
    duration = duration_pb2.Duration()
    duration.FromNanoseconds(round(value * 1e9))
    return duration


def heartbeat(
    stub: messaging_pb2_grpc.MessagingServiceStub,
    client_id: str,
    topics: list[str],
    strategy: int = messaging_pb2.ASSIGNMENT_STRATEGY_AVERAGE,
    interval: float = 10.0,
    **fields: object,
) -> messaging_pb2.HeartbeatResponse:
    return stub.Heartbeat(
        messaging_pb2.HeartbeatRequest(
            client_id=client_id,
            group="g",
            topics=topics,
            mode=messaging_pb2.CONSUME_MODE_QUEUE_EXCLUSIVE,
            strategy=strategy,
            heartbeat_interval=seconds(interval),
            **fields,
        )
    )


def query(
    stub: messaging_pb2_grpc.MessagingServiceStub, client_id: str, topic: str, held: list[int]
) -> messaging_pb2.QueryAssignmentResponse:
    return stub.QueryAssignment(
        messaging_pb2.QueryAssignmentRequest(
            client_id=client_id, group="g", topic=topic, held_queue_ids=held
        )
    )


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        (
            messaging_pb2.ASSIGNMENT_STRATEGY_AVERAGE,
            {"c1": [1, 2, 3], "c2": [4, 5, 6], "c3": [7, 8]},
        ),
        (
            messaging_pb2.ASSIGNMENT_STRATEGY_AVERAGE_BY_CIRCLE,
            {"c1": [1, 4, 7], "c2": [2, 5, 8], "c3": [3, 6]},
        ),
    ],
)
def test_query_assignment_gives_rocketmqs_tables(
    endpoint: str,
    stub: messaging_pb2_grpc.MessagingServiceStub,
    strategy: int,
    expected: dict[str, list[int]],
) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("t", queues=8)
    for client in ["c3", "c1", "c2"]:
        answer = heartbeat(stub, client, ["t"], strategy)
        assert answer.heartbeat_interval.ToTimedelta().total_seconds() == 10.0
        assert answer.lease_duration.ToTimedelta().total_seconds() == 30.0
    got = {c: query(stub, c, "t", []) for c in ["c1", "c2", "c3"]}
    # q1..q8 of docs/push-consumer.md's table are queue ids 0..7.
    assert {c: [q + 1 for q in a.queue_ids] for c, a in got.items()} == expected
    assert len({a.epoch for a in got.values()}) == 1
    assert stub.NotifyClientTermination(
        messaging_pb2.NotifyClientTerminationRequest(client_id="c3", group="g")
    ).was_registered
    assert not stub.NotifyClientTermination(
        messaging_pb2.NotifyClientTerminationRequest(client_id="c3", group="g")
    ).was_registered
    after = query(stub, "c1", "t", list(got["c1"].queue_ids))
    assert after.epoch == got["c1"].epoch + 1


def test_consistent_hash_places_queues_like_rocketmq_for_broker_a(
    endpoint: str, stub: messaging_pb2_grpc.MessagingServiceStub
) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("ring", queues=16)
    clients = ["10.0.0.1@100", "10.0.0.2@200", "10.0.0.3@300"]
    for client in clients:
        heartbeat(stub, client, ["ring"], messaging_pb2.ASSIGNMENT_STRATEGY_CONSISTENT_HASH)
    queues = [MessageQueue("ring", "broker-a", q) for q in range(16)]
    for client in clients:
        expected = [q.queue_id for q in allocate_consistent_hash(queues, clients, client)]
        assert list(query(stub, client, "ring", []).queue_ids) == expected


def test_assignment_rpcs_reject_bad_requests_with_the_right_status(
    endpoint: str, stub: messaging_pb2_grpc.MessagingServiceStub
) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("t", queues=4)

    def status(call: Callable[[], object]) -> tuple[grpc.StatusCode, str]:
        with pytest.raises(grpc.RpcError) as info:
            call()
        error = info.value
        return error.code(), error.details()  # type: ignore[attr-defined]

    code, details = status(lambda: heartbeat(stub, "c1", ["nope"]))
    assert code == grpc.StatusCode.NOT_FOUND and "nope" in details
    code, details = status(lambda: heartbeat(stub, "c1", ["t"], interval=0.01))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "heartbeat_interval 0.01s is below the minimum 0.05s" in details
    code, details = status(lambda: heartbeat(stub, "c1", ["t"], strategy=99))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "strategy 99 is unknown" in details
    code, details = status(lambda: heartbeat(stub, "", ["t"]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "client_id is empty" in details
    code, details = status(
        lambda: heartbeat(
            stub,
            "c1",
            ["t"],
            strategy=messaging_pb2.ASSIGNMENT_STRATEGY_BY_CONFIG,
            configured_queues={"t": messaging_pb2.QueueIds(queue_ids=[4])},
        )
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "queues are 0..3" in details
    code, details = status(lambda: query(stub, "c1", "t", []))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "send Heartbeat first" in details
    heartbeat(stub, "c1", ["t"])
    code, details = status(
        lambda: heartbeat(stub, "c2", ["t"], strategy=messaging_pb2.ASSIGNMENT_STRATEGY_BY_CONFIG)
    )
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert "every member must use one strategy" in details
    code, details = status(lambda: query(stub, "c1", "t", [-1]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "queue id -1" in details


def test_by_config_members_consume_their_configured_queues(endpoint: str) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("cfg", queues=4)
    options = {
        "mode": "queue_exclusive",
        "strategy": "by_config",
        "heartbeat_interval_s": INTERVAL,
    }
    with (
        PushConsumer(
            endpoint,
            "g",
            subscriptions={"cfg": "*"},
            listener=lambda m: ConsumeResult.SUCCESS,
            configured_queues={"cfg": [3, 1]},
            **options,
        ) as first,
        PushConsumer(
            endpoint,
            "g",
            subscriptions={"cfg": "*"},
            listener=lambda m: ConsumeResult.SUCCESS,
            configured_queues={"cfg": [0]},
            **options,
        ) as second,
    ):
        wait_until(
            lambda: first.stats.assigned_queues == {"cfg": (1, 3)},
            "first to be assigned queues 1, 3 of cfg",
            WAIT,
        )
        wait_until(
            lambda: second.stats.assigned_queues == {"cfg": (0,)},
            "second to be assigned queues 0 of cfg",
            WAIT,
        )


def test_a_pop_member_and_a_queue_exclusive_member_cannot_share_a_topic(endpoint: str) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("mixed", queues=2)
    with PushConsumer(
        endpoint, "g", subscriptions={"mixed": "*"}, listener=lambda m: ConsumeResult.SUCCESS
    ):
        exclusive = PushConsumer(
            endpoint,
            "g",
            subscriptions={"mixed": "*"},
            listener=lambda m: ConsumeResult.SUCCESS,
            mode="queue_exclusive",
        )
        with pytest.raises(FailedPreconditionError, match="every member must use one mode"):
            exclusive.start()
        exclusive.close()


@dataclass(frozen=True)
class Run:
    """One listener call: which member processed which message, and when."""

    member: str
    queue_id: int
    offset: int
    start: float
    end: float


class Journal:
    """Listener calls of every member, for the exclusivity and order checks."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: list[Run] = []
        self.done: set[tuple[int, int]] = set()

    def listener(self, member: str) -> Callable[[ReceivedMessage], ConsumeResult]:
        def record(message: ReceivedMessage) -> ConsumeResult:
            start = time.monotonic()
            end = time.monotonic()
            with self.lock:
                self.runs.append(Run(member, message.queue_id, message.offset, start, end))
                self.done.add((message.queue_id, message.offset))
            return ConsumeResult.SUCCESS

        return record

    def count(self) -> int:
        with self.lock:
            return len(self.done)


@pytest.mark.slow
@pytest.mark.timeout(300)  # ~10 s here; 27-44 s with both cores busy with other work
def test_churn_loses_nothing_and_never_shares_a_queue(endpoint: str) -> None:
    """Members join and leave (3 to 6 at a time) while 20,000 messages flow."""
    total, queues = 20_000, 8
    with Admin(endpoint) as admin:
        admin.create_topic("churn", queues=queues)
    journal = Journal()
    receipts: list[SendReceipt] = []
    rng = random.Random(5)

    def produce() -> None:
        with Producer(endpoint) as producer:
            for start in range(0, total, 250):
                batch = [Message(f"{i}".encode()) for i in range(start, start + 250)]
                receipts.extend(producer.send_batch("churn", batch))
                time.sleep(0.03)  # spread the flow over the churn

    def member(name: str) -> PushConsumer:
        consumer = PushConsumer(
            endpoint,
            "churners",
            subscriptions={"churn": "*"},
            listener=journal.listener(name),
            consume_threads=4,
            mode="queue_exclusive",
            heartbeat_interval_s=1.0,
            consume_from="first",
            client_id=name,
        )
        consumer.start()
        return consumer

    members = {f"m{i}": member(f"m{i}") for i in range(3)}
    producer = threading.Thread(target=produce)
    producer.start()
    joins = leaves = 0
    serial = 3
    began = time.monotonic()
    try:
        while producer.is_alive() or time.monotonic() - began < 6:
            time.sleep(0.6)
            if len(members) < 6 and (len(members) == 3 or rng.random() < 0.5):
                name = f"m{serial}"
                serial += 1
                members[name] = member(name)
                joins += 1
            else:
                name = rng.choice(sorted(members))
                members.pop(name).close()
                leaves += 1
        producer.join(180)
        try:
            wait_until(lambda: journal.count() == total, "every message consumed", 180)
        except AssertionError:
            done = {(r.queue_id, r.offset) for r in journal.runs}
            missing = sorted({(r.queue_id, r.offset) for r in receipts} - done)
            states = {n: c.stats for n, c in members.items()}
            raise AssertionError(
                f"{len(missing)} unconsumed, first {missing[:5]}; {states}"
            ) from None
    finally:
        for consumer in members.values():
            consumer.close()
    assert joins >= 3 and leaves >= 3

    sent = {(r.queue_id, r.offset) for r in receipts}
    assert len(sent) == total
    consumed = [(r.queue_id, r.offset) for r in journal.runs]
    assert set(consumed) == sent  # none lost
    duplicates = len(consumed) - len(set(consumed))
    by_queue: dict[int, list[Run]] = defaultdict(list)
    for run in journal.runs:
        by_queue[run.queue_id].append(run)
    owners_seen = 0
    for queue_id, runs in by_queue.items():
        runs.sort(key=lambda r: r.start)
        tenures = 1
        for earlier, later in itertools.pairwise(runs):
            # One message at a time per queue, whoever the member: never two at once.
            assert earlier.end <= later.start, f"queue {queue_id}: {earlier} overlaps {later}"
            if later.member == earlier.member:
                assert later.offset == earlier.offset + 1, f"queue {queue_id} out of order"
            else:
                tenures += 1
                # The next owner continues where the last one committed: no gap.
                assert later.offset <= earlier.offset + 1, f"queue {queue_id} skipped"
        owners_seen = max(owners_seen, tenures)
    assert owners_seen > 1  # queues did change hands
    assert duplicates == 0  # graceful leaves commit before they release


def test_a_joiner_gets_queues_within_about_a_heartbeat_interval(endpoint: str) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("join", queues=4)
    options = {"mode": "queue_exclusive", "heartbeat_interval_s": INTERVAL}
    with PushConsumer(
        endpoint,
        "g",
        subscriptions={"join": "*"},
        listener=lambda m: ConsumeResult.SUCCESS,
        client_id="a",
        **options,
    ) as first:
        wait_until(
            lambda: first.stats.assigned_queues == {"join": (0, 1, 2, 3)},
            "first to be assigned queues 0, 1, 2, 3 of join",
            WAIT,
        )
        began = time.monotonic()
        with PushConsumer(
            endpoint,
            "g",
            subscriptions={"join": "*"},
            listener=lambda m: ConsumeResult.SUCCESS,
            client_id="b",
            **options,
        ) as second:
            wait_until(
                lambda: second.stats.assigned_queues == {"join": (2, 3)},
                "second to be assigned queues 2, 3 of join",
                WAIT,
            )
            joined = time.monotonic() - began
            assert first.stats.assigned_queues == {"join": (0, 1)}
        began = time.monotonic()
        wait_until(
            lambda: first.stats.assigned_queues == {"join": (0, 1, 2, 3)},
            "first to be assigned queues 0, 1, 2, 3 of join",
            WAIT,
        )
        left = time.monotonic() - began
    # Generous bounds; typically a fraction of one interval (see docs/push-consumer.md).
    assert joined < 4 * INTERVAL, joined
    assert left < 4 * INTERVAL, left


def test_a_silent_member_keeps_its_queues_until_its_claim_ends(
    endpoint: str, stub: messaging_pb2_grpc.MessagingServiceStub
) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("crash", queues=4)
    heartbeat(stub, "ghost", ["crash"], interval=INTERVAL)
    sent = time.monotonic()
    assert list(query(stub, "ghost", "crash", []).queue_ids) == [0, 1, 2, 3]
    # The ghost never calls again, as if its process was killed.
    samples: list[tuple[float, tuple[int, ...]]] = []
    with PushConsumer(
        endpoint,
        "g",
        subscriptions={"crash": "*"},
        listener=lambda m: ConsumeResult.SUCCESS,
        mode="queue_exclusive",
        heartbeat_interval_s=INTERVAL,
        client_id="survivor",
    ) as survivor:

        def took_over() -> bool:
            queues = survivor.stats.assigned_queues["crash"]
            samples.append((time.monotonic() - sent, queues))
            return queues == (0, 1, 2, 3)

        wait_until(took_over, "the survivor to take over every queue", WAIT)
    claim = 3 * INTERVAL
    assert all(queues == () for at, queues in samples if at < claim)
    assert samples[-1][0] >= claim


def test_a_new_group_starts_where_consume_from_says(endpoint: str) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("start", queues=2)
    with Producer(endpoint) as producer:
        producer.send_batch("start", [Message(f"old{i}".encode()) for i in range(6)])
        time.sleep(0.01)  # store times have millisecond resolution
        boundary = datetime.now(UTC)
        time.sleep(0.01)
        producer.send_batch("start", [Message(f"mid{i}".encode()) for i in range(4)])

    def run(group: str, consume_from: object, expect: int) -> list[bytes]:
        journal: list[bytes] = []
        lock = threading.Lock()

        def record(message: ReceivedMessage) -> ConsumeResult:
            with lock:
                journal.append(message.body)
            return ConsumeResult.SUCCESS

        with PushConsumer(
            endpoint,
            group,
            subscriptions={"start": "*"},
            listener=record,
            mode="queue_exclusive",
            heartbeat_interval_s=INTERVAL,
            consume_from=consume_from,  # type: ignore[arg-type]
        ) as consumer:
            wait_until(
                lambda: consumer.stats.assigned_queues == {"start": (0, 1)},
                "consumer to be assigned queues 0, 1 of start",
                WAIT,
            )
            with PullConsumer(endpoint, topic="start", group=group) as reader:

                def started() -> bool:
                    try:  # the group exists once the first start offset is committed
                        return all(o.committed for o in reader.get_offsets())
                    except NotFoundError:
                        return False

                wait_until(started, "the group's start offsets committed", WAIT)
            if group == "from-last":
                with Producer(endpoint) as producer:
                    producer.send_batch("start", [Message(b"new0"), Message(b"new1")])
            wait_until(lambda: len(journal) >= expect, f"{expect} messages consumed", WAIT)
        return sorted(journal)

    assert run("from-first", "first", 10) == sorted(
        [f"old{i}".encode() for i in range(6)] + [f"mid{i}".encode() for i in range(4)]
    )
    assert run("from-time", boundary, 4) == sorted(f"mid{i}".encode() for i in range(4))
    assert run("from-last", "last", 2) == [b"new0", b"new1"]


def test_a_failed_message_is_retried_in_place_and_blocks_its_queue(endpoint: str) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("orderly", queues=1)
    with Producer(endpoint) as producer:
        producer.send_batch("orderly", [Message(f"{i}".encode()) for i in range(6)])
    calls: list[tuple[int, int]] = []
    lock = threading.Lock()

    def listener(message: ReceivedMessage) -> ConsumeResult:
        with lock:
            calls.append((int(message.body), message.delivery_attempt))
        if message.body == b"2" and message.delivery_attempt < 3:
            raise RuntimeError("not yet")
        return ConsumeResult.SUCCESS

    with PushConsumer(
        endpoint,
        "g",
        subscriptions={"orderly": "*"},
        listener=listener,
        mode="queue_exclusive",
        heartbeat_interval_s=INTERVAL,
        consume_from="first",
        orderly_retry_delay_s=0.1,
    ):
        wait_until(lambda: len(calls) == 8, "8 listener calls", WAIT)
    assert calls == [(0, 1), (1, 1), (2, 1), (2, 2), (2, 3), (3, 1), (4, 1), (5, 1)]


def await_messages(
    stub: messaging_pb2_grpc.MessagingServiceStub,
    topic: str,
    positions: dict[int, int],
    wait: float,
) -> messaging_pb2.AwaitMessagesResponse:
    return stub.AwaitMessages(
        messaging_pb2.AwaitMessagesRequest(
            topic=topic,
            positions=[
                messaging_pb2.QueueOffset(queue_id=q, offset=o) for q, o in positions.items()
            ],
            long_polling_timeout=seconds(wait),
        )
    )


def test_await_messages_returns_on_arrival_or_empty_after_the_wait(
    endpoint: str, stub: messaging_pb2_grpc.MessagingServiceStub
) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("await", queues=2)
    with Producer(endpoint) as producer:
        producer.send_batch("await", [Message(b"a")] * 3)
        first = {r.queue_id: r.offset + 1 for r in producer.send_batch("await", [Message(b"b")])}
    # Already past the offsets: answered at once, with the queues' max offsets.
    ready = await_messages(stub, "await", {0: 0, 1: 0}, 5.0).ready
    assert {r.queue_id for r in ready} >= set(first)
    assert await_messages(stub, "await", {0: 100, 1: 100}, 0.2).ready == []  # timed out
    with Admin(endpoint) as admin:
        caught_up = {q.queue_id: q.max_offset for q in admin.get_topic("await").queues}
    answer: list[messaging_pb2.AwaitMessagesResponse] = []
    waiter = threading.Thread(
        target=lambda: answer.append(await_messages(stub, "await", caught_up, 20.0))
    )
    waiter.start()
    with Producer(endpoint) as producer:
        receipt = producer.send("await", b"wake")
    waiter.join(WAIT)
    assert [(r.queue_id, r.offset) for r in answer[0].ready] == [
        (receipt.queue_id, receipt.offset + 1)
    ]

    def status(call: Callable[[], object]) -> tuple[grpc.StatusCode, str]:
        with pytest.raises(grpc.RpcError) as info:
            call()
        return info.value.code(), info.value.details()  # type: ignore[attr-defined]

    code, details = status(lambda: await_messages(stub, "nope", {0: 0}, 0))
    assert code == grpc.StatusCode.NOT_FOUND
    code, details = status(lambda: await_messages(stub, "await", {2: 0}, 0))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "queues are 0..1" in details
    code, details = status(lambda: await_messages(stub, "await", {}, 0))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "positions is empty" in details
    code, details = status(lambda: await_messages(stub, "await", {0: -1}, 0))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "offset -1" in details
    code, details = status(lambda: await_messages(stub, "await", {0: 0}, 31))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "long_polling_timeout 31s is above the maximum 30s" in details


def test_a_held_wait_is_answered_when_the_server_stops(server: ServerThread) -> None:
    with Admin(server.endpoint) as admin:
        admin.create_topic("bye", queues=1)
    answer: list[object] = []
    with grpc.insecure_channel(server.endpoint) as channel:
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)

        def hold() -> None:
            try:
                answer.append(await_messages(stub, "bye", {0: 0}, 25.0))
            except grpc.RpcError as exc:
                answer.append(exc.code())

        waiter = threading.Thread(target=hold)
        waiter.start()
        wait_until(lambda: server.held_pops() == 1, "1 pop held", WAIT)
        server.stop()
        waiter.join(WAIT)
    # Answered (empty) by the shutdown, not cancelled when the grace period ran out.
    assert answer == [messaging_pb2.AwaitMessagesResponse()]


def test_an_idle_queue_exclusive_consumer_waits_without_polling(endpoint: str) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("quiet", queues=4)
    got = threading.Event()
    with PushConsumer(
        endpoint,
        "g",
        subscriptions={"quiet": "*"},
        listener=lambda m: (got.set(), ConsumeResult.SUCCESS)[1],
        mode="queue_exclusive",
        heartbeat_interval_s=INTERVAL,
    ) as consumer:
        wait_until(
            lambda: consumer.stats.assigned_queues == {"quiet": (0, 1, 2, 3)},
            "consumer to be assigned queues 0, 1, 2, 3 of quiet",
            WAIT,
        )
        time.sleep(2.0)  # idle time is what is being measured
        assert consumer.stats.receive_calls <= 8  # a first pull or two per queue, then waits
        began = time.monotonic()
        with Producer(endpoint) as producer:
            producer.send("quiet", b"hello")
        assert got.wait(WAIT)
        assert time.monotonic() - began < 5.0
