"""What a checker run saw and what it concludes: the history of sends and deliveries, the
result with its findings and violations, and the evaluation of one from the other."""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from popmq import ReceivedMessage, SendReceipt
from tests.chaos.faults import (
    AFTERMATH_S,
    RESUME_WITHIN_S,
    CallRecord,
    DiskFull,
    FaultWindow,
    attribute_errors,
    sends_during,
)
from tests.chaos.replicated import Failover
from tests.support.server_process import KILLED, Incarnation

if TYPE_CHECKING:
    from tests.chaos.checker import CheckConfig

__all__ = [
    "CheckResult",
    "History",
    "SendRecord",
    "evaluate",
    "seconds_span",
    "span_text",
]


@dataclass(frozen=True, slots=True)
class SendRecord:
    """One send call as the producer saw it (monotonic times)."""

    began: float
    ended: float
    queue_id: int | None
    """The receipt's (global) queue id; None when the send failed."""


class History:
    """Everything the clients saw. Ids are ``p<producer>-<n>``; a message body is its id."""

    def __init__(self) -> None:
        self.attempted: set[str] = set()
        self.acknowledged: dict[str, tuple[int, int]] = {}
        """Id -> (queue, offset) from its send receipt."""
        self.indeterminate: set[str] = set()
        self.send_errors: Counter[str] = Counter()
        self.processed: Counter[str] = Counter()
        """Id -> deliveries that were processed (the consumer went on to ack them)."""
        self.abandoned: Counter[str] = Counter()
        """Id -> deliveries dropped unacked by a crashing consumer."""
        self.nacked: Counter[str] = Counter()
        """Id -> deliveries given back with a nack."""
        self.attempts: Counter[int] = Counter()
        """delivery_attempt -> processed deliveries with it."""
        self.max_attempt = 0
        self.pop_errors: Counter[str] = Counter()
        self.ack_errors: Counter[str] = Counter()
        self.nack_errors: Counter[str] = Counter()
        self.send_log: list[SendRecord] = []
        """Every send call, in the order they ended."""
        self.failed_calls: list[CallRecord] = []
        """Every client call that failed (sends, pops, acks, nacks)."""
        self.faults: list[FaultWindow] = []
        """Cluster mode: each fault of the nemesis, from its start until it was over."""
        self.processed_log: list[tuple[float, int]] = []
        """(monotonic time, global queue id) of each processed delivery."""

    def sending(self, ids: Iterable[str]) -> None:
        self.attempted.update(ids)

    def sent(self, ids: Sequence[str], receipts: Sequence[SendReceipt]) -> None:
        for message_id, receipt in zip(ids, receipts, strict=True):
            self.acknowledged[message_id] = (receipt.queue_id, receipt.offset)

    def send_failed(self, ids: Iterable[str], code: str) -> None:
        self.indeterminate.update(ids)
        self.send_errors[code] += 1

    def failed(self, call: CallRecord) -> None:
        self.failed_calls.append(call)

    def delivered(self, message: ReceivedMessage, into: Counter[str]) -> None:
        into[message.body.decode()] += 1
        self.max_attempt = max(self.max_attempt, message.delivery_attempt)
        if into is self.processed:
            self.attempts[message.delivery_attempt] += 1
            self.processed_log.append((time.monotonic(), message.queue_id))


