"""Client-side helpers of the cluster process tests: unique ids as bodies, a steady send
loop, a steady receive-and-ack loop, receiving until a set of ids came, and the checks every
test makes (ids sent = ids received, duplicates counted and named)."""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections import Counter
from collections.abc import Collection, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field

import grpc

from popmq import (
    AsyncProducer,
    AsyncSimpleConsumer,
    PopMQError,
    Producer,
    ReceivedMessage,
    SendReceipt,
    SimpleConsumer,
)
from popmq._gen.popmq.broker.v1 import broker_pb2 as broker_pb
from popmq._gen.popmq.broker.v1 import broker_pb2_grpc
from tests.support.fault_relay import FaultRelay
from tests.support.waiting import wait_until


def ids_of(messages: Iterable[ReceivedMessage]) -> Counter[str]:
    """Body (a unique id) -> deliveries."""
    return Counter(m.body.decode() for m in messages)


def duplicates(received: Counter[str]) -> dict[str, int]:
    """Ids delivered more than once, with their count."""
    return {i: n for i, n in sorted(received.items()) if n > 1}


def compare(sent: Collection[str], received: Counter[str]) -> str:
    """What differs between the ids sent and those received, for assertion messages."""
    missing = sorted(set(sent) - set(received))
    unexpected = sorted(set(received) - set(sent))
    return (
        f"sent {len(sent)}, received {len(received)} distinct in {sum(received.values())} "
        f"deliveries; missing {len(missing)} {missing[:10]}; unexpected {len(unexpected)} "
        f"{unexpected[:10]}; duplicates {duplicates(received)}"
    )


async def receive_ids(
    consumer: AsyncSimpleConsumer,
    want: Collection[str],
    *,
    deadline_s: float = 30.0,
    invisible_s: float = 30.0,
    wait_s: float = 2.0,
    quiet_polls: int = 1,
) -> list[ReceivedMessage]:
    """Receive (without acking) until every id of `want` came, then `quiet_polls` more empty
    long polls (to catch extra deliveries), or until `deadline_s`; returns every delivery."""
    got: list[ReceivedMessage] = []
    missing = set(want)
    quiet = 0
    give_up = time.monotonic() + deadline_s
    while time.monotonic() < give_up:
        batch = await consumer.receive(
            max_messages=32, invisible_duration_s=invisible_s, wait_s=wait_s
        )
        got += batch
        missing.difference_update(m.body.decode() for m in batch)
        if missing:
            continue
        if not batch:
            quiet += 1
            if quiet >= quiet_polls:
                break
    return got


async def drain(
    consumer: AsyncSimpleConsumer, *, wait_s: float = 1.0, deadline_s: float = 60.0
) -> list[ReceivedMessage]:
    """Receive and ack until a long poll comes back empty (or `deadline_s`)."""
    got: list[ReceivedMessage] = []
    give_up = time.monotonic() + deadline_s
    while time.monotonic() < give_up:
        batch = await consumer.receive(max_messages=32, invisible_duration_s=30, wait_s=wait_s)
        if not batch:
            break
        await consumer.ack(batch)
        got += batch
    return got


@dataclass
class SendLog:
    """What a send loop saw: every id tried, the receipts, and the failures."""

    attempted: list[str] = field(default_factory=list)
    receipts: dict[str, SendReceipt] = field(default_factory=dict)
    done_at: dict[str, float] = field(default_factory=dict)
    """Id -> time.monotonic() when its send returned a receipt."""
    errors: list[tuple[float, str, str]] = field(default_factory=list)
    """(time.monotonic(), id, error code) of each send that raised."""

    def error_codes(self) -> Counter[str]:
        return Counter(code for _, _, code in self.errors)

    def longest_gap(self, since: float, until: float) -> float:
        """The longest time without a successful send between `since` and `until`."""
        times = sorted(t for t in self.done_at.values() if since <= t <= until)
        edges = [since, *times, until]
        return max(b - a for a, b in itertools.pairwise(edges))


async def send_loop(
    producer: AsyncProducer,
    topic: str,
    prefix: str,
    stop: asyncio.Event,
    log: SendLog,
    *,
    pause_s: float = 0.005,
) -> None:
    """Send `prefix000000`, `prefix000001`, ... one by one until `stop` is set."""
    for n in itertools.count():
        if stop.is_set():
            return
        message_id = f"{prefix}{n:06d}"
        log.attempted.append(message_id)
        try:
            receipt = await producer.send(topic, message_id.encode())
        except PopMQError as exc:
            log.errors.append((time.monotonic(), message_id, exc.code))
        else:
            log.receipts[message_id] = receipt
            log.done_at[message_id] = time.monotonic()
        await asyncio.sleep(pause_s)


async def receive_loop(
    consumer: AsyncSimpleConsumer,
    stop: asyncio.Event,
    received: list[tuple[float, ReceivedMessage]],
    errors: list[str],
) -> None:
    """Receive (32 at most, invisible 30 s, long poll 1 s) and ack until `stop` is set.

    Each acked batch goes to `received` with the time.monotonic() of its ack; a failed
    receive or ack goes to `errors` as `CODE: message` and is retried after 0.1 s (its batch,
    not acked, comes back once invisible)."""
    while not stop.is_set():
        try:
            batch = await consumer.receive(max_messages=32, invisible_duration_s=30, wait_s=1)
            await consumer.ack(batch)
        except PopMQError as exc:
            errors.append(f"{exc.code}: {exc}")
            await asyncio.sleep(0.1)
        else:
            at = time.monotonic()
            received.extend((at, m) for m in batch)


def copies_in(endpoint: str, topic: str) -> Counter[str]:
    """Message id -> copies in the cluster (every message received once, unacked)."""
    got: Counter[str] = Counter()
    with SimpleConsumer(endpoint, group="audit", topic=topic) as consumer:
        quiet = 0
        while quiet < 3:
            batch = consumer.receive(max_messages=32, invisible_duration_s=120, wait_s=1)
            got.update(m.message_id for m in batch)
            quiet = 0 if batch else quiet + 1
    return got


def stored_on(address: str, topic: str, message_id: str) -> bool:
    """Whether the broker at `address` stored the message: QueryMessage finds only a
    written message (durable with the default sync flush), where a lookup of the dedup
    window also counts a send still being written. A blocking call: no event loop of its
    own for grpc to outlive."""
    request = broker_pb.QueryMessageRequest(topic=topic, message_id=message_id)
    with grpc.insecure_channel(address) as channel:
        stub = broker_pb2_grpc.BrokerServiceStub(channel)  # type: ignore[no-untyped-call]
        try:
            stub.QueryMessage(request, timeout=10)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                return False
            raise
    return True


def send_until_held(
    producer: Producer, relay: FaultRelay, topic: str, body_bytes: int
) -> tuple[str, Future[SendReceipt]]:
    """Send messages MOVED-0, MOVED-1, ... one at a time (spread over the topic's brokers)
    until one is held at `relay` (armed with `drop_next_answer`): its id and its pending
    receipt. Bodies are random bytes of `body_bytes`, so the relay tells a send from pings."""
    for i in range(20):
        message_id = f"MOVED-{i}"
        sending = producer.send_async(topic, os.urandom(body_bytes), message_id=message_id)
        wait_until(
            lambda s=sending: s.done() or relay.holding,
            "the send answered, or held at the relay",
            30,
        )
        if relay.holding:
            return message_id, sending
        sending.result()
    raise AssertionError("no send went through the relay")
