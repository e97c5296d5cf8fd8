"""Transactional messages through the SDK and the CLI against the real server: commit,
rollback, the producer's checker answering checks, discard and resume."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from popmq import (
    Admin,
    AsyncProducer,
    FailedPreconditionError,
    HalfMessage,
    InvalidArgumentError,
    Producer,
    SimpleConsumer,
    TransactionResolution,
)
from popmq.broker_core.config import BrokerConfig, TransactionsConfig
from popmq.cli.main import main
from tests.support.server_thread import ServerThread

FAST = TransactionsConfig(check_first_s=1.0, check_interval_s=0.5, check_max=3)
"""First check 1 s after the half send, then every 0.5 s, discarded after the third."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    thread = ServerThread(
        tmp_path_factory.mktemp("tx") / "data", BrokerConfig(transactions=FAST), metrics=True
    )
    thread.start()
    yield thread
    thread.stop()


@pytest.fixture
def endpoint(server: ServerThread) -> str:
    return server.endpoint


def _topic(endpoint: str, name: str, message_type: str = "transaction") -> str:
    with Admin(endpoint) as admin:
        admin.create_topic(name, 2, message_type=message_type)
    return name


def _receive_all(endpoint: str, topic: str, *, wait_s: float) -> list[bytes]:
    """Everything a fresh group receives of `topic` until `wait_s` passes with nothing new."""
    got: list[bytes] = []
    with SimpleConsumer(endpoint, group=f"g-{topic}", topic=topic) as consumer:
        while messages := consumer.receive(max_messages=32, wait_s=wait_s):
            got.extend(m.body for m in messages)
            consumer.ack(*messages)
    return got


def _metric(server: ServerThread, name: str, **labels: str) -> float:
    """A sample of the server's registry (read fresh from this thread), 0 when absent."""
    assert server.server is not None and server.server.metrics is not None
    for family in server.server.metrics.registry.collect():
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


