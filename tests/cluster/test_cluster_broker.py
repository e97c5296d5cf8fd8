"""Cluster mode's data path and admin through proxies (ClusterBroker), in one process: a real
etcd, three brokers and two proxies (tests/support/inprocess_cluster.py), driven by the SDK."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from popmq import (
    Admin,
    InvalidArgumentError,
    Message,
    NotFoundError,
    Producer,
    PullConsumer,
    ReceivedMessage,
    SimpleConsumer,
    UnavailableError,
)
from popmq._gen.popmq.v1 import messaging_pb2, messaging_pb2_grpc
from popmq.broker_core import InvalidReceiptHandleError as CoreInvalidReceiptHandleError
from popmq.broker_core import NotFoundError as CoreNotFoundError
from popmq.broker_core import PoppedMessage, ReceiptHandleSupersededError, received_messages_wire
from popmq.broker_core.handles import issuer_of
from tests.support.inprocess_cluster import InProcessCluster

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessCluster]:
    running = InProcessCluster(tmp_path_factory.mktemp("cluster")).start(brokers=3, proxies=2)
    yield running
    running.stop()


def _drain(consumer: SimpleConsumer, want: int, wait_s: float = 2) -> list[ReceivedMessage]:
    got: list[ReceivedMessage] = []
    deadline = time.monotonic() + 30
    while len(got) < want and time.monotonic() < deadline:
        got += consumer.receive(max_messages=32, wait_s=wait_s)
    return got


def test_a_topic_spreads_over_every_broker_and_any_proxy_serves_any_step(
    cluster: InProcessCluster,
) -> None:
    a, b = cluster.proxies
    with Admin(a) as admin_a, Admin(b) as admin_b, Producer(a) as producer:
        topic = admin_a.create_topic("spread", queues=2)
        assert topic.queues == 6  # 2 per broker, RocketMQ's per-broker count
        described = admin_b.get_topic("spread")
        assert [q.queue_id for q in described.queues] == list(range(6))
        assert Counter(q.broker for q in described.queues) == {"b1": 2, "b2": 2, "b3": 2}

        sent = {producer.send("spread", f"m{i}".encode()).message_id for i in range(60)}
        stored = Counter(
            q.broker for q in admin_b.get_topic("spread").queues for _ in range(q.message_count)
        )
        assert set(stored) == {"b1", "b2", "b3"}  # every broker took a share
        assert sum(stored.values()) == 60

    with (
        SimpleConsumer(b, group="spreaders", topic="spread") as through_b,
        SimpleConsumer(a, group="spreaders", topic="spread") as through_a,
    ):
        got = _drain(through_b, 60)
        assert {m.message_id for m in got} == sent
        assert {m.queue_id for m in got} == set(range(6))
        through_a.ack(got)  # B's handles, acked through A
        assert through_b.receive(wait_s=0) == []
    with Admin(b) as admin:
        report = admin.lag_report("spreaders", "spread")
        normal = [q for q in report.queues if not q.retry]
        assert sorted(q.queue_id for q in normal) == list(range(6))
        assert {q.broker for q in normal} == {"b1", "b2", "b3"}
        assert all(q.lag == 0 and q.inflight == 0 for q in report.queues)
        assert sum(t.lag for t in report.topics) == 0


def test_a_held_receive_wakes_when_a_message_arrives_on_any_broker(
    cluster: InProcessCluster,
) -> None:
    a, b = cluster.proxies
    with Admin(a) as admin:
        admin.create_topic("wake", queues=1)
    with SimpleConsumer(b, group="wakers", topic="wake") as consumer, Producer(a) as producer:
        assert consumer.receive(wait_s=0) == []
        for round_ in range(3):
            sender = producer.send_async("wake", f"w{round_}".encode())
            started = time.monotonic()
            got = consumer.receive(max_messages=4, wait_s=20)
            waited = time.monotonic() - started
            assert [m.body for m in got] == [f"w{round_}".encode()]
            assert waited < 10, f"a held receive took {waited:.1f}s to see the message"
            sender.result()
            consumer.ack(got)


def test_fifo_groups_keep_their_order_across_brokers(cluster: InProcessCluster) -> None:
    a, b = cluster.proxies
    with Admin(a) as admin, Producer(a) as producer:
        admin.create_topic("ordered", queues=2, message_type="fifo")
        for i in range(20):
            for group in ("g1", "g2", "g3", "g4"):
                producer.send("ordered", f"{group}-{i}".encode(), message_group=group)
    seen: dict[str, list[int]] = {}
    with SimpleConsumer(b, group="fifo-readers", topic="ordered") as consumer:
        deadline = time.monotonic() + 30
        while sum(map(len, seen.values())) < 80 and time.monotonic() < deadline:
            for message in consumer.receive(max_messages=32, wait_s=2):
                group, number = message.body.decode().split("-")
                seen.setdefault(group, []).append(int(number))
                consumer.ack(message)
    assert seen == {g: list(range(20)) for g in ("g1", "g2", "g3", "g4")}


def test_handles_recall_and_errors_work_through_any_proxy(cluster: InProcessCluster) -> None:
    a, b = cluster.proxies
    with Admin(a) as admin, Producer(a) as producer, Producer(b) as producer_b:
        admin.create_topic("later", queues=1, message_type="delay")
        receipt = producer.send("later", b"never", delay_s=60)
        assert producer_b.recall("later", receipt.recall_handle) == receipt.message_id
        with pytest.raises(NotFoundError, match="'missing' does not exist"):
            producer.send("missing", b"x")
        admin.create_topic("handles", queues=1)
        producer.send("handles", b"again")
    with (
        SimpleConsumer(a, group="h", topic="handles") as ca,
        SimpleConsumer(b, group="h", topic="handles") as cb,
    ):
        [first] = _drain(ca, 1)
        cb.change_invisible_duration(first, 30)  # through B: first gets a new handle
        cb.nack(first, delay_s=1)
        [again] = _drain(ca, 1, wait_s=5)
        assert again.message_id == first.message_id and again.delivery_attempt == 2
        ca.ack(again)
    with PullConsumer(a, group="pullers", topic="handles") as puller:
        with pytest.raises(InvalidArgumentError, match=r"queue 9 does not exist.*0\.\.2"):
            puller.pull(9, 0)
        pulled = [m.body for q in range(3) for m in puller.pull(q, 0).messages]
        assert pulled == [b"again"]  # the one message, on whichever broker took it


def test_a_malformed_handle_is_refused_by_name(cluster: InProcessCluster) -> None:
    with grpc.insecure_channel(cluster.proxies[0]) as channel:
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        answer = stub.Ack(messaging_pb2.AckRequest(group="h", receipt_handles=["junk"]))
    [result] = answer.results
    assert result.code == "INVALID_ARGUMENT"
    assert "malformed" in result.message


def test_a_broker_added_later_takes_queues_of_a_topic(tmp_path: Path) -> None:
    cluster = InProcessCluster(tmp_path).start(brokers=2, proxies=1)
    try:
        [proxy] = cluster.proxies
        with Admin(proxy) as admin, Producer(proxy) as producer:
            admin.create_topic("grow", queues=2)
            cluster.add_broker("b3")
            grown = admin.update_topic("grow", 3, broker="b3")
            assert grown.queues == 7  # 2 + 2, then b3's 3 take ids 4..6
            described = admin.get_topic("grow")
            assert [(q.queue_id, q.broker) for q in described.queues][4:] == [
                (4, "b3"), (5, "b3"), (6, "b3"),
            ]  # fmt: skip
            with pytest.raises(InvalidArgumentError, match="queues are never removed"):
                admin.update_topic("grow", 1, broker="b3")
            receipts = [producer.send("grow", b"x") for _ in range(30)]
            assert {r.queue_id for r in receipts} >= {4, 5, 6}
    finally:
        cluster.stop()


def test_inspect_group_pages_every_brokers_messages_in_flight_each_naming_its_broker(
    cluster: InProcessCluster,
) -> None:
    """... and the SDK client that popped them: its id rides each pop from the proxy to
    every broker (the sweep's hop stream, a held pop's unary call)."""
    a, b = cluster.proxies
    with Admin(a) as admin, Producer(a) as producer:
        admin.create_topic("inspected", queues=1)
        sent = {producer.send("inspected", f"m{i}".encode()).message_id for i in range(9)}
    with SimpleConsumer(
        b, group="inspectors", topic="inspected", client_id="inspector-1"
    ) as consumer:
        got = _drain(consumer, 9)
        assert {m.message_id for m in got} == sent
    rows = []
    with Admin(b) as admin:
        token = ""
        while True:
            view = admin.inspect_group("inspectors", "inspected", page_size=2, page_token=token)
            assert len(view.inflight) <= 2
            rows += view.inflight
            token = view.next_page_token
            if not token:
                break
        assert sorted(r.broker for r in view.revive) == ["b1", "b2", "b3"]
        # One row for the client, summed over the three brokers, whatever the page.
        (holder,) = view.consumers
        assert (holder.client_id, holder.count) == ("inspector-1", 9)
        assert holder.earliest_invisible_until is not None
        with pytest.raises(InvalidArgumentError, match="page_token"):
            admin.inspect_group("inspectors", page_token="b9/1.0.0")
    assert sorted(r.message_id for r in rows) == sorted(sent)
    assert {r.client_id for r in rows} == {"inspector-1"}
    by_queue = {(r.queue_id, r.broker) for r in rows}  # global queue ids, their brokers
    assert {q for q, _ in by_queue} == {0, 1, 2} and {b for _, b in by_queue} == {"b1", "b2", "b3"}
    assert len(by_queue) == 3
    assert [r.broker for r in rows] == sorted(r.broker for r in rows)  # broker by broker


def test_message_history_through_a_proxy_names_the_broker_and_the_global_queue(
    cluster: InProcessCluster,
) -> None:
    a, b = cluster.proxies
    with Admin(a) as admin, Producer(a) as producer:
        admin.create_topic("histories", queues=1)
        sent = producer.send("histories", b"x")
    with SimpleConsumer(b, group="historians", topic="histories", client_id="h1") as consumer:
        (got,) = _drain(consumer, 1)
        consumer.nack(got, delay_s=30)
    with Admin(b) as admin:
        events = admin.message_history("histories", sent.message_id, group="historians")
        with pytest.raises(NotFoundError):
            admin.message_history("histories", "missing-id")
    assert [(e.event, e.client_id) for e in events] == [
        ("stored", ""),
        ("pop", "h1"),
        ("nack", "h1"),
    ]
    (broker,) = {e.broker for e in events}  # one broker stored it and saw every step
    assert broker in {"b1", "b2", "b3"}
    assert {e.queue_id for e in events} == {sent.queue_id} == {got.queue_id}  # global ids


@pytest.mark.parametrize("earlier_b2", [False, True], ids=["current", "b2-of-an-earlier-release"])
def test_a_pops_deliveries_cross_the_proxy_as_the_brokers_wrote_them(
    cluster: InProcessCluster, earlier_b2: bool
) -> None:
    """Each broker writes its deliveries as the proxy's client gets them, numbered by the
    route's global queue ids, and the proxy joins the brokers' answers unread: the bytes it
    wrote before from the PoppedMessages. A broker of an earlier release (b2 in the second
    case: it answers PoppedMessages) has its deliveries written by the proxy into the same
    bytes."""
    a = cluster.proxies[0]
    topic = f"received-{int(earlier_b2)}"
    with Admin(a) as admin, Producer(a) as producer:
        admin.create_topic(topic, queues=2)  # 6 queues, 2 on each broker
        for i in range(30):  # one by one: a batch is stored whole on one broker
            producer.send(topic, f"r{i}".encode(), tag=f"t{i % 3}", keys=[f"k{i}"])
    broker = cluster.cluster_broker(0)
    servicer = cluster.brokers["b2"].servicer
    assert servicer is not None
    servicer.answers_received_form = not earlier_b2

    async def scenario() -> tuple[list[bytes], list[object], list[object]]:
        wires: list[bytes] = []
        handles: list[str] = []
        for _ in range(30):
            if len(handles) >= 30:
                break
            batch = await broker.pop_received("receivers", topic, max_messages=32, wait_s=1)
            wires.append(batch.wire())
            handles += batch.receipt_handles()
        # The objects' path for the same deliveries: each broker's, numbered by the route.
        delivered: list[object] = list(await broker.get_deliveries("receivers", handles))
        acked: list[object] = list(await broker.ack("receivers", handles))
        return wires, delivered, acked

    try:
        wires, delivered, acked = cluster.call(scenario)
    finally:
        servicer.answers_received_form = True
    assert acked == [None] * 30
    objects = [d for d in delivered if isinstance(d, PoppedMessage)]
    assert len(objects) == 30
    assert b"".join(wires) == received_messages_wire(objects)
    first = messaging_pb2.PopResponse.FromString(wires[0]).messages
    assert len(first) == 30  # one sweep over the three brokers took them all
    assert {m.queue_id for m in first} == set(range(6))
    assert sorted(m.body for m in first) == sorted(f"r{i}".encode() for i in range(30))


def test_a_stopped_brokers_handles_fail_retriably_and_sends_go_elsewhere(tmp_path: Path) -> None:
    cluster = InProcessCluster(tmp_path).start(brokers=2, proxies=1)
    try:
        [proxy] = cluster.proxies
        with Admin(proxy) as admin, Producer(proxy) as producer:
            admin.create_topic("gone", queues=1)
            for i in range(10):
                producer.send("gone", f"m{i}".encode())
        with SimpleConsumer(proxy, group="g", topic="gone") as consumer:
            got = _drain(consumer, 10)
            cluster.stop_broker("b2")
            on_b2 = [m for m in got if m.queue_id == 1]
            assert on_b2, "both brokers took messages"
            with pytest.raises(UnavailableError, match="'b2' is not a live member"):
                consumer.ack(on_b2)
            consumer.ack([m for m in got if m.queue_id == 0])
        with Producer(proxy) as producer:
            assert {producer.send("gone", b"y").queue_id for _ in range(5)} == {0}
        with Admin(proxy) as admin, pytest.raises(UnavailableError, match="b2"):
            admin.get_topic("gone")
        with Admin(proxy) as admin, pytest.raises(UnavailableError, match=r"inspect group 'g'.*b2"):
            admin.inspect_group("g")
        with Admin(proxy) as admin, pytest.raises(UnavailableError, match="b2"):
            admin.message_history("gone", "any-id")
        # a write over every broker starts only when all are live: nothing moved on b1
        with (
            Admin(proxy) as admin,
            pytest.raises(UnavailableError, match=r"broker\(s\) b2 are not"),
        ):
            admin.redrive_dead_letters("g")
    finally:
        cluster.stop()


def test_batches_are_stored_whole_on_one_broker(cluster: InProcessCluster) -> None:
    a, _ = cluster.proxies
    with Admin(a) as admin, Producer(a) as producer:
        admin.create_topic("batches", queues=2)
        for _ in range(6):
            receipts = producer.send_batch("batches", [Message(b"x") for _ in range(8)])
            brokers = {
                q.broker
                for q in admin.get_topic("batches").queues
                if q.queue_id in {r.queue_id for r in receipts}
            }
            assert len(brokers) == 1


def test_a_send_split_over_brokers_is_refused_whole_as_one_process_refuses_it(
    cluster: InProcessCluster,
) -> None:
    a, _ = cluster.proxies
    with Admin(a) as admin:
        admin.create_topic("whole-a", queues=3)
        admin.create_topic("whole-b", queues=3)
        with grpc.insecure_channel(a) as channel:
            stub = messaging_pb2_grpc.MessagingServiceStub(channel)
            split = messaging_pb2.SendMessagesRequest(
                messages=[
                    messaging_pb2.OutgoingMessage(topic="whole-a", body=b"ok"),
                    messaging_pb2.OutgoingMessage(topic="whole-b", body=b""),
                ]
            )
            with pytest.raises(grpc.RpcError) as refused:
                stub.SendMessages(split, timeout=10)
            with pytest.raises(grpc.RpcError) as empty:
                stub.SendMessages(messaging_pb2.SendMessagesRequest(), timeout=10)
        # Named by its index in the send, not in the part a broker would have stored.
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert refused.value.details().startswith("messages[1].body is empty")
        assert all(q.max_offset == 0 for q in admin.get_topic("whole-a").queues)  # nothing
        assert empty.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert empty.value.details() == "a send needs at least one message"


def test_a_lease_popped_through_one_proxy_replays_through_the_other(
    cluster: InProcessCluster,
) -> None:
    a, b = cluster.proxies
    with Admin(a) as admin, Producer(a) as producer:
        admin.create_topic("leased", queues=1)
        sent = {producer.send("leased", f"l{i}".encode()).message_id for i in range(9)}
    with (
        SimpleConsumer(a, group="spark", topic="leased") as ca,
        SimpleConsumer(b, group="spark", topic="leased") as cb,
    ):
        first = ca.receive_lease("spark/run/0/0", page=0, max_messages=16, wait_s=2)
        assert not first.replayed and len(first.messages) >= 1
        again = cb.receive_lease("spark/run/0/0", page=0, max_messages=16, wait_s=2)
        assert again.replayed
        assert [m.message_id for m in again.messages] == [m.message_id for m in first.messages]
        assert [m.queue_id for m in again.messages] == [m.queue_id for m in first.messages]
        assert [m.body for m in again.messages] == [m.body for m in first.messages]
        [result] = cb.ack_leases(["spark/run/0/0"])
        assert result.code == "OK"
        rest = _drain(cb, len(sent) - len(first.messages))
        assert {m.message_id for m in rest} | {m.message_id for m in first.messages} == sent
        cb.ack(rest)


def test_follow_handles_asks_the_broker_that_issued_each_handle(cluster: InProcessCluster) -> None:
    a = cluster.proxies[0]
    with Admin(a) as admin, Producer(a) as producer:
        admin.create_topic("followed", queues=1)  # one queue on each broker
        for i in range(9):  # one by one: a batch is stored whole on one broker
            producer.send("followed", f"f{i}".encode())
    broker = cluster.cluster_broker(0)

    async def scenario() -> tuple[list[str], list[tuple[str, int]], list[object], list[object]]:
        popped: list[PoppedMessage] = []
        for _ in range(20):
            if len(popped) >= 9:
                break
            popped += await broker.pop("follow", "followed", max_messages=16, wait_s=1)
        old = [m.receipt_handle for m in popped]
        moved = [await broker.change_invisible_time("follow", h, 60) for h in old]
        followed: list[object] = list(await broker.follow_handles("follow", [*old, "junk"]))
        refused: list[object] = list(await broker.ack("follow", old))
        assert await broker.ack("follow", [h for h, _ in moved]) == [None] * len(old)
        return old, moved, followed, refused

    old, moved, followed, refused = cluster.call(scenario)
    assert len(old) == 9 and len({issuer_of(h) for h in old}) >= 2
    assert followed[:-1] == moved  # each from its own broker, in order
    assert isinstance(followed[-1], CoreInvalidReceiptHandleError)
    assert all(isinstance(r, ReceiptHandleSupersededError) for r in refused)


def test_a_group_push_that_arrives_after_the_delete_does_not_bring_the_group_back(
    cluster: InProcessCluster,
) -> None:
    a, b = cluster.proxies[:2]
    with Admin(a) as admin:
        admin.create_group("late", max_delivery_attempts=7)
    proxy = cluster.cluster_broker(1)

    async def scenario() -> list[str]:
        record = proxy.groups.get("late")
        await cluster.cluster_broker(0).delete_group("late")
        errors: list[str] = []
        for name in proxy.pool.names():
            # The update another proxy pushed before the delete, arriving only now.
            try:
                await proxy.pool.get(name).apply_group(
                    "late", record.state, create_time_ms=record.create_time_ms,
                    revision=record.revision,
                )  # fmt: skip
            except CoreNotFoundError as error:
                errors.append(str(error))
        return errors

    errors = cluster.call(scenario)
    assert len(errors) == 3 and all("deleted at cluster revision" in e for e in errors), errors
    with Admin(b) as admin:
        assert "late" not in [g.name for g in admin.list_groups()]
    for server in cluster.brokers.values():
        local = cluster.call(server.broker.list_groups)
        assert "late" not in [g.name for g in local]


def test_named_dead_letters_are_redriven_by_the_broker_of_their_global_queue(
    cluster: InProcessCluster,
) -> None:
    a, b = cluster.proxies
    with Admin(a) as admin, Producer(a) as producer:
        admin.create_topic("picks", queues=1)
        admin.create_group("pickers", max_delivery_attempts=1)
        for i in range(12):
            producer.send("picks", f"p{i}".encode())
    with SimpleConsumer(b, group="pickers", topic="picks") as consumer:
        for message in _drain(consumer, 12):
            consumer.nack(message, delay_s=0)
    with Admin(a) as admin:
        deadline = time.monotonic() + 30
        while admin.lag_report("pickers").dlq_depth < 12:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        dead = admin.peek_messages("%DLQ%pickers", max_messages=64)
    assert {m.queue_id for m in dead} == {0, 1, 2}  # one DLQ queue per broker, global ids
    picked = [next(m for m in dead if m.queue_id == q) for q in (2, 1)]
    with Admin(b) as admin:
        result = admin.redrive_dead_letters(
            "pickers",
            messages=[(m.queue_id, m.offset) for m in picked] + [(0, 10_000)],
        )
        assert [o.outcome for o in result.outcomes] == ["moved", "moved", "not_found"]
        assert [(o.queue_id, o.offset) for o in result.outcomes[:2]] == [
            (m.queue_id, m.offset) for m in picked
        ]
        assert (result.moved, result.dropped) == (2, 0)
        left = admin.peek_messages("%DLQ%pickers", max_messages=64)
        assert {(m.queue_id, m.offset) for m in left} == {(m.queue_id, m.offset) for m in dead} - {
            (m.queue_id, m.offset) for m in picked
        }
        with pytest.raises(InvalidArgumentError, match="queue"):
            admin.redrive_dead_letters("pickers", messages=[(3, 0)])
    with SimpleConsumer(a, group="pickers", topic="picks") as consumer:
        back = _drain(consumer, 2)
        assert sorted(m.body for m in back) == sorted(m.body for m in picked)
