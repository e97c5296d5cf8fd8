"""Slow consumers against a real `popmq serve`: the server's RSS before, at peak and after.

Why: a consumer that asks for messages and never reads its answers must cost the server a
bounded amount of memory, and all of it must come back once the client goes away.
This reproduces the attacks against a `popmq serve` subprocess and reads the server's RSS from
/proc/PID/status:

- ``pop-stream``: one PopStream per group (``--groups``, auto-created, new ones each run)
  writes ``--pops`` pops (``--max-messages`` 32, invisible 1 s) and never reads, against a
  store of ``--messages`` messages of ``--body-kib`` KiB;
- ``receive``: ``--calls`` apache.rocketmq.v2 ReceiveMessage calls (batch ``--max-messages``,
  invisible 1 s) of one client that are never read;
- ``--idle-connections N``: N HTTP/2 connections that make no call, which the server (run
  with ``connections.max_idle_s`` = ``--max-idle``) must close.

Each attack runs ``--runs`` times back to back on one server (a leak shows as a rising
"after"). Run: ``python -m bench.slow_consumer_memory`` (the full-sized run of
docs/durability.md, "Slow consumers and memory"); tests/integration/test_slow_consumers.py
runs a small one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc

from popmq._gen.apache.rocketmq.v2 import definition_pb2 as rmq
from popmq._gen.apache.rocketmq.v2 import service_pb2 as rmq_service
from popmq._gen.apache.rocketmq.v2 import service_pb2_grpc as rmq_grpc
from popmq._gen.popmq.v1 import admin_pb2, admin_pb2_grpc, messaging_pb2, messaging_pb2_grpc
from popmq.broker_core import validation

REPO_ROOT = Path(__file__).resolve().parents[1]
_LISTENING = re.compile(rb"listening on (\S+:\d+)")
_MIB = 1024 * 1024
_TOPIC = "slow-consumers"
_ADMIN: Any = admin_pb2_grpc.AdminServiceStub
_MESSAGING: Any = messaging_pb2_grpc.MessagingServiceStub
_RMQ: Any = rmq_grpc.MessagingServiceStub


def rss_mb(pid: int) -> float:
    """Resident set size of a process in MB (10^6 bytes), from /proc/PID/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024 / 1e6
    raise RuntimeError(f"no VmRSS in /proc/{pid}/status")


@dataclass(slots=True)
class Run:
    """One attack on the server: its RSS before, the highest seen, and after the client left."""

    attack: str
    before_mb: float
    peak_mb: float = 0.0
    after_mb: float = 0.0
    answers_read: int = 0

    def line(self) -> str:
        return (
            f"{self.attack}: before {self.before_mb:.0f} MB, peak {self.peak_mb:.0f} MB "
            f"(+{self.peak_mb - self.before_mb:.0f}), after {self.after_mb:.0f} MB "
            f"(+{self.after_mb - self.before_mb:.0f})"
        )


@dataclass(slots=True)
class Server:
    """A `popmq serve` subprocess over a temporary data dir."""

    process: asyncio.subprocess.Process
    endpoint: str
    extra: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.process.pid

    def rss_mb(self) -> float:
        return rss_mb(self.pid)


