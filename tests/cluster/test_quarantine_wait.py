"""A client's repeat of a send that may be stored on a quarantined broker waits for the
broker's connection and is answered there, stored once: real etcd, brokers and a proxy in
one process (tests/support/inprocess_cluster.py), a relay in front of broker b2
(tests/support/fault_relay.py).

The relay loses the answer of a send b2 stored and closes the connection, and refuses new
ones: the proxy quarantines b2 (its connection is down) and tells the client the send's
outcome is unknown. The client repeats the send with the same message id while b2 is still
cut off. Without the wait, the repeat failed at once, and an application that then sent the
message again under a new id had it stored twice.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest

from popmq import Admin, Message, SendReceipt, SimpleConsumer
from popmq import UnavailableError as SdkUnavailableError
from popmq._gen.apache.rocketmq.v2 import definition_pb2 as v2pb
from popmq._gen.apache.rocketmq.v2 import service_pb2 as v2_service
from popmq._gen.apache.rocketmq.v2 import service_pb2_grpc as v2_grpc
from popmq._gen.popmq.v1 import messaging_pb2
from popmq.sdk.producer import AsyncProducer, build_send_request
from tests.support.fault_relay import FaultRelay
from tests.support.inprocess_cluster import InProcessCluster

pytestmark = pytest.mark.timeout(180)

BODY_BYTES = 6000
"""Bodies of random bytes this large (not compressible), so the relay tells a send request
from the connection's pings by its size."""


def _send(endpoint: str, request: messaging_pb2.SendMessagesRequest) -> SendReceipt:
    """One attempt of `request` through `endpoint`, not retried by the SDK."""

    async def send() -> SendReceipt:
        async with AsyncProducer(endpoint, timeout_s=60) as producer:
            (receipt,) = await producer.send_request(request, retry=False)
            return receipt

    return asyncio.run(send())


def _send_unary(
    endpoint: str, request: messaging_pb2.SendMessagesRequest, timeout_s: float
) -> None:
    """One unary SendMessages call of `request` with a deadline `timeout_s` away."""

    async def send() -> None:
        async with AsyncProducer(endpoint, timeout_s=timeout_s, multiplex=False) as producer:
            await producer.send_request(request, retry=False)

    asyncio.run(send())


def _v2_send(endpoint: str, message: messaging_pb2.OutgoingMessage, timeout_s: float) -> Any:
    """`message` sent once as an official RocketMQ client sends it (apache.rocketmq.v2
    SendMessage, its message id kept), on a call with a deadline `timeout_s` away."""
    v2 = v2pb.Message(
        topic=v2pb.Resource(name=message.topic),
        body=message.body,
        system_properties=v2pb.SystemProperties(
            message_id=message.message_id, body_encoding=v2pb.Encoding.IDENTITY
        ),
    )
    metadata = (("x-mq-client-id", "v2-client"), ("x-mq-language", "JAVA"))
    with grpc.insecure_channel(endpoint) as channel:
        stub = v2_grpc.MessagingServiceStub(channel)  # type: ignore[no-untyped-call]
        return stub.SendMessage(
            v2_service.SendMessageRequest(messages=[v2]), metadata=metadata, timeout=timeout_s
        )


def _request(topic: str) -> messaging_pb2.SendMessagesRequest:
    return build_send_request(topic, [Message(os.urandom(BODY_BYTES))])


def _per_broker(admin: Admin, topic: str) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for queue in admin.get_topic(topic).queues:
        counts[queue.broker] += queue.message_count
    return dict(counts)


