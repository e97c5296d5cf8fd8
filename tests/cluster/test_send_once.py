"""A send is stored at most once cluster-wide, whatever the proxy and the SDK retry: real
etcd, brokers and a proxy in one process (tests/support/inprocess_cluster.py), with a relay
in front of broker b2 (tests/support/fault_relay.py) that loses a send's answer after b2
stored it, or holds b2's requests past the client's timeout.

Without the fix, the proxy moved such a send to b1 (the answer lost) or sent the client's
repeat there (the client timed out), and the message was stored on both brokers.
"""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest

from popmq import Admin, Producer, RetryBackoff, RetryPolicy
from tests.cluster.traffic import copies_in
from tests.support.fault_relay import FaultRelay
from tests.support.inprocess_cluster import InProcessCluster

pytestmark = pytest.mark.timeout(180)

BODY_BYTES = 6000
"""Bodies of random bytes this large (not compressible), so a send request is told from
the connection's pings by its size."""


def _per_broker(admin: Admin, topic: str) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for queue in admin.get_topic(topic).queues:
        counts[queue.broker] += queue.message_count
    return dict(counts)


def test_a_send_stored_whose_answer_was_lost_is_retried_on_its_broker_and_stored_once(
    relayed_b2: tuple[InProcessCluster, FaultRelay],
) -> None:
    cluster, relay = relayed_b2
    proxy = cluster.proxies[0]
    with Admin(proxy) as admin, Producer(proxy) as producer:
        admin.create_topic("lost", queues=1)
        relay.drop_next_answer(min_bytes=BODY_BYTES)
        sent: list[str] = []
        for _ in range(20):  # sends alternate between b1 and b2: the first to b2 is hit
            sent.append(producer.send("lost", os.urandom(BODY_BYTES)).message_id)
            if relay.dropped:
                break
        assert relay.dropped == 1, "no send went through the relay to b2"
        sent += [producer.send("lost", os.urandom(BODY_BYTES)).message_id for _ in range(4)]
        per_broker = _per_broker(admin, "lost")
    stored = copies_in(cluster.proxies[0], "lost")
    assert {i: n for i, n in stored.items() if n > 1} == {}, f"stored twice; {per_broker}"
    assert set(stored) == set(sent)
    assert sum(per_broker.values()) == len(sent), per_broker
    assert per_broker.get("b2", 0) >= 1, per_broker


def test_a_clients_repeat_after_its_timeout_keeps_the_id_and_is_stored_once(
    relayed_b2: tuple[InProcessCluster, FaultRelay],
) -> None:
    cluster, relay = relayed_b2
    proxy = cluster.proxies[0]
    retry = RetryPolicy(max_attempts=20, backoff=RetryBackoff(initial_s=0.2, max_s=0.5))
    with Admin(proxy) as admin, Producer(proxy, timeout_s=1.0, retry=retry) as producer:
        admin.create_topic("slow", queues=1)
        sent: list[str] = []
        timed_out = False
        for _ in range(6):  # alternating brokers: one of the first sends goes to b2
            relay.pause(3.0)  # b2 takes nothing for 3 s: the client's 1 s timeout passes
            began = time.monotonic()
            sent.append(producer.send("slow", os.urandom(BODY_BYTES)).message_id)
            if time.monotonic() - began > 1.0:
                timed_out = True  # it went to b2, and its first attempt timed out
                break
        assert timed_out, "no send went to the paused b2"
        per_broker = _per_broker(admin, "slow")
    stored = copies_in(cluster.proxies[0], "slow")
    assert {i: n for i, n in stored.items() if n > 1} == {}, f"stored twice; {per_broker}"
    assert set(stored) == set(sent)
    assert sum(per_broker.values()) == len(sent), per_broker
