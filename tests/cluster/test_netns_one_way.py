"""One-way drops across a namespace's link (tests/support/netns.py `VethNamespace.drop`).

A TCP connection from inside the namespace to a listener on the host's end of the link, set
up before the rule: with packets *into* the namespace from the listener's port dropped, the
inside end's bytes still reach the host but the answer does not come back; with packets
*out* of it to that port dropped, the reverse. After `undrop()` TCP retransmits what was
held back and both bytes arrive: nothing was cut but the one direction.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.support.netns import VethNamespace, one_way_unavailable

_CLIENT = """
import socket, sys
host, port = sys.argv[1], int(sys.argv[2])
conn = socket.create_connection((host, port), timeout=30)
print("connected", flush=True)
sys.stdin.readline()
conn.sendall(b"ping")
conn.settimeout(float(sys.argv[3]))
try:
    print("got", conn.recv(4).decode(), flush=True)
except TimeoutError:
    print("nothing", flush=True)
conn.settimeout(30)
sys.stdin.readline()
print("got", conn.recv(4).decode(), flush=True)
"""
_SILENCE_S = 2.0
"""How long the inside end waits for an answer that must not come while the rule holds."""


@pytest.fixture
def namespace() -> Iterator[VethNamespace]:
    why = one_way_unavailable()
    if why is not None:
        pytest.skip(why)
    with VethNamespace() as made:
        yield made


class Pair:
    """A listener on the host's end and a connected client inside the namespace."""

    def __init__(self, namespace: VethNamespace) -> None:
        self.listener = socket.create_server((namespace.host_address, 0))
        self.port = self.listener.getsockname()[1]
        self.client = namespace.popen_python(
            ["-c", _CLIENT, namespace.host_address, str(self.port), str(_SILENCE_S)]
        )
        self.listener.settimeout(30)
        self.server, _ = self.listener.accept()
        self.server.settimeout(30)
        assert self._line() == "connected"

    def _line(self) -> str:
        assert self.client.stdout is not None
        return self.client.stdout.readline().strip()

    def tell_client(self) -> None:
        assert self.client.stdin is not None
        self.client.stdin.write("\n")
        self.client.stdin.flush()

    def client_says(self) -> str:
        return self._line()

    def close(self) -> None:
        if self.client.poll() is None:
            self.client.kill()
        self.client.communicate(timeout=30)
        self.server.close()
        self.listener.close()


@pytest.fixture
def pair(namespace: VethNamespace) -> Iterator[Pair]:
    made = Pair(namespace)
    try:
        yield made
    finally:
        made.close()


def test_packets_into_the_namespace_are_dropped_while_the_other_way_passes(
    namespace: VethNamespace, pair: Pair
) -> None:
    namespace.drop("in", src_port=pair.port)
    assert namespace.dropping
    pair.tell_client()  # it sends "ping" and waits for the answer
    assert pair.server.recv(4) == b"ping"  # out of the namespace: passes
    pair.server.sendall(b"pong")
    assert pair.client_says() == "nothing"  # into it: dropped
    namespace.undrop()
    assert not namespace.dropping
    pair.tell_client()
    assert pair.client_says() == "got pong"  # retransmitted once the rule is gone


def test_packets_out_of_the_namespace_are_dropped_while_the_other_way_passes(
    namespace: VethNamespace, pair: Pair
) -> None:
    namespace.drop("out", dst_port=pair.port)
    pair.server.sendall(b"pong")  # into the namespace: passes (read after its ping)
    pair.tell_client()
    assert pair.client_says() == "got pong"
    pair.server.settimeout(_SILENCE_S)
    with pytest.raises(TimeoutError):
        pair.server.recv(4)  # its ping: dropped
    namespace.undrop()
    pair.server.settimeout(30)
    assert pair.server.recv(4) == b"ping"


def test_a_drop_needs_a_port_within_range(namespace: VethNamespace) -> None:
    with pytest.raises(ValueError, match="src_port, dst_port"):
        namespace.drop("in")
    with pytest.raises(ValueError, match="70000 is not within"):
        namespace.drop("out", dst_port=70000)
    assert not namespace.dropping
