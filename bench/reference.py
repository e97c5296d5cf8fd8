"""The physical reference rows: what storage and transport alone can do on this machine.

- ``rocksdb raw``: rocksdict ``WriteBatch`` puts of the same records popmq stores (a
  ``StoredMessage`` with the same body, big-endian topic/queue/offset keys), one synced write
  per batch: the storage limit of our stack, with none of the broker's indexing or Python.
- ``grpc echo``: a bare ``grpc.aio`` server (its own process, like popmq's) that returns the
  bytes of the same ``SendMessagesRequest`` it receives: the transport limit, with no
  protobuf parsing and no storage. Unary (``Echo``) for scenario 1's rates; a bidi stream
  (``EchoStream``, one per sender, as the SDK's SendStream) for scenario 3b's paced sends.

Run ``python -m bench.reference echo-server`` to start the echo server by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import rocksdict

from bench.load import Meter, Worker, measure_rate
from bench.peers.servers import ServerProcess, read_port_line
from popmq import Message
from popmq._gen.popmq.store.v1 import records_pb2
from popmq.sdk.producer import build_send_request

__all__ = ["EchoServer", "echo_rate", "rocksdb_rate", "stream_echo_sender"]

_ECHO_METHOD = "/bench.Echo/Echo"
_ECHO_STREAM_METHOD = "/bench.Echo/EchoStream"
_READY_PREFIX = "echo listening on "
_REPO = Path(__file__).resolve().parents[1]


def stored_record(body: bytes) -> bytes:
    """A serialized StoredMessage like the broker writes for a fresh send of ``body``."""
    now = int(time.time() * 1000)
    return records_pb2.StoredMessage(
        message_id=uuid.uuid4().hex.upper(),
        body=body,
        born_time_ms=now,
        store_time_ms=now,
        delivery_attempt=1,
        born_host="bench",
    ).SerializeToString()


def rocksdb_rate(*, batch: int, seconds: float, body: bytes, warmup_s: float = 0.2) -> float:
    """Records per second of synced WriteBatch puts, ``batch`` records per write."""
    record = stored_record(body)
    with tempfile.TemporaryDirectory(prefix="popmq-bench-rocksdb-") as tmp:
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        db = rocksdict.Rdict(tmp, options)
        synced = rocksdict.WriteOptions()
        synced.sync = True
        offset = 0
        count = 0
        try:
            counting_from = time.perf_counter() + warmup_s
            end = counting_from + seconds
            now = time.perf_counter()
            while now < end:
                write = rocksdict.WriteBatch(raw_mode=True)
                for _ in range(batch):
                    write.put(struct.pack(">IIQ", 1, offset % 8, offset), record)
                    offset += 1
                db.write(write, synced)
                now = time.perf_counter()
                if now >= counting_from:
                    count += batch
        finally:
            db.close()
    return count / max(now - counting_from, 1e-9)


class EchoServer(ServerProcess):
    """The bare grpc.aio echo server in its own process."""

    name = "grpc-echo"
    picks_own_port = True

    def _command(self, data_dir: Path) -> list[str]:
        return [sys.executable, "-m", "bench.reference", "echo-server"]

    def _env(self) -> dict[str, str] | None:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(_REPO) + (
            os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
        )
        return env

    def _stdout(self) -> int:
        return subprocess.PIPE

    def _wait_ready(self, proc: Any, deadline: float) -> None:
        self.port = read_port_line(proc, deadline, _READY_PREFIX, self._log_tail)


def batch_payload(batch: int, body: bytes) -> bytes:
    """The bytes of the SendMessagesRequest popmq's producer sends for this batch."""
    return build_send_request("bench", [Message(body) for _ in range(batch)]).SerializeToString()


async def echo_rate(
    endpoint: str,
    *,
    batch: int,
    callers: int,
    body: bytes,
    warmup_s: float,
    duration_s: float,
) -> float:
    """Messages per second through the echo server, ``callers`` concurrent channels."""
    payload = batch_payload(batch, body)

    def worker() -> Worker:
        async def run(meter: Meter) -> None:
            async with grpc.aio.insecure_channel(endpoint) as channel:
                echo = channel.unary_unary(_ECHO_METHOD)
                while meter.running:
                    reply = await echo(payload)
                    assert len(reply) == len(payload)
                    meter.add(batch)

        return run

    return await measure_rate(
        [worker() for _ in range(callers)], warmup_s=warmup_s, duration_s=duration_s
    )


class _StreamEchoSender:
    """Sends each batch as one message on a bidi stream, as popmq's SDK does (SendStream);
    the echo comes back in order, so answers are matched first in, first out."""

    def __init__(self, call: Any) -> None:
        self._call = call
        self._writing = asyncio.Lock()
        self._waiting: deque[asyncio.Future[int]] = deque()
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        while (reply := await self._call.read()) is not grpc.aio.EOF:
            self._waiting.popleft().set_result(len(reply))

    async def send(self, bodies: Sequence[bytes]) -> None:
        request = build_send_request("bench", [Message(body) for body in bodies])
        payload = request.SerializeToString()
        answered: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        async with self._writing:  # one write at a time; answers queue in write order
            self._waiting.append(answered)
            await self._call.write(payload)
        assert await answered == len(payload)

    async def close(self) -> None:
        await self._call.done_writing()
        await self._reader


@asynccontextmanager
async def stream_echo_sender(endpoint: str) -> AsyncIterator[_StreamEchoSender]:
    """A scenario ``Sender`` on its own channel and echo stream (the transport's share)."""
    async with grpc.aio.insecure_channel(endpoint) as channel:
        sender = _StreamEchoSender(channel.stream_stream(_ECHO_STREAM_METHOD)())
        try:
            yield sender
        finally:
            await sender.close()


async def _serve_echo() -> None:
    async def echo(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        return request

    async def echo_stream(
        requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[bytes]:
        async for request in requests:
            yield request

    handler = grpc.method_handlers_generic_handler(
        "bench.Echo",
        {
            "Echo": grpc.unary_unary_rpc_method_handler(echo),
            "EchoStream": grpc.stream_stream_rpc_method_handler(echo_stream),
        },
    )
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", 130 * 1024 * 1024),
            ("grpc.max_send_message_length", 130 * 1024 * 1024),
        ]
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"{_READY_PREFIX}127.0.0.1:{port}", flush=True)
    await server.wait_for_termination()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.reference", description=__doc__)
    parser.add_argument("command", choices=["echo-server"])
    parser.parse_args(argv)
    try:
        asyncio.run(_serve_echo())
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
