"""ResetOffsets against the real server: targets, range checks, the in-flight guard, force."""

from __future__ import annotations

import pytest

from popmq import (
    Admin,
    FailedPreconditionError,
    InvalidArgumentError,
    Message,
    NotFoundError,
    Producer,
    SimpleConsumer,
)
from tests.support.server_thread import ServerThread


def _drain(endpoint: str, group: str, topic: str) -> list[bytes]:
    """Receive and ack until a receive comes back empty."""
    bodies: list[bytes] = []
    with SimpleConsumer(endpoint, group=group, topic=topic) as consumer:
        while batch := consumer.receive(max_messages=32, wait_s=1):
            consumer.ack(batch)
            bodies.extend(m.body for m in batch)
    return sorted(bodies)


def test_reset_to_earliest_redelivers_and_to_latest_skips(endpoint: str) -> None:
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic("orders", queues=2)
        producer.send_batch("orders", [Message(f"m{i}".encode()) for i in range(4)])
        assert len(_drain(endpoint, "g", "orders")) == 4
        result = admin.reset_offsets("g", "orders", "earliest")
        assert [(c.queue_id, c.old_offset, c.new_offset) for c in result.queues] == [
            (0, 2, 0),
            (1, 2, 0),
        ]
        assert result.dropped_inflight == 0
        assert _drain(endpoint, "g", "orders") == [b"m0", b"m1", b"m2", b"m3"]
        admin.reset_offsets("g", "orders", "earliest")
        producer.send("orders", b"m4")
        admin.reset_offsets("g", "orders", "latest")
        assert _drain(endpoint, "g", "orders") == []
        assert all(q.lag == 0 for q in admin.get_group_lag("g", "orders"))


def test_reset_to_a_time_and_to_explicit_offsets(endpoint: str) -> None:
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic("orders", queues=1)
        producer.send_batch("orders", [Message(b"a"), Message(b"b"), Message(b"c")])
        assert len(_drain(endpoint, "g", "orders")) == 3
        third = admin.peek_messages("orders", queue_id=0, offset=2, max_messages=1)[0]
        admin.reset_offsets("g", "orders", third.store_timestamp)
        # Messages stored in the same millisecond share a time: at least c comes back.
        assert _drain(endpoint, "g", "orders")[-1:] == [b"c"]
        result = admin.reset_offsets("g", "orders", {0: 1})
        assert [(c.old_offset, c.new_offset) for c in result.queues] == [(3, 1)]
        assert _drain(endpoint, "g", "orders") == [b"b", b"c"]
        with pytest.raises(InvalidArgumentError, match=r"offset 9 of queue 0 is outside 0\.\.3"):
            admin.reset_offsets("g", "orders", {0: 9})
        with pytest.raises(InvalidArgumentError, match=r"queue_id 4 is outside 0\.\.0"):
            admin.reset_offsets("g", "orders", {4: 0})
        with pytest.raises(InvalidArgumentError, match="'sideways'"):
            admin.reset_offsets("g", "orders", "sideways")
        with pytest.raises(NotFoundError):
            admin.reset_offsets("missing", "orders", "earliest")


def test_reset_is_refused_in_flight_and_force_drops_the_deliveries(endpoint: str) -> None:
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic("orders", queues=1)
        producer.send_batch("orders", [Message(b"a"), Message(b"b")])
        with SimpleConsumer(endpoint, group="g", topic="orders") as consumer:
            held = consumer.receive(max_messages=2, wait_s=5)
            assert len(held) == 2
            with pytest.raises(FailedPreconditionError, match="2 messages of topic 'orders'"):
                admin.reset_offsets("g", "orders", "earliest")
            result = admin.reset_offsets("g", "orders", "earliest", force=True)
            assert result.dropped_inflight == 2
            with pytest.raises(FailedPreconditionError):
                consumer.ack(held[0])
            again = consumer.receive(max_messages=2, wait_s=5)
            assert sorted(m.body for m in again) == [b"a", b"b"]
            consumer.ack(again)


def test_a_reset_survives_a_restart(server: ServerThread) -> None:
    with Admin(server.endpoint) as admin, Producer(server.endpoint) as producer:
        admin.create_topic("orders", queues=1)
        producer.send_batch("orders", [Message(b"a"), Message(b"b")])
    assert len(_drain(server.endpoint, "g", "orders")) == 2
    with Admin(server.endpoint) as admin:
        admin.reset_offsets("g", "orders", {0: 1})
    endpoint = server.restart()
    assert _drain(endpoint, "g", "orders") == [b"b"]
