"""Console sessions end when idle or too old; login failures are limited per source and per
access key within a sliding minute."""

from __future__ import annotations

from popmq.console.sessions import MAX_FAILURES, WINDOW_S, LoginLimiter, SessionStore
from popmq.security.model import UserType


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_session_ends_when_idle_or_too_old_and_use_keeps_it_alive() -> None:
    clock = _Clock()
    store = SessionStore(idle_s=10, max_s=25, clock=clock)
    session = store.create("app", UserType.NORMAL, "ipv4:127.0.0.1:5000")
    assert len(session.id) >= 43 and session.csrf != session.id  # 32 random bytes each
    for _ in range(2):
        clock.now += 9
        assert store.get(session.id) is session  # used within the idle time
    clock.now += 9  # 27 s old: past max_s, though used 9 s ago
    assert store.get(session.id) is None and len(store) == 0

    idle = store.create("app", UserType.NORMAL, "")
    clock.now += 10.5
    assert store.get(idle.id) is None
    assert store.get("not-a-session") is None


def test_ending_a_users_sessions_leaves_the_others() -> None:
    store = SessionStore(idle_s=60, max_s=600)
    mine = [store.create("app", UserType.NORMAL, "") for _ in range(2)]
    theirs = store.create("ops", UserType.SUPER, "")
    assert store.end_user("app") == 2
    assert [store.get(s.id) for s in mine] == [None, None]
    assert store.get(theirs.id) is theirs
    store.end(theirs.id)
    assert len(store) == 0


def test_failures_are_limited_per_source_and_per_key_within_a_sliding_window() -> None:
    clock = _Clock()
    limiter = LoginLimiter(clock=clock)
    for i in range(MAX_FAILURES):
        assert limiter.retry_after("10.0.0.1", "app") == 0
        limiter.failed("10.0.0.1", "app")
        clock.now += 1 if i < MAX_FAILURES - 1 else 0
    wait = limiter.retry_after("10.0.0.1", "app")
    assert wait == WINDOW_S - (MAX_FAILURES - 1)  # until the oldest failure leaves
    assert limiter.retry_after("10.0.0.2", "app") == wait  # the key is limited anywhere
    assert limiter.retry_after("10.0.0.1", "other") == wait  # and the source for any key
    assert limiter.retry_after("10.0.0.2", "other") == 0
    clock.now += wait
    assert limiter.retry_after("10.0.0.1", "app") == 0  # one failure left the window
    limiter.failed("10.0.0.1", "app")
    assert limiter.retry_after("10.0.0.1", "app") > 0
