"""The official RocketMQ 5 Python client's transactional producer against popmq, unchanged.

One run of the real client (a subprocess: conftest.OfficialClient) sends a half message per
case and ends it, or leaves it to the check-back, with a TransactionChecker answering by
body; the test process then reads the broker. Checks come fast here: the first 1 s after the
half send, then every 1 s, at most 3.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from popmq.broker_core import TRANSACTION_DISCARD_TOPIC, BrokerConfig, TransactionsConfig
from popmq.broker_core.transactions import TRANSACTION_ID_PROPERTY
from tests.compat.conftest import OfficialClient
from tests.support.server_thread import ServerThread

Admin = Callable[..., Any]
PRECONDITION_FAILED = 42800
CHECK_MAX = 3


@pytest.fixture
def broker_config() -> BrokerConfig:
    return BrokerConfig(
        transactions=TransactionsConfig(
            check_first_s=1.0, check_interval_s=1.0, check_max=CHECK_MAX
        )
    )


def stored_bodies(admin: Admin, topic: str) -> list[str]:
    """Every message stored in the topic's queues (what consumers can ever be delivered)."""
    peeked = admin(lambda b: b.peek(topic, max_messages=100))
    return sorted(p.record.body.decode() for p in peeked)


def test_transactional_producer_commits_rolls_back_and_answers_check_backs(
    server: ServerThread, official: OfficialClient, admin: Admin
) -> None:
    admin(lambda b: b.create_topic("payments", 2, message_type="transaction"))
    result = official.run(
        "transaction",
        topic="payments",
        answers={
            "check-commit": "commit",
            "check-rollback": "rollback",
            "check-unknown": "unknown",
        },
        messages=[
            {"body": "commit-twice", "ends": ["commit", "commit"]},
            {"body": "rollback-then-commit", "ends": ["rollback", "commit"]},
            {
                "body": "check-commit",
                "tag": "TagA",
                "keys": ["order-7"],
                "properties": {"region": "eu"},
                "checks": 1,
                "ends": ["wait_checks", "commit", "rollback"],
            },
            {"body": "check-rollback", "checks": 1, "ends": ["wait_checks", "commit"]},
            # Checked CHECK_MAX times, then discarded an interval later: a commit is refused.
            {
                "body": "check-unknown",
                "checks": CHECK_MAX,
                "ends": ["wait_checks", "sleep", "commit"],
            },
        ],
        sleep_s=2.0,
        want_checks={"check-commit": 1, "check-rollback": 1, "check-unknown": CHECK_MAX},
    )
    sent = result["sent"]
    for entry in sent.values():
        assert entry["offset"] == -1 and entry["transaction_id"], entry

    # Resolutions are final and idempotent: the same twice is OK, the other one refused.
    assert [sorted(e) for e in sent["commit-twice"]["ends"]] == [["commit", "message"]] * 2
    ends = sent["rollback-then-commit"]["ends"]
    assert ends[0]["rollback"] == "ok"
    assert ends[1]["commit"]["code"] == PRECONDITION_FAILED, ends
    assert "rolled back already" in ends[1]["commit"]["text"]
    # Answered COMMIT by the checker: the producer's own commit is a no-op, a rollback refused.
    ends = sent["check-commit"]["ends"]
    assert ends[1]["commit"] == "ok" and "committed" in ends[1]["message"], ends
    assert ends[2]["rollback"]["code"] == PRECONDITION_FAILED, ends
    assert sent["check-rollback"]["ends"][1]["commit"]["code"] == PRECONDITION_FAILED
    refused = sent["check-unknown"]["ends"][-1]["commit"]
    assert refused["code"] == PRECONDITION_FAILED and "discarded" in refused["text"], refused

    # Checks reach the producer with the half message; resolved transactions are never
    # checked (RocketMQ #8158), an unknown one exactly check_max times.
    counts: dict[str, int] = {}
    for check in result["checks"]:
        counts[check["body"]] = counts.get(check["body"], 0) + 1
    assert counts == {"check-commit": 1, "check-rollback": 1, "check-unknown": CHECK_MAX}
    (checked,) = [c for c in result["checks"] if c["body"] == "check-commit"]
    assert checked["message_id"] == sent["check-commit"]["message_id"]
    assert checked["topic"] == "payments" and checked["tag"] == "TagA"
    assert checked["keys"] == ["order-7"] and checked["properties"] == {"region": "eu"}

    # Committed ones are stored once; rolled-back, unknown ones never.
    assert stored_bodies(admin, "payments") == ["check-commit", "commit-twice"]
    states = {
        body: admin(lambda b, tid=entry["transaction_id"]: b.get_transaction(tid)).state
        for body, entry in sent.items()
    }
    assert states == {
        "commit-twice": "committed",
        "rollback-then-commit": "rolled_back",
        "check-commit": "committed",
        "check-rollback": "rolled_back",
        "check-unknown": "discarded",
    }
    # The unanswered one waits in the discarded-transactions topic, for an operator.
    (discarded,) = admin(lambda b: b.peek(TRANSACTION_DISCARD_TOPIC))
    assert discarded.record.body == b"check-unknown"
    assert (
        discarded.record.properties[TRANSACTION_ID_PROPERTY]
        == sent["check-unknown"]["transaction_id"]
    )