@dataclass(slots=True)
class CheckResult:
    """What a run did and what the checker found; ``summary()`` prints it for humans."""

    config: CheckConfig
    seed: int
    data_dir: str
    attempted: int = 0
    acknowledged: int = 0
    indeterminate: int = 0
    indeterminate_appeared: int = 0
    send_errors: dict[str, int] = field(default_factory=dict)
    distinct_received: int = 0
    deliveries: int = 0
    duplicate_ids: int = 0
    duplicate_deliveries: int = 0
    max_delivery_attempt: int = 0
    delivery_attempts: dict[int, int] = field(default_factory=dict)
    crashing_consumers: int = 0
    abandoned_deliveries: int = 0
    abandoned_ids: int = 0
    nacked_deliveries: int = 0
    nacked_ids: int = 0
    given_back_never_returned: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    offset_conflicts: list[str] = field(default_factory=list)
    pop_errors: dict[str, int] = field(default_factory=dict)
    ack_errors: dict[str, int] = field(default_factory=dict)
    nack_errors: dict[str, int] = field(default_factory=dict)
    kills: int = 0
    kills_by_kind: dict[str, int] = field(default_factory=dict)
    incarnations: list[Incarnation] = field(default_factory=list)
    lease_lapse_s: list[float] = field(default_factory=list)
    """Cluster mode: per kill, seconds until etcd dropped the killed process."""
    errors_by_fault: dict[str, dict[str, int]] = field(default_factory=dict)
    """Cluster mode: fault kind -> "<op> <code>" -> failed client calls put down to it
    (faults.attribute_errors); "outside faults" holds the others."""
    sends_by_fault: dict[str, int] = field(default_factory=dict)
    """Cluster mode: fault kind -> send calls put down to it, failed or not."""
    disk_fulls: list[DiskFull] = field(default_factory=list)
    """Cluster mode: each disk-full fault with its findings (faults.DiskFull)."""
    queue_brokers: list[str] = field(default_factory=list)
    """Cluster mode: the broker of each global queue id of the topic."""
    unregistered: list[tuple[str, list[str]]] = field(default_factory=list)
    """Cluster mode: per etcd fault, broker pause and disk-full fault, the brokers etcd
    lacked 10 s after it (targets.ClusterTarget.unregistered)."""
    redelivered_deliveries: int = 0
    """Processed deliveries with a delivery attempt above 1."""
    failovers: list[Failover] = field(default_factory=list)
    """Replicated mode: each failover, timed (replicated.Failover)."""
    shard_of_queue: dict[int, str] = field(default_factory=dict)
    """Replicated mode: global queue id of the topic -> its shard."""
    send_calls: int = 0
    send_calls_acknowledged: int = 0
    longest_ack_gap_s: float = 0.0
    """Longest time without any acknowledged send, from the first send to the last."""
    send_latency_s: dict[str, float] = field(default_factory=dict)
    """p50, p99 and max of the send calls that were acknowledged."""
    logged_errors: dict[str, list[str]] = field(default_factory=dict)
    """Replicated mode: process -> the ERROR lines of its log."""
    produce_s: float = 0.0
    drain_s: float = 0.0
    total_s: float = 0.0
    drained: bool = False
    final_lag: int = -1
    final_inflight: int = -1
    clean_stop_exit_code: int | None = None
    redelivered_after_clean_restart: list[str] | None = None
    """What a pop returned after the clean stop and restart: ``id attempt=N queue@offset``."""

    @property
    def restarts_after_kill(self) -> list[Incarnation]:
        return [i for i in self.incarnations if i.after == KILLED]

    @property
    def violations(self) -> list[str]:
        """Broken promises. Sync flush: no acknowledged send lost and every given-back id
        returns. Both modes: no unexpected ids, the drain finishes, the stop is clean."""
        found: list[str] = []
        if self.config.flush == "sync" and self.lost:
            found.append(f"{len(self.lost)} acknowledged sends lost")
        if self.config.flush == "sync" and self.given_back_never_returned:
            found.append(
                f"{len(self.given_back_never_returned)} abandoned or nacked ids never came back"
            )
        if self.unexpected:
            found.append(f"{len(self.unexpected)} ids received that were never sent")
        if not self.drained:
            found.append(f"the drain did not finish within {self.config.drain_timeout_s:g}s")
        if self.clean_stop_exit_code != 0:
            found.append(f"the clean stop exited with {self.clean_stop_exit_code}")
        for failover in self.failovers:
            found += failover.problems
        for disk_full in self.disk_fulls:
            found += disk_full.notes
        found += [
            f"{', '.join(missing)} not registered again 10 s after {kind} #{n}"
            for n, (kind, missing) in enumerate(self.unregistered, 1)
            # Paused etcd's resume (every lease expired at once) is judged by its own tests
            # (test_cluster_etcd_pause.py): reported in the summary, not held against the run.
            if missing and kind != "etcd-pause"
        ]
        return found

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["config"] = {
            k: str(v) if isinstance(v, Path) else v for k, v in asdict(self.config).items()
        }
        data["violations"] = self.violations
        return data

    def _failover_lines(self) -> list[str]:
        ttl = self.config.session_ttl_s
        failovers = self.failovers

        def over(values: Iterable[float | None]) -> str:
            seen = list(values)
            known = [v for v in seen if v is not None]
            missing = len(seen) - len(known)
            return _stats(known) + (f" ({missing} never)" if missing else "")

        during = sum(f.sends for f in failovers)
        during_ok = sum(f.acknowledged for f in failovers)
        latency = self.send_latency_s
        return [
            "  failovers, seconds from the kill -9, SIGSTOP or cut of the leader:",
            *(f"    {f.line()}" for f in failovers),
            f"  new leader registered s: {over(f.leader_s for f in failovers)}",
            f"  shard takes sends again (its new leader stores one) s: "
            f"{over(f.takes_sends_s for f in failovers)}",
            f"  shard takes sends again through every proxy s: "
            f"{over(f.resumed_s for f in failovers)}; under 15 s: "
            f"{sum(1 for f in failovers if f.resumed_s is not None and f.resumed_s < 15)}"
            f"/{len(failovers)} (lease {ttl}s)",
            f"  first producer send stored on the shard s: "
            f"{over(f.traffic_send_s for f in failovers)}",
            f"  cluster-wide send availability: {self.send_calls_acknowledged}/{self.send_calls} "
            f"send calls acknowledged ({_percent(self.send_calls_acknowledged, self.send_calls)})"
            f", during failovers {during_ok}/{during} ({_percent(during_ok, during)}); longest "
            f"time without an acknowledged send {self.longest_ack_gap_s:.2f}s; acknowledged "
            f"send latency p50 {latency.get('p50', 0) * 1000:.0f}ms p99 "
            f"{latency.get('p99', 0) * 1000:.0f}ms max {latency.get('max', 0):.2f}s",
            "  ERROR lines in the processes' logs: "
            + (
                "; ".join(
                    f"{name} {len(lines)} (first: {lines[0][:160]})"
                    for name, lines in sorted(self.logged_errors.items())
                )
                or "none"
            ),
        ]

    def _fault_lines(self) -> list[str]:
        lines = [
            f"  failed client calls by fault (the latest fault a call overlaps, up to "
            f"{AFTERMATH_S:g}s after it ended):"
        ]
        for kind, counts in self.errors_by_fault.items():
            faults = self.kills_by_kind.get(kind)
            lines.append(
                f"    {kind}"
                + (f" x{faults}" if faults else "")
                + f" ({self.sends_by_fault.get(kind, 0)} send calls): "
                + (", ".join(f"{what}={n}" for what, n in counts.items()) or "none")
            )
        lines += [f"  disk full: {d.line()}" for d in self.disk_fulls]
        missing = [
            f"{', '.join(names)} after {kind} #{n}"
            for n, (kind, names) in enumerate(self.unregistered, 1)
            if names
        ]
        lines.append(
            "  brokers not registered again 10 s after an etcd fault, broker pause or disk "
            "full: "
            + ("; ".join(missing) or "none")
            + f" (of {len(self.unregistered)} such faults)"
        )
        return lines

    def summary(self) -> str:
        cfg = self.config
        restarts = self.restarts_after_kill
        redelivered = self.redelivered_after_clean_restart
        lines = [
            f"popmq total-queue check: flush={cfg.flush} messages={cfg.messages} "
            f"producers={cfg.producers} (batch {cfg.batch_size}) consumers={cfg.consumers} "
            f"(crashing {self.crashing_consumers}, nack p={cfg.nack_probability:g}) "
            f"queues={cfg.queues}"
            f"{' per broker' if cfg.cluster else ' per shard' if cfg.replicated else ''} "
            f"invisible={span_text(cfg.invisible_s)}s kills={cfg.kills} seed={self.seed}"
            + (
                f"\n  cluster: {cfg.brokers} brokers, {cfg.proxies} proxies, session TTL "
                f"{cfg.session_ttl_s}s, proxy kills {cfg.proxy_kills}, send rate "
                f"{cfg.send_rate or 'unpaced'}"
                if cfg.cluster
                else ""
            )
            + (
                f"\n  replicated: {cfg.shards} shards x {cfg.replicas} replicas "
                f"(replication defaults: sync, min_insync 1), {cfg.proxies} proxies, leader "
                f"lease (session TTL) {cfg.session_ttl_s}s, leader kills {cfg.kills}, leader "
                f"pauses {cfg.pauses}, leader one-way partitions {cfg.leader_partitions}, peer "
                f"cuts {cfg.peer_cuts}, send rate {cfg.send_rate or 'unpaced'}"
                if cfg.replicated
                else ""
            ),
            f"  sends: attempted {self.attempted}, acknowledged {self.acknowledged}, "
            f"indeterminate {self.indeterminate} (appeared {self.indeterminate_appeared})"
            + _counts("; errors", self.send_errors),
            f"  received: {self.distinct_received} distinct ids in {self.deliveries} processed "
            f"deliveries; duplicates {self.duplicate_ids} ids ({self.duplicate_deliveries} "
            f"extra deliveries); redelivered {self.redelivered_deliveries} deliveries "
            f"(attempt > 1); max delivery attempt {self.max_delivery_attempt}; by attempt "
            + (" ".join(f"{a}:{n}" for a, n in sorted(self.delivery_attempts.items())) or "-"),
        ]
        if self.crashing_consumers or cfg.nack_probability:
            lines.append(
                f"  given back: abandoned by crashing consumers {self.abandoned_deliveries} "
                f"deliveries of {self.abandoned_ids} ids, nacked {self.nacked_deliveries} "
                f"deliveries of {self.nacked_ids} ids; never came back "
                f"{len(self.given_back_never_returned)}" + _sample(self.given_back_never_returned)
            )
        lines += [
            f"  LOST (acknowledged, never received): {len(self.lost)}" + _sample(self.lost),
            f"  UNEXPECTED (received, never sent): {len(self.unexpected)}"
            + _sample(self.unexpected),
            "  offset conflicts (two acknowledged ids at one queue offset): "
            f"{len(self.offset_conflicts)}" + _sample(self.offset_conflicts),
            f"  {'failovers' if cfg.replicated else 'faults' if cfg.cluster else 'kills (kill -9)'}"
            f": {self.kills}"
            + (_counts(" by kind", self.kills_by_kind) if cfg.cluster or cfg.replicated else "")
            + (f"; lease lapse s: {_stats(self.lease_lapse_s)}" if cfg.cluster else "")
            + "; restart spawn->listening s: "
            + _stats([i.spawn_to_listening_s for i in restarts])
            + (
                ""
                if cfg.replicated  # a restarted replica follows: no broker core recovers
                else "; broker recovery s: "
                + _stats([i.recovery_s for i in restarts if i.recovery_s is not None])
                + "; in-flight checkpoints recovered: "
                + (" ".join(str(i.recovered_checkpoints) for i in restarts) or "-")
            ),
            *(self._failover_lines() if cfg.replicated else []),
            *(self._fault_lines() if cfg.cluster else []),
            "  client errors:"
            + (
                _counts(" pop", self.pop_errors)
                + _counts(" ack", self.ack_errors)
                + _counts(" nack", self.nack_errors)
                or " none"
            ),
            f"  time: produce {self.produce_s:.1f}s "
            f"({_rate(self.acknowledged, self.produce_s)} acknowledged sends/s), "
            f"drain {self.drain_s:.1f}s, total {self.total_s:.1f}s; "
            f"{_rate(self.deliveries, self.produce_s + self.drain_s)} processed deliveries/s",
            f"  drained: {self.drained} (final lag {self.final_lag}, in flight "
            f"{self.final_inflight}); clean stop exit code {self.clean_stop_exit_code}; "
            "redelivered after clean restart "
            + ("-" if redelivered is None else str(len(redelivered)) + _sample(redelivered, 5)),
            "  verdict: " + ("PASS" if self.ok else "FAIL: " + "; ".join(self.violations)),
        ]
        if not self.ok:
            lines.append(f"  store and server log kept in {self.data_dir}")
        return "\n".join(lines)


