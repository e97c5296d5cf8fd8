"""The official rocketmq-python-client against a server with authentication on: with the
right credentials it sends and receives (it signs with lower-case hex and local time
labelled Z); with a wrong secret it gets UNAUTHORIZED (40100), which it logs, and its send
fails."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from popmq import Admin, Credentials, Policy, Producer
from popmq.security.config import SecurityConfig
from tests.compat.conftest import OfficialClient
from tests.support.server_thread import ServerThread

ROOT = Credentials("root", "r00t-s3cret")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    security = SecurityConfig(
        authentication=True, root_access_key=ROOT.access_key, root_secret_key=ROOT.secret_key
    )
    thread = ServerThread(tmp_path / "data", security=security)
    thread.start()
    with Admin(thread.endpoint, credentials=ROOT) as admin:
        admin.create_topic("orders", queues=2)
    yield thread
    thread.stop()


def test_the_official_client_with_credentials_sends_and_receives(
    server: ServerThread, official: OfficialClient
) -> None:
    signed = {"access_key": ROOT.access_key, "secret_key": ROOT.secret_key}
    sent = official.run("produce", topic="orders", messages=[{"body": "hello"}], **signed)
    [receipt] = sent["receipts"]
    assert "error" not in receipt, receipt
    with Producer(server.endpoint, credentials=ROOT) as producer:
        producer.send("orders", b"from the sdk")
    got = official.run("simple", group="billing", topic="orders", want=2, **signed)
    assert sorted(m["body"] for m in got["messages"]) == ["from the sdk", "hello"]


def test_the_official_client_with_a_wrong_secret_gets_40100(
    server: ServerThread, official: OfficialClient
) -> None:
    proc = official.start(
        "produce",
        topic="orders",
        messages=[{"body": "refused"}],
        access_key=ROOT.access_key,
        secret_key="not-the-secret",
    )
    result = official.result(proc, may_fail=True)
    [receipt] = result["receipts"]
    assert "error" in receipt, result  # the client wraps it: "failed to fetch topic route"
    # The client logs the code and message of the Status it got.
    log = official.log_tail(200)
    assert "40100, the signature of access key 'root' does not match" in log, log
    assert "not-the-secret" not in log


def test_the_official_client_of_a_user_with_pub_on_one_topic_gets_40300_elsewhere(
    server: ServerThread, official: OfficialClient
) -> None:
    producer = Credentials("producer", "producer-s3cret")
    with Admin(server.endpoint, credentials=ROOT) as admin:
        admin.create_topic("audit", queues=1)
        admin.create_user(producer.access_key, producer.secret_key)
        admin.grant_policy(producer.access_key, Policy.of("topic:orders", ["pub"]))
    signed = {"access_key": producer.access_key, "secret_key": producer.secret_key}
    sent = official.run("produce", topic="orders", messages=[{"body": "allowed"}], **signed)
    [receipt] = sent["receipts"]
    assert "error" not in receipt, receipt
    proc = official.start("produce", topic="audit", messages=[{"body": "refused"}], **signed)
    result = official.result(proc, may_fail=True)
    [receipt] = result["receipts"]
    assert "error" in receipt, result  # the client wraps it: "failed to fetch topic route"
    log = official.log_tail(200)
    assert "40300" in log and "'producer' may not" in log and "topic 'audit'" in log, log
