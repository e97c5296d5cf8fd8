"""What Spark lease tokens cost in the coordinator: round trips and time per page.

``python -m bench.lease_cost [--etcd HOST:PORT] [--leases 40] [--pages 4] [--messages 32]
[--interrupted] [--by-page] [--pinned]``

Two lease tables (two proxies) over one in-process broker (a temp data dir) and one
coordinator: a LocalCoordinator, or etcd with ``--etcd`` (then each table has its own
client, as two proxy processes would). Each lease pops ``--pages`` pages of ``--messages``
messages through proxy A, is replayed through A (from its cache) and through B (which reads
the messages back from the broker by handle), renewed and acked. For each operation:
the coordinator calls it made (with etcd, each is one round trip: a get, a compare-and-set
or a lease grant), and its time, median and 90th percentile, with the broker's share
(the pop, get_deliveries, ack, renewals) shown apart, so ``total - broker`` is what keeping
the lease in the coordinator costs.

``--interrupted``: before the renewal and before the ack, every message of the lease is
moved on the broker alone (a ChangeInvisibleTime the lease never records), as a proxy
killed in the middle of a renewal leaves it; the renewal and the ack measured then meet
only superseded handles and follow each of them (BrokerAPI.follow_handles).

``--by-page``: the ack names the pages read (their page ids, as a reader acking by page
sends them) instead of acking the lease by token.

``--pinned``: every LeasePop and the ack carry `pinned` (proxy/lease_pinning.py), as the
Spark connector's with leaseEndpoints; with etcd up they should cost what they did.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from popmq.broker_core import Broker, BrokerConfig, NewMessage, PopMQError, PoppedMessage
from popmq.broker_core.config import StoreConfig
from popmq.coordination import Coordinator, EtcdCoordinator, LocalCoordinator
from popmq.proxy.leases import LeasePage, LeaseTable

_COORDINATOR_CALLS = ("get", "compare_and_set", "put", "list", "delete")


class _Meter:
    """Counts coordinator calls and times broker calls, per operation being measured."""

    def __init__(self) -> None:
        self.calls = 0
        self.broker_s = 0.0
        """Time with at least one broker call running (concurrent calls count once)."""
        self._running = 0
        self._since = 0.0

    def count(self, target: object, names: Sequence[str]) -> None:
        for name in names:
            method = getattr(target, name)

            def counted(*args: Any, _method: Any = method, **kwargs: Any) -> Any:
                self.calls += 1
                return _method(*args, **kwargs)

            setattr(target, name, counted)

    def time(self, target: object, names: Sequence[str]) -> None:
        for name in names:
            method = getattr(target, name)

            async def timed(*args: Any, _method: Any = method, **kwargs: Any) -> Any:
                if self._running == 0:
                    self._since = time.perf_counter()
                self._running += 1
                try:
                    return await _method(*args, **kwargs)
                finally:
                    self._running -= 1
                    if self._running == 0:
                        self.broker_s += time.perf_counter() - self._since

            setattr(target, name, timed)


class _Results:
    def __init__(self) -> None:
        # operation -> [(coordinator calls, total s, broker s)]
        self.rows: dict[str, list[tuple[int, float, float]]] = collections.defaultdict(list)

    async def measure(
        self, what: str, meter: _Meter, call: Callable[[], Awaitable[object]]
    ) -> object:
        meter.calls, meter.broker_s = 0, 0.0
        start = time.perf_counter()
        result = await call()
        self.rows[what].append((meter.calls, time.perf_counter() - start, meter.broker_s))
        return result

    def print(self) -> None:
        print(f"{'operation':34} {'calls':>6} {'total ms':>16} {'broker ms':>10} {'lease ms':>16}")
        for what, rows in self.rows.items():
            calls = statistics.mean(r[0] for r in rows)
            total = [r[1] * 1e3 for r in rows]
            broker = [r[2] * 1e3 for r in rows]
            lease = [(r[1] - r[2]) * 1e3 for r in rows]
            print(
                f"{what:34} {calls:6.1f} {_spread(total):>16} {statistics.median(broker):10.2f} "
                f"{_spread(lease):>16}"
            )


def _spread(values: list[float]) -> str:
    p90 = statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]
    return f"{statistics.median(values):.2f} / {p90:.2f}"


async def run(
    etcd: str,
    leases: int,
    pages: int,
    messages: int,
    interrupted: bool,
    by_page: bool,
    pinned: bool = False,
) -> None:
    with tempfile.TemporaryDirectory() as data:
        broker = Broker(BrokerConfig(store=StoreConfig(data_dir=Path(data))))
        await broker.start()
        coordinators: list[Coordinator]
        if etcd:
            cluster = f"bench-{time.time_ns()}"
            coordinators = [EtcdCoordinator(etcd, cluster=cluster) for _ in range(2)]
        else:
            local = LocalCoordinator("bench")
            coordinators = [local, local]
        meter = _Meter()
        try:
            await broker.create_topic("events", 8)
            for _ in range(leases * pages * messages // 256 + 1):
                await broker.send([NewMessage("events", b"x" * 512) for _ in range(256)])
            for coordinator in dict.fromkeys(coordinators):
                meter.count(coordinator, _COORDINATOR_CALLS)
                if isinstance(coordinator, EtcdCoordinator):
                    meter.count(coordinator.client, ["lease_grant"])
            meter.time(
                broker,
                ["pop", "get_deliveries", "ack", "change_invisible_time", "nack", "follow_handles"],
            )
            a, b = (LeaseTable(broker, c) for c in coordinators)
            results = _Results()

            def pop() -> Awaitable[list[PoppedMessage]]:
                return broker.pop("g", "events", max_messages=messages, invisible_s=60, wait_s=0)

            interrupt = _interrupter(broker, b, pages, pop) if interrupted else None
            for i in range(leases):
                token = f"spark/bench/{i // 8}/{i % 8}"
                await _one_lease(
                    results, meter, a, b, token, pages, pop, interrupt, by_page, pinned
                )
            kind = f"etcd at {etcd}" if etcd else "LocalCoordinator"
            print(f"{leases} leases x {pages} pages x {messages} messages of 512 B; {kind}")
            if interrupted:
                print("renew and ack each after a renewal the lease never recorded (--interrupted)")
            if pinned:
                print("every LeasePop and ack pinned (--pinned)")
            print("(calls: coordinator calls, with etcd one round trip each; ms: median / p90)")
            results.print()
        finally:
            for coordinator in dict.fromkeys(coordinators):
                await coordinator.close()
            await broker.close()


Interrupt = Callable[[str], Awaitable[None]]


def _interrupter(
    broker: Broker, table: LeaseTable, pages: int, pop: Callable[[], Awaitable[list[PoppedMessage]]]
) -> Interrupt:
    """Move every message of a lease on the broker without the lease recording it."""

    async def interrupt(token: str) -> None:
        for page in range(pages):
            replayed = await table.pop("g", "events", token, page, 60, pop)
            for message in replayed.messages:
                await broker.change_invisible_time("g", message.receipt_handle, 60)

    return interrupt


async def _one_lease(
    results: _Results,
    meter: _Meter,
    a: LeaseTable,
    b: LeaseTable,
    token: str,
    pages: int,
    pop: Callable[[], Awaitable[list[PoppedMessage]]],
    interrupt: Interrupt | None,
    by_page: bool,
    pinned: bool = False,
) -> None:
    """Pop `pages` pages through a, replay them through a and b, renew and ack through b
    (each after `interrupt`, when given; it is not measured; naming the pages, `by_page`)."""

    def page_of(table: LeaseTable, page: int) -> Callable[[], Awaitable[object]]:
        return lambda: table.pop("g", "events", token, page, 60, pop, pinned=pinned)

    page_ids: list[str] = []
    for page in range(pages):
        what = "pop page 0 (new lease)" if page == 0 else "pop page n > 0"
        popped = await results.measure(what, meter, page_of(a, page))
        assert isinstance(popped, LeasePage)
        page_ids.append(popped.page_id)
    for page in range(pages):
        await results.measure("replay, same proxy (cached)", meter, page_of(a, page))
    for page in range(pages):
        await results.measure("replay, other proxy (by handle)", meter, page_of(b, page))
    after = ", following" if interrupt is not None else ""
    if interrupt is not None:
        await interrupt(token)
    await results.measure(
        f"renew a lease of {pages} pages{after}", meter, lambda: _ok(b.renew("g", [token], 60))
    )
    if interrupt is not None:
        await interrupt(token)
    named = {token: page_ids} if by_page else None
    how = " by page" if by_page else ""
    await results.measure(
        f"ack a lease of {pages} pages{how}{after}",
        meter,
        lambda: _ok(b.ack("g", [token], named, pinned=pinned)),
    )


async def _ok(outcomes: Awaitable[Sequence[Any]]) -> None:
    for outcome in await outcomes:
        if outcome.error is not None:
            raise PopMQError(f"lease {outcome.token}: {outcome.error}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--etcd", default="", help="etcd HOST:PORT (default: LocalCoordinator)")
    parser.add_argument("--leases", type=int, default=40)
    parser.add_argument("--pages", type=int, default=4)
    parser.add_argument("--messages", type=int, default=32)
    parser.add_argument(
        "--interrupted",
        action="store_true",
        help="renew and ack after a renewal the lease never recorded (they follow handles)",
    )
    parser.add_argument(
        "--by-page", action="store_true", help="ack naming the pages read, not by token"
    )
    parser.add_argument(
        "--pinned", action="store_true", help="LeasePops and acks carry pinned (leaseEndpoints)"
    )
    args = parser.parse_args()
    asyncio.run(
        run(
            args.etcd,
            args.leases,
            args.pages,
            args.messages,
            args.interrupted,
            args.by_page,
            args.pinned,
        )
    )


if __name__ == "__main__":
    main()
