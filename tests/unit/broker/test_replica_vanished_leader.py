"""How long a follower goes on following a leader whose registration vanished
(broker/replication/replica.py, `follows_vanished_leader`): long enough for a leader whose
lease a resumed etcd revoked to register again, and no longer, since a leader cut from
etcd alone looks the same and its failover waits that long."""

from __future__ import annotations

import pytest

from popmq.broker.replication.replica import REGISTERS_AGAIN_S, follows_vanished_leader


@pytest.mark.parametrize("ttl_s", [3.0, 10.0, 30.0])
def test_a_speaking_leader_is_followed_while_it_may_register_again(ttl_s: float) -> None:
    assert follows_vanished_leader(now_s=100.0, heard_at=99.9, gone_since=None, ttl_s=ttl_s)
    assert follows_vanished_leader(now_s=100.0, heard_at=99.9, gone_since=99.0, ttl_s=ttl_s)


@pytest.mark.parametrize("ttl_s", [10.0, 30.0])
def test_the_extra_follow_is_capped_whatever_the_lease(ttl_s: float) -> None:
    gone_since = 100.0 - REGISTERS_AGAIN_S
    assert not follows_vanished_leader(
        now_s=100.0, heard_at=99.9, gone_since=gone_since, ttl_s=ttl_s
    )


def test_a_short_lease_caps_it_at_half_a_window() -> None:
    assert not follows_vanished_leader(now_s=100.0, heard_at=99.9, gone_since=98.5, ttl_s=3.0)


def test_a_silent_leader_is_left_at_once() -> None:
    assert not follows_vanished_leader(now_s=100.0, heard_at=96.0, gone_since=None, ttl_s=10.0)
