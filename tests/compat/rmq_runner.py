"""Runs the official RocketMQ 5 Python client against a server: one scenario per process.

Takes a JSON scenario as its argument and prints one JSON line of results on stdout. It runs in a
subprocess because importing the official client registers the apache.rocketmq.v2 schema in
protobuf's default descriptor pool, where popmq's own generated modules for the same schema
live in the test process. It imports nothing from popmq.

Scenarios (field "scenario"):
- produce: send messages (sync or async), optionally recall delayed ones.
- simple: a SimpleConsumer receives until it has `want` messages and acks each ("ack"),
  leaves them unacked ("none"), acks only redeliveries ("redeliver"), or changes their
  invisible duration, tries the old handle, and acks with the new one ("change_then_ack").
- push: a PushConsumer whose listener fails the bodies in `fail_bodies` and consumes the
  rest, until every wanted outcome was seen.
- transaction: a transactional Producer whose TransactionChecker answers by body (`answers`:
  body -> "commit", "rollback" or "unknown"); sends one half message per body and ends it
  as `ends` says (a list of "commit" / "rollback", tried in order, each outcome recorded;
  "wait_checks" waits until the body was checked `checks` times, "sleep" sleeps `sleep_s`),
  then waits until each body in `want_checks` was checked that many times.

Every scenario takes "tls": true for the clients' `tls_enable` (they verify the server with
grpc's roots: the test points GRPC_DEFAULT_SSL_ROOTS_FILE_PATH at its CA).
"""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback
from typing import Any

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)
from rocketmq.grpc_protocol import FilterType
from rocketmq.v5.exception import ClientException


def _config(scenario: dict[str, Any]) -> ClientConfiguration:
    credentials = Credentials(scenario.get("access_key", ""), scenario.get("secret_key", ""))
    return ClientConfiguration(
        scenario["endpoint"], credentials, request_timeout=scenario.get("request_timeout", 3)
    )


def _filter(spec: dict[str, str] | None) -> FilterExpression:
    if not spec:
        return FilterExpression()
    kind = FilterType.SQL if spec.get("type") == "sql" else FilterType.TAG
    return FilterExpression(spec["expression"], kind)


def _error(exc: BaseException) -> dict[str, Any]:
    code = exc.code if isinstance(exc, ClientException) else None
    return {"error": type(exc).__name__, "code": code, "text": str(exc)}


def _message(msg: Message) -> dict[str, Any]:
    return {
        "topic": msg.topic,
        "body": msg.body.decode("utf-8", "replace") if msg.body is not None else None,
        "message_id": msg.message_id,
        "tag": msg.tag,
        "keys": sorted(msg.keys),
        "properties": dict(msg.properties),
        "message_group": msg.message_group,
        "delivery_attempt": msg.delivery_attempt,
        "born_timestamp": msg.born_timestamp,
        "born_host": msg.born_host,
        "delivery_timestamp": msg.delivery_timestamp,
        "corrupted": msg.corrupted,
        "received_ms": int(time.time() * 1000),
    }


def produce(scenario: dict[str, Any]) -> dict[str, Any]:
    producer = Producer(
        _config(scenario), (scenario["topic"],), tls_enable=scenario.get("tls", False)
    )
    producer.startup()
    receipts: list[dict[str, Any]] = []
    try:
        futures = []
        for spec in scenario["messages"]:
            msg = Message()
            msg.topic = spec.get("topic", scenario["topic"])
            msg.body = spec["body"].encode()
            if spec.get("tag"):
                msg.tag = spec["tag"]
            for key in spec.get("keys", ()):
                msg.keys = key
            for name, value in spec.get("properties", {}).items():
                msg.add_property(name, value)
            if spec.get("group"):
                msg.message_group = spec["group"]
            if spec.get("delay_s"):
                msg.delivery_timestamp = int(time.time()) + int(spec["delay_s"])
            if scenario.get("mode") == "async":
                futures.append(producer.send_async(msg))
                continue
            try:
                receipt = producer.send(msg)
            except Exception as exc:  # noqa: BLE001 - reported to the test as data
                receipts.append(_error(exc))
            else:
                receipts.append(_receipt(receipt))
        for future in futures:
            try:
                receipts.append(_receipt(future.result(timeout=30)))
            except Exception as exc:  # noqa: BLE001
                receipts.append(_error(exc))
        recalled = []
        if scenario.get("recall"):
            for receipt in receipts:
                handle = receipt.get("recall_handle")
                if not handle:
                    continue
                for _ in range(2):  # the second recall of a handle must fail
                    try:
                        recalled.append(producer.recall_message(scenario["topic"], handle))
                    except Exception as exc:  # noqa: BLE001
                        recalled.append(_error(exc))
        return {"receipts": receipts, "recalled": recalled}
    finally:
        producer.shutdown()


