"""Instructions per message of the hot path in one process: pure Python vs a compiled build.

``python -m bench.compiled_cost --compare [--runs 3] [--batches 32]``
``python -m bench.compiled_cost [--phase send|pop-ack] [--batches 32] [--callgrind] [--which]``

A fixed workload through the same code `popmq serve` runs for a SendMessages, a Pop and an
Ack, without the transport: an embedded broker (flush sync, 8 queues, a fresh data dir) and
the proxy's MessagingServicer paths (request parsed from its wire bytes, validated,
converted, answered, the answer serialized).

- ``send``: ``--batches`` SendMessagesRequests of 32 messages of 1 KiB each. With
  ``--producer-ids`` each message carries a message id made as the SDK's Producer makes
  them (new ones for every request, made before the window), as every SDK send does:
  without, the broker assigns them.
- ``lone``: ``--batches`` x 32 SendMessagesRequests of one message of 1 KiB each, one after
  another: each send is alone in its group-commit batch, as a paced send is (scenario 3b),
  so the count per message is a lone send's fixed cost (its fsync runs inline, as the
  writer runs a lone, uncontended batch's). It runs on uvloop, as `popmq serve` does: on
  asyncio's own loop each callback a send schedules costs a Python `Handle`.
- ``pairs``: the same single-message sends, two started together each time: both are in
  one batch, so its fsync goes to group commit's sync thread and its completion comes
  back with a wake of the loop (``call_soon_threadsafe``), as a paced send's does when it
  meets another (counted per message; the sync thread is counted too). Also on uvloop.
- ``pop-ack``: after a backlog of ``--batches`` such sends (not measured), ``--batches``
  Pops of 32 (no long poll), each followed by an Ack of its 32 handles.

Wall-clock time is noise on a shared machine, so the measured window is meant to be counted
by callgrind, started with instrumentation off::

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/dev/null \\
        python -m bench.compiled_cost --phase send --callgrind

``--callgrind`` switches instrumentation on (``callgrind_control -i on``) after start-up and
a warm-up of ``--warmup`` batches, and off after the measured batches, so callgrind's total
is the window (every thread: RocksDB's included; the fsync itself is a system call and counts
nothing). Divide by the messages (``--batches`` x 32). The two ``callgrind_control`` calls
cost the same in every build (``--batches 0`` measures them: about 0.5 M instructions).

``--against CHECKOUT`` does that for both phases, compiled, for this checkout and for another
checkout (of an earlier commit, built with ``python setup.py build_ext --inplace``: each side
runs its own harness and build), interleaved, for ``--runs`` rounds. With
``--producer-ids`` (send only) both sides run this checkout's harness, each on its own
build, since an older harness may not have the option; ``--this-harness`` does that for
both phases (a harness change, such as the collector's set-up below, then applies to both).

Before the window the harness sets the collector up as the build's servers do (`[gc]`'s
defaults, runtime/collector.py, where the build has them) and freezes the heap, as a server
does once it serves: a full collection falling in the window then costs what the workload
made, not the whole start-up heap (about 2.5 M instructions, which one run's window caught
and the other's did not).

``--compare`` does that for both phases and both builds of this checkout, interleaved, for
``--runs`` rounds, and prints instructions per message: the compiled build as built
(popmq/_compiled.py) and its Python sources (``POPMQ_PURE_PYTHON=1``). ``--which`` says
which build a process runs.

To pick what is worth compiling, sample a longer run with py-spy
(``py-spy record --format raw -- python -m bench.compiled_cost --batches 600``) and count
samples by file: cProfile's per-call overhead distorts a workload of small calls (it charged
a third of pop + ack to receipt encoding).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import importlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from popmq import _compiled
from popmq._gen.popmq.v1 import messaging_pb2
from popmq.broker_core.broker import Broker
from popmq.broker_core.config import BrokerConfig, StoreConfig
from popmq.coordination import LocalCoordinator
from popmq.proxy.ack_request import AckRequest
from popmq.proxy.clients import ClientRegistry
from popmq.proxy.messaging import MessagingServicer
from popmq.proxy.pop_stream import ack_answer, pop_answer
from popmq.proxy.send_request import SendRequest
from popmq.proxy.send_stream import send_answer
from popmq.sdk._message_id import new_message_ids

BATCH = 32
BODY = b"x" * 1024
TOPIC = "cost"
GROUP = "g"
QUEUES = 8
WATCHED = (
    "popmq.broker_core.send",
    "popmq.broker_core.group_commit",
    "popmq.broker_core.store",
    "popmq.broker_core.pop.reader",
    "popmq.broker_core.pop.ack",
    "popmq.proxy.convert",
    "popmq.proxy.ack_request",
)
"""Modules whose build (compiled or pure) ``--which`` reports."""


def _send_request(message_ids: list[str] | None = None) -> bytes:
    request = messaging_pb2.SendMessagesRequest()
    for i in range(BATCH):
        message_id = message_ids[i] if message_ids is not None else ""
        request.messages.add(topic=TOPIC, body=BODY, tag="bench", message_id=message_id)
    return request.SerializeToString()


class _Workload:
    """The servicer's send, pop and ack paths over an embedded broker."""

    def __init__(self, broker: Broker, producer_ids: int = 0) -> None:
        """`producer_ids`: that many sends carry SDK-made message ids, the rest none."""
        self.broker = broker
        clients = ClientRegistry(broker_name="bench", coordinator=LocalCoordinator())
        self.servicer = MessagingServicer(broker, clients, LocalCoordinator())
        self.send_bytes = _send_request()
        lone = messaging_pb2.SendMessagesRequest()
        lone.messages.add(topic=TOPIC, body=BODY, tag="bench")
        self.lone_bytes = lone.SerializeToString()
        # Made before the window: the SDK's ids for each send, as its Producer makes them.
        self.sends_with_ids = [_send_request(new_message_ids(BATCH)) for _ in range(producer_ids)][
            ::-1
        ]
        self.pop_bytes = messaging_pb2.PopRequest(
            group=GROUP, topic=TOPIC, max_messages=BATCH, long_polling_timeout={"seconds": 0}
        ).SerializeToString()

    async def send(self) -> int:
        data = self.sends_with_ids.pop() if self.sends_with_ids else self.send_bytes
        request = SendRequest.FromString(data)  # the method's deserializer
        results = await self.servicer.start_send(request)
        send_answer(results)
        return len(results)

    async def lone(self) -> int:
        """BATCH sends of one message, each awaited before the next starts."""
        for _ in range(BATCH):
            request = SendRequest.FromString(self.lone_bytes)  # the method's deserializer
            send_answer(await self.servicer.start_send(request))
        return BATCH

    async def pairs(self) -> int:
        """BATCH single-message sends, two at a time, each pair awaited before the next."""

        async def one() -> None:
            request = SendRequest.FromString(self.lone_bytes)  # the method's deserializer
            send_answer(await self.servicer.start_send(request))

        for _ in range(BATCH // 2):
            await asyncio.gather(one(), one())
        return BATCH

    async def pop_ack(self) -> int:
        request = messaging_pb2.PopRequest.FromString(self.pop_bytes)
        result = await self.servicer.start_pop(request, None)
        wire = messaging_pb2.PopResponse.FromString(pop_answer(request, result))
        ack = messaging_pb2.AckRequest(
            group=GROUP, receipt_handles=[m.receipt_handle for m in wire.messages]
        )
        read = AckRequest.FromString(ack.SerializeToString())  # the method's deserializer
        outcomes = await self.servicer.start_ack(read)
        ack_answer(read.receipt_handles, outcomes)  # the method's answer
        failed = [error for error in outcomes if error is not None]
        if failed:
            raise RuntimeError(f"an ack failed: {failed[0]}")
        return len(wire.messages)


def _callgrind(switch: str) -> None:
    """Switch callgrind's instrumentation of this process on or off (returns once done)."""
    subprocess.run(
        ["callgrind_control", "--instr=" + switch, str(os.getpid())],
        check=True,
        capture_output=True,
    )


def _server_collector() -> None:
    """The collector as the build's servers set it up: `[gc]`'s defaults where the build
    has them, Python's in a build from before them."""
    try:
        from popmq.runtime.collector import CollectorConfig, configure_collector
    except ImportError:
        return
    configure_collector(CollectorConfig())


async def _run(
    phase: str, batches: int, warmup: int, callgrind: bool, producer_ids: bool = False
) -> tuple[int, float]:
    """Messages handled in the measured window and its wall time."""
    _server_collector()
    with tempfile.TemporaryDirectory() as data_dir:
        store = dataclasses.replace(StoreConfig(), data_dir=Path(data_dir), flush="sync")
        broker = Broker(BrokerConfig(store=store))
        await broker.start()
        try:
            await broker.create_topic(TOPIC, QUEUES)
            await broker.create_group(GROUP)
            work = _Workload(broker, warmup + batches if producer_ids else 0)
            step: Callable[[], Awaitable[int]] = work.send
            if phase == "pop-ack":
                for _ in range(warmup + batches):
                    await work.send()
                step = work.pop_ack
            elif phase == "lone":
                step = work.lone
            elif phase == "pairs":
                step = work.pairs
            for _ in range(warmup):
                await step()
            # As a server is once it serves: its start-up heap frozen, so a full collection
            # that falls in the window walks what the workload made, not the whole heap.
            gc.collect()
            gc.freeze()
            if callgrind:
                _callgrind("on")
            began = time.perf_counter()
            handled = 0
            for _ in range(batches):
                handled += await step()
            took = time.perf_counter() - began
            if callgrind:
                _callgrind("off")
            expected = batches * BATCH
            if handled != expected:
                raise RuntimeError(f"handled {handled} messages, expected {expected}")
            return handled, took
        finally:
            await broker.close()


def _which() -> str:
    compiled, why = _compiled.state()
    lines = [f"build: {'compiled' if compiled else 'python (' + why + ')'}"]
    for name in WATCHED:
        module = importlib.import_module(name)
        built = "compiled" if str(module.__file__).endswith(".so") else "pure"
        lines.append(f"{name}: {built}")
    return "\n".join(lines)


def _count(
    phase: str,
    batches: int,
    *,
    python: bool,
    checkout: Path | None = None,
    producer_ids: bool = False,
    this_harness: bool = False,
) -> int:
    """Instructions callgrind counts in one run's window (a child process): of this
    checkout's popmq, or of another `checkout`'s (its own harness, its own build; this
    checkout's harness with `producer_ids` or `this_harness`)."""
    env = {k: v for k, v in os.environ.items() if k != _compiled.PURE_ENV}
    if python:
        env[_compiled.PURE_ENV] = "1"
    if checkout is not None:
        env["PYTHONPATH"] = str(checkout / "src")
    command = [
        "valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=/dev/null",
        sys.executable, "-m", "bench.compiled_cost", "--phase", phase,
        "--batches", str(batches), "--callgrind",
    ]  # fmt: skip
    if producer_ids:
        command.append("--producer-ids")
    harness = None if producer_ids or this_harness else checkout
    result = subprocess.run(
        command, env=env, capture_output=True, text=True, check=True, cwd=harness
    )
    found = re.search(r"Collected : (\d+)", result.stderr)
    if found is None:
        raise RuntimeError(f"no callgrind total in:\n{result.stderr[-2000:]}")
    return int(found.group(1))


def _compare(runs: int, batches: int) -> None:
    compiled, why = _compiled.state()
    if not compiled:
        raise SystemExit(f"this checkout does not run compiled ({why}): make compile first")
    counts: dict[tuple[str, bool], list[int]] = {}
    for run in range(runs):
        for phase in ("send", "pop-ack"):
            for python in (True, False):
                count = _count(phase, batches, python=python)
                counts.setdefault((phase, python), []).append(count)
                build = "python" if python else "compiled"
                print(f"run {run + 1} {phase:8} {build:8} {count:>13,}", flush=True)
    messages = batches * BATCH
    print(f"\ninstructions per message, median of {runs} run(s) of {messages} messages:\n")
    print("| phase | python | compiled | compiled / python |")
    print("|---|---|---|---|")
    for phase in ("send", "pop-ack"):
        source = statistics.median(counts[phase, True]) / messages
        native = statistics.median(counts[phase, False]) / messages
        print(f"| {phase} | {source:,.0f} | {native:,.0f} | {native / source:.3f} |")


def _against(
    other: Path,
    runs: int,
    batches: int,
    producer_ids: bool = False,
    this_harness: bool = False,
    phases: tuple[str, ...] = ("send", "pop-ack"),
) -> None:
    """The phases of this checkout's build and of `other`'s (a checkout of another commit,
    built with `python setup.py build_ext --inplace`), interleaved run by run."""
    compiled, why = _compiled.state()
    if not compiled:
        raise SystemExit(f"this checkout does not run compiled ({why}): make compile first")
    counts: dict[tuple[str, str], list[int]] = {}
    sides = {"other": other, "this": None}
    if producer_ids:
        phases = ("send",)
    for run in range(runs):
        for phase in phases:
            for side, checkout in sides.items():
                count = _count(
                    phase, batches, python=False, checkout=checkout,
                    producer_ids=producer_ids, this_harness=this_harness,
                )  # fmt: skip
                counts.setdefault((phase, side), []).append(count)
                print(f"run {run + 1} {phase:8} {side:6} {count:>13,}", flush=True)
    messages = batches * BATCH
    print(f"\ninstructions per message, median of {runs} run(s) of {messages} messages:\n")
    print(f"| phase | {other} | this checkout | this / that |")
    print("|---|---|---|---|")
    for phase in phases:
        that = statistics.median(counts[phase, "other"]) / messages
        this = statistics.median(counts[phase, "this"]) / messages
        print(f"| {phase} | {that:,.0f} | {this:,.0f} | {this / that:.3f} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.compiled_cost", description=__doc__)
    parser.add_argument("--phase", choices=["send", "lone", "pairs", "pop-ack"], default="send")
    parser.add_argument("--batches", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=8)
    parser.add_argument("--callgrind", action="store_true", help="count the window (see above)")
    parser.add_argument("--which", action="store_true", help="say which modules are compiled")
    parser.add_argument(
        "--producer-ids", action="store_true", help="send SDK-made message ids (see above)"
    )
    parser.add_argument(
        "--this-harness",
        action="store_true",
        help="with --against: run this checkout's harness on both builds (see above)",
    )
    parser.add_argument("--compare", action="store_true", help="count both builds (see above)")
    parser.add_argument("--runs", type=int, default=3, help="rounds of --compare / --against")
    parser.add_argument(
        "--against",
        type=Path,
        metavar="CHECKOUT",
        help="count this checkout's compiled build and CHECKOUT's, interleaved",
    )
    parser.add_argument(
        "--phases",
        default="send,pop-ack",
        help="with --against: the phases to count, comma-separated ('lone' needs "
        "--this-harness when the other checkout's harness has no such phase)",
    )
    args = parser.parse_args(argv)
    if args.against is not None:
        _against(
            args.against.resolve(), args.runs, args.batches, args.producer_ids,
            args.this_harness, tuple(args.phases.split(",")),
        )  # fmt: skip
        return
    if args.compare:
        _compare(args.runs, args.batches)
        return
    if args.which:
        print(_which())
    run = _run(args.phase, args.batches, args.warmup, args.callgrind, args.producer_ids)
    if args.phase in ("lone", "pairs"):
        import uvloop

        handled, took = uvloop.run(run)
    else:
        handled, took = asyncio.run(run)
    per = took / handled * 1e6 if handled else 0.0
    print(f"{args.phase}: {handled} messages, {took:.3f} s wall ({per:.1f} us/message)")


if __name__ == "__main__":
    main()
