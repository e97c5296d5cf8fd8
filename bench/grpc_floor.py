"""What one gRPC message costs a grpc.aio process on this machine, with no popmq code: the
floor under the cluster hop's CPU per message.

``python -m bench.grpc_floor [--seconds 2] [--rounds 3] [--answer-bytes 1024] [--out FILE]``

A grpc.aio server in a child process answers each request of 100 bytes with
``--answer-bytes`` bytes (a bidirectional stream method and a unary one, bytes in and out,
no protobuf; a hop pop of 32 KiB messages is answered with about 33,000); this process, on uvloop as
popmq runs, keeps 1 or 4 callers busy over one channel: on the stream, a write then a read
each (one stream message each way, as a hop request alone or a frame); as unary calls, one
call each. It prints this process's CPU (utime + stime, every thread: gRPC's own threads
do the socket reads) per round trip, and the round trips a second, for each (mode,
callers), in rounds that alternate the order.

Each stream message costs grpc.aio a completion handed from its threads to the event loop
(an eventfd kick and a socket write between threads, a wake-up of the loop), whatever
the message carries: the proxy's CPU per message is mostly these, which is why frames (fewer
messages, not smaller ones) are what moved it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path

import grpc

SERVICE = "bench.Floor"
STREAM = f"/{SERVICE}/Stream"
UNARY = f"/{SERVICE}/Unary"


def _as_is(data: bytes) -> bytes:
    return data


async def _serve(answer_bytes: int) -> None:
    answer = b"z" * answer_bytes

    async def stream(requests: object, _context: object) -> object:
        async for _ in requests:  # type: ignore[attr-defined]
            yield answer

    async def unary(_request: bytes, _context: object) -> bytes:
        return answer

    server = grpc.aio.server()
    handlers = {
        "Stream": grpc.stream_stream_rpc_method_handler(stream, _as_is, _as_is),
        "Unary": grpc.unary_unary_rpc_method_handler(unary, _as_is, _as_is),
    }
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, handlers)])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


async def _measure(port: int, mode: str, callers: int, seconds: float) -> tuple[float, float]:
    """(CPU us per round trip, round trips a second) of `callers` callers for `seconds`."""
    payload = b"y" * 100
    done = 0
    running = True
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:

        async def on_stream() -> None:
            nonlocal done
            call = channel.stream_stream(
                STREAM, request_serializer=_as_is, response_deserializer=_as_is
            )()
            while running:
                await call.write(payload)
                await call.read()
                done += 1
            await call.done_writing()
            while await call.read() is not grpc.aio.EOF:
                pass

        async def on_unary() -> None:
            nonlocal done
            call = channel.unary_unary(
                UNARY, request_serializer=_as_is, response_deserializer=_as_is
            )
            while running:
                await call(payload)
                done += 1

        tasks = [
            asyncio.ensure_future(on_stream() if mode == "stream" else on_unary())
            for _ in range(callers)
        ]
        await asyncio.sleep(0.5)  # warm-up: connection, first calls
        done = 0
        cpu, wall = time.process_time(), time.monotonic()
        await asyncio.sleep(seconds)
        cpu, wall, trips = time.process_time() - cpu, time.monotonic() - wall, done
        running = False
        await asyncio.gather(*tasks)
    return cpu * 1e6 / trips, trips / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--answer-bytes", type=int, default=1024)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    import uvloop

    if args.serve:
        uvloop.run(_serve(args.answer_bytes))
        return
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.grpc_floor",
            "--serve",
            "--answer-bytes",
            str(args.answer_bytes),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
        lines = [
            f"python -m bench.grpc_floor --seconds {args.seconds:g} --rounds {args.rounds} "
            f"--answer-bytes {args.answer_bytes}",
            f"load average at the start: {load}",
        ]
        cases = [(mode, callers) for mode in ("stream", "unary") for callers in (1, 4)]
        samples: dict[tuple[str, int], list[tuple[float, float]]] = {}
        for round_ in range(args.rounds):
            for mode, callers in cases if round_ % 2 == 0 else cases[::-1]:
                us, rate = uvloop.run(_measure(port, mode, callers, args.seconds))
                samples.setdefault((mode, callers), []).append((us, rate))
                lines.append(
                    f"round {round_ + 1} {mode:6} {callers} callers: {us:.1f} us CPU a round "
                    f"trip, {rate:,.0f} a second"
                )
                print(lines[-1], flush=True)
        lines.append("medians:")
        for mode, callers in cases:
            found = samples[mode, callers]
            lines.append(
                f"  {mode:6} {callers} callers: "
                f"{statistics.median(us for us, _ in found):.1f} us CPU a round trip, "
                f"{statistics.median(rate for _, rate in found):,.0f} a second"
            )
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
        lines.append(f"load average at the end: {load}")
    finally:
        server.kill()
        server.wait()
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
