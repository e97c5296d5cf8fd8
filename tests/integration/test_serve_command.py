"""`popmq serve` as users run it: a subprocess that prints its port and stops on SIGTERM."""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from popmq import Admin, Producer, SimpleConsumer


def _start(
    data_dir: Path, *, soft_file_limit: int = 0, **env: str
) -> tuple[subprocess.Popen[str], str, str]:
    """The server process, its endpoint, and what it printed until it listened; started
    with `soft_file_limit` as its soft limit on open files if given."""

    def limit() -> None:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft_file_limit, hard))

    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "popmq.cli",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            str(data_dir),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
        preexec_fn=limit if soft_file_limit else None,
    )
    assert process.stdout is not None
    deadline = time.monotonic() + 60
    printed = ""
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        printed += line
        match = re.search(r"listening on (127\.0\.0\.1:(\d+))", line)
        if match:
            assert int(match.group(2)) > 0
            return process, match.group(1), printed
        if not line and process.poll() is not None:
            break
    process.kill()
    raise AssertionError("server did not print its listening line")


def test_serve_prints_real_port_and_shuts_down_gracefully_on_sigterm(tmp_path: Path) -> None:
    process, endpoint, printed = _start(tmp_path / "data")
    assert "(event loop: uvloop)" in printed  # the default (ServerConfig.event_loop)
    try:
        with Admin(endpoint) as admin:
            admin.create_topic("orders", queues=2)
        with Producer(endpoint) as producer:
            producer.send("orders", b"kept")
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    # The store was closed cleanly: a new server on the same dir has the message.
    process, endpoint, _ = _start(tmp_path / "data")
    try:
        with SimpleConsumer(endpoint, group="g", topic="orders") as consumer:
            (msg,) = consumer.receive(wait_s=5)
            assert msg.body == b"kept"
            consumer.ack(msg)
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
    assert process.returncode == 0


def test_serve_runs_on_asyncios_own_loop_when_configured(tmp_path: Path) -> None:
    process, endpoint, printed = _start(tmp_path / "data", POPMQ_SERVER_EVENT_LOOP="asyncio")
    assert "(event loop: asyncio)" in printed
    try:
        with Admin(endpoint) as admin:
            admin.create_topic("orders", queues=2)
        with Producer(endpoint) as producer:
            producer.send("orders", b"on asyncio")
        with SimpleConsumer(endpoint, group="g", topic="orders") as consumer:
            (msg,) = consumer.receive(wait_s=5)
            assert msg.body == b"on asyncio"
            consumer.ack(msg)
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output


def test_serve_raises_its_open_file_limit_to_the_hard_one(tmp_path: Path) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY or hard < 512:
        pytest.skip(f"the hard limit on open files here ({hard}) leaves no room below it")
    process, _, printed = _start(tmp_path / "data", soft_file_limit=256)
    try:
        limits = Path(f"/proc/{process.pid}/limits").read_text()
        (line,) = [row for row in limits.splitlines() if row.startswith("Max open files")]
        assert line.split()[3:5] == [str(hard), str(hard)]
        assert f"raised the open-file limit from 256 to {hard}" in printed
    finally:
        # As soon as the listening line is read: the stop handlers are installed before it.
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output


def test_serve_refuses_a_bad_listen_address(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "popmq.cli",
            "serve",
            "--listen",
            "nonsense",
            "--data-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "HOST:PORT" in result.stderr


def test_stopping_answers_held_long_polls_at_once(tmp_path: Path) -> None:
    import threading

    from tests.support.server_thread import ServerThread

    server = ServerThread(tmp_path / "data")
    endpoint = server.start()
    with Admin(endpoint) as admin:
        admin.create_topic("orders", queues=1)
    outcome: list[object] = []
    with SimpleConsumer(endpoint, group="g", topic="orders") as consumer:

        def poll() -> None:
            try:
                outcome.append(consumer.receive(wait_s=20))
            except Exception as exc:  # noqa: BLE001 - any end of the call is recorded
                outcome.append(exc)

        worker = threading.Thread(target=poll)
        worker.start()
        deadline = time.monotonic() + 5
        while server.sync(lambda: server.broker.polling.held) == 0:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        started = time.monotonic()
        server.stop()
        worker.join(timeout=10)
        assert time.monotonic() - started < 5  # not the 20 s the poll asked for
    assert outcome == [[]]