def span_text(span: tuple[float, float]) -> str:
    low, high = span
    return f"{low:g}" if low == high else f"{low:g}-{high:g}"


def seconds_span(text: str) -> tuple[float, float]:
    low, sep, high = text.partition("-")
    try:
        return (float(low), float(high)) if sep else (float(low), float(low))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected S or MIN-MAX seconds, got {text!r}") from None


def _counts(label: str, counts: dict[str, int]) -> str:
    if not counts:
        return ""
    return label + " " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))


def _sample(ids: Sequence[str], limit: int = 10) -> str:
    if not ids:
        return ""
    more = f" ... (+{len(ids) - limit})" if len(ids) > limit else ""
    return " e.g. " + " ".join(ids[:limit]) + more


def _stats(values: Sequence[float]) -> str:
    if not values:
        return "-"
    return (
        f"mean {statistics.fmean(values):.3f} max {max(values):.3f} "
        f"[{' '.join(f'{v:.2f}' for v in values)}]"
    )


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.2f}%" if whole else "-"


def _rate(count: int, seconds: float) -> str:
    return f"{count / seconds:.0f}" if seconds > 0 else "-"


def evaluate(history: History, result: CheckResult) -> None:
    """Fill ``result``'s counts and findings from ``history`` (the checker proper)."""
    processed = history.processed
    result.attempted = len(history.attempted)
    result.acknowledged = len(history.acknowledged)
    result.indeterminate = len(history.indeterminate)
    result.indeterminate_appeared = sum(1 for i in history.indeterminate if i in processed)
    result.send_errors = dict(history.send_errors)
    result.distinct_received = len(processed)
    result.deliveries = sum(processed.values())
    result.duplicate_ids = sum(1 for n in processed.values() if n > 1)
    result.duplicate_deliveries = result.deliveries - result.distinct_received
    result.delivery_attempts = dict(sorted(history.attempts.items()))
    result.max_delivery_attempt = history.max_attempt
    result.abandoned_deliveries = sum(history.abandoned.values())
    result.abandoned_ids = len(history.abandoned)
    result.nacked_deliveries = sum(history.nacked.values())
    result.nacked_ids = len(history.nacked)
    given_back = history.abandoned.keys() | history.nacked.keys()
    result.given_back_never_returned = sorted(i for i in given_back if i not in processed)
    result.lost = sorted(i for i in history.acknowledged if i not in processed)
    seen = processed.keys() | given_back
    result.unexpected = sorted(i for i in seen if i not in history.attempted)
    by_position: dict[tuple[int, int], list[str]] = {}
    for message_id, position in history.acknowledged.items():
        by_position.setdefault(position, []).append(message_id)
    result.offset_conflicts = sorted(
        f"queue{q}@{o}:{'+'.join(sorted(ids))}"
        for (q, o), ids in by_position.items()
        if len(ids) > 1
    )
    result.pop_errors = dict(history.pop_errors)
    result.ack_errors = dict(history.ack_errors)
    result.nack_errors = dict(history.nack_errors)
    result.redelivered_deliveries = sum(n for a, n in history.attempts.items() if a > 1)
    if result.config.cluster:
        result.errors_by_fault = attribute_errors(history.faults, history.failed_calls)
        result.sends_by_fault = sends_during(
            history.faults, ((r.began, r.ended) for r in history.send_log)
        )
    _evaluate_sends(history.send_log, result)
    _evaluate_disk_fulls(history, result)


