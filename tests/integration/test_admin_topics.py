"""AdminService topics against the real server: types, growth, describe, guarded delete, purge."""

from __future__ import annotations

import grpc
import pytest

from popmq import (
    Admin,
    FailedPreconditionError,
    InvalidArgumentError,
    Message,
    NotFoundError,
    Producer,
    SimpleConsumer,
    Subscription,
)
from popmq._gen.popmq.v1 import admin_pb2, admin_pb2_grpc
from tests.support.server_thread import ServerThread


def test_topics_declare_their_message_type(endpoint: str) -> None:
    with Admin(endpoint) as admin:
        for kind in ("normal", "fifo", "delay", "transaction", "mixed"):
            assert admin.create_topic(f"t-{kind}", queues=1, message_type=kind).message_type == kind
        assert admin.create_topic("t-default", queues=1).message_type == "normal"
        listed = {t.name: t.message_type for t in admin.list_topics()}
        assert listed["t-fifo"] == "fifo"
        assert admin.get_topic("t-delay").topic.message_type == "delay"
        with pytest.raises(InvalidArgumentError, match="message_type 'weird'"):
            admin.create_topic("t-weird", message_type="weird")


def test_an_unknown_message_type_number_is_rejected_by_the_server(endpoint: str) -> None:
    with grpc.insecure_channel(endpoint) as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        with pytest.raises(grpc.RpcError) as raised:
            stub.CreateTopic(admin_pb2.CreateTopicRequest(name="t", message_type=9))  # type: ignore[arg-type]
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "message_type 9 is not one of NORMAL, FIFO" in (raised.value.details() or "")


def test_update_adds_queues_that_receive_messages_and_never_removes_any(endpoint: str) -> None:
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic("orders", queues=2)
        grown = admin.update_topic("orders", 4)
        assert grown.queues == 4
        receipts = producer.send_batch("orders", [Message(f"m{i}".encode()) for i in range(8)])
        assert {r.queue_id for r in receipts} == {0, 1, 2, 3}
        assert [q.queue_id for q in admin.get_topic("orders").queues] == [0, 1, 2, 3]
        with pytest.raises(InvalidArgumentError, match="queues 3 is below the topic's current 4"):
            admin.update_topic("orders", 3)
        with pytest.raises(InvalidArgumentError, match="above the maximum 1024"):
            admin.update_topic("orders", 2000)
        with pytest.raises(NotFoundError):
            admin.update_topic("missing", 4)


def test_update_naming_the_broker_works_only_for_this_servers_broker(endpoint: str) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("orders", queues=1)
        name = admin.server_info().config["broker.broker_name"].strip('"')
        assert admin.update_topic("orders", 2, broker=name).queues == 2
        with pytest.raises(InvalidArgumentError, match=f"one broker, {name!r}, not 'other'"):
            admin.update_topic("orders", 3, broker="other")
        assert all(q.broker == "" for q in admin.get_topic("orders").queues)


def test_grown_topic_keeps_its_queue_count_across_a_restart(server: ServerThread) -> None:
    with Admin(server.endpoint) as admin:
        admin.create_topic("orders", queues=1)
        admin.update_topic("orders", 3)
    endpoint = server.restart()
    with Admin(endpoint) as admin:
        assert admin.get_topic("orders").topic.queues == 3


def test_describe_reports_counts_last_store_time_and_consumer_groups(endpoint: str) -> None:
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic("orders", queues=2)
        empty = admin.get_topic("orders")
        assert [(q.message_count, q.last_store_time) for q in empty.queues] == [(0, None)] * 2
        receipts = producer.send_batch("orders", [Message(b"a"), Message(b"b"), Message(b"c")])
        with SimpleConsumer(endpoint, group="billing", topic="orders") as consumer:
            consumer.ack(consumer.receive(max_messages=3, wait_s=5))
        described = admin.get_topic("orders")
    counts = {q.queue_id: q.message_count for q in described.queues}
    assert sum(counts.values()) == 3
    assert counts == {q: sum(1 for r in receipts if r.queue_id == q) for q in (0, 1)}
    for queue in described.queues:
        assert queue.max_offset - queue.min_offset == queue.message_count
        assert queue.last_store_time is not None
    assert described.consumer_groups == ("billing",)


def test_delete_is_refused_while_messages_are_in_flight_unless_forced(endpoint: str) -> None:
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic("orders", queues=1)
        producer.send("orders", b"x")
        with SimpleConsumer(endpoint, group="billing", topic="orders") as consumer:
            (message,) = consumer.receive(wait_s=5)
            with pytest.raises(
                FailedPreconditionError, match=r"in flight for groups billing \(1\)"
            ):
                admin.delete_topic("orders")
            assert [t.name for t in admin.list_topics()] == ["orders"]
            admin.delete_topic("orders", force=True)
            assert admin.list_topics() == []
            with pytest.raises(FailedPreconditionError, match="deleted"):
                consumer.ack(message)
        with pytest.raises(NotFoundError):
            admin.delete_topic("orders")


def test_delete_succeeds_once_the_deliveries_are_acked(endpoint: str) -> None:
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic("orders", queues=1)
        producer.send("orders", b"x")
        with SimpleConsumer(endpoint, group="billing", topic="orders") as consumer:
            consumer.ack(consumer.receive(wait_s=5))
        admin.delete_topic("orders")
        assert admin.list_topics() == []


def test_purge_empties_one_queue_and_a_lagging_group_skips_what_was_purged(
    endpoint: str,
) -> None:
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic("orders", queues=2)
        # Subscribing places the group at the first offsets, before the purge.
        admin.create_group("late", subscriptions=[Subscription("orders")])
        sent = producer.send_batch("orders", [Message(f"m{i}".encode()) for i in range(6)])
        in_queue_0 = sum(1 for r in sent if r.queue_id == 0)
        assert admin.purge_topic("orders", queue_id=0) == in_queue_0
        assert admin.purge_topic("orders", queue_id=0) == 0
        described = admin.get_topic("orders")
        assert described.queues[0].message_count == 0
        assert described.queues[1].message_count == len(sent) - in_queue_0
        with pytest.raises(InvalidArgumentError, match=r"queue_id 5 is outside 0\.\.1"):
            admin.purge_topic("orders", queue_id=5)
        with SimpleConsumer(endpoint, group="late", topic="orders") as consumer:
            got = consumer.receive(max_messages=32, wait_s=2)
            assert {m.queue_id for m in got} == {1}
            consumer.ack(got)
        lag = {(q.queue_id, q.retry): q for q in admin.get_group_lag("late", "orders")}
        assert lag[(0, False)].retention_skipped == in_queue_0
        producer.send("orders", b"after")
        assert admin.purge_topic("orders") == len(sent) - in_queue_0 + 1
        assert sum(q.message_count for q in admin.get_topic("orders").queues) == 0
