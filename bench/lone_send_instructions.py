"""Instructions a lone send costs the whole server process, transport included, beside the
bare grpc.aio echo server's for the same request.

``python -m bench.lone_send_instructions [--popmq-src CHECKOUT/src] [--sends 200] [--runs 3]``

One sender (scenario 3b's: the SDK's producer on its SendStream for popmq, an echo stream
for the echo) sends single 1 KiB messages one after another, so each request is alone on
the server (for popmq: alone in its group-commit batch, fsynced inline), as a paced send
that does not meet another is. The server runs under callgrind with instrumentation off;
after a warm-up of ``--warmup`` sends it is switched on (``callgrind_control -i on``), the
``--sends`` are made, and the window is dumped (``callgrind_control --dump``): its total,
every thread of the server (grpc's poller and event-engine threads, RocksDB's, the WAL
sync thread), divided by the sends, is the row. Kernel work (the fsync, the socket calls)
is a system call and counts nothing; the rows count user-space instructions only.

``--popmq-src`` runs ``popmq serve`` from another checkout's ``src`` (built in place to
compare compiled builds); each run alternates the echo, this checkout's server and, with
``--popmq-src``, that one. Instruction counts do not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench.peers.servers import PopmqServer, ServerProcess
from bench.peers.targets import PopmqTarget, Sender
from bench.reference import EchoServer, stream_echo_sender
from bench.scenarios._common import body_of

_TOPIC = "lone"
_VALGRIND = (
    "valgrind", "--tool=callgrind", "--instr-atstart=no", "--trace-children=no",
)  # fmt: skip


def _callgrind_prefix(out: Path) -> list[str]:
    return [*_VALGRIND, f"--callgrind-out-file={out}"]


class _CountedPopmq(PopmqServer):
    start_timeout_s = 300.0

    def __init__(self, src: Path | None, out: Path) -> None:
        super().__init__(flush="sync")
        self._src = src
        self._out = out

    def _command(self, data_dir: Path) -> list[str]:
        return [*_callgrind_prefix(self._out), *super()._command(data_dir)]

    def _env(self) -> dict[str, str] | None:
        env = dict(os.environ)
        if self._src is not None:
            env["PYTHONPATH"] = str(self._src)
        return env


class _CountedEcho(EchoServer):
    start_timeout_s = 300.0

    def __init__(self, out: Path) -> None:
        super().__init__()
        self._out = out

    def _command(self, data_dir: Path) -> list[str]:
        return [*_callgrind_prefix(self._out), *super()._command(data_dir)]


def _control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True)


def _dumped_total(out: Path, before: set[Path]) -> int:
    """The event total of the dump callgrind wrote after `before` was listed."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        new = [p for p in out.parent.glob(out.name + "*") if p not in before]
        for path in new:
            text = path.read_text(errors="replace")
            found = re.search(r"^(?:summary|totals): (\d+)", text, re.MULTILINE)
            if found:
                return int(found.group(1))
        time.sleep(0.2)
    raise TimeoutError(f"callgrind wrote no dump beside {out}")


async def _window(sender: Sender, pid: int, out: Path, warmup: int, sends: int) -> int:
    body = body_of(1024)
    for _ in range(warmup):
        await sender.send([body])
    before = set(out.parent.glob(out.name + "*"))
    _control(pid, "--instr=on")
    for _ in range(sends):
        await sender.send([body])
    _control(pid, "--dump")
    _control(pid, "--instr=off")
    return _dumped_total(out, before)


async def _popmq(server: ServerProcess, out: Path, warmup: int, sends: int) -> int:
    target = PopmqTarget(server.endpoint)
    await target.create_topic(_TOPIC)
    async with target.sender(_TOPIC) as sender:
        return await _window(sender, server.pid, out, warmup, sends)


async def _echo(server: ServerProcess, out: Path, warmup: int, sends: int) -> int:
    async with stream_echo_sender(server.endpoint) as sender:
        return await _window(sender, server.pid, out, warmup, sends)


def _count(side: str, src: Path | None, tmp: Path, warmup: int, sends: int) -> int:
    out = tmp / f"{side}-{time.monotonic_ns()}.cg"
    if side == "echo":
        with _CountedEcho(out) as echo:
            return asyncio.run(_echo(echo, out, warmup, sends))
    with _CountedPopmq(src, out) as popmq:
        return asyncio.run(_popmq(popmq, out, warmup, sends))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.lone_send_instructions", description=__doc__
    )
    parser.add_argument("--popmq-src", type=Path, help="also count popmq serve from this src")
    parser.add_argument("--sends", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--keep", type=Path, help="keep callgrind's files here (for callgrind_annotate)"
    )
    args = parser.parse_args(argv)
    sides: dict[str, Path | None] = {"echo": None}
    if args.popmq_src is not None:
        sides["other"] = args.popmq_src.resolve()
    sides["this"] = None
    counts: dict[str, list[int]] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory(prefix="popmq-lone-") as tmp:
        where = args.keep or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        for run in range(args.runs):
            for side, src in sides.items():
                total = _count(side, src, where, args.warmup, args.sends)
                counts[side].append(total)
                print(f"run {run + 1} {side:6} {total:>13,}", flush=True)
    print(f"\ninstructions per send, median of {args.runs} run(s) of {args.sends} sends:\n")
    print("| server | instructions a send | ÷ echo |")
    print("|---|---|---|")
    echo = statistics.median(counts["echo"]) / args.sends
    names = {
        "echo": "grpc echo",
        "other": f"popmq serve ({args.popmq_src})",
        "this": "popmq serve (this checkout)",
    }
    for side in sides:
        per = statistics.median(counts[side]) / args.sends
        print(f"| {names[side]} | {per:,.0f} | {per / echo:.2f}x |")


if __name__ == "__main__":
    main()
