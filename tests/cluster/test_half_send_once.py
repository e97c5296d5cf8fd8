"""A half message (transaction) is stored at most once cluster-wide, as a send is: real etcd,
brokers and proxies in one process (tests/support/inprocess_cluster.py), with a relay
(tests/support/fault_relay.py) that loses a stored half's answer.

A second half of the same message is a second transaction: its check-back has the producer
commit it by message id, so the message would be delivered twice. Before, the proxy moved a
half send on after any broker failure, and brokers did not deduplicate halves: the half lost
below was stored on both brokers, the client committed the second, and the first stayed
open for its check-back.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from popmq import Admin, Producer, RetryBackoff, RetryPolicy, SendReceipt
from tests.cluster.traffic import copies_in
from tests.support.fault_relay import FaultRelay
from tests.support.inprocess_cluster import InProcessCluster

pytestmark = pytest.mark.timeout(180)

BODY_BYTES = 6000
"""Bodies of random bytes this large (not compressible), so a half send request is told
from the connection's pings by its size."""


def _committed(producer: Producer, topic: str) -> SendReceipt:
    tx = producer.begin_transaction()
    receipt = tx.send(topic, os.urandom(BODY_BYTES))
    tx.commit()
    return receipt


def test_a_half_whose_answer_was_lost_is_retried_on_its_broker_and_committed_once(
    relayed_b2: tuple[InProcessCluster, FaultRelay],
) -> None:
    """The relay in front of b2 drops the answer of a half b2 stored: the proxy retries it
    on b2, whose dedup window answers with the first half's transaction; the client commits
    that one, and no other half is left open to be checked back."""
    cluster, relay = relayed_b2
    proxy = cluster.proxies[0]
    with Admin(proxy) as admin, Producer(proxy) as producer:
        admin.create_topic("txlost", queues=1, message_type="transaction")
        relay.drop_next_answer(min_bytes=BODY_BYTES)
        sent: list[SendReceipt] = []
        for _ in range(20):  # half sends alternate between b1 and b2: the first to b2 is hit
            sent.append(_committed(producer, "txlost"))
            if relay.dropped:
                break
        assert relay.dropped == 1, "no half send went through the relay to b2"
        hit = sent[-1]
        # The retry's answer is b2's first half: the same transaction, which EndTransaction
        # reached through the id (it names b2).
        assert hit.duplicate, hit
        assert hit.transaction_id.startswith("b2."), hit.transaction_id
        sent += [_committed(producer, "txlost") for _ in range(3)]
        assert admin.list_transactions() == [], "a second half is left open for a check-back"
    delivered = copies_in(cluster.proxies[0], "txlost")
    assert {i: n for i, n in delivered.items() if n > 1} == {}, "delivered twice"
    assert set(delivered) == {r.message_id for r in sent}


@pytest.fixture
def two_proxies(tmp_path: Path) -> Iterator[InProcessCluster]:
    started = InProcessCluster(tmp_path).start(brokers=2, proxies=2)
    try:
        yield started
    finally:
        started.stop()


def test_the_sdks_repeat_of_a_half_through_another_proxy_gets_the_first_transaction(
    two_proxies: InProcessCluster,
) -> None:
    """P1 stores a half and its answer is lost (a relay in front of P1 drops it and closes
    the connection, as when P1 dies before answering); the SDK repeats it, marked, on P2,
    which looks it up on the brokers and sends it where the first half is."""
    cluster = two_proxies
    p1, p2 = cluster.proxies
    relay = FaultRelay()
    endpoint = cluster.call(relay.start)
    relay.target = ("127.0.0.1", int(p1.rsplit(":", 1)[1]))
    retry = RetryPolicy(max_attempts=5, backoff=RetryBackoff(initial_s=0.05, max_s=0.2))
    try:
        with Admin(p2) as admin:
            admin.create_topic("txrepeat", queues=2, message_type="transaction")
            with Producer([endpoint, p2], retry=retry) as producer:
                warm = _committed(producer, "txrepeat")  # the producer's stream is up, to P1
                relay.cut = True  # P1 takes no new connection: the repeat goes to P2
                relay.drop_next_answer(min_bytes=BODY_BYTES)
                receipt = _committed(producer, "txrepeat")
            assert relay.dropped == 1, "the half send's answer was not dropped"
            assert receipt.duplicate, receipt  # P2's answer: the first half's
            assert admin.list_transactions() == [], "a second half is left open"
        delivered = copies_in(cluster.proxies[0], "txrepeat")
        assert delivered == Counter({warm.message_id: 1, receipt.message_id: 1})
    finally:
        cluster.call(relay.close)