def test_a_repeat_for_a_quarantined_broker_waits_for_it_and_is_stored_once(
    relayed_b2: tuple[InProcessCluster, FaultRelay],
) -> None:
    cluster, relay = relayed_b2
    proxy = cluster.proxies[0]
    router = cluster.cluster_broker().sends.router

    async def waits() -> tuple[int, int]:
        return router.quarantine_waits  # read on the proxy's loop

    with Admin(proxy) as admin:
        admin.create_topic("held", queues=1)
        # Sends alternate between b1 and b2: once one went to b2, its connection is up.
        for _ in range(10):
            _send(proxy, _request("held"))
            if _per_broker(admin, "held").get("b2"):
                break
        before = _per_broker(admin, "held")
        assert before.get("b2"), "no send went to b2"
        # The next send to b2 is stored, its answer lost, and b2 cut off from then on.
        relay.drop_next_answer(min_bytes=BODY_BYTES)
        relay.cut = True
        lost: messaging_pb2.SendMessagesRequest | None = None
        to_b1 = 0
        for _ in range(4):
            request = _request("held")
            try:
                _send(proxy, request)
                to_b1 += 1
            except SdkUnavailableError as error:
                assert "may or may not be stored on broker 'b2'" in str(error), error
                lost = request
                break
        assert lost is not None and relay.dropped == 1, "no send to b2 lost its answer"
        assert not cluster.cluster_broker().faults.is_reachable("b2"), "b2 not quarantined"
        status = admin.cluster_status()  # what `popmq cluster status` shows
        (b2,) = [b for b in status.brokers if b.name == "b2"]
        assert b2.quarantined, b2
        assert any(p.startswith("broker b2 is quarantined") for p in status.problems)

        # A repeat on a unary call whose deadline (3 s, an official RocketMQ client's)
        # comes before the end of the wait (in_doubt_retry_s, 5 s) stops waiting just
        # before it: the client is told the outcome is unknown, a retriable UNAVAILABLE,
        # not cut off by its deadline.
        with pytest.raises(
            SdkUnavailableError, match=r"cannot be reached now: its connection is down \(waited \d"
        ):
            _send_unary(proxy, lost, timeout_s=3.0)
        assert cluster.call(waits) == (0, 1)
        # So does an official RocketMQ client's retry (same message id, 3 s request timeout):
        # answered in the response's status, before its deadline.
        answer = _v2_send(proxy, lost.messages[0], timeout_s=3.0)
        assert answer.status.code == v2pb.Code.INTERNAL_SERVER_ERROR, answer.status
        assert "cannot be reached now: its connection is down (waited" in answer.status.message
        assert cluster.call(waits) == (0, 2)

        # The client's repeat (same message id) while b2 is still cut off: it waits.
        with ThreadPoolExecutor(1) as pool:
            repeat = pool.submit(_send, proxy, lost)
            deadline = time.monotonic() + 30
            while cluster.call(waits)[0] == 0:
                assert not repeat.done(), f"the repeat did not wait: {repeat.exception()}"
                assert time.monotonic() < deadline, "the repeat never waited"
                time.sleep(0.05)
            relay.cut = False  # b2's connection comes up: the probe ends the quarantine
            receipt = repeat.result(timeout=60)

        assert receipt.message_id == lost.messages[0].message_id
        assert receipt.duplicate, receipt  # answered by b2's dedup window: the first copy
        after = _per_broker(admin, "held")
        # The lost send stored once, on b2; nothing else since but the sends to b1.
        assert after == {"b1": before.get("b1", 0) + to_b1, "b2": before["b2"] + 1}, before
        (b2,) = [b for b in admin.cluster_status().brokers if b.name == "b2"]
        assert not b2.quarantined and b2.reachable, b2
    assert cluster.call(waits) == (0, 3)

    got: Counter[str] = Counter()
    with SimpleConsumer(proxy, group="audit", topic="held") as consumer:
        quiet = 0
        while quiet < 2:
            batch = consumer.receive(max_messages=32, invisible_duration_s=60, wait_s=1)
            got.update(m.message_id for m in batch)
            quiet = 0 if batch else quiet + 1
    assert got[receipt.message_id] == 1
    assert {i: n for i, n in got.items() if n > 1} == {}
