"""Loopback ports for processes a test starts on an address chosen up front (so that a
restart keeps it): etcd, `popmq broker`, `popmq proxy`."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