def _evaluate_disk_fulls(history: History, result: CheckResult) -> None:
    """Per disk-full fault: sends stored on the full broker while full (a violation),
    deliveries from its queues processed meanwhile, and its first send once freed."""
    brokers = result.queue_brokers

    def on(queue_id: int | None, broker: str) -> bool:
        return queue_id is not None and queue_id < len(brokers) and brokers[queue_id] == broker

    for fault in result.disk_fulls:
        fault.stored_while_full = sum(
            1
            for r in history.send_log
            if r.began >= fault.full_at
            and r.ended < fault.freed_at
            and on(r.queue_id, fault.broker)
        )
        fault.processed_while_full = sum(
            1
            for at, queue_id in history.processed_log
            if fault.full_at <= at <= fault.freed_at and on(queue_id, fault.broker)
        )
        after = [
            r.ended
            for r in history.send_log
            if r.ended >= fault.freed_at and on(r.queue_id, fault.broker)
        ]
        fault.resumed_s = min(after) - fault.freed_at if after else None
        fault.notes = (
            [f"disk full: {fault.broker} stored {fault.stored_while_full} sends while full"]
            if fault.stored_while_full
            else []
        )
        fault.sends_after_s = max(
            (r.ended - fault.freed_at for r in history.send_log if r.queue_id is not None),
            default=0.0,
        )
        # Judged only when the producers went on long enough after the space returned.
        went_on = any(
            r.queue_id is not None and r.began >= fault.freed_at + RESUME_WITHIN_S
            for r in history.send_log
        )
        if went_on and (fault.resumed_s is None or fault.resumed_s > RESUME_WITHIN_S):
            fault.notes.append(
                f"disk full: {fault.broker} stored no send within {RESUME_WITHIN_S:g}s of the "
                "space returning"
            )


