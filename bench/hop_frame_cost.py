"""Instructions per message of a broker serving the cluster hop's frames of sends, without
the transport.

``python -m bench.hop_frame_cost [--frames 64] [--requests 8] [--messages 1] [--callgrind]``
``python -m bench.hop_frame_cost --against CHECKOUT [--runs 3] [--requests 8] [--messages 1]``

An embedded broker (flush sync, 8 queues, a fresh data dir) behind a BrokerServicer is
handed ``--frames`` HopSendRequest frames (what a proxy writes on HopSend when sends are made
while one is in flight: cluster/hop_frames.py), each of ``--requests`` sends of ``--messages``
1 KiB messages, one frame after the other, through the servicer's frame handler (the bytes
of the frame in, the bytes of its answer out, checked). Batch 1 from 8 producers is about
``--requests 8 --messages 1``; batch 32, ``--messages 32``.

Wall-clock time is noise on a shared machine, so the window is meant to be counted by
callgrind, started with instrumentation off (``--callgrind`` switches it on after a warm-up
and off after the window, as bench/compiled_cost.py does; every thread counts, RocksDB's
included, and the fsync itself is a system call and counts nothing).

``--against CHECKOUT`` counts this harness over this checkout's build and over CHECKOUT's
popmq (its ``src`` on the PYTHONPATH, built in place with ``python setup.py build_ext
--inplace``), interleaved, for ``--runs`` rounds, and prints instructions per message.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from popmq import _compiled
from popmq.broker import BrokerServicer, hop_wire, send_wire
from popmq.broker_core.broker import Broker
from popmq.broker_core.config import BrokerConfig, StoreConfig
from popmq.broker_core.types import NewMessage

BODY = b"x" * 1024
TOPIC = "cost"
QUEUES = 8
THIS = Path(__file__).resolve().parents[1]


def _frame(first_id: int, requests: int, messages: int) -> bytes:
    """A HopSendRequest frame of `requests` sends of `messages` messages each."""
    send = send_wire.send_request_wire([NewMessage(TOPIC, BODY, "bench")] * messages)
    parts = [hop_wire.hop_answer(first_id + i, hop_wire.HOP_SEND, send) for i in range(requests)]
    return send_wire.frame_wire(send_wire.REQUEST_FRAME_KEY, parts)


def _stored(answer: bytes | None) -> int:
    """The messages an answer frame says were stored; raises on an error answer."""
    parts = send_wire.frame_from_wire(send_wire.ANSWER_FRAME_KEY, answer or b"")
    if parts is None:
        raise RuntimeError("the answer is not a frame")
    stored = 0
    for part in parts:
        _, field, payload = hop_wire.hop_answer_from_wire(part)
        if field != hop_wire.HOP_SEND:
            raise RuntimeError(f"a send was answered with field {field}: {payload!r}")
        stored += len(send_wire.send_results_from_wire(payload))
    return stored


def _callgrind(switch: str) -> None:
    subprocess.run(
        ["callgrind_control", "--instr=" + switch, str(os.getpid())],
        check=True,
        capture_output=True,
    )


async def _run(frames: int, requests: int, messages: int, warmup: int, callgrind: bool) -> int:
    """The messages stored in the measured window."""
    with tempfile.TemporaryDirectory() as data_dir:
        store = dataclasses.replace(StoreConfig(), data_dir=Path(data_dir), flush="sync")
        broker = Broker(BrokerConfig(store=store))
        await broker.start()
        try:
            await broker.create_topic(TOPIC, QUEUES)
            servicer = BrokerServicer(broker)
            data = [_frame(i * requests, requests, messages) for i in range(warmup + frames)]
            for frame in data[:warmup]:
                _stored(await servicer._hop_send_frame(frame))
            if callgrind:
                _callgrind("on")
            stored = 0
            for frame in data[warmup:]:
                stored += _stored(await servicer._hop_send_frame(frame))
            if callgrind:
                _callgrind("off")
        finally:
            await broker.close()
    expected = frames * requests * messages
    if stored != expected:
        raise RuntimeError(f"stored {stored} messages, expected {expected}")
    return stored


def _count(checkout: Path, frames: int, requests: int, messages: int) -> int:
    """Instructions callgrind counts in one run's window, `checkout`'s popmq under this
    harness."""
    env = {k: v for k, v in os.environ.items() if k != _compiled.PURE_ENV}
    env["PYTHONPATH"] = str(checkout / "src")
    command = [
        "valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=/dev/null",
        sys.executable, "-m", "bench.hop_frame_cost", "--callgrind", "--frames", str(frames),
        "--requests", str(requests), "--messages", str(messages),
    ]  # fmt: skip
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=True, cwd=THIS)
    found = re.search(r"Collected : (\d+)", result.stderr)
    if found is None:
        raise RuntimeError(f"no callgrind total in:\n{result.stderr[-2000:]}")
    return int(found.group(1))


def _build(checkout: Path) -> str:
    probe = "from popmq._compiled import state; print(state())"
    env = {k: v for k, v in os.environ.items() if k != _compiled.PURE_ENV}
    env["PYTHONPATH"] = str(checkout / "src")
    found = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    return found.stdout.strip()


def _against(other: Path, runs: int, frames: int, requests: int, messages: int) -> None:
    sides = {"base": other, "new": THIS}
    for side, checkout in sides.items():
        print(f"{side}: compiled (True) or not, and why: {_build(checkout)}", flush=True)
    counts: dict[str, list[int]] = {side: [] for side in sides}
    for run in range(runs):
        order = list(sides) if run % 2 == 0 else list(reversed(sides))
        for side in order:
            count = _count(sides[side], frames, requests, messages)
            counts[side].append(count)
            print(f"run {run + 1} {side}: {count:,}", flush=True)
    total = frames * requests * messages
    base = statistics.median(counts["base"]) / total
    new = statistics.median(counts["new"]) / total
    print(
        f"frames of {requests} sends of {messages} message(s), {total} messages, median of "
        f"{runs} run(s): base {base:,.0f}, new {new:,.0f} instructions/msg, new / base "
        f"{new / base:.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=64)
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--messages", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=8)
    parser.add_argument("--callgrind", action="store_true", help="count the window (see above)")
    parser.add_argument("--against", type=Path, metavar="CHECKOUT")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if args.against is not None:
        _against(args.against.resolve(), args.runs, args.frames, args.requests, args.messages)
        return
    stored = asyncio.run(
        _run(args.frames, args.requests, args.messages, args.warmup, args.callgrind)
    )
    print(f"stored {stored} messages in {args.frames} frames")


if __name__ == "__main__":
    main()
