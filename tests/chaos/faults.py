"""The cluster nemesis's faults as the history sees them: when each one lasted, which client
calls failed during or just after it, and the disk-full fault's own findings.

The nemesis runs one fault at a time and records a `FaultWindow` for each (from the kill,
pause or fill until the process is back, resumed or the space freed). A failed client call
(send, pop, ack, nack) is put down to the latest fault whose window, stretched by
`AFTERMATH_S`, overlaps the call; a failure that overlaps none counts as "outside faults".
So a send cut off by a broker kill, or a pop that failed while a proxy was still reloading
its routes after etcd came back, is put down to the fault that caused it.

A disk-full fault (`DISK_FULL`) fills one broker's data volume (a tmpfs of its own) with
filler files ("another program's data") until less than the broker's send floor is left
free, holds it full, then frees it. Its findings: how many sends were stored on the full
broker while it was full (0: sends move to the other brokers), how many deliveries from its
queues were processed and acked meanwhile (pops and acks still work), and how long after
the space returned it stored a producer's send again (within `RESUME_WITHIN_S`, or a violation
when the producers went on that long).
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.chaos.disk_full import MountError, mounted_tmpfs

__all__ = [
    "AFTERMATH_S",
    "DISK_FULL",
    "FILL_PAUSE_S",
    "LEFT_FREE_MIB",
    "NEAR_FLOOR_MIB",
    "RESUME_WITHIN_S",
    "CallRecord",
    "DiskFull",
    "FaultWindow",
    "attribute_errors",
    "disk_full_unavailable",
    "sends_during",
]

DISK_FULL = "disk-full"
AFTERMATH_S = 5.0
"""How long after a fault ends a failed call is still put down to it: the clients' and
proxies' reactions (a route reload, an isolation's end, a lease taken again) run on."""
LEFT_FREE_MIB = 4
"""Free space a filled volume keeps: below the 8 MiB a send needs (the store's send floor),
above what acks, nacks and pop checkpoints use."""
NEAR_FLOOR_MIB = 40
"""Where the filling pauses (`FILL_PAUSE_S`) on its way down. Far above its send floor (8 MiB
plus 64 MiB of slack) the store reads the free space at most every 0.1 s, which is safe
against writers slower than about 640 MiB/s; the filler on a tmpfs is faster. Within the
slack every send reads it afresh, so after the pause the last step is seen at once."""
FILL_PAUSE_S = 0.3
RESUME_WITHIN_S = 30.0
"""A broker whose space returned must store a send within this (while sends go on): past the
send fault table's isolation of a broker that refused sends, with room for a loaded machine."""
_MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One client call that failed (monotonic times): `op` is send, pop, ack or nack."""

    op: str
    began: float
    ended: float
    code: str


@dataclass(slots=True)
class FaultWindow:
    """One fault of the nemesis, from its start until what it hit is back (monotonic)."""

    kind: str
    began: float
    ended: float = 0.0


@dataclass(slots=True)
class DiskFull:
    """One disk-full fault (module docstring)."""

    broker: str
    began: float
    """When the filling started (monotonic)."""
    full_at: float = 0.0
    """When less than the send floor was left free."""
    freed_at: float = 0.0
    filler_mib: int = 0
    free_mib: float = 0.0
    """Free space while full."""
    stored_while_full: int = 0
    """Producer sends begun once it was full and stored on it before the space returned."""
    processed_while_full: int = 0
    """Deliveries from its queues processed (then acked) while it was full."""
    resumed_s: float | None = None
    """Seconds from freeing the space to the first producer send stored on it (the first
    one that ended since)."""
    sends_after_s: float = 0.0
    """How long acknowledged sends (on any broker) went on after the space returned."""
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        resumed = (
            f"never (sends went on {self.sends_after_s:.1f}s)"
            if self.resumed_s is None
            else f"{self.resumed_s:.2f}s"
        )
        return (
            f"{self.broker}: {self.filler_mib} MiB filler, {self.free_mib:.1f} MiB free for "
            f"{self.freed_at - self.full_at:.1f}s; sends stored on it meanwhile "
            f"{self.stored_while_full}; deliveries from its queues processed meanwhile "
            f"{self.processed_while_full}; first send stored on it {resumed} after the space "
            "returned"
        )


def disk_full_unavailable() -> str | None:
    """Why the brokers' volumes cannot be made here (None: a tmpfs mounts)."""
    with tempfile.TemporaryDirectory(prefix="popmq-tmpfs-probe-") as root:
        try:
            with mounted_tmpfs(Path(root) / "disk", 1):
                return None
        except MountError as exc:
            return str(exc)


def free_mib(directory: Path) -> float:
    stats = os.statvfs(directory)
    return stats.f_bavail * stats.f_frsize / _MIB


def _fault_of(ordered: Sequence[FaultWindow], began: float, ended: float) -> str:
    for window in reversed(ordered):
        if window.began <= ended and began <= window.ended + AFTERMATH_S:
            return window.kind
    return "outside faults"


def attribute_errors(
    windows: Sequence[FaultWindow], failed: Iterable[CallRecord]
) -> dict[str, dict[str, int]]:
    """Failed calls per fault kind (module docstring): kind -> "<op> <code>" -> count.
    Every kind of `windows` has an entry (empty: no client error); failures that overlap
    no window go under "outside faults"."""
    by_kind: dict[str, Counter[str]] = {w.kind: Counter() for w in windows}
    ordered = sorted(windows, key=lambda w: w.began)
    for call in failed:
        kind = _fault_of(ordered, call.began, call.ended)
        by_kind.setdefault(kind, Counter())[f"{call.op} {call.code}"] += 1
    return {kind: dict(sorted(counts.items())) for kind, counts in sorted(by_kind.items())}


def sends_during(
    windows: Sequence[FaultWindow], sends: Iterable[tuple[float, float]]
) -> dict[str, int]:
    """Send calls ((began, ended), failed or not) put down to each fault kind as failures are:
    how many sends a fault's "0 failed sends" stands on (a fault that began once the
    producers were done has none)."""
    counts: Counter[str] = Counter({w.kind: 0 for w in windows})
    ordered = sorted(windows, key=lambda w: w.began)
    for began, ended in sends:
        counts[_fault_of(ordered, began, ended)] += 1
    return dict(sorted(counts.items()))
