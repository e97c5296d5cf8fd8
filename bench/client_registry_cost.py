"""What a heartbeat and an assignment query cost the client registry (proxy/clients.py).

``python -m bench.client_registry_cost [--etcd HOST:PORT] [--calls 2000]``

- In process (LocalCoordinator, `popmq serve`): CPU µs per Heartbeat and per
  QueryAssignment of a queue-exclusive member, and per Heartbeat of a POP member, for
  groups of 1 to 64 members on 4 to 128 queues, every member holding its share. CPU time
  (``time.process_time``), best of 7 runs: the machine's other work barely moves it.
- With ``--etcd``: two registries (two proxies, a client each) over one etcd, members
  calling them in turn, so nearly every call finds the group changed by the other proxy:
  wall-clock ms per call, median and 90th percentile, and coordinator round trips per call.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from popmq.coordination import Coordinator, EtcdCoordinator
from popmq.proxy.clients import ClientRegistry, ConsumeMode, Registration

SIZES = ((1, 4), (4, 8), (16, 32), (64, 128))
_COORDINATOR_CALLS = ("get", "compare_and_set", "put", "list", "delete")


def _members(count: int) -> list[Registration]:
    return [
        Registration(client_id=f"c{i:03}", group="g", topics=("t",), heartbeat_interval_s=10.0)
        for i in range(count)
    ]


async def _best_us(call: Callable[[int], Awaitable[object]], calls: int) -> float:
    best = float("inf")
    for _ in range(7):
        started = time.process_time()
        for i in range(calls):
            await call(i)
        best = min(best, (time.process_time() - started) / calls * 1e6)
    return best


async def _settled(
    registries: Sequence[ClientRegistry], members: list[Registration], queues: int
) -> dict[str, tuple[int, ...]]:
    """Every member registered, holding its share; what each holds."""
    for i, member in enumerate(members):
        await registries[i % len(registries)].heartbeat(member, {"t": queues})
    held: dict[str, tuple[int, ...]] = {}
    for _ in range(2):
        for i, member in enumerate(members):
            registry = registries[i % len(registries)]
            answer = await registry.query_assignment(
                member.client_id, "g", "t", queues, held.get(member.client_id, ())
            )
            held[member.client_id] = answer.queue_ids
    return held


async def _local_row(count: int, queues: int, calls: int) -> list[float]:
    registry = ClientRegistry(broker_name="b")
    members = _members(count)
    held = await _settled([registry], members, queues)
    pop = Registration(client_id="p", group="g2", topics=("t",), mode=ConsumeMode.POP)

    async def heartbeat(i: int) -> object:
        return await registry.heartbeat(members[i % count], {"t": queues})

    async def query(i: int) -> object:
        client_id = members[i % count].client_id
        return await registry.query_assignment(client_id, "g", "t", queues, held[client_id])

    async def pop_heartbeat(i: int) -> object:
        return await registry.heartbeat(pop, {"t": queues})

    n = max(200, calls // count)
    row = [await _best_us(f, n) for f in (heartbeat, query, pop_heartbeat)]
    await registry.close()
    return row


async def local(calls: int) -> None:
    print("In process (LocalCoordinator), CPU µs per call, best of 7:")
    print()
    print("| members | queues | Heartbeat | QueryAssignment | POP Heartbeat |")
    print("|---|---|---|---|---|")
    for count, queues in SIZES:
        row = await _local_row(count, queues, calls)
        print(f"| {count} | {queues} | " + " | ".join(f"{us:.0f}" for us in row) + " |")


class _Counted:
    """Counts one coordinator's calls (each one etcd round trip)."""

    def __init__(self, coordinator: Coordinator) -> None:
        self.calls = 0
        for name in _COORDINATOR_CALLS:
            method = getattr(coordinator, name)

            def counted(*args: Any, _method: Any = method, **kwargs: Any) -> Any:
                self.calls += 1
                return _method(*args, **kwargs)

            setattr(coordinator, name, counted)


async def etcd(endpoint: str, calls: int) -> None:
    print()
    print("Two proxies over one etcd (loopback), members calling them in turn:")
    print()
    print("| members | queues | call | median ms | p90 ms | round trips per call |")
    print("|---|---|---|---|---|---|")
    cluster = f"bench-registry-{int(time.time())}"
    for count, queues in SIZES[:3]:
        coordinators = [EtcdCoordinator(endpoint, cluster=f"{cluster}-{count}") for _ in range(2)]
        counters = [_Counted(c) for c in coordinators]
        registries = [ClientRegistry(broker_name="b", coordinator=c) for c in coordinators]
        members = _members(count)
        held = await _settled(registries, members, queues)
        n = max(50, calls // 20)
        for name in ("Heartbeat", "QueryAssignment"):
            times: list[float] = []
            before = sum(c.calls for c in counters)
            for i in range(n):
                member = members[i % count]
                registry = registries[i % 2]  # members spread over both proxies
                started = time.perf_counter()
                if name == "Heartbeat":
                    await registry.heartbeat(member, {"t": queues})
                else:
                    await registry.query_assignment(
                        member.client_id, "g", "t", queues, held[member.client_id]
                    )
                times.append((time.perf_counter() - started) * 1e3)
            trips = (sum(c.calls for c in counters) - before) / n
            deciles = statistics.quantiles(times, n=10)
            print(
                f"| {count} | {queues} | {name} | {statistics.median(times):.2f} | "
                f"{deciles[8]:.2f} | {trips:.1f} |"
            )
        for coordinator in coordinators:
            await coordinator.close()


async def main_async(args: argparse.Namespace) -> None:
    await local(args.calls)
    if args.etcd:
        await etcd(args.etcd, args.calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--etcd", help="HOST:PORT of an etcd to measure two proxies over")
    parser.add_argument("--calls", type=int, default=2000, help="calls per measurement")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
