"""Instructions per message of a cluster proxy under pop + ack batch 32, or under sends:
the proxy's own work.

``python -m bench.proxy_pop_cost [--batches 48] [--consumers 4] [--profile FILE]``
``python -m bench.proxy_pop_cost --against CHECKOUT [--runs 3] [--count broker]``
``python -m bench.proxy_pop_cost --phase send [--send-batch 1] [--batches 48] [--consumers 8]``

A real cluster of child processes (an etcd, one ``popmq broker --flush sync``, one
``popmq proxy``) with the proxy run under callgrind, instrumentation off. This process
stores a backlog through the proxy, lets ``--consumers`` SDK consumers (PopStream) each run
``--warmup`` receive + ack cycles of batch 32, switches the proxy's instrumentation on
(``callgrind_control --instr=on``), runs ``--batches`` more cycles over the consumers, switches
it off and dumps the proxy's profile: its instructions over the window (every thread of the
proxy: grpc's, the event loop's) divided by the messages received and acked in it. Only the
proxy is counted; the broker, etcd and the client run at full speed outside valgrind.
``--count broker`` counts the broker the same way instead (the proxy then runs at full
speed): what a change moves from one side of the hop to the other shows in both counts.

``--phase send`` counts sends instead: ``--consumers`` SDK producers (SendStream) each make
``--warmup`` sends of ``--send-batch`` messages, then, counted, ``--batches`` sends between
them, one after the other on each producer (batch 1 from 8 producers is scenario 8's
``produce batch 1``; no backlog is stored first).

The proxy is slowed some fifty times under callgrind, so its requests queue: the hop's
frames carry more requests than at full speed (hop_frames.py). Both sides of an A/B see the
same, and the count says what the proxy executes, not how long the machine took.

``--profile FILE`` keeps the window's callgrind profile (``callgrind_annotate --inclusive=yes
FILE`` shows where the proxy's instructions go; compiled modules appear by their functions,
``CPyDef_<module>___<function>``).

``--against CHECKOUT`` counts this checkout's servers and CHECKOUT's (its ``src`` on the
children's PYTHONPATH; built in place with ``python setup.py build_ext --inplace`` for a
compiled claim), interleaved, for ``--runs`` rounds, with this process's client for both.
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
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench.peers.cluster import EtcdProcess, PopmqBrokerProcess, PopmqProxyProcess
from bench.peers.targets import PopmqTarget, Receiver, prefill

BATCH = 32
BODY = b"x" * 1024
TOPIC = "proxycost"
GROUP = "bench"
THIS = Path(__file__).resolve().parents[1]
_PROXY_START_S = 600.0
"""A proxy under valgrind starts slowly, the more so on a loaded machine."""


def _child_env(checkout: Path) -> dict[str, str]:
    """The environment of `checkout`'s servers: its popmq first on the path, as built."""
    env = {k: v for k, v in os.environ.items() if k != "POPMQ_PURE_PYTHON"}
    env["PYTHONPATH"] = str(checkout / "src")
    return env


def _under_callgrind(command: list[str], subcommand: str, out_file: Path) -> list[str]:
    """`command` (a ``popmq SUBCOMMAND ...`` line) run under callgrind, instrumentation off
    until switched on; the CLI by -c, not the venv's script: valgrind runs the interpreter
    itself."""
    args = command[command.index(subcommand) :]
    cli = "import sys; from popmq.cli.main import main; sys.argv[0] = 'popmq'; sys.exit(main())"
    return [
        "valgrind", "--tool=callgrind", "--instr-atstart=no",
        f"--callgrind-out-file={out_file}",
        sys.executable, "-c", cli, *args,
    ]  # fmt: skip


class _Broker(PopmqBrokerProcess):
    """``popmq broker``; under callgrind when given an `out_file`."""

    def __init__(self, etcd: str, checkout: Path, out_file: Path | None = None) -> None:
        super().__init__("b1", etcd)
        self._checkout = checkout
        self._out = out_file
        if out_file is not None:
            self.start_timeout_s = _PROXY_START_S

    def _env(self) -> dict[str, str]:
        return _child_env(self._checkout)

    def _command(self, data_dir: Path) -> list[str]:
        command = super()._command(data_dir)
        return command if self._out is None else _under_callgrind(command, "broker", self._out)


