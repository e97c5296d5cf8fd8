"""The official RocketMQ 5 Python client (Producer, SimpleConsumer) against popmq, unchanged.

Each scenario runs the real client in a subprocess (conftest.OfficialClient) against the real
server; the test process checks the results with popmq's own SDK and broker.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from popmq import Producer, ReceivedMessage, SimpleConsumer
from tests.compat.conftest import OfficialClient
from tests.support.server_thread import ServerThread

MESSAGE_ID = re.compile(r"^01[0-9A-F]{32}$")
"""The official client's message id: "01" + MAC + pid + seconds + sequence, in hex."""
Admin = Callable[..., Any]


def drain(
    endpoint: str, group: str, topic: str, want: int, *, deadline_s: float = 30
) -> list[ReceivedMessage]:
    """Receive (and ack) with popmq's SDK until `want` messages came or the deadline passed."""
    got: list[ReceivedMessage] = []
    give_up = time.monotonic() + deadline_s
    with SimpleConsumer(endpoint, group=group, topic=topic) as consumer:
        while len(got) < want and time.monotonic() < give_up:
            batch = consumer.receive(max_messages=32, invisible_duration_s=30, wait_s=5)
            if batch:
                consumer.ack(batch)
            got += batch
    return got


def test_producer_sync_and_async_sends_keep_ids_tags_keys_and_properties(
    server: ServerThread, official: OfficialClient, admin: Admin
) -> None:
    admin(lambda b: b.create_topic("orders", 4))
    specs = [
        {"body": "plain"},
        {"body": "tagged", "tag": "TagA", "keys": ["order-1", "user-9"], "properties": {"a": "1"}},
    ]
    sync = official.run("produce", topic="orders", messages=specs)["receipts"]
    later = official.run(
        "produce",
        topic="orders",
        mode="async",
        messages=[{**s, "body": s["body"] + "-async"} for s in specs],
    )["receipts"]
    receipts = sync + later
    assert all(MESSAGE_ID.match(r["message_id"]) for r in receipts), receipts
    assert all(r["offset"] >= 0 and r["recall_handle"] is None for r in receipts)
    by_id = {m.message_id: m for m in drain(server.endpoint, "checker", "orders", 4)}
    assert set(by_id) == {r["message_id"] for r in receipts}  # the client's ids are kept
    bodies = {m.body: m for m in by_id.values()}
    assert set(bodies) == {b"plain", b"tagged", b"plain-async", b"tagged-async"}
    for body in (b"tagged", b"tagged-async"):
        tagged = bodies[body]
        assert tagged.tag == "TagA"
        assert sorted(tagged.keys) == ["order-1", "user-9"]
        assert tagged.properties == {"a": "1"}
    plain = bodies[b"plain"]
    assert plain.tag == "" and plain.keys == () and plain.delivery_attempt == 1
    assert plain.born_host  # the client reports its address
    assert abs(plain.born_timestamp.timestamp() - time.time()) < 600


def test_producer_sends_fifo_messages_that_arrive_in_order_per_group(
    server: ServerThread, official: OfficialClient, admin: Admin
) -> None:
    admin(lambda b: b.create_topic("fifo-orders", 4, message_type="fifo"))
    specs = [{"body": f"{g}:{i}", "group": g} for i in range(4) for g in ("g1", "g2", "g3")]
    receipts = official.run("produce", topic="fifo-orders", messages=specs)["receipts"]
    assert len(receipts) == 12 and all("error" not in r for r in receipts), receipts
    got = drain(server.endpoint, "fifo-reader", "fifo-orders", 12)
    per_group: dict[str, list[int]] = {}
    for message in got:
        group, index = message.body.decode().split(":")
        assert message.message_group == group
        per_group.setdefault(group, []).append(int(index))
    assert per_group == {g: [0, 1, 2, 3] for g in ("g1", "g2", "g3")}


def test_a_fifo_message_to_a_normal_topic_is_refused_by_the_client_from_the_route(
    official: OfficialClient, admin: Admin
) -> None:
    admin(lambda b: b.create_topic("orders", 2))
    result = official.run("produce", topic="orders", messages=[{"body": "x", "group": "g"}])
    (receipt,) = result["receipts"]
    assert receipt["error"] == "IllegalArgumentException"
    assert "accept message types" in receipt["text"]


def test_producer_sends_delayed_messages_delivered_when_due_and_recallable(
    server: ServerThread, official: OfficialClient, admin: Admin
) -> None:
    admin(lambda b: b.create_topic("delayed", 2, message_type="delay"))
    sent_at = time.time()
    due = official.run("produce", topic="delayed", messages=[{"body": "soon", "delay_s": 2}])
    (receipt,) = due["receipts"]
    assert receipt["recall_handle"]
    (message,) = drain(server.endpoint, "delay-reader", "delayed", 1)
    assert message.body == b"soon"
    assert message.deliver_at is not None
    # Due at a whole second 1-2 s after the send (the client sends seconds): never early.
    assert time.time() >= message.deliver_at.timestamp() - 0.05
    assert message.deliver_at.timestamp() >= int(sent_at) + 2 - 0.001
    recalled = official.run(
        "produce", topic="delayed", recall=True, messages=[{"body": "never", "delay_s": 600}]
    )
    first, second = recalled["recalled"]
    assert first == recalled["receipts"][0]["message_id"]
    assert second["error"] == "NotFoundException"  # recalled already: nothing to recall


