"""Server and client CPU per single-message send: SendStream against unary SendMessages.

N producers in this process each await `send` of one 1 KiB message in a loop (optionally
paced to a total rate) against a fresh `popmq serve --flush sync`; the server's CPU comes from
/proc/<pid>/stat, the client's from this process. Runs alternate the two transports and the
medians are printed. The numbers in docs/pop-stream.md come from:

    .venv/bin/python tools/send_cpu.py --runs 3 --seconds 4            # as fast as they go
    .venv/bin/python tools/send_cpu.py --runs 3 --seconds 4 --rate 1000
    .venv/bin/python tools/send_cpu.py --runs 3 --seconds 4 --producers 1
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "src"), str(ROOT / "gen")]

from popmq import AsyncAdmin, AsyncProducer  # noqa: E402

BODY = bytes(range(256)) * 4


def _serve(data_dir: str) -> tuple[subprocess.Popen[str], str]:
    server = subprocess.Popen(
        [sys.executable, "-m", "popmq.cli", "serve", "--listen", "127.0.0.1:0", "--data-dir",
         data_dir, "--flush", "sync", "--log-level", "warning"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert server.stdout is not None
    line = server.stdout.readline()
    assert "listening on" in line, line
    return server, line.split()[-1]


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _measure(
    endpoint: str, server_pid: int, *, multiplex: bool, producers: int, seconds: float, rate: float
) -> tuple[float, float, float]:
    """(server us/msg, client us/msg, msg/s) over `seconds` after a 1 s warm-up."""
    topic = f"cpu-{uuid.uuid4().hex[:8]}"
    async with AsyncAdmin(endpoint) as admin:
        await admin.create_topic(topic, queues=8)
    running, measuring, count = True, False, 0

    async def sender(producer: AsyncProducer) -> None:
        nonlocal count
        interval = producers / rate if rate else 0.0
        due = time.perf_counter()
        while running:
            await producer.send(topic, BODY)
            count += measuring
            if interval:
                due += interval
                await asyncio.sleep(max(0.0, due - time.perf_counter()))

    clients = [AsyncProducer(endpoint, multiplex=multiplex) for _ in range(producers)]
    tasks = [asyncio.create_task(sender(p)) for p in clients]
    await asyncio.sleep(1.0)
    s0, c0, w0 = _cpu_s(server_pid), time.process_time(), time.perf_counter()
    measuring = True
    await asyncio.sleep(seconds)
    measuring = False
    s1, c1, w1 = _cpu_s(server_pid), time.process_time(), time.perf_counter()
    sent = count
    running = False
    await asyncio.gather(*tasks)
    for producer in clients:
        await producer.close()
    return (s1 - s0) / sent * 1e6, (c1 - c0) / sent * 1e6, sent / (w1 - w0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--producers", type=int, default=8)
    parser.add_argument("--rate", type=float, default=0.0, help="total msg/s (0: unpaced)")
    args = parser.parse_args()
    results: dict[bool, list[tuple[float, float, float]]] = {True: [], False: []}
    for run in range(args.runs):
        for multiplex in (True, False) if run % 2 == 0 else (False, True):
            with tempfile.TemporaryDirectory() as data_dir:
                server, endpoint = _serve(data_dir)
                try:
                    result = asyncio.run(
                        _measure(
                            endpoint, server.pid, multiplex=multiplex,
                            producers=args.producers, seconds=args.seconds, rate=args.rate,
                        )
                    )  # fmt: skip
                finally:
                    server.terminate()
                    server.wait()
            results[multiplex].append(result)
            name = "SendStream" if multiplex else "unary"
            print(f"run {run} {name:10}: server {result[0]:6.0f} us/msg, client "
                  f"{result[1]:6.0f} us/msg, {result[2]:6.0f} msg/s", flush=True)  # fmt: skip
    for multiplex, rows in results.items():
        server_us, client_us, rate = (statistics.median(r[i] for r in rows) for i in range(3))
        name = "SendStream" if multiplex else "unary"
        print(f"median {name:10}: server {server_us:6.0f} us/msg, client {client_us:6.0f} us/msg, "
              f"{rate:6.0f} msg/s")  # fmt: skip


if __name__ == "__main__":
    main()