class _Proxy(PopmqProxyProcess):
    """``popmq proxy``; under callgrind when given an `out_file`."""

    def __init__(self, etcd: str, checkout: Path, out_file: Path | None = None) -> None:
        super().__init__(etcd)
        self._checkout = checkout
        self._out = out_file
        if out_file is not None:
            self.start_timeout_s = _PROXY_START_S

    def _env(self) -> dict[str, str]:
        return _child_env(self._checkout)

    def _command(self, data_dir: Path) -> list[str]:
        command = super()._command(data_dir)
        return command if self._out is None else _under_callgrind(command, "proxy", self._out)


def _callgrind(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True)


def _total(profile: Path) -> int:
    """The instructions a callgrind profile counted (its `totals:` line; the `summary:` of a
    dump made with instrumentation toggled says 0)."""
    for line in profile.read_text(errors="replace").splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise RuntimeError(f"no total in the callgrind profile {profile}")


Worker = Callable[[int, Callable[[], Awaitable[None]]], Awaitable[int]]
"""One client of a window: given its index and the wait for the window's start (called once
warmed up), it returns what it did in the window (messages)."""


async def _window(pid: int, clients: int, worker: Worker) -> int:
    """Run `clients` workers together, `pid`'s instrumentation on from when every one has
    warmed up until all are done; returns the messages they counted."""
    ready = asyncio.Barrier(clients + 1)
    go = asyncio.Event()

    async def started() -> None:
        await ready.wait()
        await go.wait()

    tasks = [asyncio.ensure_future(worker(i, started)) for i in range(clients)]
    await ready.wait()
    await asyncio.to_thread(_callgrind, pid, "--instr=on")
    go.set()
    counted = await asyncio.gather(*tasks)
    await asyncio.to_thread(_callgrind, pid, "--instr=off")
    return sum(counted)


