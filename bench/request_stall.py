"""How long one hostile or careless request stalls the server: the worst latency of a
ListTopics ping that runs beside it, per RPC.

``python -m bench.request_stall [--quick] [--json]``

A `popmq serve` subprocess (127.0.0.1:0, a fresh data dir, flush async so the disk is not
what is measured) gets a topic of 1,024 queues and a topic of large messages. A second
subprocess pings ListTopics every 5 ms and reports each ping's start and latency; this
process sends each attack, one request of at most the server's receive limit
(validation.MAX_REQUEST_BYTES), and reports the worst ping that overlapped it, the attack's
own time, its answer (status) and the server's RSS after it. Target (docs/limits.md):
worst ping under 100 ms for every row on a 2-core machine.

The last rows are not single requests: 2,000 held AwaitMessages calls on the 1,024-queue
topic while one message is sent (every call watches every queue, so all are woken and
answered), and the same with the calls watching a queue the send does not reach.

`--quick` (CI, tests/integration/test_request_stall.py) uses smaller held counts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import grpc

from popmq._gen.apache.rocketmq.v2 import definition_pb2 as v2
from popmq._gen.apache.rocketmq.v2 import service_pb2 as v2s
from popmq._gen.popmq.v1 import admin_pb2, admin_pb2_grpc, messaging_pb2, messaging_pb2_grpc
from popmq.broker_core import validation

_REPO = Path(__file__).resolve().parents[1]
_PING_EVERY_S = 0.005
_V2_META = (("x-mq-client-id", "stall-bench"), ("x-mq-language", "PYTHON"))
_LISTENING = re.compile(r"listening on (\S+:\d+)")
_SERVE = (sys.executable, "-m", "popmq.cli", "serve", "--listen", "127.0.0.1:0")


@dataclass(frozen=True)
class Row:
    """One attack's outcome."""

    attack: str
    request_bytes: int
    status: str
    attack_s: float
    worst_ping_ms: float
    pings: int
    server_rss_mb: float


# -- the server and the ping ---------------------------------------------------------------


@contextmanager
def _server(data_dir: Path) -> Iterator[tuple[str, int]]:
    process = subprocess.Popen(
        [*_SERVE, "--data-dir", str(data_dir), "--flush", "async"],
        cwd=_REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:
            found = _LISTENING.search(line)
            if found:
                yield found.group(1), process.pid
                break
        else:
            raise RuntimeError("the server exited before listening")
    finally:
        process.terminate()
        process.wait(30)
        if process.stdout is not None:
            process.stdout.close()


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def ping_main(endpoint: str) -> None:
    """The ping process: one ListTopics every 5 ms; prints `start latency` per ping."""
    stub = admin_pb2_grpc.AdminServiceStub(grpc.insecure_channel(endpoint))
    request = admin_pb2.ListTopicsRequest()
    while True:
        began = time.monotonic()
        try:
            stub.ListTopics(request, timeout=120)
        except grpc.RpcError:
            pass
        took = time.monotonic() - began
        print(f"{began:.6f} {took:.6f}", flush=True)
        time.sleep(max(0.0, _PING_EVERY_S - took))


class Ping:
    """Runs the ping process and keeps its samples."""

    def __init__(self, endpoint: str) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "bench.request_stall", "--ping", endpoint],
            cwd=_REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.samples: list[tuple[float, float]] = []
        self._lock = threading.Lock()  # guards samples
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            began, took = (float(x) for x in line.split())
            with self._lock:
                self.samples.append((began, took))

    def settle(self, after: float) -> None:
        """Wait until a ping that started after `after` has answered."""
        give_up = time.monotonic() + 120
        while time.monotonic() < give_up:
            with self._lock:
                if self.samples and self.samples[-1][0] > after:
                    return
            time.sleep(0.01)

    def worst(self, start: float, end: float) -> tuple[float, int]:
        """Worst latency of the pings in flight at any time within [start, end]."""
        with self._lock:
            hits = [took for began, took in self.samples if began <= end and began + took >= start]
        return (max(hits) if hits else 0.0), len(hits)

    def close(self) -> None:
        self._process.kill()
        self._process.wait()
        self._reader.join(10)
        if self._process.stdout is not None:
            self._process.stdout.close()


