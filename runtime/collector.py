"""How a server process sets up Python's cyclic garbage collector (`[gc]`).

A server holds a large heap that lives as long as the process: the modules, the protobuf
descriptors, grpc's and the SDK's classes, the catalog, ~60,000 tracked objects. Every
full (generation-2) collection walks all of it, 15-40 ms of CPU under pop + ack (to
200 ms of wall time on a loaded machine), with the event loop stopped: each RPC in flight
waits that long. What the hot path leaves behind is young, and nearly all of it is freed
by reference counting (docs/operations.md, "Garbage collection").

- `configure_collector` (run_process, before the event loop) sets the generation-0
  threshold;
- `freeze_start_up_heap` (each server's `serve`, once it serves) collects what the
  start left as garbage, then moves every object still alive into the permanent
  generation (`gc.freeze`), which no collection walks again. Full collections then walk
  only what was made since the start: a few thousand objects, about 1 ms.

Garbage cycles are still collected, by the same rules as without the freeze: a young
collection once the net allocations reach the threshold, a generation-1 one every ten
young ones, a full one once ten generation-1 ones passed and what they promoted is at
least a quarter of what the last full collection kept (now: of what was made since the
start). A cycle that becomes garbage while young is freed within the threshold's
allocations; one promoted first waits for its generation's collection, as before. A cycle
among the frozen objects (start-up state dropped later) is never collected: a one-time,
start-size amount, not a growth.

Each call is microseconds but `gc.collect()` (once, at the start); none runs on a hot path.
"""

from __future__ import annotations

import gc
import logging
from dataclasses import dataclass

__all__ = [
    "MAX_YOUNG_THRESHOLD",
    "MIN_YOUNG_THRESHOLD",
    "CollectorConfig",
    "configure_collector",
    "freeze_start_up_heap",
]

log = logging.getLogger(__name__)

MIN_YOUNG_THRESHOLD = 100
"""Below it the collector runs every few requests; 0 would never collect cycles at all."""
MAX_YOUNG_THRESHOLD = 100_000
"""Above it the young generation alone may hold tens of MB of garbage cycles."""


@dataclass(frozen=True, kw_only=True)
class CollectorConfig:
    """Python's cyclic garbage collector in a server process (`[gc]`)."""

    freeze_after_start: bool = True
    """Once the process serves, move every object it holds into the collector's permanent
    generation (`gc.freeze`), so full collections walk only what was made since: a few ms
    instead of tens of ms with the event loop stopped (docs/operations.md, "Garbage
    collection"). False: Python's behaviour, every full collection walks the whole heap."""
    young_threshold: int = 10_000
    """Allocations of container objects, net of those freed, between two collections of the
    youngest generation (`gc.set_threshold`'s first value; Python's default: 700). A
    server's requests hold a few thousand objects at a time and free nearly all of them by
    reference counting: at 700, pop + ack ran 15-23 young collections a second that found
    one object each; at 10,000, under one. 100..100000."""

    def __post_init__(self) -> None:
        if not MIN_YOUNG_THRESHOLD <= self.young_threshold <= MAX_YOUNG_THRESHOLD:
            raise ValueError(
                f"gc.young_threshold {self.young_threshold} is out of range: "
                f"{MIN_YOUNG_THRESHOLD}..{MAX_YOUNG_THRESHOLD} (0 would never collect "
                "garbage cycles; above the maximum the young generation alone may hold "
                "tens of MB of them)"
            )


def configure_collector(config: CollectorConfig) -> None:
    """Set the generation-0 threshold; the older generations' keep Python's values."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(config.young_threshold, older, oldest)


def freeze_start_up_heap(config: CollectorConfig) -> int:
    """Collect the start's garbage, then freeze what is alive (when configured); return
    how many objects are frozen now."""
    if not config.freeze_after_start:
        return gc.get_freeze_count()
    # Garbage frozen now would never be collected: collect it first.
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.debug("froze %d start-up objects out of the garbage collector's walks", frozen)
    return frozen
