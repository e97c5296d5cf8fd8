"""FIFO throughput with 1,000 message groups, next to the same load on a normal topic.

A producer sends N messages spread over 1,000 groups (message i goes to group i % 1000) in
batches of 100, so each group's messages are in send order. Then 8 consumers (asyncio, one
spawned process) receive up to 32 at a time and ack each batch until all N arrived. A FIFO
group has at most one message in flight, so the consume rate shows what the per-group
hand-off costs; the order check counts messages that arrived before an earlier one of their
group (0 expected for fifo; the normal topic makes no such promise).

The real server runs in this process (a loop thread, a temp data dir); producer and
consumers run in a spawned process so they do not share the server's GIL.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from popmq import AsyncProducer, AsyncSimpleConsumer, Message
from tests.support.server_thread import ServerThread

GROUPS = 1_000
CONSUMERS = 8
BATCH = 100


@dataclass(frozen=True)
class FifoResult:
    kind: str
    messages: int
    send_seconds: float
    consume_seconds: float
    out_of_order: int

    @property
    def send_rate(self) -> float:
        return self.messages / self.send_seconds

    @property
    def consume_rate(self) -> float:
        return self.messages / self.consume_seconds


def _load(endpoint: str, kind: str, messages: int) -> tuple[float, float, int]:
    """Runs in a spawned process: send, then consume; (send s, consume s, out of order)."""

    async def load() -> tuple[float, float, int]:
        fifo = kind == "fifo"
        async with AsyncProducer(endpoint) as producer:
            started = time.perf_counter()
            for first in range(0, messages, BATCH):
                await producer.send_batch(
                    "bench",
                    [
                        Message(
                            f"{i % GROUPS}:{i // GROUPS}".encode(),
                            message_group=f"g{i % GROUPS}" if fifo else "",
                        )
                        for i in range(first, min(messages, first + BATCH))
                    ],
                )
            send_seconds = time.perf_counter() - started

        last_seq: dict[str, int] = {}
        out_of_order = 0
        received = 0
        done = asyncio.Event()

        async def consume(consumer: AsyncSimpleConsumer) -> None:
            nonlocal received, out_of_order
            while not done.is_set():
                batch = await consumer.receive(max_messages=32, invisible_duration_s=60, wait_s=1)
                for message in batch:
                    group, seq = message.body.decode().split(":")
                    if int(seq) < last_seq.get(group, -1):
                        out_of_order += 1
                    last_seq[group] = max(int(seq), last_seq.get(group, -1))
                received += len(batch)
                if received >= messages:
                    done.set()
                if batch:
                    await consumer.ack(batch)

        consumers = [
            AsyncSimpleConsumer(endpoint, group="bench-consumers", topic="bench")
            for _ in range(CONSUMERS)
        ]
        try:
            started = time.perf_counter()
            await asyncio.gather(*(consume(c) for c in consumers))
            consume_seconds = time.perf_counter() - started
        finally:
            for consumer in consumers:
                await consumer.close()
        return send_seconds, consume_seconds, out_of_order

    return asyncio.run(load())


def run_once(kind: str, *, messages: int) -> FifoResult:
    with tempfile.TemporaryDirectory(prefix="popmq-bench-") as tmp:
        server = ServerThread(Path(tmp) / "data")
        server.start()
        try:
            server.call(lambda: server.broker.create_topic("bench", 8, message_type=kind))
            context = multiprocessing.get_context("spawn")
            with context.Pool(1) as pool:
                send_s, consume_s, out_of_order = pool.apply(
                    _load, (server.endpoint, kind, messages)
                )
        finally:
            server.stop()
    return FifoResult(kind, messages, send_s, consume_s, out_of_order)


def main(*, quick: bool) -> str:
    messages = 2 * GROUPS if quick else 50 * GROUPS
    runs = 1 if quick else 3
    lines = [
        f"| topic | messages | send msg/s (median of {runs}) | consume+ack msg/s "
        "| arrived before an earlier one of their group |",
        "|---|---|---|---|---|",
    ]
    for kind in ("normal", "fifo"):
        results = [run_once(kind, messages=messages) for _ in range(runs)]
        send = statistics.median(r.send_rate for r in results)
        consume = statistics.median(r.consume_rate for r in results)
        disorder = max(r.out_of_order for r in results)
        label = f"fifo, {GROUPS:,} groups" if kind == "fifo" else "normal"
        lines.append(f"| {label} | {messages:,} | {send:,.0f} | {consume:,.0f} | {disorder} |")
    lines.append(
        f"\n8 queues, batches of {BATCH} per send, {CONSUMERS} consumers receiving up to 32 "
        "and acking each batch."
    )
    return "\n".join(lines)
