"""The CLI whose stdout goes away (`| head`): quiet exit, and no popped message left behind.

A real `popmq` subprocess against the real server; the test plays `head`: it reads a little
of the child's stdout and closes the pipe while the child still has more to write (the
output is made larger than a pipe buffer, so the child cannot have finished writing).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from popmq import Admin, Message, Producer, SimpleConsumer
from popmq.cli.main import EXIT_BROKEN_PIPE

_REPO = Path(__file__).resolve().parents[2]
_PIPE_BUFFER = 64 * 1024
"""Linux's default pipe capacity: output beyond it blocks until the reader reads."""


def _spawn(endpoint: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "popmq.cli", *args, "--endpoint", endpoint],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=_REPO,
        env={**os.environ, "COLUMNS": "200"},
    )


def _finish(process: subprocess.Popen[bytes]) -> tuple[int, str]:
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # `head` exits: the child's next write fails with EPIPE
    err = process.stderr.read().decode()
    process.stderr.close()
    return process.wait(timeout=60), err


def test_message_peek_json_into_head_exits_quietly(endpoint: str) -> None:
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic("t", queues=1)
        producer.send_batch("t", [Message(b"x" * 16_000) for _ in range(16)])
    process = _spawn(endpoint, "message", "peek", "t", "--json")
    assert process.stdout is not None
    assert len(process.stdout.read(10)) == 10  # head -c 10
    code, err = _finish(process)
    assert code == EXIT_BROKEN_PIPE, err
    assert err == ""  # no traceback, no "Exception ignored" at interpreter exit


def test_receive_ack_into_head_acks_only_what_got_out_and_gives_the_rest_back(
    endpoint: str,
) -> None:
    total = 3000
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic("t", queues=1)
        admin.create_group("g")
        bodies = [f"m{n:05d}-" + "y" * 60 for n in range(total)]
        for at in range(0, total, 500):
            producer.send_batch("t", [Message(b.encode()) for b in bodies[at : at + 500]])
    assert total * 100 > 2 * _PIPE_BUFFER
    process = _spawn(endpoint, "receive", "g", "t", "--count", str(total), "--ack", "--wait", "5")
    assert process.stdout is not None
    seen = [process.stdout.readline().decode() for _ in range(2)]  # head -2
    seen_bodies = {line.rsplit("body=", 1)[1].strip() for line in seen}
    code, err = _finish(process)
    assert code == EXIT_BROKEN_PIPE, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err

    # Nothing stays invisible: what the CLI did not get out was nacked with no delay and
    # can be received again right away (as attempt 2); what it printed was acked.
    again: list[str] = []
    with SimpleConsumer(endpoint, group="g", topic="t") as consumer:
        while batch := consumer.receive(max_messages=32, invisible_duration_s=60, wait_s=3):
            again += [m.body.decode() for m in batch]
            consumer.ack(batch)
    assert again, "the CLI popped more than it could print; those must come back"
    assert not seen_bodies & set(again), "a message the reader saw was delivered again"
    assert len(set(again)) == len(again)
    with Admin(endpoint) as admin:
        rows = admin.get_group_lag("g", "t")
    assert [(r.retry, r.lag, r.inflight) for r in rows if not r.retry] == [(False, 0, 0)]
    assert all(r.inflight == 0 for r in rows), rows
