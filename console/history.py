"""The overview's live numbers: the broker's counters sampled into 15 minutes of history.

Every `interval_s` the `Sampler` reads `BrokerAPI.metrics_snapshot()` (the counters
Prometheus exports: messages sent, popped, acked, nacked, dead-lettered) and, every few
samples, the total lag over every group (`total_lag`), and appends one `Point` of rates per
second to a ring buffer holding the last `HISTORY_S`. Watchers (the overview's server-sent
event streams) wait on `changed()` and read the points they have not seen: no Prometheus is
needed to see what the server did in the last minutes.

Runs on the event loop: the snapshot is in-memory counters of the embedded broker (one
round trip per broker in cluster mode); the lag is one small scan per group, read with
yields between groups and less often when there are many groups. A failed read is logged
and skipped, never fatal.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from popmq.broker_core import BrokerAPI, MetricsSnapshot, PopMQError

log = logging.getLogger(__name__)

HISTORY_S = 900.0
"""How far back the overview's charts go (15 minutes)."""
_LAG_GROUPS_EACH_SAMPLE = 50
"""Up to this many groups the total lag is read with every sample; with more, every
groups / 50 samples (every 8 s with 200 groups and the 2 s default), so reading it costs a
bounded share of the loop however many groups there are."""


@dataclass(frozen=True, slots=True)
class Point:
    """One sample: rates per second since the previous one, and the total lag."""

    t: float
    """Unix seconds."""
    send: float
    receive: float
    """Messages delivered by pops."""
    ack: float
    nack: float
    dlq: float
    """Messages dead-lettered."""
    lag: int
    """Messages not yet acked over every group and topic (ready + in flight)."""

    def as_json(self) -> dict[str, float | int]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class _Totals:
    at: float
    sent: int
    popped: int
    acked: int
    nacked: int
    dead: int


def _sum(counts: Mapping[Any, int]) -> int:
    return sum(counts.values())


def _totals(snapshot: MetricsSnapshot, at: float) -> _Totals:
    return _Totals(
        at,
        _sum(snapshot.sent),
        _sum(snapshot.popped),
        _sum(snapshot.acked),
        _sum(snapshot.nacked),
        _sum(snapshot.dead_lettered),
    )


async def total_lag(broker: BrokerAPI) -> int:
    """Unacked messages (ready + in flight) over every group's queues, retry queues included
    (a group deleted meanwhile counts 0). One `group_lag` per group, yielding to the loop
    between groups: in process each is a small scan that does not yield by itself (~0.13 ms
    for a group reading 2 topics of 8 queues, 2.7x less than `lag_report`, which also reads
    the oldest unacked message's time), so 200 groups would otherwise hold the loop ~25 ms.
    """
    total = 0
    for group in await broker.list_groups():
        try:
            queues = await broker.group_lag(group.name)
        except PopMQError:
            continue
        total += sum(queue.lag for queue in queues)
        await asyncio.sleep(0)
    return total


class History:
    """The last `HISTORY_S` of points, oldest first, and a way to wait for the next one."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._points: collections.deque[Point] = collections.deque(
            maxlen=max(1, math.ceil(HISTORY_S / interval_s))
        )
        # Set and replaced at each append: watchers wait on the current one.
        self._changed = asyncio.Event()

    def __len__(self) -> int:
        return len(self._points)

    def append(self, point: Point) -> None:
        self._points.append(point)
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def points(self, after: float = -math.inf) -> list[Point]:
        """The points newer than `after` (unix seconds), oldest first."""
        return [p for p in self._points if p.t > after]

    def latest(self) -> Point | None:
        return self._points[-1] if self._points else None

    async def changed(self) -> None:
        """Return at the next append."""
        await self._changed.wait()


class Sampler:
    """Samples `broker` into `history` every `history.interval_s` (see the module docstring).

    Args:
        broker: The server's BrokerAPI.
        history: Where the points go.
        clock: Unix seconds (a seam for tests).
    """

    def __init__(
        self,
        broker: BrokerAPI,
        history: History,
        *,
        clock: Callable[[], float] = time.time,
        lag: Callable[[BrokerAPI], Awaitable[int]] = total_lag,
    ) -> None:
        self._broker = broker
        self.history = history
        self._clock = clock
        self._lag = lag
        self._previous: _Totals | None = None
        self._last_lag = 0
        self._samples = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="popmq-console-sampler"
            )

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def sample(self) -> Point | None:
        """Take one sample; the point it appended (None for the first, which only sets the
        counters' base)."""
        snapshot = await self._broker.metrics_snapshot()
        totals = _totals(snapshot, self._clock())
        every = max(1, snapshot.groups // _LAG_GROUPS_EACH_SAMPLE)
        if self._samples % every == 0:
            self._last_lag = await self._lag(self._broker)
        self._samples += 1
        previous, self._previous = self._previous, totals
        if previous is None:
            return None
        elapsed = max(totals.at - previous.at, 1e-3)

        def rate(now: int, before: int) -> float:
            # A counter that went back (a broker restarted behind a proxy) restarts at 0.
            return round(max(now - before, 0) / elapsed, 3)

        point = Point(
            t=round(totals.at, 3),
            send=rate(totals.sent, previous.sent),
            receive=rate(totals.popped, previous.popped),
            ack=rate(totals.acked, previous.acked),
            nack=rate(totals.nacked, previous.nacked),
            dlq=rate(totals.dead, previous.dead),
            lag=self._last_lag,
        )
        self.history.append(point)
        return point

    async def _run(self) -> None:
        interval = self.history.interval_s
        while True:
            try:
                await self.sample()
            except (PopMQError, OSError) as exc:
                log.warning("the console could not sample the broker's counters: %s", exc)
            await asyncio.sleep(interval)
