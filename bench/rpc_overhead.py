"""Per-RPC server overhead: server CPU per unary call, Python memory per held long poll.

``python -m bench.rpc_overhead [--root DIR] [--runs 3] [--calls 10000] [--held 4000]``

``--root`` is the popmq checkout whose server is measured (default: this one), so a change
can be compared with the commit before it (``git archive HEAD~1 | tar -x -C /tmp/before``,
then ``--root /tmp/before``). Each run starts a fresh server on a temp data dir; the result is
the median of the runs.

- cpu: ``popmq serve`` (``python -m popmq.cli.main serve``, flush async, log level warning) in a
  subprocess; this process keeps ``--concurrency`` callers busy over one channel. Server CPU
  is utime + stime of the server process (all its threads) from ``/proc/PID/stat`` across
  ``--calls`` calls, after a warm-up, for AdminService/ListTopics and for
  MessagingService/Pop with a zero wait on an empty topic.
- held: the server runs in this file's ``--harness`` mode (the same server, with tracemalloc
  on); the client holds ``--held`` long-polling Pops on an empty topic and the harness
  reports the GC-tracked objects (``gc.get_objects``) and traced Python bytes before and
  while they are held (exact: the same on every run).

Server CPU per call varies by 10% or more between runs on a busy machine (fewer calls per
wake-up cost more each): alternate the two checkouts' runs and compare medians.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

_SELF = Path(__file__).resolve()
_REPO = _SELF.parents[1]
_HARNESS = (
    "import runpy, sys; path = sys.argv[1]; sys.argv[1:2] = ['--harness']; "
    "runpy.run_path(path, run_name='__main__')"
)
"""Runs this file with the measured checkout's packages first on sys.path (cwd and PYTHONPATH)."""
_GROUP_SIZE = 1000
"""Held pops per group: the broker holds at most 1024 per (group, topic) by default."""


def _stubs() -> tuple[Any, Any]:
    from popmq._gen.popmq.v1 import admin_pb2_grpc, messaging_pb2_grpc

    # The generated stubs are untyped.
    admin: Any = admin_pb2_grpc.AdminServiceStub
    messaging: Any = messaging_pb2_grpc.MessagingServiceStub
    return admin, messaging