# -- attacks --------------------------------------------------------------------------------


def _v1_message(body: bytes, **kw: Any) -> messaging_pb2.OutgoingMessage:
    return messaging_pb2.OutgoingMessage(topic="wide", body=body, **kw)


def _v2_message(body: bytes, n: int) -> v2.Message:
    props = v2.SystemProperties(message_id=f"stall-{n}", born_host="h", body_encoding=v2.IDENTITY)
    props.born_timestamp.FromMilliseconds(1_700_000_000_000)
    return v2.Message(topic=v2.Resource(name="wide"), body=body, system_properties=props)


def _attacks(channel: grpc.Channel) -> list[tuple[str, Callable[[], Any], int]]:
    """(name, call, request bytes) of each single-request attack."""
    limit = validation.MAX_REQUEST_BYTES - 64 * 1024
    attacks: list[tuple[str, Callable[[], Any], int]] = []

    def add(name: str, method: str, request: Any, **kw: Any) -> None:
        # Serialized now, sent as bytes: the attack window holds the server's work only.
        payload = request.SerializeToString()
        call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        attacks.append((name, lambda: call(payload, timeout=120, **kw), len(payload)))

    fill = limit // 8
    add(
        "v1 Heartbeat, topics x1M",
        "/popmq.v1.MessagingService/Heartbeat",
        messaging_pb2.HeartbeatRequest(client_id="c", group="g", topics=["wide"] * (fill)),
    )
    tiny = _v1_message(b"x")
    add(
        "v1 SendMessages, tiny messages to the limit",
        "/popmq.v1.MessagingService/SendMessages",
        messaging_pb2.SendMessagesRequest(messages=[tiny] * (limit // (tiny.ByteSize() + 3))),
    )
    add(
        "v1 SendMessages, 1,024 x 4 KiB (largest valid)",
        "/popmq.v1.MessagingService/SendMessages",
        messaging_pb2.SendMessagesRequest(messages=[_v1_message(b"y" * 4096)] * 1024),
    )
    add(
        "v1 SendMessages, one largest body",
        "/popmq.v1.MessagingService/SendMessages",
        messaging_pb2.SendMessagesRequest(messages=[_v1_message(b"z" * validation.MAX_BODY_BYTES)]),
    )
    add(
        "v1 Pop, 32 of 1 MiB messages",
        "/popmq.v1.MessagingService/Pop",
        messaging_pb2.PopRequest(group="stall", topic="big", max_messages=32),
    )
    add(
        "v1 Ack, handles to the limit",
        "/popmq.v1.MessagingService/Ack",
        messaging_pb2.AckRequest(group="g", receipt_handles=["h" * 100] * (limit // 103)),
    )
    add(
        "v1 AwaitMessages, 1,024 queues, no wait",
        "/popmq.v1.MessagingService/AwaitMessages",
        messaging_pb2.AwaitMessagesRequest(
            topic="wide",
            positions=[messaging_pb2.QueueOffset(queue_id=q, offset=0) for q in range(1024)],
        ),
    )
    add(
        "v1 AwaitMessages, positions to the limit",
        "/popmq.v1.MessagingService/AwaitMessages",
        messaging_pb2.AwaitMessagesRequest(
            topic="wide",
            positions=[messaging_pb2.QueueOffset(queue_id=1, offset=10**12)] * (limit // 12),
        ),
    )
    add(
        "v1 QueryAssignment, held ids to the limit",
        "/popmq.v1.MessagingService/QueryAssignment",
        messaging_pb2.QueryAssignmentRequest(
            client_id="c", group="g", topic="wide", held_queue_ids=range(limit // 4)
        ),
    )
    add(
        "v1 CommitOffset, offsets to the limit",
        "/popmq.v1.MessagingService/CommitOffset",
        messaging_pb2.CommitOffsetRequest(
            group="g",
            topic="wide",
            offsets=[messaging_pb2.QueueOffset(queue_id=1, offset=1)] * (limit // 6),
        ),
    )
    add(
        "v1 AckLease, tokens to the limit",
        "/popmq.v1.MessagingService/AckLease",
        messaging_pb2.AckLeaseRequest(group="g", lease_tokens=["t" * 60] * (limit // 63)),
    )
    add(
        "v1 PullMessages, 1,024 of 1 MiB",
        "/popmq.v1.MessagingService/PullMessages",
        messaging_pb2.PullMessagesRequest(topic="big", queue_id=0, offset=0, max_messages=1024),
    )
    add(
        "admin PeekMessages, 256 of 1 MiB",
        "/popmq.v1.AdminService/PeekMessages",
        admin_pb2.PeekMessagesRequest(topic="big", max_messages=256),
    )
    add(
        "admin CreateGroup, subscriptions to the limit",
        "/popmq.v1.AdminService/CreateGroup",
        admin_pb2.CreateGroupRequest(
            name="g2", subscriptions=[admin_pb2.Subscription(topic="wide")] * (limit // 8)
        ),
    )
    add(
        "admin ResetOffsets, offsets to the limit",
        "/popmq.v1.AdminService/ResetOffsets",
        admin_pb2.ResetOffsetsRequest(
            group="g", topic="wide", offsets={q: 0 for q in range(limit // 8)}
        ),
    )
    garbage = os.urandom(limit)
    for method in (
        "/popmq.v1.MessagingService/SendMessages",
        "/popmq.v1.AdminService/PeekMessages",
    ):
        raw = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        attacks.append(
            (f"random bytes to {method.rsplit('/', 1)[1]}", _raw(raw, garbage), len(garbage))
        )
    endpoints = v2.Endpoints(
        scheme=v2.IPv4,
        addresses=[v2.Address(host="10.0.0.1", port=8081)] * (limit // 16),
    )
    add(
        "v2 QueryRoute, addresses to the limit",
        "/apache.rocketmq.v2.MessagingService/QueryRoute",
        v2s.QueryRouteRequest(topic=v2.Resource(name="wide"), endpoints=endpoints),
        metadata=_V2_META,
    )
    add(
        "v2 SendMessage, tiny messages to the limit",
        "/apache.rocketmq.v2.MessagingService/SendMessage",
        v2s.SendMessageRequest(messages=[_v2_message(b"x", n) for n in range(limit // 60)]),
        metadata=_V2_META,
    )
    add(
        "v2 AckMessage, entries to the limit",
        "/apache.rocketmq.v2.MessagingService/AckMessage",
        v2s.AckMessageRequest(
            group=v2.Resource(name="g"),
            topic=v2.Resource(name="wide"),
            entries=[v2s.AckMessageEntry(message_id="m", receipt_handle="h" * 60)] * (limit // 70),
        ),
        metadata=_V2_META,
    )
    add(
        "v2 QueryAssignment, addresses to the limit",
        "/apache.rocketmq.v2.MessagingService/QueryAssignment",
        v2s.QueryAssignmentRequest(
            topic=v2.Resource(name="wide"), group=v2.Resource(name="g"), endpoints=endpoints
        ),
        metadata=_V2_META,
    )
    return attacks


def _raw(call: Any, payload: bytes) -> Callable[[], Any]:
    return lambda: call(payload, timeout=120)


def _run_attack(name: str, call: Callable[[], Any], size: int, ping: Ping, pid: int) -> Row:
    ping.settle(time.monotonic())
    start = time.monotonic()
    try:
        call()
        status = "OK"
    except grpc.RpcError as exc:
        status = exc.code().name
    end = time.monotonic()
    # Work the server does after answering (waking held calls, freeing the request) shows
    # in the pings that start just after: count two ping periods past the answer.
    after = end + 2 * _PING_EVERY_S
    ping.settle(after)
    worst, count = ping.worst(start, after)
    return Row(name, size, status, end - start, worst * 1000, count, _rss_mb(pid))


def _held_awaits(
    endpoint: str, v1: messaging_pb2_grpc.MessagingServiceStub, ping: Ping, pid: int, held: int
) -> list[Row]:
    rows = []
    for queues, label in ((range(1024), "every queue"), ((1023,), "a queue not sent to")):
        channels = [grpc.insecure_channel(endpoint) for _ in range(max(1, held // 100))]
        stubs = [messaging_pb2_grpc.MessagingServiceStub(c) for c in channels]
        request = messaging_pb2.AwaitMessagesRequest(
            topic="wide",
            positions=[messaging_pb2.QueueOffset(queue_id=q, offset=10**9) for q in queues],
        )
        request.long_polling_timeout.FromSeconds(30)
        futures = [
            stubs[n % len(stubs)].AwaitMessages.future(request, timeout=60) for n in range(held)
        ]
        time.sleep(3 + held / 500)  # let the server hold them all
        rows.append(
            _run_attack(
                f"{held} held AwaitMessages on {label}, then one send",
                lambda: v1.SendMessages(
                    messaging_pb2.SendMessagesRequest(messages=[_v1_message(b"w")]),
                    timeout=120,
                ),
                0,
                ping,
                pid,
            )
        )
        for future in futures:
            future.cancel()
        for channel in channels:
            channel.close()
    return rows


def measure(*, quick: bool) -> list[Row]:
    with tempfile.TemporaryDirectory() as tmp, _server(Path(tmp) / "data") as (endpoint, pid):
        channel = grpc.insecure_channel(
            endpoint, options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)]
        )
        admin = admin_pb2_grpc.AdminServiceStub(channel)
        v1 = messaging_pb2_grpc.MessagingServiceStub(channel)
        admin.CreateTopic(admin_pb2.CreateTopicRequest(name="wide", queues=1024))
        admin.CreateTopic(admin_pb2.CreateTopicRequest(name="big", queues=1))
        admin.CreateGroup(admin_pb2.CreateGroupRequest(name="g"))
        for _ in range(4 if quick else 64):
            v1.SendMessages(
                messaging_pb2.SendMessagesRequest(
                    messages=[
                        messaging_pb2.OutgoingMessage(topic="big", body=os.urandom(1024 * 1024))
                    ]
                ),
                timeout=60,
            )
        ping = Ping(endpoint)
        try:
            ping.settle(time.monotonic())
            rows = [
                _run_attack(name, call, size, ping, pid) for name, call, size in _attacks(channel)
            ]
            rows += _held_awaits(endpoint, v1, ping, pid, 300 if quick else 2000)
        finally:
            ping.close()
            channel.close()
    return rows


def render(rows: list[Row]) -> str:
    lines = [
        "| attack | request | answer | attack took | worst ping | server RSS after |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        size = f"{row.request_bytes / 1024 / 1024:.1f} MiB" if row.request_bytes else "-"
        lines.append(
            f"| {row.attack} | {size} | {row.status} | {row.attack_s * 1000:.0f} ms "
            f"| {row.worst_ping_ms:.0f} ms | {row.server_rss_mb:.0f} MB |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="CI-sized held counts")
    parser.add_argument("--json", action="store_true", help="print rows as JSON")
    parser.add_argument("--ping", metavar="ENDPOINT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ping:
        ping_main(args.ping)
        return
    rows = measure(quick=args.quick)
    print(json.dumps([asdict(r) for r in rows], indent=1) if args.json else render(rows))


if __name__ == "__main__":
    main()
