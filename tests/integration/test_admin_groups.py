"""AdminService groups and lag against the real server."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from popmq import (
    Admin,
    AlreadyExistsError,
    ExponentialBackoff,
    FailedPreconditionError,
    InvalidArgumentError,
    Message,
    NotFoundError,
    Producer,
    SimpleConsumer,
    Sql,
    Subscription,
)
from tests.support.server_thread import ServerThread


def test_group_settings_round_trip_and_survive_a_restart(server: ServerThread) -> None:
    with Admin(server.endpoint) as admin:
        admin.create_topic("orders", queues=2)
        admin.create_topic("refunds", queues=1)
        created = admin.create_group(
            "billing",
            max_delivery_attempts=5,
            exponential_backoff=ExponentialBackoff(initial_s=1, max_s=10, multiplier=2),
            fifo=True,
            subscriptions=[
                Subscription("refunds", Sql("amount > 100")),
                Subscription("orders", "TagA || TagB"),
            ],
            consume_from="last",
        )
    assert created.retry_backoff_s == (1.0, 2.0, 4.0, 8.0, 10.0)
    assert created.exponential_backoff == ExponentialBackoff(1.0, 10.0, 2.0)
    assert created.fifo and created.consume_from == "last" and not created.auto_created
    assert created.subscriptions == (
        Subscription("orders", "TagA || TagB"),
        Subscription("refunds", Sql("amount > 100")),
    )
    endpoint = server.restart()
    with Admin(endpoint) as admin:
        again = admin.get_group("billing")
        assert again == created
        assert [g.name for g in admin.list_groups()] == ["billing"]


def test_group_settings_are_validated(endpoint: str) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("orders", queues=1)
        with pytest.raises(InvalidArgumentError, match="not both"):
            admin.create_group("g", retry_backoff_s=[1], exponential_backoff=ExponentialBackoff())
        with pytest.raises(InvalidArgumentError, match=r"exponential_backoff\.multiplier 20"):
            admin.create_group("g", exponential_backoff=ExponentialBackoff(1, 10, 20))
        with pytest.raises(InvalidArgumentError, match=r"exponential_backoff\.max 0\.5s is below"):
            admin.create_group("g", exponential_backoff=ExponentialBackoff(1, 0.5, 2))
        with pytest.raises(NotFoundError, match="missing"):
            admin.create_group("g", subscriptions=[Subscription("missing")])
        with pytest.raises(InvalidArgumentError, match="subscribed twice"):
            admin.create_group("g", subscriptions=[Subscription("orders"), Subscription("orders")])
        with pytest.raises(InvalidArgumentError, match="SQL"):
            admin.create_group("g", subscriptions=[Subscription("orders", Sql("amount >"))])
        with pytest.raises(InvalidArgumentError, match="naive datetime"):
            admin.create_group("g", consume_from=datetime(2026, 1, 1))
        assert admin.list_groups() == []
        admin.create_group("g")
        with pytest.raises(AlreadyExistsError):
            admin.create_group("g")


def test_consume_from_last_skips_what_was_stored_before_the_group(endpoint: str) -> None:
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic("orders", queues=2)
        producer.send_batch("orders", [Message(b"old-1"), Message(b"old-2")])
        admin.create_group("newest", subscriptions=[Subscription("orders")], consume_from="last")
        admin.create_group("oldest", subscriptions=[Subscription("orders")], consume_from="first")
        producer.send("orders", b"new")
        with SimpleConsumer(endpoint, group="newest", topic="orders") as consumer:
            got = consumer.receive(max_messages=32, wait_s=5)
            assert [m.body for m in got] == [b"new"]
            consumer.ack(got)
        with SimpleConsumer(endpoint, group="oldest", topic="orders") as consumer:
            got = []
            deadline = time.monotonic() + 10
            while len(got) < 3 and time.monotonic() < deadline:
                batch = consumer.receive(max_messages=32, wait_s=1)
                consumer.ack(batch) if batch else None
                got.extend(batch)
            assert sorted(m.body for m in got) == [b"new", b"old-1", b"old-2"]


def test_consume_from_applies_to_a_topic_the_group_never_declared(server: ServerThread) -> None:
    """A group new to a topic starts where consume_from says on its first pop, in every
    queue at once, and that start survives a restart with nothing popped since."""
    with Admin(server.endpoint) as admin, Producer(server.endpoint) as producer:
        admin.create_topic("orders", queues=3)
        producer.send_batch("orders", [Message(f"old-{i}".encode()) for i in range(6)])
        admin.create_group("newest", consume_from="last")
        with SimpleConsumer(server.endpoint, group="newest", topic="orders") as consumer:
            assert consumer.receive(max_messages=32, wait_s=0) == []
        producer.send_batch("orders", [Message(f"new-{i}".encode()) for i in range(3)])
    endpoint = server.restart()
    with Producer(endpoint) as producer:
        producer.send("orders", b"after restart")
    with SimpleConsumer(endpoint, group="newest", topic="orders") as consumer:
        got: list[bytes] = []
        deadline = time.monotonic() + 10
        while len(got) < 4 and time.monotonic() < deadline:
            batch = consumer.receive(max_messages=32, wait_s=1)
            consumer.ack(batch) if batch else None
            got.extend(m.body for m in batch)
        assert sorted(got) == [b"after restart", b"new-0", b"new-1", b"new-2"]
        assert consumer.receive(max_messages=32, wait_s=0) == []


def test_queues_added_later_start_at_their_first_message(endpoint: str) -> None:
    """consume_from is where a group starts a topic, not each queue: a queue added to a
    topic the group already consumes holds nothing older than the group."""
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic("orders", queues=1)
        producer.send("orders", b"old")
        admin.create_group("g", subscriptions=[Subscription("orders")], consume_from="last")
        admin.update_topic("orders", queues=2)
        receipts = [producer.send("orders", f"new-{i}".encode()) for i in range(4)]
        assert {r.queue_id for r in receipts} == {0, 1}
        with SimpleConsumer(endpoint, group="g", topic="orders") as consumer:
            got: list[bytes] = []
            deadline = time.monotonic() + 10
            while len(got) < 4 and time.monotonic() < deadline:
                batch = consumer.receive(max_messages=32, wait_s=1)
                consumer.ack(batch) if batch else None
                got.extend(m.body for m in batch)
            assert sorted(got) == [f"new-{i}".encode() for i in range(4)]


def test_consume_from_a_time_starts_at_the_first_message_stored_then(endpoint: str) -> None:
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic("orders", queues=1)
        producer.send("orders", b"before")
        first = admin.peek_messages("orders")[0].store_timestamp
        cut = first + timedelta(milliseconds=1)
        while datetime.now(UTC) <= cut:  # the next message must be stored after `cut`
            time.sleep(0.001)
        producer.send("orders", b"after")
        group = admin.create_group("g", subscriptions=[Subscription("orders")], consume_from=cut)
        assert group.consume_from == "timestamp" and group.consume_from_time == cut
        with SimpleConsumer(endpoint, group="g", topic="orders") as consumer:
            assert [m.body for m in consumer.receive(max_messages=32, wait_s=5)] == [b"after"]


def test_update_changes_settings_and_a_new_subscription_starts_per_consume_from(
    endpoint: str,
) -> None:
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic("orders", queues=1)
        admin.create_topic("refunds", queues=1)
        producer.send("refunds", b"old refund")
        admin.create_group("g", subscriptions=[Subscription("orders", "TagA")])
        updated = admin.update_group(
            "g",
            max_delivery_attempts=3,
            retry_backoff_s=[2, 4],
            fifo=True,
            set_subscriptions=[Subscription("refunds")],
            remove_subscriptions=["orders"],
            consume_from="last",
        )
        assert updated.max_delivery_attempts == 3
        assert updated.retry_backoff_s == (2.0, 4.0)
        assert updated.exponential_backoff is None and updated.fifo
        assert updated.subscriptions == (Subscription("refunds"),)
        producer.send("refunds", b"new refund")
        with SimpleConsumer(endpoint, group="g", topic="refunds") as consumer:
            assert [m.body for m in consumer.receive(max_messages=8, wait_s=5)] == [b"new refund"]
        unchanged = admin.update_group("g")
        assert unchanged == updated
        with pytest.raises(InvalidArgumentError, match="does not subscribe to topic 'orders'"):
            admin.update_group("g", remove_subscriptions=["orders"])
        with pytest.raises(NotFoundError):
            admin.update_group("missing", fifo=True)


def test_delete_group_is_refused_in_flight_unless_forced_and_forgets_everything(
    endpoint: str,
) -> None:
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic("orders", queues=1)
        producer.send_batch("orders", [Message(b"a"), Message(b"b")])
        with SimpleConsumer(endpoint, group="g", topic="orders") as consumer:
            (first,) = consumer.receive(max_messages=1, wait_s=5)
            consumer.nack(first, delay_s=30)  # a retry-queue checkpoint too
            (second,) = consumer.receive(max_messages=1, wait_s=5)
            with pytest.raises(FailedPreconditionError, match="group 'g' has 2 messages in flight"):
                admin.delete_group("g")
            admin.delete_group("g", force=True)
            assert admin.list_groups() == []
            with pytest.raises(NotFoundError):
                consumer.ack(second)
        # A group of the same name starts over: both messages again, first delivery.
        with SimpleConsumer(endpoint, group="g", topic="orders") as consumer:
            got = consumer.receive(max_messages=8, wait_s=5)
            assert sorted(m.body for m in got) == [b"a", b"b"]
            assert {m.delivery_attempt for m in got} == {1}
        with pytest.raises(NotFoundError):
            admin.delete_group("missing")


def _dead_letter(endpoint: str, group: str, topic: str, bodies: list[bytes]) -> None:
    """Send `bodies` and exhaust their single delivery so they land in %DLQ%<group>."""
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_group(group, max_delivery_attempts=1)
        producer.send_batch(topic, [Message(b) for b in bodies])
        with SimpleConsumer(endpoint, group=group, topic=topic) as consumer:
            got: list[bytes] = []
            while len(got) < len(bodies):
                batch = consumer.receive(max_messages=32, wait_s=5)
                assert batch, "messages did not arrive"
                for message in batch:
                    consumer.nack(message, delay_s=0)
                got.extend(m.body for m in batch)
        deadline = time.monotonic() + 30
        while admin.lag_report(group).dlq_depth < len(bodies):
            assert time.monotonic() < deadline, "messages were not dead-lettered"
            time.sleep(0.02)


def test_lag_report_has_inflight_retry_backlog_dlq_depth_and_oldest_age(endpoint: str) -> None:
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic("orders", queues=1)
        _dead_letter(endpoint, "g", "orders", [b"dead"])
        admin.update_group("g", max_delivery_attempts=5)
        producer.send_batch("orders", [Message(b"a"), Message(b"b"), Message(b"c")])
        with SimpleConsumer(endpoint, group="g", topic="orders") as consumer:
            a, b = consumer.receive(max_messages=2, wait_s=5)
            consumer.nack(a, delay_s=0)  # revived into the retry queue at once
            deadline = time.monotonic() + 30
            while admin.lag_report("g", "orders").topics[0].retry_backlog < 1:
                assert time.monotonic() < deadline
                time.sleep(0.02)
            report = admin.lag_report("g", "orders")
            normal = [q for q in report.queues if not q.retry]
            # Lag counts from the consumer offset, which waits for b: a, b and c.
            assert [(q.lag, q.inflight) for q in normal] == [(3, 1)]
            assert normal[0].oldest_unacked_age_s > 0
            (topic,) = report.topics
            assert (topic.topic, topic.lag, topic.inflight, topic.retry_backlog) == (
                "orders", 3, 1, 1,
            )  # fmt: skip
            assert topic.oldest_unacked_age_s >= normal[0].oldest_unacked_age_s
            assert report.dlq_depth == 1
            consumer.ack(b)
        with pytest.raises(NotFoundError):
            admin.lag_report("missing")
