"""The feature matrix of the official Node.js client (rocketmq-client-nodejs) against a real
server (docs/compatibility.md, "The Node.js client").

Runs tests/compat/node_matrix.js in a `node` subprocess; each scenario does several checks in
one client process, and the test process checks the results with popmq's SDK and broker.
Skipped, as test_official_node_client.py is, without node and the npm package.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from popmq import Admin, Credentials, Policy, Producer, SimpleConsumer
from popmq.broker_core.types import GroupSettings
from popmq.security.config import SecurityConfig
from tests.compat.test_official_clients import drain
from tests.compat.test_official_node_client import pytestmark as needs_node
from tests.compat.test_official_node_client import run_node
from tests.support.server_thread import ServerThread

pytestmark = needs_node
RUNNER = Path(__file__).with_name("node_matrix.js")
MESSAGE_ID = re.compile(r"^01[0-9A-F]{32}$")
"""The official clients' message id: "01" + MAC + pid + seconds + sequence, in hex."""
UNSUPPORTED, NOT_FOUND, INVALID_RECEIPT_HANDLE, UNAUTHORIZED = 50500, 40400, 40013, 40100
"""apache.rocketmq.v2.Code values the client reports."""


def node(scenario: str, server: ServerThread, **params: Any) -> dict[str, Any]:
    return run_node(scenario, server.endpoint, runner=RUNNER, **params)


def test_a_node_producer_sends_normal_fifo_delayed_and_transactional_messages(
    server: ServerThread,
) -> None:
    async def setup() -> None:
        await server.broker.create_topic("orders", 2)
        await server.broker.create_topic("fifo-orders", 4, message_type="fifo")
        await server.broker.create_topic("delayed", 2, message_type="delay")
        await server.broker.create_topic("payments", 1, message_type="transaction")

    server.call(setup)
    topics = {"normal": "orders", "fifo": "fifo-orders", "delay": "delayed"}
    result = node("produce", server, transaction="payments", **topics)
    receipts = result["normal"] + result["fifo"] + [result["delay"]]
    assert all(MESSAGE_ID.match(r["message_id"]) for r in receipts), receipts

    # Normal: the client's ids, tags, keys and properties are kept.
    got = {m.message_id: m for m in drain(server.endpoint, "checker", "orders", 2)}
    assert set(got) == {r["message_id"] for r in result["normal"]}
    plain, tagged = (got[r["message_id"]] for r in result["normal"])
    assert (plain.body, plain.tag, plain.keys, plain.properties) == (b"plain", "", (), {})
    assert (tagged.body, tagged.tag) == (b"tagged", "TagA")
    assert sorted(tagged.keys) == ["order-1", "user-9"]
    assert tagged.properties == {"a": "1", "region": "eu"}
    # The route says "normal" and the client refuses a FIFO message itself.
    assert result["fifo_to_normal"]["name"] == "TypeError"
    assert "accept message types" in result["fifo_to_normal"]["text"]

    # FIFO: order per message group.
    per_group: dict[str, list[int]] = {}
    for message in drain(server.endpoint, "fifo-reader", "fifo-orders", 12):
        group, index = message.body.decode().split(":")
        assert message.message_group == group
        per_group.setdefault(group, []).append(int(index))
    assert per_group == {g: [0, 1, 2, 3] for g in ("g1", "g2", "g3")}

    # Delay: delivered when due, never early; a recall works once.
    assert result["delay"]["recall_handle"]
    (due,) = drain(server.endpoint, "delay-reader", "delayed", 1)
    assert due.body == b"soon" and due.deliver_at is not None
    assert due.deliver_at.timestamp() >= result["delay_sent_ms"] / 1000 + 2 - 0.001
    assert time.time() >= due.deliver_at.timestamp() - 0.05
    recall = result["recall"]
    assert recall["first"] == recall["sent"]
    assert recall["second"]["text"].endswith(f"(code: {NOT_FOUND})"), recall

    # Transactions: refused by the client from the route of any other topic; to a topic of
    # type transaction a half message, stored once when the client commits it.
    assert result["transaction_to_normal"]["name"] == "TypeError"
    assert "accept message types" in result["transaction_to_normal"]["text"]
    assert result["transaction"] is None, result["transaction"]
    assert result["transaction_receipt"]["transaction_id"], result["transaction_receipt"]
    (committed,) = server.call(lambda: server.broker.peek("payments"))
    assert committed.record.body == b"tx"
    assert committed.record.message_id == result["transaction_receipt"]["message_id"]


