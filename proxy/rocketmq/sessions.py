"""Connected RocketMQ 5 clients, by the client id they send in `x-mq-client-id`.

A session is created by the first call that carries a client id and lives while the client
calls (heartbeats every 10 s) or keeps its Telemetry stream open; NotifyClientTermination or
`client_idle_s` of silence ends it, and `on_end` hears of it (membership.py then unregisters
the client from the consumer registry). Everything runs on the server's event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from popmq._gen.apache.rocketmq.v2 import definition_pb2 as pb


@dataclass(slots=True)
class ClientSession:
    """What the proxy knows about one client."""

    client_id: str
    last_seen: float
    """time.monotonic() of the client's last call."""
    client_type: int = pb.CLIENT_TYPE_UNSPECIFIED
    group: str = ""
    settings: pb.Settings | None = None
    """The settings the client last reported over Telemetry."""
    queried_topics: set[str] = field(default_factory=set)
    """Topics it asked assignments for that its settings do not list (a later subscribe;
    clients resend settings only every 5 minutes). Cleared by each settings frame."""
    streams: int = 0
    """Open Telemetry streams; a client with one open is alive even when silent."""
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the session ends: its Telemetry streams finish."""
    settings_reply: Any = None
    """A Node.js client's last settings reply (a TelemetryCommand), kept to send again
    (telemetry.py `Telemetry.nudge` says why); None for other clients."""
    settings_replied_at: float = 0.0
    """time.monotonic() of that reply."""
    resend: asyncio.Event = field(default_factory=asyncio.Event)
    """Set to have the client's Telemetry stream send `settings_reply` again."""
    resend_timer: asyncio.TimerHandle | None = None
    """The pending `resend` of a nudge, restarted by each nudge."""

    def topics(self) -> list[str]:
        """Topics the client consumes, once each: its settings' subscriptions, then queried
        ones."""
        topics: dict[str, None] = {}
        if self.settings is not None and self.settings.HasField("subscription"):
            topics = dict.fromkeys(e.topic.name for e in self.settings.subscription.subscriptions)
        topics.update(dict.fromkeys(sorted(self.queried_topics.difference(topics))))
        return list(topics)


class Sessions:
    """The connected clients, by client id."""

    def __init__(
        self, idle_s: float, on_end: Callable[[ClientSession], None] | None = None
    ) -> None:
        self._idle_s = idle_s
        self._on_end = on_end
        # client id -> session; guarded by running on one event loop.
        self._sessions: dict[str, ClientSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def touch(
        self, client_id: str, *, client_type: int | None = None, group: str | None = None
    ) -> ClientSession:
        """The client's session (created on first sight), marked as seen now."""
        session = self._sessions.get(client_id)
        if session is None:
            session = ClientSession(client_id, time.monotonic())
            self._sessions[client_id] = session
        session.last_seen = time.monotonic()
        if client_type is not None and client_type != pb.CLIENT_TYPE_UNSPECIFIED:
            session.client_type = client_type
        if group:
            session.group = group
        return session

    def get(self, client_id: str) -> ClientSession | None:
        return self._sessions.get(client_id)

    def is_live(self, client_id: str) -> bool:
        session = self._sessions.get(client_id)
        return session is not None and (
            session.streams > 0 or time.monotonic() - session.last_seen < self._idle_s
        )

    def remove(self, client_id: str, *, notify: bool = True) -> ClientSession | None:
        """End a session: its Telemetry streams are told to finish (and `on_end`, unless
        not `notify`)."""
        session = self._sessions.pop(client_id, None)
        if session is not None:
            session.closed.set()
            if session.resend_timer is not None:
                session.resend_timer.cancel()
            if notify and self._on_end is not None:
                self._on_end(session)
        return session

    def idle(self) -> list[str]:
        """Clients silent for longer than the idle limit, with no Telemetry stream open."""
        limit = time.monotonic() - self._idle_s
        return [
            s.client_id for s in self._sessions.values() if s.streams == 0 and s.last_seen <= limit
        ]

    def next_idle_in(self) -> float | None:
        """Seconds until the next client may become idle (None without sessions)."""
        candidates = [s.last_seen for s in self._sessions.values() if s.streams == 0]
        if not candidates:
            return None
        return max(0.0, min(candidates) + self._idle_s - time.monotonic())

    def close_all(self) -> None:
        """Server shutdown: every session ends, but the clients did not leave (in a cluster
        they go on through another proxy), so `on_end` is not told."""
        for client_id in list(self._sessions):
            self.remove(client_id, notify=False)
