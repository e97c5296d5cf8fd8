"""The kill -9 total-queue checker (tests/chaos/checker.py) in cluster mode, CI-sized.

etcd + 3 `popmq broker` + 2 `popmq proxy` subprocesses; producers and consumers spread over
the proxies; the nemesis kill -9s two brokers and one proxy (one at a time: kill, wait for
the lease to lapse, restart on the same address and data dir), kill -9s etcd and keeps it
down past the session TTL, SIGSTOPs etcd as long, and SIGSTOPs a broker past the proxy's
call timeout; half of the consumers crash mid-batch now and then. Then everything is
drained, stopped with SIGTERM, started again and checked for redeliveries. The full-size
run is by hand:
``python -m tests.chaos.checker --cluster --help``. Run with ``-s`` to see the summary.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.checker import CheckConfig, check

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_a_cluster_loses_no_acknowledged_send_across_kills_and_etcd_and_broker_faults(
    tmp_path: Path,
) -> None:
    config = CheckConfig(
        cluster=True,
        messages=800,
        kills=2,
        proxy_kills=1,
        etcd_kills=1,
        etcd_pauses=1,
        broker_pauses=1,
        producers=2,
        consumers=2,
        queues=2,
        send_rate=60,
        crashing_consumers=True,
        flush="sync",
        seed=20261127,
        data_dir=tmp_path,
        drain_timeout_s=60,
    )
    result = check(config)
    summary = result.summary()
    print()
    print(summary)
    assert result.kills_by_kind == {
        "broker": 2,
        "proxy": 1,
        "etcd-kill": 1,
        "etcd-pause": 1,
        "broker-pause": 1,
    }, summary
    assert len(result.restarts_after_kill) == 3, summary
    # A killed process's registration lapses after its TTL (3 s), not much later.
    assert all(s <= config.session_ttl_s + 3 for s in result.lease_lapse_s), summary
    assert result.acknowledged >= 0.9 * result.attempted, summary
    assert result.abandoned_deliveries > 0, summary
    assert result.given_back_never_returned == [], summary
    assert result.lost == [], summary
    assert result.unexpected == [], summary
    assert result.offset_conflicts == [], summary
    assert result.drained, summary
    assert result.clean_stop_exit_code == 0, summary
    assert result.redelivered_after_clean_restart == [], summary
    assert result.ok, summary
