"""The official RocketMQ 5 PushConsumer against popmq: assignment, auto-renewed receives,
listener results turned into acks and retries, the dead-letter topic, and FIFO groups."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from popmq import Producer, SimpleConsumer
from popmq.broker_core.types import GroupSettings
from tests.compat.conftest import OfficialClient
from tests.compat.test_official_clients import drain
from tests.support.server_thread import ServerThread
from tests.support.waiting import wait_until

Admin = Callable[..., Any]


def test_push_consumer_consumes_everything_once(
    server: ServerThread, official: OfficialClient, admin: Admin
) -> None:
    admin(lambda b: b.create_topic("orders", 4))
    bodies = [f"m{i}" for i in range(40)]
    with Producer(server.endpoint) as producer:
        for body in bodies:
            producer.send("orders", body.encode(), tag="T")
    result = official.run(
        "push", group="pushers", topic="orders", want_bodies=bodies, deadline_s=60
    )
    assert result["finished"], result
    assert result["fifo"] is False
    assert sorted(e["body"] for e in result["log"]) == sorted(bodies)
    assert {e["delivery_attempt"] for e in result["log"]} == {1}
    with SimpleConsumer(server.endpoint, group="pushers", topic="orders") as consumer:
        assert consumer.receive(wait_s=1) == []  # the listener's successes were acked


def test_failed_messages_are_retried_then_dead_lettered(
    server: ServerThread, official: OfficialClient, admin: Admin
) -> None:
    admin(lambda b: b.create_topic("orders", 2))
    admin(lambda b: b.create_group("flaky", max_delivery_attempts=3, retry_backoff_s=[1]))
    good = [f"ok{i}" for i in range(5)]
    bad = ["bad0", "bad1"]
    with Producer(server.endpoint) as producer:
        for body in good + bad:
            producer.send("orders", body.encode())
    result = official.run(
        "push", group="flaky", topic="orders", want_bodies=good, fail_bodies=bad,
        fail_attempts=3, deadline_s=60,
    )  # fmt: skip
    assert result["finished"], result
    for body in bad:
        attempts = [e["delivery_attempt"] for e in result["log"] if e["body"] == body]
        assert attempts == [1, 2, 3], (body, result["log"])  # retried after each failure
    # The third failure's retry delay ends in a revive into the dead-letter topic.
    wait_until(
        lambda: any(t.name == "%DLQ%flaky" for t in server.call(server.broker.list_topics)),
        "the dead-letter topic",
        30,
    )
    dead = drain(server.endpoint, "dlq-reader", "%DLQ%flaky", 2)
    assert sorted(m.body.decode() for m in dead) == bad
    assert all(m.topic == "%DLQ%flaky" for m in dead)


def test_fifo_push_consumer_sees_each_group_in_order(
    server: ServerThread, official: OfficialClient, admin: Admin
) -> None:
    admin(lambda b: b.create_topic("fifo-orders", 4, message_type="fifo"))
    admin(lambda b: b.create_group_with_settings("fifo-pushers", settings=GroupSettings(fifo=True)))
    groups = [f"order-{g}" for g in range(4)]
    specs = [{"body": f"{g}:{i}", "group": g} for i in range(6) for g in groups]
    receipts = official.run("produce", topic="fifo-orders", messages=specs)["receipts"]
    assert all("error" not in r for r in receipts), receipts
    result = official.run(
        "push", group="fifo-pushers", topic="fifo-orders",
        want_bodies=[s["body"] for s in specs], deadline_s=60,
    )  # fmt: skip
    assert result["finished"], result
    assert result["fifo"] is True  # from the group's settings, through Telemetry
    seen: dict[str, list[int]] = {}
    for entry in result["log"]:
        group, index = entry["body"].split(":")
        assert entry["message_group"] == group
        seen.setdefault(group, []).append(int(index))
    assert seen == {g: list(range(6)) for g in groups}
