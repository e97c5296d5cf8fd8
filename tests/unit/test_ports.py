"""The harness's up-front ports (tests/support/ports.py)."""

from __future__ import annotations

import socket

from tests.support.ports import free_port


def test_ports_are_distinct_and_below_the_kernels_ephemeral_range() -> None:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral_low = int(f.read().split()[0])
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert all(1024 < port < ephemeral_low for port in ports)


def test_a_port_someone_listens_on_is_skipped() -> None:
    taken = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", taken + 1))
        listener.listen()
        given = free_port()
        assert given != taken + 1


def test_a_port_claimed_by_another_process_is_skipped() -> None:
    # Another run of the suite (same worker block) holds its ports' claims while its servers
    # are down for a restart, when no probe would see them taken.
    import subprocess
    import sys

    taken = free_port()
    code = (
        "import sys, time; from tests.support.ports import _claim; "
        f"assert _claim({taken + 1}); print('held', flush=True); time.sleep(60)"
    )
    other = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "held"
        given = free_port()
        assert given != taken + 1
    finally:
        other.kill()
        other.wait()
        if other.stdout is not None:
            other.stdout.close()