def _receipt(receipt: Any) -> dict[str, Any]:
    return {
        "message_id": receipt.message_id,
        "offset": receipt.offset,
        "recall_handle": receipt.recall_handle,
    }


def simple(scenario: dict[str, Any]) -> dict[str, Any]:
    consumer = SimpleConsumer(
        _config(scenario),
        scenario["group"],
        {scenario["topic"]: _filter(scenario.get("filter"))},
        await_duration=scenario.get("await_s", 5),
        tls_enable=scenario.get("tls", False),
    )
    consumer.startup()
    received: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    action = scenario.get("action", "ack")
    want = scenario.get("want", 1)
    give_up = time.monotonic() + scenario.get("deadline_s", 30)
    try:
        while len(received) < want and time.monotonic() < give_up:
            batch = consumer.receive(scenario.get("max", 32), scenario.get("invisible_s", 30))
            events.append({"receive": len(batch)})
            for msg in batch:
                received.append(_message(msg))
                if action == "ack" or (action == "redeliver" and msg.delivery_attempt > 1):
                    consumer.ack(msg)
                elif action == "change_then_ack":
                    old = msg.receipt_handle
                    consumer.change_invisible_duration(msg, scenario.get("change_s", 30))
                    events.append({"changed": msg.message_id, "new": msg.receipt_handle != old})
                    fresh = msg.receipt_handle
                    msg.receipt_handle = old
                    try:
                        consumer.ack(msg)
                        events.append({"old_ack": "ok"})
                    except Exception as exc:  # noqa: BLE001
                        events.append({"old_ack": _error(exc)})
                    msg.receipt_handle = fresh
                    consumer.ack(msg)
                    events.append({"acked": msg.message_id})
            if scenario.get("once"):
                break
    finally:
        consumer.shutdown()
    return {"messages": received, "events": events}


class _Listener(MessageListener):
    """Consumes every message except the bodies it must fail; logs each attempt."""

    def __init__(self, scenario: dict[str, Any]) -> None:
        self.fail = set(scenario.get("fail_bodies", ()))
        self.fail_attempts = scenario.get("fail_attempts", 0)
        self.want = set(scenario.get("want_bodies", ()))
        self.log: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.failures: dict[str, int] = {}

    def consume(self, message: Message) -> ConsumeResult:
        entry = _message(message)
        body = entry["body"]
        failing = body in self.fail
        entry["result"] = "failure" if failing else "success"
        with self.lock:
            self.log.append(entry)
            if failing:
                self.failures[body] = self.failures.get(body, 0) + 1
            else:
                self.want.discard(body)
            finished = not self.want and all(
                self.failures.get(b, 0) >= self.fail_attempts for b in self.fail
            )
        if finished:
            self.done.set()
        return ConsumeResult.FAILURE if failing else ConsumeResult.SUCCESS


