"""Where the milliseconds of one message go, from the producer's send to the consumer's receive.

Usage: python -m bench.latency_timeline [--rate 100] [--messages 600] [--ack-on-receive]

One producer sends single messages at a low, steady rate to a ``popmq serve`` of its own
(flush sync, a separate process, as the e2e-latency scenario runs it); one consumer keeps a
long-poll receive held on its PopStream (32 messages, 1 s wait, as the SDK does by default)
and acks what it got, with a second round trip or (``--ack-on-receive``) on the next receive.

Both processes stamp each step with ``time.perf_counter_ns`` (CLOCK_MONOTONIC on Linux:
one clock for both), the server through wrappers this module puts around the methods of
the path before running the CLI (the code under test carries no tracing). A step that
names no message (a flush, an fsync, a wake) belongs to the message whose window it falls
in; messages whose windows overlap another's are left out, so the rate must leave a gap
between messages (at 100 msg/s a message takes a few ms of a 10 ms period).

Prints, per step, the median and 90th percentile of the time since the step before it, and
the median time since the send was issued; then the end-to-end and send latencies. A hook
missing from the code under test (another version) leaves its step out.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import functools
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.peers.servers import read_port_line

_SEQ = struct.Struct(">Q")
_MAGIC = b"TLN1"
_TOPIC = "timeline"
_GROUP = "timeline"
_WARM_UP = 20
"""Messages sent first, not recorded (the first send and receive open their streams)."""

Event = tuple[int, str, int, int]
"""(perf_counter_ns, step, message sequence number or -1, a number the step reports)."""

_events: list[Event] = []


def _stamp(step: str, seq: int = -1, value: int = 0) -> None:
    _events.append((time.perf_counter_ns(), step, seq, value))


def _seq_of(body: bytes) -> int:
    if body[:4] != _MAGIC:
        return -1
    return int(_SEQ.unpack_from(body, 4)[0])


def _patch(owner: Any, name: str, make: Callable[[Any], Any]) -> None:
    """Replace ``owner.name`` with ``make(original)``; a name the code lacks is skipped."""
    original = getattr(owner, name, None)
    if original is None:
        print(f"timeline: no {owner.__name__}.{name}, its step is left out", file=sys.stderr)
        return
    setattr(owner, name, functools.wraps(original)(make(original)))


# --- server side ---------------------------------------------------------------------------


class _TracedContext:
    """A servicer context whose writes are stamped (pop answers and send answers)."""

    def __init__(self, context: Any, seqs: dict[int, int]) -> None:
        self._context = context
        self._seqs = seqs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    async def write(self, response: Any) -> None:
        kind, seq = _response_seq(response, self._seqs)
        if seq >= 0:
            _stamp(f"srv.{kind}.write.begin", seq)
        await self._context.write(response)
        if seq >= 0:
            _stamp(f"srv.{kind}.write.end", seq)


def _response_seq(response: Any, seqs: dict[int, int]) -> tuple[str, int]:
    """("pop" or "send", the message's sequence number), or ("", -1) for other answers."""
    if isinstance(response, bytes):
        return _encoded_seq(response, seqs)
    kind = response.WhichOneof("result")
    if kind == "pop" and response.pop.messages:
        return "pop", _seq_of(response.pop.messages[0].body)
    if kind == "send":
        return "send", seqs.get(response.request_id, -1)
    return "", -1


def _encoded_seq(response: bytes, seqs: dict[int, int]) -> tuple[str, int]:
    """`_response_seq` of an answer the server wrote as bytes: a pop answer holds the body
    (found by its magic), a send answer starts with its request_id (field 1, a varint)."""
    at = response.find(_MAGIC)
    if at >= 0:
        return "pop", int(_SEQ.unpack_from(response, at + len(_MAGIC))[0])
    if response[:1] != b"\x08":
        return "", -1
    request_id = shift = 0
    for byte in response[1:11]:
        request_id |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            break
    seq = seqs.get(request_id, -1)
    return ("send", seq) if seq >= 0 else ("", -1)


def _install_server_hooks() -> None:
    from popmq.broker_core.group_commit import GroupCommitWriter
    from popmq.broker_core.long_polling import LongPolling
    from popmq.broker_core.pop.reader import Reader
    from popmq.broker_core.store import Store
    from popmq.proxy import messaging, send_stream, stream_session

    def session_init(original: Any) -> Any:
        def init(self: Any, *args: Any, **kwargs: Any) -> None:
            original(self, *args, **kwargs)
            self._timeline_seqs = {}
            self._context = _TracedContext(self._context, self._timeline_seqs)

        return init

    def on_send_request(original: Any) -> Any:
        def on_request(self: Any, request: Any) -> Any:
            has_send = getattr(request, "has_send", None)
            if has_send is None:
                has_send = request.HasField("send")
            if has_send and request.send.messages:
                seq = _seq_of(request.send.messages[0].body)
                self._timeline_seqs[request.request_id] = seq
                _stamp("srv.send.read", seq)
            return original(self, request)

        return on_request

    def start_send(original: Any) -> Any:
        def start(self: Any, request: Any) -> Any:
            coroutine = original(self, request)
            if request.messages:
                _stamp("srv.send.converted", _seq_of(request.messages[0].body))
            return coroutine

        return start

    batch_seqs: list[int] = []

    def job_seqs(job: Any) -> list[int]:
        """The messages a send's write job stores (read from its apply's closure)."""
        for cell in getattr(job.apply, "__closure__", None) or ():
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            if isinstance(value, list) and value and hasattr(value[0], "message"):
                return [_seq_of(p.message.body) for p in value]
            if isinstance(value, list) and value and hasattr(value[0], "record"):
                return [_seq_of(p.record.body) for p in value]
        return []

    def submit(original: Any) -> Any:
        def wrapped(self: Any, apply: Any, *, sync: bool, **kwargs: Any) -> Any:
            _stamp("srv.submit", value=int(sync))
            return original(self, apply, sync=sync, **kwargs)

        return wrapped

    def flush(original: Any) -> Any:
        def wrapped(self: Any) -> Any:
            batch_seqs[:] = [q for job in self._pending for q in job_seqs(job)]
            for seq in batch_seqs:
                _stamp("srv.flush", seq, len(self._pending))
            if not batch_seqs:
                _stamp("srv.flush", value=len(self._pending))
            return original(self)

        return wrapped

    def write(original: Any) -> Any:
        def wrapped(self: Any, batch: Any, *, sync: bool) -> Any:
            result = original(self, batch, sync=sync)
            for seq in batch_seqs or [-1]:
                _stamp("srv.written", seq, int(sync))
            return result

        return wrapped

    def sync_wal(original: Any) -> Any:
        def wrapped(self: Any) -> Any:
            inline = threading.current_thread() is threading.main_thread()
            seqs = list(batch_seqs) or [-1]
            for seq in seqs:
                _stamp("srv.fsync.begin", seq, int(inline))
            try:
                return original(self)
            finally:
                for seq in seqs:
                    _stamp("srv.fsync.end", seq, int(inline))

        return wrapped

    def complete(original: Any) -> Any:
        def wrapped(self: Any, jobs: Any, *args: Any, **kwargs: Any) -> Any:
            seqs = [q for job in jobs for q in job_seqs(job)] or [-1]
            for seq in seqs:
                _stamp("srv.complete", seq, len(jobs))
            return original(self, jobs, *args, **kwargs)

        return wrapped

    def notify(original: Any) -> Any:
        def wrapped(self: Any, *args: Any, **kwargs: Any) -> int:
            woken: int = original(self, *args, **kwargs)
            _stamp("srv.notify", value=woken)
            return woken

        return wrapped

    def pop_once(original: Any) -> Any:
        def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
            _stamp("srv.pop.begin")
            found, contended = original(self, *args, **kwargs)
            if found:
                for message in found:
                    _stamp("srv.pop.read", _seq_of(message.record.body))
            else:
                _stamp("srv.pop.empty")
            return found, contended

        return wrapped

    def launch(original: Any) -> Any:
        def wrapped(self: Any, entry: Any) -> Any:
            if self.method == "PopStream":
                _stamp("srv.pop.launch", value=int(entry.probe))
            return original(self, entry)

        return wrapped

    def queue(original: Any) -> Any:
        def wrapped(self: Any, answer: Any) -> Any:
            kind, seq = _response_seq(answer.response, getattr(self, "_timeline_seqs", {}))
            if seq >= 0:
                _stamp(f"srv.{kind}.queued", seq)
            return original(self, answer)

        return wrapped

    _patch(stream_session.StreamSession, "__init__", session_init)
    _patch(send_stream.SendStreamSession, "_on_request", on_send_request)
    _patch(messaging.MessagingServicer, "start_send", start_send)
    _patch(GroupCommitWriter, "submit", submit)
    _patch(GroupCommitWriter, "flush", flush)
    _patch(Store, "write", write)
    _patch(Store, "sync_wal", sync_wal)
    _patch(GroupCommitWriter, "_complete", complete)
    _patch(LongPolling, "notify", notify)
    _patch(Reader, "_pop_once", pop_once)
    _patch(stream_session.StreamSession, "_launch", launch)
    _patch(stream_session.StreamSession, "_queue", queue)


def _serve_traced(out: str, argv: list[str]) -> int:
    """Run ``popmq <argv>`` with the hooks in, and write the events to ``out`` at exit."""
    from popmq.cli.main import main

    _install_server_hooks()

    def dump() -> None:
        Path(out).write_text(json.dumps(_events))

    atexit.register(dump)
    return main(argv)


# --- client side ---------------------------------------------------------------------------


class _TracedCall:
    """An SDK stream call whose writes and reads are stamped."""

    def __init__(self, call: Any) -> None:
        self._call = call
        self._sends: dict[int, int] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._call, name)

    async def write(self, request: Any) -> None:
        seq = -1
        if type(request).__name__ == "SendStreamRequest" and request.send.messages:
            seq = _seq_of(request.send.messages[0].body)
            self._sends[request.request_id] = seq
            _stamp("cli.send.write.begin", seq)
        await self._call.write(request)
        if seq >= 0:
            _stamp("cli.send.write.end", seq)

    async def read(self) -> Any:
        answer = await self._call.read()
        kind = getattr(answer, "WhichOneof", lambda _: None)("result")
        if kind == "pop" and answer.pop.messages:
            _stamp("cli.pop.read", _seq_of(answer.pop.messages[0].body))
        elif kind == "send":
            _stamp("cli.send.answer", self._sends.pop(answer.request_id, -1))
        return answer


