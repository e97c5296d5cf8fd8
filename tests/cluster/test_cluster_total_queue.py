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

from tests.chaos.checker import CheckConfig, CheckResult, History, SendRecord, check, evaluate
from tests.chaos.faults import CallRecord, DiskFull, FaultWindow


def test_failed_calls_are_put_down_to_the_fault_they_overlap_and_disk_full_is_checked() -> None:
    history = History()
    history.faults += [
        FaultWindow("etcd-kill", 100.0, 104.0),
        FaultWindow("disk-full", 120.0, 128.0),
    ]
    history.failed_calls += [
        CallRecord("send", 99.0, 100.5, "UNAVAILABLE"),  # cut off by the kill
        CallRecord("pop", 108.0, 108.5, "UNAVAILABLE"),  # within 5 s of its end
        CallRecord("ack", 110.0, 110.1, "UNAVAILABLE"),  # later: no fault's
        CallRecord("send", 119.0, 125.0, "UNAVAILABLE"),  # overlaps both: the latest
    ]
    # Global queues 0, 1 on b1 and 2, 3 on b2; b1 is full from 121 until 128.
    history.send_log += [
        SendRecord(121.5, 121.6, 2),
        SendRecord(122.0, 122.1, 0),  # stored on the full broker: a violation
        SendRecord(127.9, 128.2, 0),  # ended after the space returned: fine
        SendRecord(128.5, 128.7, 1),  # the first send stored on it once freed
    ]
    history.processed_log += [(121.0, 0), (123.0, 1), (124.0, 2), (129.0, 0)]
    full = DiskFull(broker="b1", began=120.0, full_at=121.0, freed_at=128.0)
    result = CheckResult(config=CheckConfig(cluster=True, disk_fulls=1), seed=0, data_dir="")
    result.disk_fulls = [full]
    result.queue_brokers = ["b1", "b1", "b2", "b2"]
    result.kills_by_kind = {"etcd-kill": 1, "disk-full": 1}
    evaluate(history, result)
    assert result.errors_by_fault == {
        "disk-full": {"send UNAVAILABLE": 1},
        "etcd-kill": {"pop UNAVAILABLE": 1, "send UNAVAILABLE": 1},
        "outside faults": {"ack UNAVAILABLE": 1},
    }
    assert (full.stored_while_full, full.processed_while_full) == (1, 2)
    assert full.resumed_s == pytest.approx(0.2)
    result.drained, result.clean_stop_exit_code = True, 0
    assert result.violations == ["disk full: b1 stored 1 sends while full"]
    summary = result.summary()
    assert "    etcd-kill x1: pop UNAVAILABLE=1, send UNAVAILABLE=1" in summary
    assert "first send stored on it 0.20s after the space returned" in summary


@pytest.mark.slow
@pytest.mark.timeout(300)
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
        disk_fulls=1,
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
        "disk-full": 1,
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