def test_node_simple_consumers_ack_change_invisible_duration_redeliver_and_filter(
    server: ServerThread,
) -> None:
    async def setup() -> None:
        for topic in ("orders", "retries", "filtered"):
            await server.broker.create_topic(topic, 2)

    server.call(setup)
    with Producer(server.endpoint) as producer:
        ids = {producer.send("orders", f"m{i}".encode()).message_id for i in range(2)}
        big = ("0123456789abcdef" * 1024).encode()  # 16 KiB: the SDK sends it zlib-compressed
        ids.add(producer.send("orders", big).message_id)
        retried = producer.send("retries", b"retry me").message_id
        producer.send("filtered", b"a1", tag="TagA", properties={"region": "eu"})
        producer.send("filtered", b"b1", tag="TagB", properties={"region": "us"})
        producer.send("filtered", b"a2", tag="TagA", properties={"region": "us"})
        producer.send("filtered", b"c1", tag="TagC", properties={"region": "eu"})
    result = node(
        "simple", server, orders="orders", orders_count=3, retries="retries", filtered="filtered"
    )

    changed = result["changed"]
    assert {m["message_id"] for m in changed} == ids
    assert sorted(m["body"] for m in changed) == sorted([big.decode(), "m0", "m1"])
    assert not any(m["corrupted"] for m in changed)  # the MD5 digests match
    assert all(m["new_handle"] and m["new_ack"] is None for m in changed), changed
    # The handle before the change is refused, as the Python client's is.
    assert [m["old_ack"]["code"] for m in changed] == [INVALID_RECEIPT_HANDLE] * 3, changed
    assert all(m["old_ack"]["name"] == "BadRequestException" for m in changed)

    redelivery = result["redelivery"]
    first, second = redelivery["first"], redelivery["second"]
    assert first["message_id"] == second["message_id"] == retried
    assert (first["delivery_attempt"], second["delivery_attempt"]) == (1, 2)
    assert redelivery["after_ms"] >= 1500  # after the 2 s invisible time

    assert sorted(m["body"] for m in result["tag"]) == ["a1", "a2", "c1"]
    by_body = {m["body"]: m for m in result["tag"]}
    assert (by_body["c1"]["tag"], by_body["c1"]["properties"]) == ("TagC", {"region": "eu"})
    assert sorted(m["body"] for m in result["sql"]) == ["a1", "c1"]
    done = [("billing", "orders"), ("retrier", "retries")]
    for group, topic in [*done, ("tag-readers", "filtered"), ("sql-readers", "filtered")]:
        with SimpleConsumer(server.endpoint, group=group, topic=topic) as consumer:
            # Acked, or filtered out: done for the group.
            assert consumer.receive(wait_s=0) == [], group


