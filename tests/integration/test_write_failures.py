"""A failing write fails its RPCs clearly, loses nothing, and the server recovers."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from popmq import Admin, Producer, ResourceExhaustedError, SimpleConsumer
from popmq import UnavailableError as ClientUnavailableError
from popmq.broker_core.errors import UnavailableError
from tests.support.server_thread import ServerThread


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 48 MiB tmpfs: a real disk that fills up (needs root, as on our CI machines)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({result.stderr.strip()})")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_full_disk_fails_sends_keeps_reads_and_recovers_without_loss(small_disk: Path) -> None:
    ballast = small_disk / "ballast"
    ballast.write_bytes(b"\0" * 36 * 1024 * 1024)
    server = ServerThread(small_disk / "data")
    endpoint = server.start()
    try:
        with Admin(endpoint) as admin:
            admin.create_topic("t", queues=1)
        with SimpleConsumer(endpoint, group="g", topic="t") as consumer:
            assert consumer.receive(wait_s=0) == []  # the group and its retry queue exist
        acknowledged: list[bytes] = []
        with Producer(endpoint) as producer:
            with pytest.raises(ResourceExhaustedError, match="disk holding the store is full"):
                for i in range(1000):
                    body = b"%06d" % i + os.urandom(256 * 1024)
                    producer.send("t", body)
                    acknowledged.append(body)
            assert len(acknowledged) > 5
            with SimpleConsumer(endpoint, group="g", topic="t") as consumer:
                peek = consumer.receive(max_messages=2, invisible_duration_s=1, wait_s=1)
                assert [m.body for m in peek] == acknowledged[:2]  # reads keep working
            ballast.unlink()
            deadline = time.monotonic() + 10
            while True:
                try:
                    receipt = producer.send("t", b"after")
                    break
                except (ResourceExhaustedError, ClientUnavailableError):
                    assert time.monotonic() < deadline, "writes did not resume"
                    time.sleep(0.2)
            assert receipt.offset == len(acknowledged)  # the failed batch left no trace
        received: dict[bytes, int] = {}
        with SimpleConsumer(endpoint, group="g", topic="t") as consumer:
            while True:
                got = consumer.receive(max_messages=8, wait_s=3)
                if not got:
                    break
                for message in got:
                    received[message.body] = received.get(message.body, 0) + 1
                consumer.ack(got)
        assert set(received) == {*acknowledged, b"after"}
    finally:
        server.stop()


def test_injected_write_error_fails_the_send_with_unavailable_and_the_next_one_works(
    server: ServerThread,
) -> None:
    with Admin(server.endpoint) as admin:
        admin.create_topic("t", queues=1)
    store = server.broker.store
    real_write = store.write
    failures = [0]

    def flaky_write(batch, *, sync):  # type: ignore[no-untyped-def]
        if failures[0]:
            failures[0] -= 1
            raise UnavailableError("injected I/O error; nothing was written")
        return real_write(batch, sync=sync)

    store.write = flaky_write
    with Producer(server.endpoint) as producer:
        first = producer.send("t", b"one")
        failures[0] = 3  # every attempt of the producer's retry policy (3) fails
        with pytest.raises(ClientUnavailableError, match="injected I/O error"):
            producer.send("t", b"lost-in-flight")
        second = producer.send("t", b"two")
    assert (first.offset, second.offset) == (0, 1)
    with SimpleConsumer(server.endpoint, group="g", topic="t") as consumer:
        assert [m.body for m in consumer.receive(wait_s=2)] == [b"one", b"two"]
