"""Send throughput of one sync Producer: ``send`` (one at a time) vs ``send_async`` vs oneway.

``send`` waits for each receipt, so one thread gets one fsync per message at best.
``send_async`` keeps up to ``max_in_flight`` sends open, and the server's group commit puts
many of them in one write and one fsync. ``send_oneway`` also pipelines, without futures.

The real server runs in this process (a loop thread, a temp data dir, flush = sync); the
producer runs in a spawned process so the two do not share a GIL. Each run counts the
messages started within the time budget and stops the clock when every one of them is
acknowledged (for oneway: when ``close`` has waited for them).
"""

from __future__ import annotations

import multiprocessing
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from popmq import Admin, Producer
from tests.support.server_thread import ServerThread

MODES = ("send", "send_async", "send_oneway")


@dataclass(frozen=True)
class SendResult:
    mode: str
    messages: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.messages / self.seconds


def _load(endpoint: str, mode: str, seconds: float, body_bytes: int) -> tuple[int, float]:
    """Runs in a spawned process: send for ``seconds``, return (messages, elapsed)."""
    body = b"x" * body_bytes
    sent = 0
    producer = Producer(endpoint)
    try:
        producer.send("bench", body)  # open the channel outside the timed part
        started = time.perf_counter()
        deadline = started + seconds
        if mode == "send":
            while time.perf_counter() < deadline:
                producer.send("bench", body)
                sent += 1
        elif mode == "send_async":
            futures = []
            while time.perf_counter() < deadline:
                futures.append(producer.send_async("bench", body))
                sent += 1
            for future in futures:
                future.result()
        else:
            while time.perf_counter() < deadline:
                producer.send_oneway("bench", body)
                sent += 1
    finally:
        producer.close()  # waits for the oneway sends
    return sent, time.perf_counter() - started


def run_once(mode: str, *, seconds: float, body_bytes: int = 1024) -> SendResult:
    with tempfile.TemporaryDirectory(prefix="popmq-bench-") as tmp:
        server = ServerThread(Path(tmp) / "data")
        endpoint = server.start()
        try:
            with Admin(endpoint) as admin:
                admin.create_topic("bench", queues=8)
            context = multiprocessing.get_context("spawn")
            with context.Pool(1) as pool:
                messages, elapsed = pool.apply(_load, (endpoint, mode, seconds, body_bytes))
            with Admin(endpoint) as admin:
                stored = sum(q.max_offset for q in admin.get_topic("bench").queues)
        finally:
            server.stop()
    # Oneway sends may be lost by design; count what the server stored (minus the warm-up).
    return SendResult(mode, stored - 1 if mode == "send_oneway" else messages, elapsed)


def main(*, quick: bool) -> str:
    seconds = 0.5 if quick else 5.0
    runs = 1 if quick else 3
    lines = [
        f"| mode | msg/s (median of {runs}) | messages per run | vs send |",
        "|---|---|---|---|",
    ]
    rates: dict[str, float] = {}
    for mode in MODES:
        results = [run_once(mode, seconds=seconds) for _ in range(runs)]
        rates[mode] = statistics.median(r.rate for r in results)
        messages = statistics.median(r.messages for r in results)
        lines.append(
            f"| {mode} | {rates[mode]:,.0f} | {messages:,.0f} | "
            f"{rates[mode] / rates['send']:.1f}x |"
        )
    lines.append("\n1 KiB bodies, one Producer in one thread, flush = sync, 8 queues.")
    return "\n".join(lines)