def _evaluate_sends(log: Sequence[SendRecord], result: CheckResult) -> None:
    """Send availability: acknowledged calls, the longest stretch without one, latencies,
    and per failover the sends begun in its window and the first one its shard stored."""
    ok = sorted((r for r in log if r.queue_id is not None), key=lambda r: r.ended)
    result.send_calls = len(log)
    result.send_calls_acknowledged = len(ok)
    if log:
        marks = [min(r.began for r in log), *(r.ended for r in ok), max(r.ended for r in log)]
        result.longest_ack_gap_s = max(b - a for a, b in itertools.pairwise(marks))
    if ok:
        latencies = sorted(r.ended - r.began for r in ok)
        result.send_latency_s = {
            "p50": latencies[len(latencies) // 2],
            "p99": latencies[min(len(latencies) - 1, len(latencies) * 99 // 100)],
            "max": latencies[-1],
        }
    for failover in result.failovers:
        window_end = failover.began + failover.ended_s
        inside = [r for r in log if failover.began <= r.began <= window_end]
        failover.sends = len(inside)
        failover.acknowledged = sum(1 for r in inside if r.queue_id is not None)
        failover.max_send_latency_s = max((r.ended - r.began for r in inside), default=0.0)
        on_shard = [
            r.ended
            for r in log
            if r.began >= failover.began
            and r.queue_id is not None
            and result.shard_of_queue.get(r.queue_id) == failover.shard
        ]
        failover.traffic_send_s = min(on_shard) - failover.began if on_shard else None