def _env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(root / "src"), str(root / "gen")])
    return env


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _serve(root: Path, data_dir: str) -> tuple[subprocess.Popen[str], str]:
    """`popmq serve` of `root` on a free port; returns the process and its endpoint."""
    server = subprocess.Popen(
        [sys.executable, "-m", "popmq.cli.main", "serve", "--listen", "127.0.0.1:0",
         "--data-dir", data_dir, "--flush", "async", "--log-level", "warning"],
        cwd=root, env=_env(root), stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert server.stdout is not None
    line = server.stdout.readline()
    if "listening on" not in line:
        server.kill()
        raise RuntimeError(f"server did not start: {line!r}")
    return server, line.split()[-1]


def _rss() -> int:
    status = Path("/proc/self/status").read_text()
    return next(int(line.split()[1]) * 1024 for line in status.splitlines() if "VmRSS:" in line)


async def _cpu_run(root: Path, calls: int, concurrency: int) -> dict[str, float]:
    import grpc
    from google.protobuf.duration_pb2 import Duration

    from popmq._gen.popmq.v1 import admin_pb2, messaging_pb2

    admin_stub, messaging_stub = _stubs()

    with tempfile.TemporaryDirectory() as data_dir:
        server, endpoint = _serve(root, data_dir)
        try:
            async with grpc.aio.insecure_channel(endpoint) as channel:
                admin = admin_stub(channel)
                messaging = messaging_stub(channel)
                await admin.CreateTopic(admin_pb2.CreateTopicRequest(name="empty", queues=8))
                pop = messaging_pb2.PopRequest(
                    group="g", topic="empty", long_polling_timeout=Duration(seconds=0)
                )
                shapes = {
                    "ListTopics": lambda: admin.ListTopics(admin_pb2.ListTopicsRequest()),
                    "Pop": lambda: messaging.Pop(pop),
                }
                result: dict[str, float] = {}
                for name, call in shapes.items():

                    async def load(n: int, call: Any = call) -> None:
                        remaining = [n]

                        async def caller() -> None:
                            while remaining[0] > 0:
                                remaining[0] -= 1
                                await call()

                        await asyncio.gather(*(caller() for _ in range(concurrency)))

                    await load(max(1000, calls // 10))  # warm-up
                    began_cpu, began = _cpu_seconds(server.pid), time.perf_counter()
                    await load(calls)
                    cpu, wall = _cpu_seconds(server.pid) - began_cpu, time.perf_counter() - began
                    result[f"{name} server cpu us/call"] = cpu / calls * 1e6
                    result[f"{name} calls/s"] = calls / wall
                return result
        finally:
            server.terminate()
            server.wait(timeout=30)


async def _held_run(root: Path, held: int) -> dict[str, float]:
    import grpc
    from google.protobuf.duration_pb2 import Duration

    from popmq._gen.popmq.v1 import admin_pb2, messaging_pb2

    admin_stub, messaging_stub = _stubs()

    with tempfile.TemporaryDirectory() as data_dir:
        harness = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _HARNESS, str(_SELF), data_dir,
            cwd=root, env=_env(root), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )  # fmt: skip
        assert harness.stdin is not None and harness.stdout is not None
        stdin, stdout = harness.stdin, harness.stdout

        async def ask(command: str) -> dict[str, Any]:
            stdin.write(f"{command}\n".encode())
            await stdin.drain()
            answer: dict[str, Any] = json.loads(await stdout.readline())
            return answer

        groups = [f"g{i}" for i in range(-(-held // _GROUP_SIZE))]
        try:
            endpoint = (await ask("endpoint"))["endpoint"]
            channels = [
                grpc.aio.insecure_channel(endpoint, options=[("popmq.bench.channel", i)])
                for i in range(4)
            ]
            admin = admin_stub(channels[0])
            await admin.CreateTopic(admin_pb2.CreateTopicRequest(name="empty", queues=8))
            stubs = [messaging_stub(c) for c in channels]

            async def hold(count: int) -> list[asyncio.Future[Any]]:
                calls = [
                    asyncio.ensure_future(
                        stubs[i % len(stubs)].Pop(
                            messaging_pb2.PopRequest(
                                group=groups[i % len(groups)],
                                topic="empty",
                                long_polling_timeout=Duration(seconds=30),
                            ),
                            timeout=120,
                        )
                    )
                    for i in range(count)
                ]
                deadline = time.monotonic() + 120
                while (await ask("held"))["held"] < count:
                    if time.monotonic() > deadline:
                        raise RuntimeError("pops were not all held")
                    await asyncio.sleep(0.2)
                return calls

            async def release(calls: list[asyncio.Future[Any]]) -> None:
                for call in calls:
                    call.cancel()
                await asyncio.gather(*calls, return_exceptions=True)
                deadline = time.monotonic() + 60
                while (await ask("held"))["held"] > 0:
                    if time.monotonic() > deadline:
                        raise RuntimeError("held pops did not end")
                    await asyncio.sleep(0.2)
                await asyncio.sleep(0.5)

            # Warm-up: every group and every per-method structure exists before the baseline.
            await release(await hold(len(groups) * 50))
            before = await ask("measure")
            calls = await hold(held)
            during = await ask("measure")
            await release(calls)
            for channel in channels:
                await channel.close()
            stdin.close()  # the harness stops its server at end of input
            await harness.wait()
        finally:
            with contextlib.suppress(ProcessLookupError):
                harness.kill()
            await harness.wait()
    return {
        "held objects/call": (during["objects"] - before["objects"]) / held,
        "held traced bytes/call": (during["traced"] - before["traced"]) / held,
        "held rss bytes/call": (during["rss"] - before["rss"]) / held,
    }


async def _harness(data_dir: str) -> None:
    """The server under measurement, answering commands on stdin with JSON lines."""
    tracemalloc.start()
    from popmq.broker_core.config import BrokerConfig, StoreConfig
    from popmq.proxy.server import PopMQServer
    from popmq.runtime.config import ServerConfig

    store = StoreConfig(data_dir=Path(data_dir), flush="async")
    server = PopMQServer(ServerConfig(listen="127.0.0.1:0", broker=BrokerConfig(store=store)))
    port = await server.start()
    loop = asyncio.get_running_loop()
    try:
        while command := (await loop.run_in_executor(None, sys.stdin.readline)).strip():
            answer: dict[str, Any]
            if command == "endpoint":
                answer = {"endpoint": f"127.0.0.1:{port}"}
            elif command == "held":
                answer = {"held": server.embedded_broker.polling.held}
            elif command == "measure":
                gc.collect()
                answer = {
                    "objects": len(gc.get_objects()),
                    "traced": tracemalloc.get_traced_memory()[0],
                    "rss": _rss(),
                }
            else:
                break
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()
    finally:
        await server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--root", type=Path, default=_REPO, help="popmq checkout to measure")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--held", type=int, default=4000)
    parser.add_argument("--only", choices=("cpu", "held"), help="run one measurement")
    parser.add_argument("--harness", metavar="DATA_DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.harness:
        asyncio.run(_harness(args.harness))
        return
    root = args.root.resolve()
    runs: list[dict[str, float]] = []
    for run in range(args.runs):
        result: dict[str, float] = {}
        if args.only in (None, "cpu"):
            result.update(asyncio.run(_cpu_run(root, args.calls, args.concurrency)))
        if args.only in (None, "held"):
            result.update(asyncio.run(_held_run(root, args.held)))
        print(f"run {run + 1}: " + ", ".join(f"{k}={v:.1f}" for k, v in result.items()))
        runs.append(result)
    print(f"median of {len(runs)} runs ({root}):")
    for key in runs[0]:
        print(f"  {key:28} {statistics.median(r[key] for r in runs):10.1f}")


if __name__ == "__main__":
    main()
