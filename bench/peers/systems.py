"""The systems of a side-by-side run, by name, and how each is started.

``popmq`` is `popmq serve` with sync flush (a send returns after its fsync). The Redis rows
differ only in ``appendfsync``: ``always`` matches popmq's durability (fsync before the
reply), ``everysec`` is Redis's default. NATS runs JetStream with file storage and its default
sync (the server fsyncs every 2 minutes, so an acked publish is not yet on disk: the row is
faster than a durability-matched one would be; nats-server 2.9 has no per-write sync option).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from bench.peers.servers import (
    NatsServer,
    PeerMissingError,
    PopmqServer,
    RedisServer,
    ServerProcess,
    find_binary,
)
from bench.peers.targets import NatsTarget, PopmqTarget, RedisTarget, Target

__all__ = [
    "ALL_SYSTEMS",
    "PEER_BINARIES",
    "Launched",
    "choose_systems",
    "launch",
]

ALL_SYSTEMS = ("popmq", "redis-always", "redis-everysec", "nats")
PEER_BINARIES = {
    "redis-always": "redis-server",
    "redis-everysec": "redis-server",
    "nats": "nats-server",
}


class Launched:
    """A started server and the client target pointing at it."""

    def __init__(self, server: ServerProcess, target: Target) -> None:
        self.server = server
        self.target = target


def choose_systems(wanted: Sequence[str], *, require_peers: bool) -> tuple[list[str], list[str]]:
    """The systems to run and a note for each peer skipped because it is not installed.

    Raises:
        PeerMissingError: ``require_peers`` and a peer's binary is missing.
    """
    chosen: list[str] = []
    notes: list[str] = []
    for name in wanted:
        binary = PEER_BINARIES.get(name)
        if binary is not None and find_binary(binary) is None:
            if require_peers:
                raise PeerMissingError(f"{binary} is not installed; run `make bench-peers`")
            notes.append(f"{name} skipped: {binary} is not installed (`make bench-peers`).")
            continue
        chosen.append(name)
    return chosen, notes


@contextlib.contextmanager
def launch(name: str, *, prepare: Callable[[Path], None] | None = None) -> Iterator[Launched]:
    """Start system ``name`` on a free loopback port with a fresh data dir; stop it after.

    ``prepare`` (popmq only) gets the empty data dir before the server starts.
    """
    if prepare is not None and name != "popmq":
        raise ValueError(f"prepare is for popmq's store only, not {name}")
    server: ServerProcess
    if name == "popmq":
        server = PopmqServer(flush="sync", prepare=prepare)
    elif name in ("redis-always", "redis-everysec"):
        server = RedisServer(appendfsync="always" if name == "redis-always" else "everysec")
    elif name == "nats":
        server = NatsServer()
    else:
        raise ValueError(f"unknown system {name!r}; known: {', '.join(ALL_SYSTEMS)}")
    with server:
        target: Target
        if isinstance(server, PopmqServer):
            target = PopmqTarget(server.endpoint, name)
        elif isinstance(server, RedisServer):
            target = RedisTarget(server.port, name)
        else:
            target = NatsTarget(server.port, name)
        yield Launched(server, target)
