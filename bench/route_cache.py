"""What the proxy's route cache costs: per lookup, per change, and write-to-visible latency.

``python -m bench.route_cache [--topics 10000] [--etcd HOST:PORT] [--writes 50]``

- Lookups (the proxy's hot path): `route`, `writable_queues` (after its first call, which
  builds the per-topic map), `queue` by global id and `broker_addr`, in ns per call, on a
  cache of ``--topics`` routes of 8 queues on each of 3 brokers (LocalCoordinator).
- A change of one topic among ``--topics``, in one process (LocalCoordinator, no network):
  the admin write, then the time until the cache serves it (the coordinator's snapshot and
  the cache's own work).
- With ``--etcd``: the latency from an admin write through one client to a second client's
  cache serving it (`wait_for`), median and worst of ``--writes`` writes, over loopback.

Reported: the best of 7 timing runs for lookups (the least disturbed by other load).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import timeit

from popmq.coordination import (
    Coordinator,
    EtcdCoordinator,
    LocalCoordinator,
    RouteAdmin,
    RouteCache,
)

BROKERS = ("broker-a", "broker-b", "broker-c")


async def _fill(coordinator: Coordinator, topics: int) -> RouteAdmin:
    for i, broker in enumerate(BROKERS):
        await coordinator.register("broker", broker, {"addr": f"127.0.0.1:{9000 + i}"})
    admin = RouteAdmin(coordinator)
    for i in range(topics):
        await admin.create_topic(f"topic-{i}")
    return admin


def _ns(stmt: object, number: int) -> float:
    best = min(timeit.repeat(stmt, number=number, repeat=7))  # type: ignore[arg-type]
    return best / number * 1e9


async def local(topics: int) -> None:
    async with LocalCoordinator("bench") as coordinator:
        admin = await _fill(coordinator, topics)
        async with RouteCache(coordinator) as cache:
            name = f"topic-{topics // 2}"
            cache.writable_queues(name)
            n = 200_000
            print(f"{topics} topics x {len(BROKERS)} brokers x 8 queues")
            print(f"  route(topic)            {_ns(lambda: cache.route(name), n):7.0f} ns")
            print(
                f"  writable_queues(topic)  {_ns(lambda: cache.writable_queues(name), n):7.0f} ns"
            )
            print(f"  queue(topic, 17)        {_ns(lambda: cache.queue(name, 17), n):7.0f} ns")
            print(
                f"  broker_addr(broker)     {_ns(lambda: cache.broker_addr('broker-b'), n):7.0f} ns"
            )
            writes, updates = [], []
            for i in range(50):
                start = time.perf_counter()
                route = await admin.add_queues(f"topic-{i}", "broker-a", 1)
                written = time.perf_counter()
                await cache.wait_for(route.revision)
                writes.append(written - start)
                updates.append(time.perf_counter() - written)
            for what, times in (("admin write", writes), ("cache update", updates)):
                print(
                    f"  one topic changed: {what:12} median "
                    f"{statistics.median(times) * 1e3:.2f} ms, worst {max(times) * 1e3:.2f} ms"
                )


async def etcd(endpoint: str, writes: int) -> None:
    async with (
        EtcdCoordinator(endpoint, cluster="bench-routes") as one,
        EtcdCoordinator(endpoint, cluster="bench-routes") as two,
    ):
        for topic in (await one.list("topics/")).entries:
            await one.delete(topic)
        session = await one.register("broker", "broker-a", {"addr": "127.0.0.1:9000"})
        admin = RouteAdmin(one)
        await admin.create_topic("orders", queues_per_broker=1)
        async with RouteCache(two) as cache:
            times = []
            for _ in range(writes):
                start = time.perf_counter()
                route = await admin.add_queues("orders", "broker-a", 1)
                written = time.perf_counter()
                await cache.wait_for(route.revision, timeout_s=5)
                times.append((written - start, time.perf_counter() - written))
            write = [w for w, _ in times]
            seen = [s for _, s in times]
            print(f"etcd {endpoint}, {writes} add_queues through client one:")
            print(
                f"  admin write (get + CAS)     median {statistics.median(write) * 1e3:.2f} ms,"
                f" worst {max(write) * 1e3:.2f} ms"
            )
            print(
                f"  then visible in client two  median {statistics.median(seen) * 1e3:.2f} ms,"
                f" worst {max(seen) * 1e3:.2f} ms"
            )
        await session.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--etcd", help="HOST:PORT of an etcd to measure propagation on")
    parser.add_argument("--writes", type=int, default=50)
    args = parser.parse_args()
    asyncio.run(local(args.topics))
    if args.etcd:
        asyncio.run(etcd(args.etcd, args.writes))


if __name__ == "__main__":
    main()
