"""How often a broker lets its clients ping a connection.

A broker's clients are the proxies, which ping every `[cluster] hop_keepalive_s` (1 s by
default, MIN_HOP_KEEPALIVE_S at the fastest) with or without calls so that a silent cut fails
their calls within seconds (cluster/quarantine.py), and its replicas. A gRPC server closes a
connection pinged more often than it allows (GOAWAY too_many_pings, after three pings too
soon with no data sent between), failing what was in flight on it; the server default here
(`connections.min_client_ping_interval_s`, 10 s) would do that to every idle proxy
connection. So a broker and a shard's replica allow pings at twice the fastest rate a proxy
may be set to, whatever their `[connections]` says: a broker does not know its proxies'
settings.
"""

from __future__ import annotations

import dataclasses

from popmq.coordination.config import MIN_HOP_KEEPALIVE_S
from popmq.runtime.config import ServerConfig

__all__ = ["peer_pings_allowed"]


def peer_pings_allowed(config: ServerConfig) -> ServerConfig:
    """`config` letting clients ping at least twice as often as any proxy may."""
    connections = config.connections
    allowed = MIN_HOP_KEEPALIVE_S / 2
    if connections.min_client_ping_interval_s <= allowed:
        return config
    return dataclasses.replace(
        config,
        connections=dataclasses.replace(connections, min_client_ping_interval_s=allowed),
    )