def _install_client_hooks() -> None:
    from popmq.sdk import _stream_call

    def init(original: Any) -> Any:
        def wrapped(self: Any, *args: Any, **kwargs: Any) -> None:
            original(self, *args, **kwargs)
            self.call = _TracedCall(self.call)

        return wrapped

    _patch(_stream_call._Call, "__init__", init)


@contextlib.contextmanager
def _server(trace_out: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    data = Path(tempfile.mkdtemp(prefix="popmq-timeline-"))
    (data / "data").mkdir(mode=0o700)
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), root) if p)
    command = [
        sys.executable, "-m", "bench.latency_timeline", "--serve-traced", str(trace_out), "--",
        "serve", "--listen", "127.0.0.1:0", "--data-dir", str(data / "data"), "--flush", "sync",
    ]  # fmt: skip
    log = (data / "server.log").open("wb")
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, env=env, cwd=data)
    try:
        port = read_port_line(proc, time.monotonic() + 60, "popmq listening on ", lambda: "")
        yield f"127.0.0.1:{port}", proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        log.close()


async def _drive(endpoint: str, args: argparse.Namespace) -> None:
    from popmq import AsyncAdmin, AsyncProducer, AsyncSimpleConsumer

    async with AsyncAdmin(endpoint) as admin:
        await admin.create_topic(_TOPIC, queues=8)
        await admin.create_group(_GROUP)
    pad = bytes(range(251)) * 5
    body_size = args.body_bytes - len(_MAGIC) - _SEQ.size
    received = 0
    stop = asyncio.Event()
    all_in = asyncio.Event()

    async def consume(consumer: AsyncSimpleConsumer) -> None:
        nonlocal received
        messages: list[Any] = []
        while not stop.is_set():
            if args.ack_on_receive:
                messages = await consumer.receive(32, 60.0, 1.0, ack=messages)
            else:
                messages = await consumer.receive(32, 60.0, 1.0)
            now = time.perf_counter_ns()
            for message in messages:
                _events.append((now, "cli.received", _seq_of(message.body), 0))
            received += len(messages)
            if received >= args.messages + _WARM_UP:
                all_in.set()
            if messages and not args.ack_on_receive:
                await consumer.ack(messages)

    async with contextlib.AsyncExitStack() as stack:
        producers = [
            await stack.enter_async_context(AsyncProducer(endpoint)) for _ in range(args.producers)
        ]
        consumers = [
            await stack.enter_async_context(
                AsyncSimpleConsumer(endpoint, group=_GROUP, topic=_TOPIC)
            )
            for _ in range(args.consumers)
        ]
        producer = producers[0]
        tasks = [asyncio.create_task(consume(consumer)) for consumer in consumers]
        # Warm up both streams (their first calls open them) before anything is recorded.
        for _ in range(_WARM_UP):
            await producer.send(_TOPIC, b"warm-up")
            await asyncio.sleep(0.01)
        _events.clear()
        interval = 1.0 / args.rate
        start = time.perf_counter() + 0.05
        sends = []

        async def send(seq: int) -> None:
            body = _MAGIC + _SEQ.pack(seq) + (pad * (body_size // len(pad) + 1))[:body_size]
            _stamp("cli.send", seq)
            await producers[seq % len(producers)].send(_TOPIC, body)
            _stamp("cli.send.returned", seq)

        for seq in range(args.messages):
            delay = start + seq * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            sends.append(asyncio.create_task(send(seq)))
        await asyncio.gather(*sends)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_in.wait(), 10)
        stop.set()
        await asyncio.gather(*tasks)


STEPS = (
    ("cli.send", "producer.send called"),
    ("cli.send.write.begin", "SDK stream writer takes it"),
    ("cli.send.write.end", "grpc took the request (on the wire)"),
    ("srv.send.read", "server: SendStream read it"),
    ("srv.send.converted", "server: converted, validated"),
    ("srv.submit", "server: group-commit submit"),
    ("srv.flush", "server: flush starts"),
    ("srv.written", "server: WriteBatch written (no sync)"),
    ("srv.fsync.begin", "server: fsync begins"),
    ("srv.fsync.end", "server: fsync ends"),
    ("srv.complete", "server: batch completes (futures)"),
    ("srv.notify", "server: long polls notified"),
    ("srv.pop.begin", "server: woken pop reads (probe)"),
    ("srv.pop.launch", "server: pop started with bytes"),
    ("srv.pop.read", "server: pop read the message"),
    ("srv.pop.queued", "server: pop answer queued"),
    ("srv.pop.write.begin", "server: answer write begins"),
    ("srv.pop.write.end", "server: answer written"),
    ("cli.pop.read", "SDK: stream answer read"),
    ("cli.received", "receive() returned"),
)
SEND_STEPS = (
    ("srv.complete", "server: batch completes (futures)"),
    ("srv.send.queued", "server: send answer queued"),
    ("srv.send.write.begin", "server: answer write begins"),
    ("srv.send.write.end", "server: answer written"),
    ("cli.send.answer", "SDK: send answer read"),
    ("cli.send.returned", "producer.send returned"),
)


def _timelines(events: list[Event], steps: tuple[tuple[str, str], ...]) -> list[dict[str, int]]:
    """Per message, the time of each step found in order within its window."""
    events.sort()
    by_seq: dict[int, list[Event]] = {}
    for event in events:
        if event[2] >= 0:
            by_seq.setdefault(event[2], []).append(event)
    windows = []
    for seq, own in sorted(by_seq.items()):
        begin = (
            min(e[0] for e in own if e[1] == steps[0][0])
            if any(e[1] == steps[0][0] for e in own)
            else None
        )
        ends = [e[0] for e in own if e[1] == steps[-1][0]]
        if begin is None or not ends:
            continue
        windows.append((begin, min(ends), seq))
    windows.sort()
    result = []
    for i, (begin, end, seq) in enumerate(windows):
        # Another message's window overlaps: only the steps that name this one are its own.
        overlaps = any(w[1] > begin for w in windows[max(0, i - 50) : i]) or (
            i + 1 < len(windows) and windows[i + 1][0] < end
        )
        mine = (seq,) if overlaps else (-1, seq)
        found: dict[str, int] = {}
        at = begin
        lo = _first_index(events, begin)
        for name, _ in steps:
            for ns, step, eseq, _value in events[lo:]:
                if ns > end:
                    break
                if ns >= at and step == name and eseq in mine:
                    found[name] = ns
                    at = ns
                    break
        result.append(found)
    return result


def _first_index(events: list[Event], ns: int) -> int:
    lo, hi = 0, len(events)
    while lo < hi:
        mid = (lo + hi) // 2
        if events[mid][0] < ns:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _report(title: str, lines: list[dict[str, int]], steps: tuple[tuple[str, str], ...]) -> None:
    print(f"\n{title} ({len(lines)} messages; ms)\n")
    print(f"| step | since previous p50 | p90 | since {steps[0][0]} p50 |")
    print("|---|---|---|---|")
    first = steps[0][0]
    previous: str | None = None
    for name, text in steps:
        deltas = [
            (line[name] - line[previous]) / 1e6
            for line in lines
            if previous is not None and name in line and previous in line
        ]
        totals = [(line[name] - line[first]) / 1e6 for line in lines if name in line]
        if not totals:
            continue
        p50 = f"{statistics.median(deltas):.3f}" if deltas else "-"
        p90 = f"{_percentile(deltas, 0.9):.3f}" if deltas else "-"
        print(f"| {text} | {p50} | {p90} | {statistics.median(totals):.3f} |")
        previous = name


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve-traced"]:
        return _serve_traced(argv[1], argv[3:])
    parser = argparse.ArgumentParser(prog="python -m bench.latency_timeline", description=__doc__)
    parser.add_argument("--rate", type=float, default=100.0, help="messages per second")
    parser.add_argument("--messages", type=int, default=600)
    parser.add_argument("--body-bytes", type=int, default=1024)
    parser.add_argument("--ack-on-receive", action="store_true")
    parser.add_argument("--producers", type=int, default=1, help="sending in turn")
    parser.add_argument("--consumers", type=int, default=1)
    parser.add_argument("--raw", type=Path, help="write the merged events here (JSON)")
    args = parser.parse_args(argv)
    _install_client_hooks()
    with tempfile.TemporaryDirectory(prefix="popmq-timeline-") as tmp:
        trace_out = Path(tmp) / "server-events.json"
        with _server(trace_out) as (endpoint, _proc):
            asyncio.run(_drive(endpoint, args))
        began = min((e[0] for e in _events), default=0)
        server_events = [tuple(e) for e in json.loads(trace_out.read_text())]
    events: list[Event] = [*_events, *(e for e in server_events if e[0] >= began)]
    if args.raw is not None:
        args.raw.write_text(json.dumps(sorted(events)))
    load = os.getloadavg()
    print(f"rate {args.rate:g} msg/s, {args.messages} messages, load average {load[0]:.2f}")
    lines = _timelines(list(events), STEPS)
    _report("receive path: send called -> receive returned", lines, STEPS)
    e2e = sorted((line["cli.received"] - line["cli.send"]) / 1e6 for line in lines)
    all_e2e = _e2e(events)
    if all_e2e:
        print(
            f"\nend to end, all {len(all_e2e)} messages: p50 {_percentile(all_e2e, 0.5):.3f} "
            f"p90 {_percentile(all_e2e, 0.9):.3f} p99 {_percentile(all_e2e, 0.99):.3f} ms "
            f"(timeline rows: {len(e2e)})"
        )
    send_lines = _timelines(list(events), (("cli.send", ""), *SEND_STEPS))
    _report(
        "send path: send called -> send returned",
        send_lines,
        (("cli.send", "producer.send called"), *SEND_STEPS),
    )
    return 0


def _e2e(events: list[Event]) -> list[float]:
    sent = {e[2]: e[0] for e in events if e[1] == "cli.send"}
    got = {e[2]: e[0] for e in events if e[1] == "cli.received"}
    return sorted((got[s] - sent[s]) / 1e6 for s in sent if s in got)


if __name__ == "__main__":
    sys.exit(main())
