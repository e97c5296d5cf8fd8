"""The `popmq` CLI as operators run it: a subprocess against the real server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest

from popmq import Admin, InvalidArgumentError, SimpleConsumer
from popmq.cli.main import main


class Cli:
    """Runs `popmq ARGS --endpoint ENDPOINT` in this process (as the console script does)."""

    def __init__(self, endpoint: str, capsys: pytest.CaptureFixture[str]) -> None:
        self.endpoint = endpoint
        self._capsys = capsys

    def __call__(self, *args: str, code: int = 0) -> str:
        self._capsys.readouterr()
        try:
            got = main([*args, "--endpoint", self.endpoint])
        except SystemExit as exit_:  # argparse usage errors
            got = exit_.code if isinstance(exit_.code, int) else 2
        out, err = self._capsys.readouterr()
        assert got == code, f"popmq {' '.join(args)} exited {got}: {out}{err}"
        return out if code == 0 else err

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "--json"))


@pytest.fixture
def popmq(endpoint: str, capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(endpoint, capsys)


def test_topic_commands_print_tables_lines_and_json(endpoint: str, popmq: Cli) -> None:
    line = popmq("topic", "create", "orders", "--queues", "2", "--type", "fifo")
    assert line.startswith("topic orders queues=2 message_type=fifo kind=normal")
    assert popmq("topic", "update", "orders", "--queues", "3").startswith("topic orders queues=3")
    table = popmq("topic", "list")
    assert "orders" in table and "fifo" in table
    described = popmq.json("topic", "describe", "orders")
    assert [q["queue_id"] for q in described["queues"]] == [0, 1, 2]
    assert described["topic"]["message_type"] == "fifo"
    assert "queues of orders" in popmq("topic", "describe", "orders")
    assert popmq("topic", "purge", "orders") == "purged 0 messages from orders\n"
    assert popmq("topic", "delete", "orders") == "deleted topic orders\n"
    assert popmq.json("topic", "list") == []


def test_send_and_receive_many_with_summaries(endpoint: str, popmq: Cli) -> None:
    popmq("topic", "create", "orders", "--queues", "2")
    sent = popmq("send", "orders", "order {n}", "--count", "30", "--key", "k")
    assert sent.startswith("sent 30 messages to orders in ")
    out = popmq(
        "receive", "billing", "orders", "--count", "12", "--max", "5", "--ack",
        "--wait", "5",
    ).splitlines()  # fmt: skip
    assert len(out) == 13 and all(" body=order " in line for line in out[:12])
    assert out[-1].startswith("received 12 of 12 messages in ") and out[-1].endswith("acked 12")
    result = popmq.json("receive", "billing", "orders", "--count", "40", "--wait", "1")
    assert len(result["received"]) == 18  # stops short when a receive comes back empty
    assert {m["body"] for m in result["received"]} <= {f"order {i}" for i in range(30)}


def test_group_lag_offsets_and_messages(endpoint: str, popmq: Cli) -> None:
    popmq("topic", "create", "orders", "--queues", "1")
    line = popmq(
        "group", "create", "billing", "--max-delivery-attempts", "4",
        "--backoff", "1s,30s,2m", "--subscribe", "orders=TagA || TagB", "--consume-from", "first",
    )  # fmt: skip
    assert "max_delivery_attempts=4 retry_backoff=1s,30s,120s" in line
    assert "subscriptions=orders" in line
    group = popmq.json("group", "describe", "billing")
    assert group["subscriptions"] == [{"topic": "orders", "filter": "TagA || TagB"}]
    updated = popmq.json("group", "update", "billing", "--exponential-backoff", "5s,1m,2", "--fifo")
    assert updated["retry_backoff_s"] == [5.0, 10.0, 20.0, 40.0, 60.0] and updated["fifo"]
    assert "billing" in popmq("group", "list")

    receipt = popmq.json("send", "orders", "hello", "--tag", "TagA", "--key", "order-7")
    popmq("send", "orders", "second", "--tag", "TagB")
    with SimpleConsumer(endpoint, group="billing", topic="orders") as consumer:
        consumer.ack(consumer.receive(max_messages=8, wait_s=5))
    lag = popmq("lag", "billing")
    assert "lag of group billing" in lag and "dead letters in %DLQ%billing: 0" in lag
    report = popmq.json("lag", "billing", "--topic", "orders")
    assert report["topics"][0]["lag"] == 0
    assert report["topics"][0]["oldest_unacked_age_s"] is None  # nothing unacked: not 0.0
    assert {q["oldest_unacked_age_s"] for q in report["queues"]} == {None}

    reset = popmq("offsets", "reset", "billing", "orders", "--to", "earliest")
    assert reset == "queue 0: 2 -> 0 (-2)\n"
    moved = popmq.json("offsets", "reset", "billing", "orders", "--offset", "0=1")
    assert moved["queues"] == [{"queue_id": 0, "old_offset": 0, "new_offset": 1}]

    peeked = popmq.json("message", "peek", "orders", "--group", "billing")
    assert [m["body"] for m in peeked] == ["second"]
    found = popmq.json("message", "get", "orders", receipt["message_id"])
    assert found["body"] == "hello" and found["keys"] == ["order-7"]
    assert "message " + receipt["message_id"] in popmq(
        "message", "get", "orders", receipt["message_id"]
    )
    by_key = popmq.json("message", "find", "orders", "order-7")
    assert [m["message_id"] for m in by_key] == [receipt["message_id"]]
    info = popmq.json("server", "info")
    assert info["topics"] == 1 and info["config"]["pop.max_batch"] == 32
    assert info["config"]["broker.broker_name"] == "broker-a"
    assert info["config"]["broker.auto_create_topics"] is False
    assert info["config"]["groups.retry_backoff_s"][:3] == [1, 5, 10]
    assert "configuration in effect" in popmq("server", "info")
    assert popmq("group", "delete", "billing") == "deleted group billing\n"


def test_dlq_redrive_moves_everything_back_with_a_summary(endpoint: str, popmq: Cli) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("orders", queues=1)
        admin.create_group("g", max_delivery_attempts=1)
    popmq("send", "orders", "m{n}", "--count", "25")
    with SimpleConsumer(endpoint, group="g", topic="orders") as consumer:
        seen = 0
        while seen < 25:
            batch = consumer.receive(max_messages=32, wait_s=5)
            assert batch
            for message in batch:
                consumer.nack(message, delay_s=0)
            seen += len(batch)
    with Admin(endpoint) as admin:
        deadline = time.monotonic() + 30
        while admin.lag_report("g").dlq_depth < 25:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    partial = popmq.json("dlq", "redrive", "g", "--max", "10")
    assert (partial["moved"], partial["remaining"]) == (10, 15)
    line = popmq("dlq", "redrive", "g")
    assert line.startswith("redrove 15 messages from %DLQ%g in ")
    assert line.endswith("(dropped 0 whose topic is gone, 0 remaining)\n")


def test_dlq_redrive_of_named_dead_letters_reports_each(endpoint: str, popmq: Cli) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("orders", queues=1)
        admin.create_group("g", max_delivery_attempts=1)
    popmq("send", "orders", "m{n}", "--count", "3")
    with SimpleConsumer(endpoint, group="g", topic="orders") as consumer:
        seen = 0
        while seen < 3:
            batch = consumer.receive(max_messages=8, wait_s=5)
            assert batch
            for message in batch:
                consumer.nack(message, delay_s=0)
            seen += len(batch)
    with Admin(endpoint) as admin:
        deadline = time.monotonic() + 30
        while admin.lag_report("g").dlq_depth < 3:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    dead = popmq.json("message", "peek", "%DLQ%g")
    first, second = dead[0], dead[1]
    named = f"{second['queue_id']}:{second['offset']}"
    result = popmq.json("dlq", "redrive", "g", "--message", named)
    assert result["outcomes"] == [
        {"queue_id": second["queue_id"], "offset": second["offset"], "outcome": "moved"}
    ]
    assert result["remaining"] == 2
    left = popmq.json("message", "peek", "%DLQ%g")
    assert [m["offset"] for m in left] == [m["offset"] for m in dead if m is not second]
    # Named again (already redriven) with one still stored: that one moves, exit code 3.
    again = _process(
        endpoint, "dlq", "redrive", "g", "--message", named, "--message", f"0:{first['offset']}"
    )
    assert again.returncode == 3, again.stderr
    assert f"%DLQ%g queue 0 offset {second['offset']}: not_found" in again.stdout
    assert f"%DLQ%g queue 0 offset {first['offset']}: moved" in again.stdout
    assert again.stdout.splitlines()[-1] == "redrove 1 of 2 named messages (1 remaining)"
    assert "1 named message not stored" in again.stderr
    with Admin(endpoint) as admin, pytest.raises(InvalidArgumentError, match="at most 1000"):
        admin.redrive_dead_letters("g", messages=[(0, n) for n in range(1001)])
    assert "is not QUEUE:OFFSET" in popmq("dlq", "redrive", "g", "--message", "0:x", code=2)


def _process(endpoint: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "popmq.cli", *args, "--endpoint", endpoint],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_exit_codes_tell_usage_not_found_rejected_and_server_errors(
    endpoint: str, popmq: Cli
) -> None:
    assert "does not exist" in popmq("topic", "describe", "missing", code=3)
    popmq("topic", "create", "orders")
    assert "already exists" in popmq("topic", "create", "orders", code=4)
    assert "is not a duration" in popmq("group", "create", "g", "--backoff", "soon", code=2)
    assert "is not a time" in popmq("offsets", "reset", "g", "orders", "--to", "later", code=2)
    # The same codes from a real process, as scripts see them.
    missing = _process(endpoint, "group", "describe", "missing")
    assert missing.returncode == 3 and missing.stderr.startswith("error: group 'missing'")
    unreachable = _process("127.0.0.1:1", "topic", "list")
    assert unreachable.returncode == 1 and unreachable.stderr.startswith("error: ")
    assert _process(endpoint, "topic", "create", "x", "--queues", "zero").returncode == 2
