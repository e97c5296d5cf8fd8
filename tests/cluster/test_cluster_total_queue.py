"""The kill -9 total-queue checker (tests/chaos/checker.py) in cluster mode, CI-sized.

etcd + 3 `popmq broker` + 2 `popmq proxy` subprocesses; producers and consumers spread over
the proxies; the nemesis kill -9s two brokers and one proxy (one at a time: kill, wait for
the lease to lapse, restart on the same address and data dir), kill -9s etcd and keeps it
down past the session TTL, SIGSTOPs etcd as long, SIGSTOPs a broker past the proxy's call
timeout, and fills a broker's data volume (a tmpfs; root, as CI runs; without it the run
says why and leaves that fault out) past its send floor for 8 s; half of the consumers
crash mid-batch now and then. Failed client calls are put down to the fault they overlap,
and the run must show what docs/cluster.md's failure table promises for each fault. Then
everything is drained, stopped with SIGTERM, started again and checked for redeliveries.
The full-size run is by hand:
``python -m tests.chaos.checker --cluster --help``. Run with ``-s`` to see the summary.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.checker import CheckConfig, CheckResult, History, SendRecord, check, evaluate
from tests.chaos.faults import CallRecord, DiskFull, FaultWindow, disk_full_unavailable


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
    # b3 missing 10 s after the etcd kill; b2 after an etcd pause is only reported.
    result.unregistered = [("etcd-kill", ["b3"]), ("disk-full", []), ("etcd-pause", ["b2"])]
    evaluate(history, result)
    assert result.errors_by_fault == {
        "disk-full": {"send UNAVAILABLE": 1},
        "etcd-kill": {"pop UNAVAILABLE": 1, "send UNAVAILABLE": 1},
        "outside faults": {"ack UNAVAILABLE": 1},
    }
    assert (full.stored_while_full, full.processed_while_full) == (1, 2)
    assert full.resumed_s == pytest.approx(0.2)
    result.drained, result.clean_stop_exit_code = True, 0
    assert result.violations == [
        "disk full: b1 stored 1 sends while full",
        "b3 not registered again 10 s after etcd-kill #1",
    ]
    summary = result.summary()
    assert "b3 after etcd-kill #1; b2 after etcd-pause #3 (of 3 such faults)" in summary
    assert result.sends_by_fault == {"disk-full": 4, "etcd-kill": 0}
    assert "    etcd-kill x1 (0 send calls): pop UNAVAILABLE=1, send UNAVAILABLE=1" in summary
    assert "first send stored on it 0.20s after the space returned" in summary
    # Sends went on for more than 30 s after the space returned, none on b1: a violation.
    history.send_log.append(SendRecord(160.0, 160.1, 2))
    history.send_log[2] = SendRecord(127.9, 128.2, 2)
    history.send_log[3] = SendRecord(128.5, 128.7, 3)
    evaluate(history, result)
    assert full.resumed_s is None
    assert "disk full: b1 stored no send within 30s of the space returning" in result.violations


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_cluster_loses_no_acknowledged_send_across_kills_and_etcd_and_broker_faults(
    tmp_path: Path,
) -> None:
    why = disk_full_unavailable()
    if why is not None:
        print(f"\nno disk-full fault in this run (the brokers' volumes are tmpfs mounts): {why}")
    disk_fulls = 1 if why is None else 0
    config = CheckConfig(
        cluster=True,
        # 40 s of sends at 60 a second: the faults (each 5 to 20 s, one after another) fall
        # within the production, so each kind's "no failed send" stands on sends.
        messages=2400,
        kills=2,
        proxy_kills=1,
        etcd_kills=1,
        etcd_pauses=1,
        broker_pauses=1,
        disk_fulls=disk_fulls,
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
    } | ({"disk-full": 1} if disk_fulls else {}), summary
    assert len(result.restarts_after_kill) == 3, summary
    # A killed process's registration lapses after its TTL (3 s), not much later.
    assert all(s <= config.session_ttl_s + 3 for s in result.lease_lapse_s), summary
    # What the failure table of docs/cluster.md promises, fault by fault. A send through a
    # killed broker moves on, and so does one refused by a full broker: no failed send. etcd
    # killed past the TTL: sends, pops and acks go on. A full broker still pops and acks:
    # no client error at all, and it stored no send while full (a violation otherwise).
    # Sends may fail for a proxy kill (the checker's clients have that one proxy only),
    # for a paused broker (a send in flight there fails once its in-doubt retries end) and
    # for a paused etcd (left as it was: test_cluster_etcd_pause.py judges that fault).
    errors = result.errors_by_fault
    for kind in ("broker", "etcd-kill", "disk-full", "outside faults"):
        failed_sends = {what: n for what, n in errors.get(kind, {}).items() if "send" in what}
        assert failed_sends == {}, f"{kind}: {failed_sends}\n{summary}"
    assert all(result.sends_by_fault[k] > 0 for k in ("broker", "etcd-kill")), summary
    assert errors["etcd-kill"] == {}, summary
    if disk_fulls:
        assert errors["disk-full"] == {}, summary
        assert result.sends_by_fault["disk-full"] > 0, summary
        (full,) = result.disk_fulls
        assert full.stored_while_full == 0 and full.processed_while_full > 0, summary
    assert result.abandoned_deliveries > 0, summary
    assert result.given_back_never_returned == [], summary
    assert result.lost == [], summary
    assert result.unexpected == [], summary
    assert result.offset_conflicts == [], summary
    assert result.drained, summary
    assert result.clean_stop_exit_code == 0, summary
    assert result.redelivered_after_clean_restart == [], summary
    assert result.ok, summary