def test_simple_consumer_acks_and_changes_invisible_duration_with_a_new_handle(
    server: ServerThread, official: OfficialClient, admin: Admin
) -> None:
    admin(lambda b: b.create_topic("orders", 2))
    with Producer(server.endpoint) as producer:
        ids = [producer.send("orders", f"m{i}".encode()).message_id for i in range(3)]
    result = official.run(
        "simple", group="billing", topic="orders", want=3, action="change_then_ack"
    )
    assert sorted(m["message_id"] for m in result["messages"]) == sorted(ids)
    events = result["events"]
    assert [e["new"] for e in events if "changed" in e] == [True] * 3
    stale = [e["old_ack"] for e in events if "old_ack" in e]
    assert [s["code"] for s in stale] == [40013] * 3  # INVALID_RECEIPT_HANDLE
    assert len([e for e in events if "acked" in e]) == 3
    with SimpleConsumer(server.endpoint, group="billing", topic="orders") as consumer:
        assert consumer.receive(wait_s=1) == []  # all acked


def test_an_unacked_message_is_redelivered_with_delivery_attempt_2(
    server: ServerThread, official: OfficialClient, admin: Admin
) -> None:
    admin(lambda b: b.create_topic("orders", 2))
    with Producer(server.endpoint) as producer:
        sent = producer.send("orders", b"retry me")
    result = official.run(
        "simple", group="billing", topic="orders", want=2, max=1, invisible_s=2,
        action="redeliver", await_s=10,
    )  # fmt: skip
    first, second = result["messages"]
    assert first["message_id"] == second["message_id"] == sent.message_id
    assert (first["delivery_attempt"], second["delivery_attempt"]) == (1, 2)
    assert second["received_ms"] - first["received_ms"] >= 1500  # after the invisible time


def test_tag_and_sql_filters_of_the_client_select_messages(
    server: ServerThread, official: OfficialClient, admin: Admin
) -> None:
    admin(lambda b: b.create_topic("orders", 2))
    with Producer(server.endpoint) as producer:
        producer.send("orders", b"a1", tag="TagA", properties={"region": "eu"})
        producer.send("orders", b"b1", tag="TagB", properties={"region": "us"})
        producer.send("orders", b"a2", tag="TagA", properties={"region": "us"})
        producer.send("orders", b"c1", tag="TagC", properties={"region": "eu"})
    tags = official.run(
        "simple", group="tag-readers", topic="orders", want=3,
        filter={"type": "tag", "expression": "TagA || TagC"},
    )  # fmt: skip
    assert sorted(m["body"] for m in tags["messages"]) == ["a1", "a2", "c1"]
    sql = official.run(
        "simple", group="sql-readers", topic="orders", want=2,
        filter={"type": "sql", "expression": "region = 'eu'"},
    )  # fmt: skip
    assert sorted(m["body"] for m in sql["messages"]) == ["a1", "c1"]
    for group in ("tag-readers", "sql-readers"):
        with SimpleConsumer(server.endpoint, group=group, topic="orders") as consumer:
            # Filtered-out messages are done for the group: nothing is left to receive.
            assert consumer.receive(wait_s=1) == []


def test_an_empty_receive_returns_no_messages(official: OfficialClient, admin: Admin) -> None:
    admin(lambda b: b.create_topic("orders", 2))
    result = official.run("simple", group="g", topic="orders", once=True, await_s=5)
    assert result["messages"] == [] and result["events"] == [{"receive": 0}]


def test_client_shutdown_releases_its_in_flight_messages_quickly(
    server: ServerThread, official: OfficialClient, admin: Admin
) -> None:
    admin(lambda b: b.create_topic("orders", 2))
    with Producer(server.endpoint) as producer:
        ids = {producer.send("orders", f"m{i}".encode()).message_id for i in range(2)}
    held = official.run(
        "simple", group="billing", topic="orders", want=2, invisible_s=300, action="none"
    )
    assert {m["message_id"] for m in held["messages"]} == ids
    shut_down = time.monotonic()
    again = drain(server.endpoint, "billing", "orders", 2)
    assert {m.message_id for m in again} == ids
    assert {m.delivery_attempt for m in again} == {2}
    # NotifyClientTermination made them visible within seconds, not after 300 s.
    assert time.monotonic() - shut_down < 30


def test_messages_of_popmqs_sdk_reach_the_official_client_intact(
    server: ServerThread, official: OfficialClient, admin: Admin
) -> None:
    admin(lambda b: b.create_topic("orders", 2))
    big = ("0123456789abcdef" * 1024).encode()  # 16 KiB: the SDK sends it zlib-compressed
    with Producer(server.endpoint) as producer:
        small = producer.send("orders", b"hello", tag="TagA", keys=["k1"], properties={"p": "v"})
        large = producer.send("orders", big)
    result = official.run("simple", group="official", topic="orders", want=2)
    by_id = {m["message_id"]: m for m in result["messages"]}
    assert set(by_id) == {small.message_id, large.message_id}
    got = by_id[small.message_id]
    assert (got["body"], got["tag"], got["keys"], got["properties"]) == (
        "hello", "TagA", ["k1"], {"p": "v"},
    )  # fmt: skip
    assert by_id[large.message_id]["body"] == big.decode()
    assert not any(m["corrupted"] for m in result["messages"])  # the MD5 digests match
