"""A replicated shard through an etcd paused (SIGSTOP) past the TTL, then resumed (real
etcd, replicas and proxy).

A resumed etcd revokes every lease at once, so the leader's registration is gone when it
asks for it back (a restarted etcd restores it: test_replication_etcd_outage.py). The
leader's in-sync follower heard from it all along, so it did not campaign, and the shard's
record shows nobody was elected since: the leader registers again under its term, same
epoch, without ever stopping leading. Every send through the proxy is acknowledged
meanwhile, and the follower, leading after a kill, holds every one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.test_replication_etcd_outage import (
    _assert_follower_holds,
    _log_has,
    _send_for,
    _topic_and_roles,
)
from tests.support.replicas import ReplicaCluster, in_sync_shard

pytestmark = pytest.mark.timeout(180)

TTL_S = 3
PAUSED_S = TTL_S + 4
"""Past the TTL: every lease has expired when etcd resumes."""


@pytest.fixture
def shard(tmp_path: Path) -> Iterator[ReplicaCluster]:
    with in_sync_shard(tmp_path / "cluster", session_ttl_s=TTL_S) as cluster:
        yield cluster


async def _send_through_pause(
    cluster: ReplicaCluster, endpoint: str
) -> tuple[list[str], list[str], float]:
    """Sends one message every 50 ms from before the pause to 5 s past the resume:
    (acknowledged ids, errors, when etcd resumed)."""
    sending = asyncio.create_task(_send_for(endpoint, 1 + PAUSED_S + 5, "p"))
    await asyncio.sleep(1)
    cluster.etcd.pause()
    try:
        await asyncio.sleep(PAUSED_S)
    finally:
        cluster.etcd.resume()
    resumed = time.monotonic()
    acked, errors = await sending
    return acked, errors, resumed


def test_a_shard_leader_keeps_its_term_through_an_etcd_pause_past_the_ttl(
    shard: ReplicaCluster,
) -> None:
    endpoint, leader, follower, epoch = _topic_and_roles(shard)

    acked, errors, resumed = asyncio.run(_send_through_pause(shard, endpoint))
    print(f"{len(acked)} sends acknowledged, {len(errors)} failed: {errors[:5]}")
    assert _log_has(shard, leader, "lost its leader lease", 1.0), shard.logs()
    assert _log_has(shard, leader, "holds its registration again", 10.0), shard.logs()
    print(f"registered again {time.monotonic() - resumed:.1f}s or less after the resume")
    assert not errors, errors[:5]
    assert len(acked) > PAUSED_S * 5, len(acked)
    leader_log = shard.processes[leader].log_path.read_text(errors="replace")
    assert "stops leading" not in leader_log, shard.logs()
    assert shard.leader("s1") == leader and shard.epoch("s1") == epoch
    # Created again (the resume revoked the old key), naming the term's epoch.
    registration, _, _ = shard.shard_keys("s1")
    assert registration is not None and registration.get("epoch") == epoch, registration
    # On its new lease: still there once a lease granted at the resume would have lapsed.
    time.sleep(TTL_S + 1)
    assert shard.leader("s1") == leader and shard.epoch("s1") == epoch
    assert shard.wait_in_sync("s1", 1, timeout_s=30) == [follower]
    after, errors = asyncio.run(_send_for(endpoint, 1.0, "c"))
    assert after and not errors, errors

    # Replicated: the follower, leading after a kill, has every acknowledged send.
    _assert_follower_holds(shard, endpoint, leader, follower, acked + after)
