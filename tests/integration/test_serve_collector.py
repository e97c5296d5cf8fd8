"""`popmq serve` with its start-up heap frozen (`[gc]`, the default) still collects the
garbage cycles its work makes: memory stays flat while clients come and go."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from popmq import Admin, Producer

_ROUNDS = 4
_CLIENTS_PER_ROUND = 25


def _start(data_dir: Path) -> tuple[subprocess.Popen[str], str, str]:
    """The server process, its endpoint and its metrics URL."""
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "popmq.cli", "serve", "--listen", "127.0.0.1:0"),
            *("--data-dir", str(data_dir), "--metrics-listen", "127.0.0.1:0"),
            # Python's young threshold, so that a few rounds of clients reach it: at the
            # default (10,000) a young collection needs ~500 connections' cycles.
            # test_collector.py bounds the garbage at the highest threshold.
            *("--set", "gc.young_threshold=700"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    endpoint = metrics = ""
    deadline = time.monotonic() + 60
    while not (endpoint and metrics) and time.monotonic() < deadline:
        line = process.stdout.readline()
        if found := re.search(r"popmq listening on (\S+)", line):
            endpoint = found.group(1)
        if found := re.search(r"popmq metrics on (\S+)", line):
            metrics = found.group(1)
        if not line and process.poll() is not None:
            break
    if not (endpoint and metrics):
        process.kill()
        raise AssertionError("server did not print its listening and metrics lines")
    return process, endpoint, metrics


def _gc_samples(url: str) -> tuple[float, float]:
    """(objects the collector freed in all, resident bytes) of the server."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    collected = resident = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "python_gc_objects_collected_total":
                collected += sample.value
            elif sample.name == "process_resident_memory_bytes":
                resident = sample.value
    return collected, resident


def test_a_frozen_server_collects_the_cycles_of_clients_that_come_and_go(tmp_path: Path) -> None:
    process, endpoint, metrics = _start(tmp_path / "data")
    try:
        with Admin(endpoint) as admin:
            admin.create_topic("orders", queues=1)
        rounds = []
        for _ in range(_ROUNDS):
            # A connection and its streams, closed, leave reference cycles in the server.
            for _ in range(_CLIENTS_PER_ROUND):
                with Producer(endpoint) as producer:
                    producer.send("orders", b"x")
            rounds.append(_gc_samples(metrics))
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    collected = [c for c, _ in rounds]
    resident = [r for _, r in rounds]
    # Cycles made after the freeze are found and freed, round after round...
    assert collected[-1] > collected[0] > 0
    # ...so the clients of the later rounds cost no more memory than the first round's did.
    assert resident[-1] - resident[0] < 16 * 2**20, resident