def _eventually(condition: Callable[[], bool], *, within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {within_s}s: {what}"
        time.sleep(0.05)


def test_a_transaction_block_commits_its_messages_once_on_success(endpoint: str) -> None:
    orders = _topic(endpoint, "tx-commit")
    audit = _topic(endpoint, "tx-commit-audit", "mixed")
    with Producer(endpoint) as producer:
        with producer.transaction() as tx:
            first = tx.send(orders, b"order-1")
            tx.send(audit, b"audit-1")
            # Half messages: stored, invisible until the commit.
            assert first.offset == -1 and first.transaction_id
            assert _receive_all(endpoint, orders, wait_s=0.2) == []
        assert tx.state == "committed"
    assert _receive_all(endpoint, orders, wait_s=0.5) == [b"order-1"]
    assert _receive_all(endpoint, audit, wait_s=0.5) == [b"audit-1"]
    with Admin(endpoint) as admin:
        assert admin.list_transactions(topic=orders) == []


def test_a_transaction_block_that_raises_rolls_back_and_nothing_is_delivered(
    endpoint: str,
) -> None:
    topic = _topic(endpoint, "tx-raise")
    with Producer(endpoint) as producer:
        with pytest.raises(RuntimeError, match="local transaction failed"):
            with producer.transaction() as tx:
                tx.send(topic, b"never-1")
                tx.send(topic, b"never-2")
                raise RuntimeError("local transaction failed")
        assert tx.state == "rolled_back"
        # A rolled-back transaction cannot be committed.
        with pytest.raises(FailedPreconditionError):
            tx.commit()
    assert _receive_all(endpoint, topic, wait_s=0.5) == []
    with Admin(endpoint) as admin:
        assert admin.list_transactions(topic=topic) == []


def test_explicit_commit_delivers_and_explicit_rollback_does_not(endpoint: str) -> None:
    topic = _topic(endpoint, "tx-explicit")
    with Producer(endpoint) as producer:
        kept = producer.begin_transaction()
        kept.send(topic, b"kept")
        dropped = producer.begin_transaction()
        dropped.send(topic, b"dropped")
        with Admin(endpoint) as admin:
            assert {t.state for t in admin.list_transactions(topic=topic)} == {"open"}
        [committed] = kept.commit()
        assert committed.state == "committed" and committed.resolved_by == "client"
        assert kept.commit() == []  # committing again is a no-op
        [rolled_back] = dropped.rollback()
        assert rolled_back.state == "rolled_back"
    assert _receive_all(endpoint, topic, wait_s=0.5) == [b"kept"]


def test_an_operator_reads_an_open_half_message_and_not_a_resolved_one(endpoint: str) -> None:
    topic = _topic(endpoint, "tx-read")
    with Producer(endpoint) as producer, Admin(endpoint) as admin:
        open_ = producer.begin_transaction()
        open_.send(topic, b'{"pay": 7}', tag="t", keys=["k-7"], properties={"who": "<b>x</b>"})
        [listed] = admin.list_transactions(topic=topic)
        half = admin.half_message(listed.transaction_id)
        assert (half.body, half.tag, half.keys) == (b'{"pay": 7}', "t", ("k-7",))
        assert half.properties["who"] == "<b>x</b>"
        assert (half.message_id, half.topic, half.offset) == (listed.message_id, topic, -1)
        with pytest.raises(InvalidArgumentError, match="belongs to topic"):
            admin.half_message(listed.transaction_id, topic=_topic(endpoint, "tx-other"))
        [committed] = open_.commit()
        with pytest.raises(FailedPreconditionError, match=r"is committed.*stored in queue"):
            admin.half_message(listed.transaction_id, topic=topic)
        assert committed.state == "committed"


def test_async_transactions_commit_and_roll_back(endpoint: str) -> None:
    topic = _topic(endpoint, "tx-async")

    async def run() -> tuple[str, str]:
        async with AsyncProducer(endpoint) as producer:
            async with producer.transaction() as tx:
                await tx.send(topic, b"async-commit")
            with pytest.raises(ValueError, match="boom"):
                async with producer.transaction() as failed:
                    await failed.send(topic, b"async-rollback")
                    raise ValueError("boom")
            return tx.state, failed.state

    assert asyncio.run(run()) == ("committed", "rolled_back")
    assert _receive_all(endpoint, topic, wait_s=0.5) == [b"async-commit"]


def test_the_checker_decides_transactions_left_open_and_unknown_ones_are_discarded(
    server: ServerThread, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = _topic(endpoint, "tx-checked")
    answers = {
        b"commit-me": TransactionResolution.COMMIT,
        b"rollback-me": TransactionResolution.ROLLBACK,
        b"unknown": TransactionResolution.UNKNOWN,
    }
    asked: list[tuple[bytes, int]] = []
    lock = threading.Lock()

    def checker(message: HalfMessage) -> TransactionResolution:
        with lock:
            asked.append((message.body, message.check_attempt))
        assert message.topic == topic and message.transaction_id
        return answers[message.body]

    def cli(*args: str) -> str:
        capsys.readouterr()
        assert main([*args, "--endpoint", endpoint]) == 0
        return capsys.readouterr().out

    with Producer(endpoint, transaction_checker=checker, transaction_topics=[topic]) as producer:
        # The producer "dies" before its commits: nothing resolves these three.
        ids = {}
        for body in answers:
            tx = producer.begin_transaction()
            ids[body] = tx.send(topic, body).transaction_id

        _eventually(
            lambda: _receive_all(endpoint, topic, wait_s=0.2) == [b"commit-me"],
            within_s=15,
            what="the checker's COMMIT delivers the message",
        )
        with Admin(endpoint) as admin:
            _eventually(
                lambda: (
                    [t.transaction_id for t in admin.list_transactions(discarded=True)]
                    == [ids[b"unknown"]]
                ),
                within_s=15,
                what="the transaction answered UNKNOWN is discarded after check_max checks",
            )
            assert admin.list_transactions(topic=topic) == []
        with lock:
            unknown_attempts = [n for body, n in asked if body == b"unknown"]
            assert unknown_attempts == [1, 2, 3]
            # Resolved ones are never asked again.
            assert [n for body, n in asked if body == b"commit-me"] == [1]
            assert [n for body, n in asked if body == b"rollback-me"] == [1]

        # Metrics: checks sent, resolutions by source, the discard.
        assert _metric(server, "popmq_transaction_checks_total", topic=topic) >= 5
        assert _metric(server, "popmq_transactions_discarded_total", topic=topic) == 1
        for resolution in ("commit", "rollback"):
            by_checker = _metric(
                server,
                "popmq_transaction_resolutions_total",
                resolution=resolution,
                source="server_check",
            )
            assert by_checker >= 1, resolution

        listed = json.loads(cli("transaction", "list", "--discarded", "--json"))
        assert [(t["transaction_id"], t["topic"]) for t in listed] == [(ids[b"unknown"], topic)]
        assert ids[b"unknown"] in cli("transaction", "list", "--discarded")
        resumed = cli("transaction", "resume", ids[b"unknown"])
        assert "state=open" in resumed
        answers[b"unknown"] = TransactionResolution.COMMIT
        _eventually(
            lambda: _receive_all(endpoint, topic, wait_s=0.2) == [b"unknown"],
            within_s=15,
            what="the resumed transaction is checked again and committed",
        )
    assert _receive_all(endpoint, topic, wait_s=0.2) == []  # rollback-me never came


def test_operator_commits_and_rolls_back_open_transactions_from_the_cli(
    server: ServerThread, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = _topic(endpoint, "tx-operator")

    def cli(*args: str, code: int = 0) -> str:
        capsys.readouterr()
        assert main([*args, "--endpoint", endpoint]) == code
        out, err = capsys.readouterr()
        return out if code == 0 else err

    with Producer(endpoint) as producer:
        to_commit = producer.begin_transaction().send(topic, b"by-operator").transaction_id
        to_roll_back = producer.begin_transaction().send(topic, b"not-delivered").transaction_id
    assert _metric(server, "popmq_transactions_open") >= 2
    assert _metric(server, "popmq_half_messages_sent_total", topic=topic) == 2
    table = cli("transaction", "list", "--topic", topic)
    assert to_commit in table and to_roll_back in table and "2 open transactions" in table
    shown = json.loads(cli("transaction", "show", to_commit, "--json"))
    assert (shown["body"], shown["offset"]) == ("by-operator", -1)
    assert "by-operator" in cli("transaction", "show", to_commit, "--topic", topic)
    assert "state=committed by=admin" in cli("transaction", "commit", to_commit)
    rolled = json.loads(cli("transaction", "rollback", to_roll_back, "--topic", topic, "--json"))
    assert (rolled["state"], rolled["resolved_by"]) == ("rolled_back", "admin")
    # The contrary resolution is refused; a resumed transaction must be discarded first.
    assert "rolled back" in cli("transaction", "commit", to_roll_back, "--topic", topic, code=4)
    # Without --topic, resume looks among the discarded ones: a committed one is not there.
    assert "no discarded transaction" in cli("transaction", "resume", to_commit, code=3)
    assert "is committed" in cli("transaction", "show", to_commit, "--topic", topic, code=4)
    assert _receive_all(endpoint, topic, wait_s=0.5) == [b"by-operator"]