def test_node_push_consumers_consume_everything_fifo_groups_in_order_and_dead_letter_fifo(
    server: ServerThread,
) -> None:
    async def setup() -> None:
        await server.broker.create_topic("orders", 2)
        await server.broker.create_topic("fifo-orders", 4, message_type="fifo")
        await server.broker.create_topic("fifo-fail", 1, message_type="fifo")
        fifo = GroupSettings(fifo=True)
        await server.broker.create_group_with_settings("fifo-pushers", settings=fifo)
        await server.broker.create_group_with_settings(
            "fifo-failers", max_delivery_attempts=3, retry_backoff_s=[1, 2], settings=fifo
        )

    server.call(setup)
    fifo = [(f"order-{g}", f"order-{g}:{i}") for i in range(5) for g in range(3)]
    with Producer(server.endpoint) as producer:
        ids = {producer.send("orders", f"n{i}".encode()).message_id for i in range(6)}
        for group, body in fifo:
            producer.send("fifo-orders", body.encode(), message_group=group)
        poison = producer.send("fifo-fail", b"poison", message_group="p").message_id
    consumers = [
        {"group": "pushers", "topic": "orders", "want": 6},
        {"group": "fifo-pushers", "topic": "fifo-orders", "want": 15},
        {"group": "fifo-failers", "topic": "fifo-fail", "want": 3, "fail": True},
    ]
    consumers = [{**c, "deadline_ms": 30000} for c in consumers]
    result = node("push", server, consumers=consumers, linger_ms=1000)
    assert all(c["complete"] for c in result["consumers"]), result
    normal, ordered, failing = result["consumers"]
    assert (normal["fifo"], ordered["fifo"], failing["fifo"]) == (False, True, True)
    assert sorted(m["message_id"] for m in normal["seen"]) == sorted(ids)  # each once
    seen: dict[str, list[int]] = {}
    for message in ordered["seen"]:
        group, index = message["body"].split(":")
        assert message["message_group"] == group
        seen.setdefault(group, []).append(int(index))
    assert seen == {f"order-{g}": list(range(5)) for g in range(3)}
    # A FIFO listener's failures are retried by the client, in place (the attempts count up
    # locally), then it forwards the message to the dead-letter topic.
    assert [(m["message_id"], m["delivery_attempt"]) for m in failing["seen"]] == [
        (poison, 1), (poison, 2), (poison, 3),
    ]  # fmt: skip
    dead = drain(server.endpoint, "dlq-reader", "%DLQ%fifo-failers", 1)
    assert [m.body for m in dead] == [b"poison"]


ROOT = Credentials("root", "r00t-s3cret")
NODE_APP = Credentials("node-app", "n0de-s3cret")


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[ServerThread]:
    """A server with `[security] authentication = true`, a topic and a user allowed to
    publish to it and consume it in group `node-*`. The Node client's x-mq-date-time is UTC,
    so it passes a clock-skew window of minutes (docs/security.md)."""
    security = SecurityConfig(
        authentication=True,
        root_access_key=ROOT.access_key,
        root_secret_key=ROOT.secret_key,
        max_clock_skew_s=300,
    )
    thread = ServerThread(tmp_path / "secured", security=security)
    thread.start()
    try:
        with Admin(thread.endpoint, credentials=ROOT) as admin:
            admin.create_topic("orders", queues=2)
            admin.create_user(NODE_APP.access_key, NODE_APP.secret_key)
            admin.grant_policy(NODE_APP.access_key, Policy.of("topic:orders", ["pub", "sub"]))
            admin.grant_policy(NODE_APP.access_key, Policy.of("group:node-*", ["sub"]))
        yield thread
    finally:
        thread.stop()


def test_a_node_client_with_session_credentials_is_authenticated_and_a_wrong_secret_is_not(
    secured: ServerThread,
) -> None:
    """The Node client signs with upper-case hex (the signing vectors cover that form);
    here it is signed in end to end, and a wrong secret gets UNAUTHORIZED."""
    with Producer(secured.endpoint, credentials=ROOT) as producer:
        sdk = producer.send("orders", b"from the sdk").message_id
    result = node(
        "credentials",
        secured,
        topic="orders",
        group="node-billing",
        want=2,
        access_key=NODE_APP.access_key,
        secret_key=NODE_APP.secret_key,
    )
    assert {m["message_id"] for m in result["received"]} == {sdk, result["sent"]["message_id"]}
    assert sorted(m["body"] for m in result["received"]) == ["from the sdk", "signed"]
    refused = result["refused"]
    assert refused is not None and refused["code"] == UNAUTHORIZED, refused
    assert "signature of access key 'node-app' does not match" in refused["text"], refused
    assert "not-the-secret" not in refused["text"]
