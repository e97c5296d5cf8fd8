"""Client CPU per message of the SDK: send_batch, coalesced send, receive + ack.

``python tools/client_cpu.py [--root DIR ...] [--runs 5] [--seconds 3] [--case NAME ...]``

The server (``popmq serve`` of ``--server-root``, sync flush as in ``bench``) runs in its
own process; each measurement runs the SDK of one ``--root`` in a fresh client process
(that checkout's ``sdk`` and ``gen`` first on ``PYTHONPATH``) and reports the client
process's CPU time (``time.process_time``: every thread, user + system) over a window after
a warm-up, divided by the messages finished in that window. Give two roots to compare a
change with the code before it (``git archive HEAD | tar -x -C /tmp/before``, then
``--root /tmp/before --root .``): their runs alternate, in a different order each run, and
the table shows medians, because the machine's other load moves single runs by 10% or more.

Cases (``--case``, repeatable; default all):

- ``batch32x1`` / ``batch32x8``: 1 or 8 ``AsyncProducer``s in one process, each sending
  ``send_batch`` of 32 new ``Message(body)`` of 1 KiB, one batch at a time (bench
  scenario 1, ``produce``). ``batch1x1``: batches of one, i.e. the client's cost per RPC.
- ``send x8``: 8 coroutines sharing one producer, each awaiting ``send`` of one 1 KiB message
  (the coalesced path).
- ``popack``: one ``AsyncSimpleConsumer`` doing ``receive(32)`` then one ``ack`` of them, on a
  topic the client process pre-fills before the window (bench scenario 2, ``pop-ack``).

``--profile DIR`` also records each client process with py-spy (``--format raw``, 200 Hz,
Python frames only) during its window, to ``DIR/<case>-<root name>-<run>.txt``; sampling
costs the client CPU, so a profiled run's numbers are for orientation only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

_SELF = Path(__file__).resolve()
_REPO = _SELF.parents[1]
CASES = ("batch32x1", "batch32x8", "sendx8", "popack", "batch1x1")
BODY = bytes(range(256)) * 4  # 1 KiB, not compressible enough to matter (under 4 KiB anyway)


def _env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(root / "src"), str(root / "gen")])
    return env


def _serve(root: Path, data_dir: str) -> tuple[subprocess.Popen[str], str]:
    server = subprocess.Popen(
        [sys.executable, "-m", "popmq.cli.main", "serve", "--listen", "127.0.0.1:0",
         "--data-dir", data_dir, "--flush", "sync", "--log-level", "warning"],
        cwd=root, env=_env(root), stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert server.stdout is not None
    line = server.stdout.readline()
    if "listening on" not in line:
        server.kill()
        raise RuntimeError(f"server did not start: {line!r}")
    return server, line.split()[-1]


# --- the client process ---------------------------------------------------------------------


class _Window:
    """Counts messages finished while measuring; CPU is read at its start and end."""

    def __init__(self) -> None:
        self.running = True
        self.measuring = False
        self.messages = 0

    def add(self, count: int) -> None:
        if self.measuring:
            self.messages += count


async def _measure(
    window: _Window, workers: list[Any], warmup_s: float, seconds: float
) -> dict[str, float]:
    tasks = [asyncio.create_task(w) for w in workers]
    await asyncio.sleep(warmup_s)
    window.measuring = True
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.sleep(seconds)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    window.measuring = False
    window.running = False
    await asyncio.gather(*tasks)
    return {
        "cpu_us_per_msg": cpu / max(window.messages, 1) * 1e6,
        "msgs_per_s": window.messages / wall,
        "messages": window.messages,
    }


async def _client(case: str, endpoint: str, warmup_s: float, seconds: float) -> dict[str, float]:
    from popmq import AsyncAdmin, AsyncProducer, AsyncSimpleConsumer, Message

    topic = f"cpu-{uuid.uuid4().hex[:12]}"
    async with AsyncAdmin(endpoint) as admin:
        await admin.create_topic(topic, queues=8)
    window = _Window()

    if case.startswith("batch"):
        batch, producers = (int(n) for n in case.removeprefix("batch").split("x"))

        async def sender() -> None:
            async with AsyncProducer(endpoint) as producer:
                while window.running:
                    await producer.send_batch(topic, [Message(BODY) for _ in range(batch)])
                    window.add(batch)

        return await _measure(window, [sender() for _ in range(producers)], warmup_s, seconds)

    if case == "sendx8":
        async with AsyncProducer(endpoint) as producer:

            async def single() -> None:
                while window.running:
                    await producer.send(topic, BODY)
                    window.add(1)

            return await _measure(window, [single() for _ in range(8)], warmup_s, seconds)

    if case == "popack":
        group = "cpu"
        # Enough for the window at several thousand messages a second, sent 8 x 32 at a time.
        backlog = int(12_000 * (warmup_s + seconds))
        async with AsyncProducer(endpoint) as producer:
            sent = [0]

            async def fill() -> None:
                while sent[0] < backlog:
                    sent[0] += 32
                    await producer.send_batch(topic, [Message(BODY) for _ in range(32)])

            await asyncio.gather(*(fill() for _ in range(8)))

        async def consumer() -> None:
            async with AsyncSimpleConsumer(endpoint, group=group, topic=topic) as client:
                while window.running:
                    messages = await client.receive(32, invisible_duration_s=60, wait_s=1)
                    if messages:
                        await client.ack(messages)
                    window.add(len(messages))

        result = await _measure(window, [consumer()], warmup_s, seconds)
        if result["messages"] + 32 >= backlog:
            raise RuntimeError(f"the backlog of {backlog} ran out: lengthen it")
        return result

    raise ValueError(f"unknown case {case!r}")


def _client_main(argv: list[str]) -> None:
    case, endpoint, warmup_s, seconds = argv[0], argv[1], float(argv[2]), float(argv[3])
    print(json.dumps(asyncio.run(_client(case, endpoint, warmup_s, seconds))), flush=True)


# --- the driver -----------------------------------------------------------------------------


def _run_client(
    root: Path, case: str, endpoint: str, warmup_s: float, seconds: float, profile: Path | None
) -> dict[str, float]:
    client = subprocess.Popen(
        [sys.executable, str(_SELF), "--client", case, endpoint, str(warmup_s), str(seconds)],
        cwd=root, env=_env(root), stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    spy = None
    if profile is not None:
        py_spy = Path(sys.executable).with_name("py-spy")
        spy = subprocess.Popen(
            [str(py_spy if py_spy.is_file() else shutil.which("py-spy")), "record",
             "-r", "200", "-f", "raw", "-o", str(profile), "--pid", str(client.pid),
             "-d", str(int(seconds + warmup_s + 30))],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    out, _ = client.communicate(timeout=600)
    if spy is not None:
        spy.wait(timeout=60)
    if client.returncode != 0:
        raise RuntimeError(f"client {case} of {root} failed ({client.returncode})")
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        _client_main(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, action="append", help="checkout whose SDK runs")
    parser.add_argument("--server-root", type=Path, default=_REPO, help="checkout serving")
    parser.add_argument("--case", action="append", choices=CASES)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--warmup", type=float, default=0.5, help="seconds before a window")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds of a window")
    parser.add_argument("--profile", type=Path, help="directory for py-spy profiles")
    args = parser.parse_args()
    roots = [r.resolve() for r in (args.root or [_REPO])]
    cases = args.case or list(CASES)
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    results: dict[tuple[str, Path], list[dict[str, float]]] = {}
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as data_dir:
            server, endpoint = _serve(args.server_root.resolve(), data_dir)
            try:
                for case in cases:
                    order = roots if run % 2 == 0 else roots[::-1]
                    for index, root in enumerate(order):
                        profile = None
                        if args.profile is not None:
                            profile = args.profile / f"{case}-{index}-{root.name}-{run}.txt"
                        result = _run_client(
                            root, case, endpoint, args.warmup, args.seconds, profile
                        )
                        results.setdefault((case, root), []).append(result)
                        print(
                            f"run {run} {case:10} {root}: "
                            f"{result['cpu_us_per_msg']:7.1f} us/msg "
                            f"{result['msgs_per_s']:8.0f} msg/s",
                            flush=True,
                        )
            finally:
                server.terminate()
                server.wait(timeout=30)
    print(f"\nmedian of {args.runs} runs, client CPU us per message (msg/s):")
    for case in cases:
        for root in roots:
            rows = results[(case, root)]
            cpu = statistics.median(r["cpu_us_per_msg"] for r in rows)
            rate = statistics.median(r["msgs_per_s"] for r in rows)
            spread = ", ".join(f"{r['cpu_us_per_msg']:.1f}" for r in rows)
            print(f"{case:10} {cpu:7.1f} us/msg ({rate:6.0f} msg/s)  {root}  [{spread}]")


if __name__ == "__main__":
    main()
