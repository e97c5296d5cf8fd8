"""How late a delayed message arrives: receive time minus its delivery time.

The target is within 100 ms (RocketMQ's timer wheel works at 1 s). Messages are sent
with delivery times spread over a window, one long-polling SimpleConsumer receives them, and
lateness = the moment receive returned it - its deliver_at. The server runs in a loop thread of
this process; the consumer in the main thread (both are mostly waiting).
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from popmq import Admin, Message, Producer, SimpleConsumer
from popmq.broker_core.config import BrokerConfig
from tests.support.server_thread import ServerThread


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run_once(count: int, spread_s: float, seed: int) -> list[float]:
    """Lateness in ms of `count` messages due within the next `spread_s` seconds."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="popmq-bench-") as tmp:
        server = ServerThread(Path(tmp) / "data", BrokerConfig())
        endpoint = server.start()
        try:
            with Admin(endpoint) as admin:
                admin.create_topic("later", queues=4, message_type="delay")
            start = time.time() + 0.3
            with Producer(endpoint) as producer:
                scheduled = [
                    Message(b"x", deliver_at=start + rng.random() * spread_s) for _ in range(count)
                ]
                producer.send_batch("later", scheduled)
            late: list[float] = []
            with SimpleConsumer(endpoint, group="g", topic="later") as consumer:
                while len(late) < count:
                    batch = consumer.receive(max_messages=32, wait_s=5)
                    arrived = datetime.now(UTC)
                    for msg in batch:
                        assert msg.deliver_at is not None
                        late.append((arrived - msg.deliver_at).total_seconds() * 1000)
                    if batch:
                        consumer.ack(batch)  # one RPC for the batch
        finally:
            server.stop()
    return late


def main(*, quick: bool) -> str:
    count, spread, runs = (20, 0.5, 1) if quick else (2000, 10.0, 3)
    results = [run_once(count, spread, seed) for seed in range(runs)]
    lines = [
        "| run | messages | p50 late (ms) | p99 late (ms) | max late (ms) | early |",
        "|---|---|---|---|---|---|",
    ]
    for i, late in enumerate(results, 1):
        lines.append(
            f"| {i} | {len(late)} | {statistics.median(late):.1f} | "
            f"{_percentile(late, 0.99):.1f} | {max(late):.1f} | {sum(v < 0 for v in late)} |"
        )
    lines.append(
        f"\n{count} messages due at random times over {spread:g} s, one long-polling "
        "consumer acking each batch in one call; lateness includes the receive RPC and the "
        "consumer's own pace (a loaded machine shows up here)."
    )
    return "\n".join(lines)
