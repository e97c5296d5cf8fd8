"""Console logins: server-side sessions and the login-failure limit.

A login makes a `Session`: a random id (32 bytes from `secrets`, the only thing the
browser holds, in an HttpOnly SameSite=Strict cookie), the user's access key and type as
they were checked, a CSRF token for its forms, and its times. The secret key the user
typed is checked once and never kept: not here, not in the cookie, not in a log.

Every request looks its session up again (`SessionStore.get`), which ends it when it has
been idle `session_idle_s` or lived `session_max_s`; the app then checks the user still
exists and is enabled (a disabled or deleted user's session ends at its next request).

`LoginLimiter` refuses logins from a source, or for an access key, after
`MAX_FAILURES` failures within `WINDOW_S`, until the oldest of them leaves the window:
guessing a secret over HTTP costs a minute per few tries.

Everything runs on the event loop, in memory: dict reads and writes, no I/O. Sessions
are the process's (a restart logs everyone out; each proxy of a cluster has its own).
"""

from __future__ import annotations

import collections
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from popmq.security.model import UserType

COOKIE = "popmq_console"
"""The session cookie's name over plain HTTP (loopback)."""
SECURE_COOKIE = "__Host-popmq_console"
"""Its name over HTTPS: the `__Host-` prefix makes browsers accept it only with Secure,
Path=/ and no Domain, so no other host or path can plant or read it."""
MAX_FAILURES = 5
"""Failed logins from one source or for one access key within WINDOW_S, at most."""
WINDOW_S = 60.0
_MAX_SESSIONS = 10_000
"""Sessions kept at most; past it the oldest ends (a flood of logins cannot grow memory)."""
_MAX_TRACKED = 10_000
"""Sources and access keys whose failures are remembered at most."""


@dataclass(slots=True)
class Session:
    """One login."""

    id: str = field(repr=False)
    access_key: str
    """"" when authentication is off (the anonymous session)."""
    user_type: UserType
    source: str
    """The browser's address at login, as audit lines show it ("ipv4:127.0.0.1:51234")."""
    csrf: str = field(repr=False)
    """The token every form and htmx request of this session carries."""
    created: float
    last_seen: float


class SessionStore:
    """Live sessions by id (see the module docstring).

    Args:
        idle_s: A session unused this long ends.
        max_s: A session ends this long after it began.
        clock: Monotonic seconds (a seam for tests).
    """

    def __init__(
        self, *, idle_s: float, max_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._idle_s = idle_s
        self._max_s = max_s
        self._clock = clock
        # Guarded by the event loop (one thread): id -> session, oldest first.
        self._sessions: collections.OrderedDict[str, Session] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self, access_key: str, user_type: UserType, source: str) -> Session:
        now = self._clock()
        while len(self._sessions) >= _MAX_SESSIONS:
            self._sessions.popitem(last=False)
        session = Session(
            id=secrets.token_urlsafe(32),
            access_key=access_key,
            user_type=user_type,
            source=source,
            csrf=secrets.token_urlsafe(32),
            created=now,
            last_seen=now,
        )
        self._sessions[session.id] = session
        return session

    def get(self, session_id: str) -> Session | None:
        """The live session of `session_id` (its last use now), or None; an expired one
        ends here."""
        session = self._sessions.get(session_id)
        if session is None:
            return None
        now = self._clock()
        if now - session.last_seen > self._idle_s or now - session.created > self._max_s:
            del self._sessions[session_id]
            return None
        session.last_seen = now
        return session

    def end(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    def end_user(self, access_key: str) -> int:
        """End every session of `access_key`; how many ended."""
        ids = [s.id for s in self._sessions.values() if s.access_key == access_key]
        for session_id in ids:
            del self._sessions[session_id]
        return len(ids)


class LoginLimiter:
    """Failed logins per source and per access key (see the module docstring).

    Args:
        clock: Monotonic seconds (a seam for tests).
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        # Guarded by the event loop: ("source" | "key", value) -> times of recent failures.
        self._failures: collections.OrderedDict[tuple[str, str], collections.deque[float]] = (
            collections.OrderedDict()
        )

    def retry_after(self, source_ip: str, access_key: str) -> float:
        """Seconds until a login from `source_ip` for `access_key` may be tried; 0: now."""
        now = self._clock()
        wait = 0.0
        for key in (("source", source_ip), ("key", access_key)):
            times = self._recent(key, now)
            if len(times) >= MAX_FAILURES:
                wait = max(wait, times[0] + WINDOW_S - now)
        return wait

    def failed(self, source_ip: str, access_key: str) -> None:
        now = self._clock()
        for key in (("source", source_ip), ("key", access_key)):
            times = self._recent(key, now)
            times.append(now)
            self._failures[key] = times
            self._failures.move_to_end(key)
        while len(self._failures) > _MAX_TRACKED:
            self._failures.popitem(last=False)

    def _recent(self, key: tuple[str, str], now: float) -> collections.deque[float]:
        times = self._failures.get(key)
        if times is None:
            return collections.deque(maxlen=MAX_FAILURES)
        while times and times[0] <= now - WINDOW_S:
            times.popleft()
        return times
