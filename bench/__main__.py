"""Run benchmark scenarios and print their markdown tables.

Usage: python -m bench [--scenario NAME ...] [--quick]
"""

from __future__ import annotations

import argparse
import platform
import sys
from collections.abc import Callable

from bench import delay_precision, fifo, flush_modes, replication, send_async, spark_drain
from bench.scenarios import (
    backlog,
    cluster,
    consumers,
    latency,
    long_poll,
    paced_cost,
    pop_ack,
    produce,
    revive,
)

SCENARIOS: dict[str, Callable[..., str]] = {
    # Side by side with Redis Streams and NATS JetStream (bench/scenarios/).
    "produce": produce.main,
    "pop-ack": pop_ack.main,
    "e2e-latency": latency.main,
    "paced-cost": paced_cost.main,
    "long-poll": long_poll.main,
    "backlog": backlog.main,
    "consumers-beyond-queues": consumers.main,
    "revive-storm": revive.main,
    # Cluster mode (proxy + brokers) beside `popmq serve`: the price of the extra hop.
    "cluster": cluster.main,
    # A replicated shard (sync, async) beside a standalone broker.
    "replication": replication.main,
    "delay-precision": delay_precision.main,
    "fifo": fifo.main,
    "flush-modes": flush_modes.main,
    "send-async": send_async.main,
    # Spark pop mode on local[2] vs one SDK SimpleConsumer.
    "spark-drain": spark_drain.main,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    parser.add_argument("--quick", action="store_true", help="seconds, tiny sizes (for CI)")
    args = parser.parse_args(argv)
    for name in args.scenario or sorted(SCENARIOS):
        print(f"## {name}\n")
        print(
            f"`python -m bench --scenario {name}{' --quick' if args.quick else ''}` on "
            f"{platform.machine()} {platform.system()}, Python {platform.python_version()}\n"
        )
        print(SCENARIOS[name](quick=args.quick))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
