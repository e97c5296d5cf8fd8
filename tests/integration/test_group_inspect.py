"""InspectGroup through the real server: the SDK's Admin and `popmq group inspect`."""

from __future__ import annotations

import threading
import time
from typing import Any

import grpc
import pytest

from popmq import Admin, InvalidArgumentError, NotFoundError, Producer, SimpleConsumer
from popmq._gen.popmq.v1 import messaging_pb2, messaging_pb2_grpc
from tests.integration.test_admin_cli import Cli


@pytest.fixture
def popmq(endpoint: str, capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(endpoint, capsys)


def test_admin_sees_a_held_receive_and_pages_the_messages_in_flight(endpoint: str) -> None:
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic("orders", 2)
        sent = [producer.send("orders", f"m{i}".encode()) for i in range(5)]
        with SimpleConsumer(endpoint, group="billing", topic="orders") as consumer:
            got = consumer.receive(max_messages=8, invisible_duration_s=60, wait_s=5)
            while len(got) < 5:
                got += consumer.receive(max_messages=8, invisible_duration_s=60, wait_s=5)
            held = threading.Thread(target=lambda: consumer.receive(wait_s=3))
            held.start()
            try:
                deadline = time.monotonic() + 5
                view = admin.inspect_group("billing", "orders", page_size=2)
                while not view.held_polls and time.monotonic() < deadline:
                    time.sleep(0.02)
                    view = admin.inspect_group("billing", "orders", page_size=2)
                assert [(p.topic, p.count) for p in view.held_polls] == [("orders", 1)]
            finally:
                held.join()
        rows = list(view.inflight)
        while view.next_page_token:
            view = admin.inspect_group(
                "billing", "orders", page_size=2, page_token=view.next_page_token
            )
            rows += view.inflight
        assert sorted(r.message_id for r in rows) == sorted(s.message_id for s in sent)
        assert all(r.delivery_attempt == 1 and r.invisible_until is not None for r in rows)
        assert all(r.invisible_until > view.now for r in rows if r.invisible_until)
        (revive,) = view.revive
        assert revive.lag_s == 0 and revive.live_checkpoints >= 1
        with pytest.raises(InvalidArgumentError, match=r"1\.\.1000"):
            admin.inspect_group("billing", page_size=1001)
        with pytest.raises(NotFoundError):
            admin.inspect_group("nobody")


def test_message_history_through_the_sdk_and_the_cli(endpoint: str, popmq: Cli) -> None:
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic("orders", 1)
        sent = producer.send("orders", b"x")
        with SimpleConsumer(endpoint, group="billing", topic="orders") as consumer:
            (got,) = consumer.receive(invisible_duration_s=30, wait_s=5)
            consumer.nack(got, delay_s=10)
        events = admin.message_history("orders", sent.message_id, group="billing")
        assert [e.event for e in events] == ["stored", "pop", "nack"]
        pop, nack = events[1:]
        assert pop.invisible_until is not None and pop.delivery_attempt == 1
        assert nack.invisible_until is not None and nack.time >= pop.time
        with pytest.raises(NotFoundError):
            admin.message_history("orders", "missing-id")
    table = popmq("message", "history", "orders", sent.message_id)
    assert f"history of message {sent.message_id}" in table and "nack" in table
    rows = popmq.json("message", "history", "orders", sent.message_id, "--group", "billing")
    assert [r["event"] for r in rows] == ["stored", "pop", "nack"]


def test_group_inspect_prints_tables_and_json(endpoint: str, popmq: Cli) -> None:
    popmq("topic", "create", "ordered", "--queues", "1", "--type", "fifo")
    for body in ("a0", "a1"):
        popmq("send", "ordered", body, "--message-group", "a")
    with SimpleConsumer(endpoint, group="billing", topic="ordered") as consumer:
        (head,) = consumer.receive(max_messages=8, invisible_duration_s=60, wait_s=5)
    out = popmq("group", "inspect", "billing")
    assert "in flight" in out and head.message_id in out
    assert "blocked FIFO message groups: 1" in out and "waiting (FIFO)" in out
    view = popmq.json("group", "inspect", "billing", "--topic", "ordered")
    (blocked,) = view["blocked_heads"]
    assert (blocked["message_group"], blocked["waiting"]) == ("a", 1)
    assert blocked["message_id"] == head.message_id
    assert [m["waiting"] for m in view["inflight"]] == [False, True]
    err = popmq("group", "inspect", "billing", "--page-size", "5000", code=4)
    assert "page_size 5000" in err and "1..1000" in err


def test_inspect_and_history_name_the_consumer_that_popped(endpoint: str, popmq: Cli) -> None:
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic("orders", 1)
        sent = [producer.send("orders", f"m{i}".encode()) for i in range(4)]
        # One consumer over the PopStream, one over unary Pop, one raw Pop naming nobody.
        streamed = SimpleConsumer(endpoint, group="billing", topic="orders", client_id="w[1]")
        unary = SimpleConsumer(
            endpoint, group="billing", topic="orders", multiplex=False, client_id="w2"
        )
        with streamed, unary, grpc.insecure_channel(endpoint) as channel:
            a = streamed.receive(max_messages=2, invisible_duration_s=60, wait_s=5)
            b = unary.receive(max_messages=1, invisible_duration_s=30, wait_s=5)
            stub: Any = messaging_pb2_grpc.MessagingServiceStub(channel)
            bad = messaging_pb2.PopRequest(
                group="billing", topic="orders", client_id="x" * 256,
                ack_receipt_handles=[a[0].receipt_handle],
            )  # fmt: skip
            with pytest.raises(grpc.RpcError) as refused:
                stub.Pop(bad)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "client_id is 256 characters long: at most 255" in str(refused.value.details())
            raw = stub.Pop(messaging_pb2.PopRequest(group="billing", topic="orders"))
            assert len(a) == 2 and len(b) == 1 and len(raw.messages) == 1
            assert streamed.client_id == "w[1]"
            with SimpleConsumer(endpoint, group="g", topic="t") as default:
                assert default.client_id.count("@") == 2  # host@pid@random
        view = admin.inspect_group("billing", page_size=1)
        assert len(view.inflight) == 1  # the summary still counts every message in flight
        summary = [(c.client_id, c.count) for c in view.consumers]
        assert summary == [("w[1]", 2), ("", 1), ("w2", 1)]  # the refused pop acked nothing
        assert all(c.earliest_invisible_until is not None for c in view.consumers)
        holders = {r.message_id: r.client_id for r in admin.inspect_group("billing").inflight}
        assert holders == {
            sent[0].message_id: "w[1]",
            sent[1].message_id: "w[1]",
            sent[2].message_id: "w2",
            sent[3].message_id: "",
        }
        (stored, pop) = admin.message_history("orders", sent[2].message_id)
        assert (stored.client_id, pop.event, pop.client_id) == ("", "pop", "w2")
    out = popmq("group", "inspect", "billing")
    assert "in flight per consumer" in out and "w[1]" in out and "unknown" in out
    rows = popmq.json("group", "inspect", "billing")
    assert {c["client_id"]: c["count"] for c in rows["consumers"]} == {"w[1]": 2, "w2": 1, "": 1}
    table = popmq("message", "history", "orders", sent[0].message_id)
    assert "w[1]" in table
    (_, pop_row) = popmq.json("message", "history", "orders", sent[0].message_id)
    assert pop_row["client_id"] == "w[1]"