def push(scenario: dict[str, Any]) -> dict[str, Any]:
    listener = _Listener(scenario)
    consumer = PushConsumer(
        _config(scenario),
        scenario["group"],
        listener,
        {scenario["topic"]: _filter(scenario.get("filter"))},
        consumption_thread_count=scenario.get("threads", 4),
        tls_enable=scenario.get("tls", False),
    )
    consumer.startup()
    started = time.monotonic()
    try:
        finished = listener.done.wait(scenario.get("deadline_s", 60))
    finally:
        consumer.shutdown()
    with listener.lock:
        return {
            "finished": finished,
            "fifo": consumer.fifo,
            "seconds": time.monotonic() - started,
            "log": list(listener.log),
        }


_ANSWERS = {
    "commit": TransactionResolution.COMMIT,
    "rollback": TransactionResolution.ROLLBACK,
    "unknown": TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED,  # the client's UNKNOWN
}


class _Checker(TransactionChecker):
    """Answers checks by the message's body; records each check."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers
        self.checks: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def check(self, message: Message) -> TransactionResolution:
        entry = _message(message)
        with self.lock:
            self.checks.append(entry)
        return _ANSWERS[self.answers.get(entry["body"], "unknown")]

    def count(self, body: str) -> int:
        with self.lock:
            return sum(1 for c in self.checks if c["body"] == body)


def transaction(scenario: dict[str, Any]) -> dict[str, Any]:
    checker = _Checker(scenario.get("answers", {}))
    producer = Producer(_config(scenario), (scenario["topic"],), checker)
    producer.startup()
    sent: dict[str, dict[str, Any]] = {}
    try:
        transactions = {}
        for spec in scenario["messages"]:
            msg = Message()
            msg.topic = scenario["topic"]
            msg.body = spec["body"].encode()
            if spec.get("tag"):
                msg.tag = spec["tag"]
            for key in spec.get("keys", ()):
                msg.keys = key
            for name, value in spec.get("properties", {}).items():
                msg.add_property(name, value)
            tx = producer.begin_transaction()
            try:
                receipt = producer.send(msg, tx)
            except Exception as exc:  # noqa: BLE001 - reported to the test as data
                sent[spec["body"]] = {"send": _error(exc)}
                continue
            transactions[spec["body"]] = tx
            sent[spec["body"]] = {**_receipt(receipt), "transaction_id": receipt.transaction_id}
        for spec in scenario["messages"]:
            tx = transactions.get(spec["body"])
            outcomes = sent[spec["body"]].setdefault("ends", [])
            for end in spec.get("ends", ()):
                if end == "wait_checks":  # until this body was checked as often as wanted
                    _wait_checks(checker, {spec["body"]: spec["checks"]}, scenario)
                    time.sleep(scenario.get("settle_s", 0.5))
                    outcomes.append({"waited": checker.count(spec["body"])})
                    continue
                if end == "sleep":
                    time.sleep(scenario["sleep_s"])
                    continue
                try:
                    response = tx.commit() if end == "commit" else tx.rollback()
                    outcomes.append({end: "ok", "message": response.status.message})
                except Exception as exc:  # noqa: BLE001
                    outcomes.append({end: _error(exc)})
        _wait_checks(checker, scenario.get("want_checks", {}), scenario)
        time.sleep(scenario.get("settle_s", 0.5))  # the check answers' EndTransactions
        with checker.lock:
            checks = list(checker.checks)
        return {"sent": sent, "checks": checks}
    finally:
        producer.shutdown()


def _wait_checks(checker: _Checker, want: dict[str, int], scenario: dict[str, Any]) -> None:
    give_up = time.monotonic() + scenario.get("deadline_s", 30)
    while time.monotonic() < give_up and any(checker.count(b) < n for b, n in want.items()):
        time.sleep(0.05)


SCENARIOS = {"produce": produce, "simple": simple, "push": push, "transaction": transaction}


def main() -> int:
    scenario = json.loads(sys.argv[1])
    try:
        result = SCENARIOS[scenario["scenario"]](scenario)
    except Exception as exc:  # noqa: BLE001 - the test shows it
        result = {"failed": _error(exc), "traceback": traceback.format_exc()}
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
