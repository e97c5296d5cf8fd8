"""Server memory per held long-polling pop: unary Pop calls against pops on PopStreams.

``python -m bench.held_pops [--held 10000] [--per-stream 100] [--runs 1]``

For each mode the server runs in this file's harness mode (``PopMQServer`` on 127.0.0.1:0,
flush async, a fresh data dir) in a subprocess; this process holds ``--held`` long polls on
an empty topic (30 s waits) and the harness reports its VmRSS, the GC-tracked objects and,
in a second run with tracemalloc on, the traced Python bytes, before and while they are held.
The result is the growth divided by ``--held``.

- unary: one ``MessagingService/Pop`` call per held pop, over ``--held / --per-stream``
  channels.
- stream: ``--per-stream`` pops on one ``MessagingService/PopStream`` per channel (what
  ``AsyncSimpleConsumer`` does), as many channels.

RSS includes grpc core's native memory per call, which tracemalloc does not see; traced
bytes are the Python objects only. Pops are spread over groups of at most 1,000 (the broker
holds up to 1,024 per (group, topic) by default).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

_GROUP_SIZE = 1000
_MODES = ("unary", "stream")


def _rss() -> int:
    status = Path("/proc/self/status").read_text()
    return next(int(line.split()[1]) * 1024 for line in status.splitlines() if "VmRSS:" in line)


async def _held_run(mode: str, held: int, per_stream: int, *, trace: bool) -> dict[str, float]:
    import grpc
    from google.protobuf.duration_pb2 import Duration

    from popmq._gen.popmq.v1 import admin_pb2, admin_pb2_grpc, messaging_pb2, messaging_pb2_grpc

    # The generated stubs are untyped.
    stub: Any = messaging_pb2_grpc.MessagingServiceStub
    admin_stub: Any = admin_pb2_grpc.AdminServiceStub
    with tempfile.TemporaryDirectory() as data_dir:
        command = [sys.executable, "-m", "bench.held_pops", "--harness", data_dir]
        if trace:
            command.append("--trace")
        harness = await asyncio.create_subprocess_exec(
            *command, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert harness.stdin is not None and harness.stdout is not None
        stdin, stdout = harness.stdin, harness.stdout

        async def ask(command: str) -> dict[str, Any]:
            stdin.write(f"{command}\n".encode())
            await stdin.drain()
            answer: dict[str, Any] = json.loads(await stdout.readline())
            return answer

        groups = [f"g{i}" for i in range(-(-held // _GROUP_SIZE))]
        channels: list[Any] = []
        try:
            endpoint = (await ask("endpoint"))["endpoint"]
            channels = [
                grpc.aio.insecure_channel(endpoint, options=[("popmq.bench.channel", i)])
                for i in range(-(-held // per_stream))
            ]
            admin = admin_stub(channels[0])
            await admin.CreateTopic(admin_pb2.CreateTopicRequest(name="empty", queues=8))
            stubs = [stub(c) for c in channels]

            def pop(i: int) -> Any:
                return messaging_pb2.PopRequest(
                    group=groups[i % len(groups)],
                    topic="empty",
                    long_polling_timeout=Duration(seconds=30),
                )

            async def wait_held(count: int) -> None:
                deadline = time.monotonic() + 120
                while (await ask("held"))["held"] != count:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"held pops did not reach {count}")
                    await asyncio.sleep(0.2)

            async def hold(count: int) -> list[Any]:
                calls: list[Any] = []
                if mode == "unary":
                    calls = [
                        asyncio.ensure_future(stubs[i % len(stubs)].Pop(pop(i), timeout=120))
                        for i in range(count)
                    ]
                else:
                    calls = [s.PopStream() for s in stubs]
                    for i in range(count):
                        request = messaging_pb2.PopStreamRequest(request_id=i, pop=pop(i))
                        await calls[i % len(calls)].write(request)
                await wait_held(count)
                return calls

            async def release(calls: list[Any]) -> None:
                for call in calls:
                    call.cancel()
                if mode == "unary":
                    await asyncio.gather(*calls, return_exceptions=True)
                await wait_held(0)
                await asyncio.sleep(0.5)

            # Warm-up: every group and per-method structure exists before the baseline.
            await release(await hold(min(held, len(groups) * 50)))
            before = await ask("measure")
            calls = await hold(held)
            during = await ask("measure")
            await release(calls)
            stdin.close()  # the harness stops its server at end of input
            await harness.wait()
        finally:
            for channel in channels:
                await channel.close()
            with contextlib.suppress(ProcessLookupError):
                harness.kill()
            await harness.wait()
    if trace:  # tracemalloc's own bookkeeping inflates the RSS of this run
        return {"traced bytes per held pop": (during["traced"] - before["traced"]) / held}
    return {
        "objects per held pop": (during["objects"] - before["objects"]) / held,
        "rss bytes per held pop": (during["rss"] - before["rss"]) / held,
    }


async def _harness(data_dir: str, trace: bool) -> None:
    """The server under measurement, answering commands on stdin with JSON lines."""
    if trace:
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
                    "traced": tracemalloc.get_traced_memory()[0] if trace else 0,
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
    parser.add_argument("--held", type=int, default=10_000)
    parser.add_argument("--per-stream", type=int, default=100)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--mode", choices=_MODES, action="append")
    parser.add_argument("--harness", metavar="DATA_DIR", help=argparse.SUPPRESS)
    parser.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.harness:
        asyncio.run(_harness(args.harness, args.trace))
        return
    for mode in args.mode or _MODES:
        runs: list[dict[str, float]] = []
        for _ in range(args.runs):
            result = asyncio.run(_held_run(mode, args.held, args.per_stream, trace=False))
            result.update(asyncio.run(_held_run(mode, args.held, args.per_stream, trace=True)))
            runs.append(result)
        print(f"{mode}: {args.held:,} held pops, {args.per_stream} per channel")
        for key in runs[0]:
            print(f"  {key:28} {statistics.median(r[key] for r in runs):10.1f}")


if __name__ == "__main__":
    main()