def _shares(total: int, clients: int) -> list[int]:
    return [total // clients + (1 if i < total % clients else 0) for i in range(clients)]


async def _cycles(target: PopmqTarget, consumers: int, cycles: int, warmup: int, pid: int) -> int:
    """Each consumer runs `warmup` cycles, then (instrumentation on) its share of `cycles`
    receive + ack cycles; returns the messages received and acked in the window."""
    shares = _shares(cycles, consumers)

    async def consumer(index: int, started: Callable[[], Awaitable[None]]) -> int:
        async with target.receiver(TOPIC, GROUP, f"c{index}") as receiver:
            for _ in range(warmup):
                await _cycle(receiver)
            await started()
            return sum([await _cycle(receiver) for _ in range(shares[index])])

    async def _cycle(receiver: Receiver) -> int:
        messages = await receiver.receive(BATCH, 1.0)
        await receiver.ack(messages)
        return len(messages)

    return await _window(pid, consumers, consumer)


async def _sends(
    target: PopmqTarget, producers: int, sends: int, warmup: int, batch: int, pid: int
) -> int:
    """Each producer makes `warmup` sends of `batch` messages, then (instrumentation on) its
    share of `sends` more; returns the messages sent in the window."""
    shares = _shares(sends, producers)
    bodies = [BODY] * batch

    async def producer(index: int, started: Callable[[], Awaitable[None]]) -> int:
        async with target.sender(TOPIC) as sender:
            for _ in range(warmup):
                await sender.send(bodies)
            await started()
            for _ in range(shares[index]):
                await sender.send(bodies)
            return shares[index] * batch

    return await _window(pid, producers, producer)


def _count(
    checkout: Path,
    batches: int,
    consumers: int,
    warmup: int,
    profile: Path | None,
    counted: str = "proxy",
    send_batch: int = 0,
) -> tuple[int, int]:
    """One run on `checkout`'s servers: (instructions of the `counted` process in the
    window, messages in it); sends of `send_batch` messages from `consumers` producers
    when it is above 0, else receive + ack cycles."""
    with tempfile.TemporaryDirectory(prefix="popmq-proxycost-") as tmp:
        out = Path(tmp) / "callgrind.out"
        broker_out = out if counted == "broker" else None
        proxy_out = out if counted == "proxy" else None
        with EtcdProcess() as etcd, _Broker(etcd.endpoint, checkout, broker_out) as broker:
            proxy = _Proxy(etcd.endpoint, checkout, proxy_out)
            with proxy:
                target = PopmqTarget(proxy.endpoint)
                pid = proxy.pid if counted == "proxy" else broker.pid

                async def run() -> int:
                    await target.create_topic(TOPIC, queues=8)
                    if send_batch:
                        return await _sends(target, consumers, batches, warmup, send_batch, pid)
                    await target.create_group(TOPIC, GROUP)
                    backlog = (batches + consumers * warmup + consumers) * BATCH
                    await prefill(target, TOPIC, backlog, BODY)
                    return await _cycles(target, consumers, batches, warmup, pid)

                messages = asyncio.run(run())
                _callgrind(pid, "--dump=window")
                # The dump is written beside the (still empty) out file, numbered.
                window = out.with_name(out.name + ".1")
                if not window.is_file():
                    log = proxy.log_path if counted == "proxy" else broker.log_path
                    raise RuntimeError(f"callgrind wrote no profile: {log}")
                instructions = _total(window)
                if profile is not None:
                    profile.write_bytes(window.read_bytes())
    if not messages:
        raise RuntimeError("the window took no message")
    return instructions, messages


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _build(checkout: Path) -> str:
    probe = "from popmq._compiled import state; print(state())"
    found = subprocess.run(
        [sys.executable, "-c", probe],
        env=_child_env(checkout),
        capture_output=True,
        text=True,
        check=True,
    )
    return found.stdout.strip()


def _against(
    other: Path,
    runs: int,
    batches: int,
    consumers: int,
    warmup: int,
    counted: str,
    send_batch: int,
) -> None:
    sides = {"base": other, "new": THIS}
    for side, checkout in sides.items():
        print(f"{side}: compiled (True) or not, and why: {_build(checkout)}", flush=True)
    print(f"load average at the start: {_load()}", flush=True)
    counts: dict[str, list[float]] = {side: [] for side in sides}
    for run in range(runs):
        order = list(sides) if run % 2 == 0 else list(reversed(sides))
        for side in order:
            instructions, messages = _count(
                sides[side], batches, consumers, warmup, None, counted, send_batch
            )
            counts[side].append(instructions / messages)
            print(
                f"run {run + 1} {side}: {instructions:,} instructions, {messages} messages, "
                f"{instructions / messages:,.0f}/msg (load {_load()})",
                flush=True,
            )
    base = statistics.median(counts["base"])
    new = statistics.median(counts["new"])
    load = (
        f"sends of {send_batch} from {consumers} producers"
        if send_batch
        else f"pop + ack batch {BATCH} from {consumers} consumers"
    )
    print(
        f"{counted} instructions per message, {load}, "
        f"median of {runs} run(s): base {base:,.0f}, new {new:,.0f}, new / base "
        f"{new / base:.3f}\nload average at the end: {_load()}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--batches", type=int, default=48, help="receive + ack cycles (or sends) counted"
    )
    parser.add_argument("--consumers", type=int, default=1, help="consumers (or producers)")
    parser.add_argument("--phase", choices=("pop-ack", "send"), default="pop-ack")
    parser.add_argument("--send-batch", type=int, default=1, help="messages a send (--phase send)")
    parser.add_argument("--warmup", type=int, default=4, help="cycles per consumer before")
    parser.add_argument("--profile", type=Path, help="keep the window's callgrind profile")
    parser.add_argument("--checkout", type=Path, default=THIS, help="whose servers to count")
    parser.add_argument("--against", type=Path, metavar="CHECKOUT")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--count", choices=("proxy", "broker"), default="proxy", help="the process counted"
    )
    args = parser.parse_args()
    if args.send_batch < 1:
        parser.error(f"--send-batch {args.send_batch}: at least 1")
    send_batch = args.send_batch if args.phase == "send" else 0
    if args.against is not None:
        _against(
            args.against.resolve(),
            args.runs,
            args.batches,
            args.consumers,
            args.warmup,
            args.count,
            send_batch,
        )
        return
    checkout = args.checkout.resolve()
    print(f"compiled (True) or not, and why: {_build(checkout)}", flush=True)
    began = time.monotonic()
    instructions, messages = _count(
        checkout, args.batches, args.consumers, args.warmup, args.profile, args.count, send_batch
    )
    print(
        f"{args.count}: {instructions:,} instructions over {messages} messages: "
        f"{instructions / messages:,.0f}/msg ({time.monotonic() - began:.0f} s, load {_load()})"
    )


if __name__ == "__main__":
    main()