@contextlib.asynccontextmanager
async def serve(data_dir: Path, *settings: str) -> AsyncIterator[Server]:
    """Start `popmq serve` on 127.0.0.1:0 (with `--set` settings); SIGTERM it at the end."""
    args = [sys.executable, "-m", "popmq.cli", "serve", "--listen", "127.0.0.1:0"]
    args += ["--data-dir", str(data_dir), "--flush", "async", "--log-level", "warning"]
    for setting in settings:
        args += ["--set", setting]
    process = await asyncio.create_subprocess_exec(
        *args,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        found = _LISTENING.search(line)
        if found is None:
            raise RuntimeError(f"popmq serve did not start: {line!r}")
        yield Server(process, found.group(1).decode())
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                await process.wait()


async def fill(endpoint: str, messages: int, body_kib: int) -> None:
    """Create the topic and store `messages` messages of `body_kib` KiB."""
    async with grpc.aio.insecure_channel(endpoint) as channel:
        admin = _ADMIN(channel)
        await admin.CreateTopic(admin_pb2.CreateTopicRequest(name=_TOPIC, queues=8))
        stub = _MESSAGING(channel)
        body = os.urandom(body_kib * 1024)
        per_request = max(1, validation.MAX_SEND_BODY_BYTES // len(body))
        left = messages
        while left:
            n = min(per_request, left)
            await stub.SendMessages(
                messaging_pb2.SendMessagesRequest(
                    messages=[messaging_pb2.OutgoingMessage(topic=_TOPIC, body=body)] * n
                )
            )
            left -= n


def _seconds(s: float) -> timedelta:
    # A timedelta, which both popmq.v1 and popmq's private apache.rocketmq.v2 messages take
    # for a Duration field (the latter's Duration class is its own pool's, not google's).
    return timedelta(seconds=s)


async def _watch(server: Server, run: Run, seconds: float) -> None:
    """Sample the server's RSS for `seconds`, keeping the peak in `run`."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        run.peak_mb = max(run.peak_mb, server.rss_mb())
        await asyncio.sleep(0.25)


async def _settle(server: Server, run: Run, seconds: float) -> None:
    """Wait for the server to let go after the client left; `after` is the last sample."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        await asyncio.sleep(0.5)
        run.after_mb = server.rss_mb()
        run.peak_mb = max(run.peak_mb, run.after_mb)


async def pop_stream_attack(
    server: Server,
    *,
    groups: int,
    pops: int,
    hold_s: float,
    settle_s: float,
    run_no: int = 0,
    max_messages: int = 32,
    invisible_s: float = 1.0,
) -> Run:
    """One PopStream per group writes `pops` pops and never reads; then the client leaves.

    Each run uses groups of its own (auto-created), which start at the first message.
    """
    run = Run(f"PopStream x{groups} groups, {pops} pops of {max_messages} each", server.rss_mb())
    channel = grpc.aio.insecure_channel(server.endpoint)
    stub = _MESSAGING(channel)
    calls = []
    for g in range(groups):
        call = stub.PopStream()
        calls.append(call)
        for i in range(pops):
            pop = messaging_pb2.PopRequest(
                group=f"slow-{run_no}-{g}",
                topic=_TOPIC,
                max_messages=max_messages,
                invisible_duration=_seconds(invisible_s),
                long_polling_timeout=_seconds(20),
            )
            await call.write(messaging_pb2.PopStreamRequest(request_id=i + 1, pop=pop))
    await _watch(server, run, hold_s)
    for call in calls:
        call.cancel()
    await channel.close()
    await _settle(server, run, settle_s)
    return run


async def receive_attack(
    server: Server,
    *,
    calls: int,
    hold_s: float,
    settle_s: float,
    run_no: int = 0,
    max_messages: int = 32,
    invisible_s: float = 1.0,
) -> Run:
    """`calls` v2 ReceiveMessage calls that are never read; then the client leaves (a group
    of its own per run)."""
    run = Run(f"ReceiveMessage x{calls} calls of {max_messages}", server.rss_mb())
    channel = grpc.aio.insecure_channel(server.endpoint)
    stub = _RMQ(channel)
    metadata = (("x-mq-client-id", "slow-consumer-1"),)
    request = rmq_service.ReceiveMessageRequest(
        group=rmq.Resource(name=f"slow-v2-{run_no}"),
        message_queue=rmq.MessageQueue(topic=rmq.Resource(name=_TOPIC), id=-1),
        filter_expression=rmq.FilterExpression(type=rmq.TAG, expression="*"),
        batch_size=max_messages,
        invisible_duration=_seconds(invisible_s),
        long_polling_timeout=_seconds(20),
    )
    pending = [stub.ReceiveMessage(request, metadata=metadata, timeout=120) for _ in range(calls)]
    await _watch(server, run, hold_s)
    for call in pending:
        call.cancel()
    await channel.close()
    await _settle(server, run, settle_s)
    return run


_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000")
"""The HTTP/2 client preface and an empty SETTINGS frame: a connection, and no call."""


async def idle_connections(server: Server, count: int, wait_s: float) -> tuple[int, float]:
    """Open `count` HTTP/2 connections that make no call; how many the server closed within
    `wait_s`, and when the last of those closed (seconds after they were all open)."""

    async def hold(reader: asyncio.StreamReader) -> float:
        while await reader.read(65536):
            pass
        return time.monotonic()

    host, port = server.endpoint.rsplit(":", 1)
    writers: list[asyncio.StreamWriter] = []
    readers: list[asyncio.Task[float]] = []
    for _ in range(count):
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(_PREFACE)
        writers.append(writer)
        readers.append(asyncio.ensure_future(hold(reader)))
    opened = time.monotonic()
    done, pending = await asyncio.wait(readers, timeout=wait_s)
    for task in pending:
        task.cancel()
    for writer in writers:
        writer.close()
    last = max((t.result() for t in done), default=opened) - opened
    return len(done), last


async def main(argv: list[str] | None = None) -> list[Run]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=64, help="messages stored (64)")
    parser.add_argument("--body-kib", type=int, default=1024, help="body size in KiB (1024)")
    parser.add_argument("--pops", type=int, default=1024, help="pops per PopStream (1024)")
    parser.add_argument(
        "--max-messages", type=int, default=32, help="messages per pop or receive (32)"
    )
    parser.add_argument(
        "--invisible", type=float, default=1.0, help="invisible seconds of each pop (1)"
    )
    parser.add_argument("--groups", type=int, default=1, help="PopStreams, one per group (1)")
    parser.add_argument("--calls", type=int, default=256, help="ReceiveMessage calls (256)")
    parser.add_argument("--hold", type=float, default=24.0, help="seconds the client stays")
    parser.add_argument("--settle", type=float, default=8.0, help="seconds after it left")
    parser.add_argument("--runs", type=int, default=3, help="back-to-back runs of each attack")
    parser.add_argument(
        "--attack", choices=["pop-stream", "receive", "both"], default="both", help="(both)"
    )
    parser.add_argument(
        "--idle-connections", type=int, default=0, help="also open this many idle connections"
    )
    parser.add_argument(
        "--max-idle", type=float, default=5.0, help="the server's connections.max_idle_s (5)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="a setting of the server (e.g. server.event_loop=asyncio); repeatable",
    )
    args = parser.parse_args(argv)
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="popmq-slow-") as tmp:
        settings = [f"connections.max_idle_s={args.max_idle}", *args.set]
        async with serve(Path(tmp) / "data", *settings) as server:
            await fill(server.endpoint, args.messages, args.body_kib)
            await asyncio.sleep(1)
            print(f"server pid {server.pid}, {server.rss_mb():.0f} MB after the fill", flush=True)
            for run_no in range(args.runs):
                if args.attack in ("pop-stream", "both"):
                    run = await pop_stream_attack(
                        server,
                        groups=args.groups,
                        pops=args.pops,
                        hold_s=args.hold,
                        settle_s=args.settle,
                        run_no=run_no,
                        max_messages=args.max_messages,
                        invisible_s=args.invisible,
                    )
                    runs.append(run)
                    print(run.line(), flush=True)
                if args.attack in ("receive", "both"):
                    run = await receive_attack(
                        server,
                        calls=args.calls,
                        hold_s=args.hold,
                        settle_s=args.settle,
                        run_no=run_no,
                        max_messages=args.max_messages,
                        invisible_s=args.invisible,
                    )
                    runs.append(run)
                    print(run.line(), flush=True)
            if args.idle_connections:
                before = server.rss_mb()
                closed, last = await idle_connections(
                    server, args.idle_connections, args.max_idle + 10
                )
                print(
                    f"idle connections: {closed} of {args.idle_connections} closed by the "
                    f"server (max_idle_s {args.max_idle:g}; the last after {last:.1f}s); "
                    f"RSS {before:.0f} MB before, {server.rss_mb():.0f} MB after",
                    flush=True,
                )
    return runs


if __name__ == "__main__":
    asyncio.run(main())
