"""Stored messages through AdminService: peek, query by id and key, dead-letter redrive."""

from __future__ import annotations

import time

import pytest

from popmq import (
    Admin,
    InvalidArgumentError,
    Message,
    NotFoundError,
    Producer,
    SimpleConsumer,
)


def test_peek_reads_without_consuming(endpoint: str) -> None:
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic("orders", queues=2)
        sent = producer.send_batch(
            "orders", [Message(f"m{i}".encode(), tag="T", keys=[f"k{i}"]) for i in range(4)]
        )
        peeked = admin.peek_messages("orders")
        assert [(m.queue_id, m.offset) for m in peeked] == sorted(
            (r.queue_id, r.offset) for r in sent
        )
        assert {m.message_id for m in peeked} == {r.message_id for r in sent}
        assert all(m.delivery_attempt == 1 and m.tag == "T" for m in peeked)
        assert len(admin.peek_messages("orders", max_messages=3)) == 3
        one = admin.peek_messages("orders", queue_id=1, offset=1, max_messages=5)
        assert [(m.queue_id, m.offset) for m in one] == [(1, 1)]
        with pytest.raises(InvalidArgumentError, match="needs a queue_id"):
            admin.peek_messages("orders", offset=0)
        with pytest.raises(InvalidArgumentError, match="max_messages 300 is above the maximum 256"):
            admin.peek_messages("orders", max_messages=300)
        with SimpleConsumer(endpoint, group="g", topic="orders") as consumer:
            got = consumer.receive(max_messages=32, wait_s=5)
            assert len(got) == 4 and {m.delivery_attempt for m in got} == {1}
            # From the group's position: what it has not finished, in flight or not.
            assert len(admin.peek_messages("orders", group="g")) == 4
            consumer.ack(got)
        assert admin.peek_messages("orders", group="g") == []


def test_query_by_id_and_by_key(endpoint: str) -> None:
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic("orders", queues=2)
        first = producer.send("orders", b"one", keys=["order-1", "shared"])
        second = producer.send("orders", b"two", keys=["shared"])
        found = admin.query_message("orders", first.message_id)
        assert (found.body, found.queue_id, found.offset) == (b"one", first.queue_id, first.offset)
        assert found.keys == ("order-1", "shared")
        by_key = admin.query_messages_by_key("orders", "shared")
        assert {m.message_id for m in by_key} == {first.message_id, second.message_id}
        assert admin.query_messages_by_key("orders", "nobody") == []
        with pytest.raises(NotFoundError):
            admin.query_message("orders", "0000")
        with pytest.raises(InvalidArgumentError, match="message_id is empty"):
            admin.query_message("orders", "")


def _dead_letter(endpoint: str, group: str, topic: str, bodies: list[bytes]) -> None:
    """Send `bodies` and exhaust their single delivery so they land in %DLQ%<group>."""
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_group(group, max_delivery_attempts=1)
        producer.send_batch(topic, [Message(b) for b in bodies])
        with SimpleConsumer(endpoint, group=group, topic=topic) as consumer:
            seen = 0
            while seen < len(bodies):
                batch = consumer.receive(max_messages=32, wait_s=5)
                assert batch, "messages did not arrive"
                for message in batch:
                    consumer.nack(message, delay_s=0)
                seen += len(batch)
        deadline = time.monotonic() + 30
        while admin.lag_report(group).dlq_depth < len(bodies):
            assert time.monotonic() < deadline, "messages were not dead-lettered"
            time.sleep(0.02)


def test_redrive_moves_dead_letters_back_as_new_first_deliveries(endpoint: str) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("orders", queues=2)
        _dead_letter(endpoint, "g", "orders", [f"m{i}".encode() for i in range(5)])
        dead = admin.peek_messages("%DLQ%g", max_messages=10)
        assert len(dead) == 5 and {m.origin_topic for m in dead} == {"orders"}
        admin.update_group("g", max_delivery_attempts=5)
        partial = admin.redrive_dead_letters("g", max_messages=2)
        assert (partial.moved, partial.dropped, partial.remaining) == (2, 0, 3)
        rest = admin.redrive_dead_letters("g")
        assert (rest.moved, rest.dropped, rest.remaining) == (3, 0, 0)
        assert admin.lag_report("g").dlq_depth == 0
        assert admin.redrive_dead_letters("g").moved == 0
        with SimpleConsumer(endpoint, group="g", topic="orders") as consumer:
            got = []
            deadline = time.monotonic() + 15
            while len(got) < 5 and time.monotonic() < deadline:
                got.extend(consumer.receive(max_messages=32, wait_s=1))
            assert sorted(m.body for m in got) == [f"m{i}".encode() for i in range(5)]
            assert {m.delivery_attempt for m in got} == {1}
            consumer.ack(got)
        with pytest.raises(NotFoundError):
            admin.redrive_dead_letters("nobody")


def test_redriven_copies_are_found_by_id_and_key(endpoint: str) -> None:
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic("orders", queues=1)
        admin.create_group("g", max_delivery_attempts=1)
        sent = producer.send("orders", b"poison", keys=["order-7"])
        with SimpleConsumer(endpoint, group="g", topic="orders") as consumer:
            (message,) = consumer.receive(max_messages=1, wait_s=5)
            consumer.nack(message, delay_s=0)
        deadline = time.monotonic() + 30
        while admin.lag_report("g").dlq_depth < 1:
            assert time.monotonic() < deadline, "the message was not dead-lettered"
            time.sleep(0.02)
        assert admin.redrive_dead_letters("g").moved == 1
        copy = admin.query_message("orders", sent.message_id)
        assert (copy.body, copy.queue_id, copy.offset) == (b"poison", 0, sent.offset + 1)
        assert copy.delivery_attempt == 1
        by_key = admin.query_messages_by_key("orders", "order-7")
        assert sorted(m.offset for m in by_key) == [sent.offset, sent.offset + 1]


def test_redrive_drops_letters_whose_topic_was_deleted(endpoint: str) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("gone", queues=1)
        admin.create_topic("kept", queues=1)
        _dead_letter(endpoint, "g", "gone", [b"x"])
        with (
            Producer(endpoint) as producer,
            SimpleConsumer(endpoint, group="g", topic="kept") as consumer,
        ):
            producer.send("kept", b"y")
            (message,) = consumer.receive(wait_s=5)
            consumer.nack(message, delay_s=0)
        deadline = time.monotonic() + 30
        while admin.lag_report("g").dlq_depth < 2:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        admin.delete_topic("gone")
        result = admin.redrive_dead_letters("g")
        assert (result.moved, result.dropped, result.remaining) == (1, 1, 0)
        assert [m.body for m in admin.peek_messages("kept")][-1] == b"y"
