"""A send repeated through another proxy is stored at most once: real etcd, two brokers and
two proxies in one process (tests/support/inprocess_cluster.py).

The SDK marks its retries of a send as repeats; a proxy that does not remember a marked
repeat (the first try went through another proxy) asks the topic's brokers whether its
messages are in their dedup windows, and sends it to the one that has them. Without that,
a proxy routed the repeat as a new send, and consecutive sends go to different brokers, so
one of the repeats below would have been stored a second time on the other broker.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from popmq import Admin, Message, Producer, RetryBackoff, RetryPolicy, SendReceipt
from popmq import UnavailableError as SdkUnavailableError
from popmq._gen.popmq.v1 import messaging_pb2
from popmq.sdk.producer import AsyncProducer, build_send_request
from tests.support.fault_relay import FaultRelay
from tests.support.inprocess_cluster import InProcessCluster

pytestmark = pytest.mark.timeout(180)

BODY_BYTES = 6000
"""Bodies of random bytes this large (not compressible), so that the relay tells a send
request from the connection's pings by its size."""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[InProcessCluster]:
    started = InProcessCluster(tmp_path).start(brokers=2, proxies=2)
    try:
        yield started
    finally:
        started.stop()


def _request(topic: str, body: bytes, *, repeat: bool) -> messaging_pb2.SendMessagesRequest:
    request = build_send_request(topic, [Message(body)])
    request.repeat = repeat
    return request


def _send_once(endpoint: str, request: messaging_pb2.SendMessagesRequest) -> SendReceipt:
    """One attempt of `request` through `endpoint`, not retried: its receipt or its error."""

    async def send() -> SendReceipt:
        async with AsyncProducer(endpoint) as producer:
            (receipt,) = await producer.send_request(request, retry=False)
            return receipt

    return asyncio.run(send())


def _per_broker(admin: Admin, topic: str) -> dict[str, int]:
    """Messages stored on each broker (its queues' message counts), brokers with none left
    out."""
    counts: Counter[str] = Counter()
    for queue in admin.get_topic(topic).queues:
        counts[queue.broker] += queue.message_count
    return {broker: n for broker, n in counts.items() if n}


def _broker_of(admin: Admin, topic: str, receipt: SendReceipt) -> str:
    return admin.get_topic(topic).queues[receipt.queue_id].broker


def _same_copy(repeat: SendReceipt, first: SendReceipt) -> bool:
    return repeat.duplicate and (repeat.message_id, repeat.queue_id, repeat.offset) == (
        first.message_id,
        first.queue_id,
        first.offset,
    )


def test_the_sdks_repeat_through_another_proxy_gets_the_first_copy_and_is_stored_once(
    cluster: InProcessCluster,
) -> None:
    """P1 stores a send and its answer is lost (a relay in front of P1 drops it and closes
    the connection, as when P1 dies before answering); the SDK repeats it on its next
    endpoint, P2, which never saw it."""
    p1, p2 = cluster.proxies
    relay = FaultRelay()
    endpoint = cluster.call(relay.start)
    relay.target = ("127.0.0.1", int(p1.rsplit(":", 1)[1]))
    retry = RetryPolicy(max_attempts=5, backoff=RetryBackoff(initial_s=0.05, max_s=0.2))
    try:
        with Admin(p2) as admin:
            admin.create_topic("lost", queues=2)
            with Producer([endpoint, p2], retry=retry) as producer:
                warm = producer.send("lost", b"warm")  # the producer's stream is up, to P1
                relay.cut = True  # P1 takes no new connection: the repeat goes to P2
                relay.drop_next_answer(min_bytes=BODY_BYTES)
                body = os.urandom(BODY_BYTES)
                receipt = producer.send("lost", body)
            assert relay.dropped == 1, "the send's answer was not dropped"
            # The answer came from P2, from the dedup window of the broker P1 stored it on.
            assert receipt.duplicate, receipt
            first_broker = _broker_of(admin, "lost", receipt)
            # More repeats through P2: its rotation alternates brokers, so without the
            # lookup one of these would have gone to the other broker and been stored.
            again = build_send_request("lost", [Message(body, message_id=receipt.message_id)])
            again.repeat = True
            for _ in range(3):
                assert _same_copy(_send_once(p2, again), receipt)
            assert sum(_per_broker(admin, "lost").values()) == 2  # warm + the lost one
            assert _broker_of(admin, "lost", receipt) == first_broker
            assert not warm.duplicate
    finally:
        cluster.call(relay.close)


def test_a_repeat_of_a_send_never_stored_is_stored_once(cluster: InProcessCluster) -> None:
    p1, p2 = cluster.proxies
    with Admin(p1) as admin:
        admin.create_topic("fresh", queues=2)
        request = _request("fresh", b"never stored before", repeat=True)
        first = _send_once(p2, request)
        assert not first.duplicate  # every broker answered that it holds none: a new send
        for endpoint in (p1, p2, p1):
            assert _same_copy(_send_once(endpoint, request), first)
        assert _per_broker(admin, "fresh") == {_broker_of(admin, "fresh", first): 1}


def test_a_repeat_is_not_moved_while_the_broker_that_may_hold_it_is_down(
    cluster: InProcessCluster,
) -> None:
    p1, p2 = cluster.proxies
    with Admin(p1) as admin:
        admin.create_topic("held", queues=2)
        first: SendReceipt | None = None
        for n in range(6):  # consecutive sends alternate brokers: one lands on b2
            request = _request("held", f"on b2? {n}".encode(), repeat=False)
            receipt = _send_once(p1, request)
            if _broker_of(admin, "held", receipt) == "b2":
                first = receipt
                break
        assert first is not None, "no send went to b2"
        stored = _per_broker(admin, "held")
    cluster.stop_broker("b2")
    request.repeat = True
    for endpoint in (p2, p2):  # P2 never saw it; b1 answers "not held", b2 cannot answer
        with pytest.raises(SdkUnavailableError, match="may be stored on broker 'b2'"):
            _send_once(endpoint, request)
    cluster.add_broker("b2")  # the same store: the first copy is there
    with Admin(p1) as admin:
        assert _same_copy(_send_once(p2, request), first)
        assert _per_broker(admin, "held") == stored  # nothing was stored on b1 meanwhile


def test_an_unmarked_repeat_through_another_proxy_is_routed_as_a_new_send(
    cluster: InProcessCluster,
) -> None:
    """A send without the mark (an official RocketMQ client's retry, or an older SDK's) is
    routed as before: no lookup, so through a proxy that does not remember it, it can be
    stored a second time on another broker (docs/cluster.md says so)."""
    p1, p2 = cluster.proxies
    with Admin(p1) as admin:
        admin.create_topic("plain", queues=2)
        request = _request("plain", b"unmarked", repeat=False)
        first = _send_once(p1, request)
        answers = [_send_once(p2, request) for _ in range(2)]  # on both brokers, in turn
        assert [a.duplicate for a in answers].count(False) == 1, answers
        copies = _per_broker(admin, "plain")
        assert sorted(copies.values()) == [1, 1], copies
        assert not first.duplicate
